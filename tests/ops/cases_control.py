"""Cases for control flow: Scan (a loop over a traced body) and Part (its results),
through vkml.lax.scan, and While (a loop to a predicate), through vkml.lax.while_loop,
against the same loop run in NumPy. One case per dtype of the carry; each Scan case reads
the final carry and the stacked step outputs (both Parts)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import vkml.numpy as vnp
from vkml import lax
from vkml.trace.ops import OpKind

from .cases import Case, rand


def _step(c, x):
    if c.dtype == np.bool_:
        return c ^ x, c & x
    return c * 2 + x, c - x


def _scan(c, xs, which):
    c, ys = lax.scan(lambda c, x: _step(c, x), c, xs)
    return [c, ys][which]


def _ref(c, xs, which):
    ys = []
    for x in xs:
        c, y = _step(c, x)
        ys.append(y)
    return [np.asarray(c), np.stack(ys)][which]


def _cases(op, which):
    out = []
    for d in (np.float32, np.float64, np.int32, np.bool_):
        c0, xs = rand((3,), d, -2, 2), rand((5, 3), d, -2, 2)
        out.append(Case(op, f"{np.dtype(d)}", lambda c, x, w=which: _scan(c, x, w),
                        lambda c, x, w=which: _ref(c, x, w), [c0, xs], exact=np.dtype(d).kind != "f",
                        rtol=1e-6, atol=1e-6))
    # 16-bit carries: the body traced in the dtype; NumPy (ml_dtypes) rounds each step as vkml
    for d, eps in ((np.dtype(np.float16), 2.0 ** -10), (np.dtype(ml_dtypes.bfloat16), 2.0 ** -7)):
        c0, xs = rand((3,), np.float32, -2, 2).astype(d), rand((5, 3), np.float32, -2, 2).astype(d)
        out.append(Case(op, f"{d.name}", lambda c, x, w=which: _scan(c, x, w),
                        lambda c, x, w=which: _ref(c, x, w), [c0, xs], rtol=2 * eps, atol=eps * 1e-2,
                        dtype=d))
    return out


def _while(c, x):
    """Steps of _step(c, x) (its carry only) while a counter stays below 3."""
    return lax.while_loop(lambda v: v[0] < 3, lambda v: (v[0] + 1, _step(v[1], x)[0]), (0, c))[1]


def _while_ref(c, x):
    for _ in range(3):
        c = _step(c, x)[0]
    return np.asarray(c)


def _while_cases():
    out = []
    for d in (np.float32, np.float64, np.int32, np.bool_, np.float16, ml_dtypes.bfloat16):
        d = np.dtype(d)
        lo = d.kind in "fV" and d.itemsize == 2
        c0, x = (rand((3,), np.float32, -2, 2).astype(d), rand((3,), np.float32, -2, 2).astype(d)) if lo \
            else (rand((3,), d, -2, 2), rand((3,), d, -2, 2))
        eps = (2.0 ** -10 if d == np.float16 else 2.0 ** -7) if lo else 1e-6
        out.append(Case(OpKind.While, d.name, _while, _while_ref, [c0, x], exact=d.kind not in "fV",
                        rtol=4 * eps, atol=eps, **({"dtype": d} if lo else {})))
    return out


CASES = _cases(OpKind.Scan, 1) + _cases(OpKind.Part, 0) + _while_cases()
