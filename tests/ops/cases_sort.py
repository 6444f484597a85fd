"""Cases for the sort family: ArgSort against NumPy's stable argsort, exactly.

Keys are drawn from a few values so that ties are everywhere (stability shows), with NaN,
+-inf and -0.0 among them; lengths cover one element, non-powers of two, rows that fill one
workgroup's block exactly, rows just past it (the merge passes), a 2^20-element row, many
short rows packed per workgroup, axes other than the last, and inputs that are a movement's
result (transposed, strided, broadcast). Descending order is jax.numpy's: the ascending
order of the reversed row, reversed (ties keep their order, NaN first).
"""
from __future__ import annotations

import numpy as np

import vkml.numpy as vnp

from vkml.array import bind
from vkml.trace.ops import OpKind
from vkml.vulkan.lower.sort import LW_MAX

from .cases import RNG, Case

AS = OpKind.ArgSort


def argsort_ref(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    if not descending:
        return np.argsort(x, axis=axis, kind="stable").astype(np.int32)
    n = x.shape[axis]
    r = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return np.flip(n - 1 - r, axis).astype(np.int32)


def keys(shape, dtype) -> np.ndarray:
    """Ties, and for floats nan, +-inf, 0.0 and -0.0 among them."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    pool = np.array([-3, -1, 0, 0, 1, 2, 5, 7], np.float64)
    if dtype.kind == "f":
        pool = np.concatenate([pool, [np.nan, np.inf, -np.inf, -0.0, 0.5]])
    return RNG.choice(pool, size=shape).astype(dtype)


CASES: list[Case] = []


def _add(name, x, axis, desc, prep=lambda x: x):
    CASES.append(Case(AS, f"{name}-{x.dtype}-{'desc' if desc else 'asc'}",
                      lambda x, a=axis, d=desc, p=prep: bind(AS, [p(x)], axis=a, descending=d),
                      lambda x, a=axis, d=desc, p=prep: argsort_ref(p(x), a, d),
                      [x], exact=True))


def _bcast(x):
    """x broadcast along a new leading extent: every column is a run of ties."""
    return np.broadcast_to(x, (5, 6)) if isinstance(x, np.ndarray) else vnp.broadcast_to(x, (5, 6))


T_, S_ = (lambda x: x.T), (lambda x: x[::2])
for d in (np.float32, np.float64, np.int32, np.bool_):
    for desc in (False, True):
        for name, shape, axis, prep in [
            ("1", (1,), 0, None), ("2", (2,), 0, None), ("7", (7,), 0, None),
            ("rows", (5, 37), 1, None), ("first", (37, 5), 0, None), ("middle", (3, 11, 4), 1, None),
            ("block", (2, LW_MAX), 1, None), ("block+1", (2, LW_MAX + 1), 1, None),
            ("long", (3, 3 * LW_MAX + 77), 1, None), ("long-axis0", (2 * LW_MAX + 5, 3), 0, None),
            ("many-short", (3001, 3), 1, None), ("of-T", (6, 9), 1, T_), ("of-strided", (21, 4), 0, S_),
            ("size0", (0, 5), 1, None), ("size0-axis", (4, 0), 1, None),
        ]:
            _add(name, keys(shape, d), axis, desc, prep or (lambda x: x))
    _add("broadcast", keys((1, 6), d), 0, False, _bcast)


# one row of 2^20: ten merge passes after the blocks
CASES.append(Case(AS, "2^20-float32", lambda x: bind(AS, [x], axis=0, descending=False),
                  lambda x: argsort_ref(x, 0, False),
                  [np.round(RNG.standard_normal(1 << 20) * 64).astype(np.float32)], exact=True))
CASES.append(Case(AS, "signed-zeros", lambda x: bind(AS, [x], axis=0, descending=False),
                  lambda x: argsort_ref(x, 0, False),
                  [np.array([0.0, -0.0, np.nan, 0.0, -np.inf, -0.0, np.nan, np.inf], np.float32)],
                  exact=True))
