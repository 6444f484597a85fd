"""check_grads: derivatives against central finite differences (as jax.test_util).

Forward mode is checked by comparing jvp(f)(x; v) with (f(x + eps v) - f(x - eps v)) / 2 eps
along a random direction v; reverse mode by the transpose identity
<vjp(u), v> == <u, numerical derivative along v> for a random cotangent u. order=2 repeats
both checks on the derivative functions themselves (so second-order rules are exercised).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from . import numpy as vnp
from .autodiff import jvp, vjp
from .tree_util import tree_flatten, tree_map


def _np(x):
    return np.asarray(x, dtype=np.float64)


def _inner(a, b) -> float:
    la, lb = tree_flatten(a)[0], tree_flatten(b)[0]
    return float(sum(np.vdot(_np(x), _np(y)) for x, y in zip(la, lb)))


def _rand_like(tree, rng):
    return tree_map(lambda x: vnp.asarray(rng.standard_normal(np.shape(x)), vnp.asarray(x).dtype), tree)


def _numerical_jvp(f, args, v, eps):
    plus = tuple(tree_map(lambda x, d: vnp.asarray(_np(x) + eps * _np(d), vnp.asarray(x).dtype), a, t)
                 for a, t in zip(args, v))
    minus = tuple(tree_map(lambda x, d: vnp.asarray(_np(x) - eps * _np(d), vnp.asarray(x).dtype), a, t)
                  for a, t in zip(args, v))
    fp, fm = f(*plus), f(*minus)
    return tree_map(lambda p, m: (_np(p) - _np(m)) / (2 * eps), fp, fm)


def _close(name, got, want, atol, rtol):
    g, w = tree_flatten(got)[0], tree_flatten(want)[0]
    for a, b in zip(g, w):
        np.testing.assert_allclose(_np(a), _np(b), atol=atol, rtol=rtol, err_msg=name)


def check_jvp(f: Callable, args: Sequence, eps: float, atol: float, rtol: float, rng) -> None:
    v = _rand_like(tuple(args), rng)
    _, t = jvp(f, tuple(args), v)
    _close("jvp vs finite differences", t, _numerical_jvp(f, args, v, eps), atol, rtol)


def check_vjp(f: Callable, args: Sequence, eps: float, atol: float, rtol: float, rng) -> None:
    v = _rand_like(tuple(args), rng)
    out, back = vjp(f, *args)
    u = _rand_like(out, rng)
    ct = back(u)
    lhs = _inner(ct, v)
    rhs = _inner(u, _numerical_jvp(f, args, v, eps))
    np.testing.assert_allclose(lhs, rhs, atol=atol, rtol=rtol,
                               err_msg="<vjp(u), v> vs <u, finite differences along v>")


def check_grads(f: Callable, args: Sequence, order: int = 2, modes: Sequence[str] = ("rev", "fwd"),
                eps: float | None = None, atol: float | None = None, rtol: float | None = None,
                seed: int = 0) -> None:
    """Raise AssertionError unless f's derivatives up to `order` match finite differences.

    Use float64 inputs for tight checks (eps 1e-4, tolerance 1e-5 by default there).

    >>> import vkml.numpy as vnp
    >>> check_grads(lambda x: vnp.sin(x) * x, (vnp.asarray([0.3, 1.2], "float64"),), order=2)
    """
    args = tuple(vnp.asarray(a) if not isinstance(a, (dict, list, tuple)) else a for a in args)
    dts = {vnp.asarray(l).dtype for l in tree_flatten(args)[0]}
    f64 = all(d == np.float64 for d in dts)
    eps = eps if eps is not None else (1e-4 if f64 else 1e-2)
    atol = atol if atol is not None else (1e-5 if f64 else 2e-2)
    rtol = rtol if rtol is not None else (1e-5 if f64 else 2e-2)
    rng = np.random.default_rng(seed)

    def go(fn, k):
        if "fwd" in modes:
            check_jvp(fn, args, eps, atol, rtol, rng)
        if "rev" in modes:
            check_vjp(fn, args, eps, atol, rtol, rng)
        if k > 1:
            v = _rand_like(args, rng)
            if "fwd" in modes:
                go(lambda *a: jvp(fn, a, v)[1], k - 1)
            if "rev" in modes:
                out = fn(*args)
                u = _rand_like(out, rng)
                go(lambda *a: vjp(fn, *a)[1](u), k - 1)
    go(f, order)
