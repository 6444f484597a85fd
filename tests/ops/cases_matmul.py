"""Cases for the matmul family (MatMul) on each dtype of its spec: int32, float32, float64.

The kernel tiles the output (32 x 64 on lavapipe) and reads A and B up to 8 elements at
a time when the row length allows, so the cases aim at what gets that wrong: sizes 1, 7
and 129 (partial tiles, rows that are not a multiple of the wide loads, a k remainder
after the 16-wide chunks), k = 0 (zeros), batch dims broadcast from either side and of
different ranks, and operands that are a movement's result (`a.T`, `b[::2]`).
"""
from __future__ import annotations

import numpy as np

from vkml.array import bind
from vkml.trace.ops import OpKind

from .cases import Case, rand

NUMERIC = (np.int32, np.float32, np.float64)
CASES: list[Case] = []


def _add(name, fn, ref, args, dtype, k=None):
    d = np.dtype(dtype)
    k = max(1, args[0].shape[-1] if k is None else k)
    # a k-term float32 sum of products in [-4, 4] rounds by about sqrt(k) ulps of 4
    if d == np.float32:
        tol = dict(rtol=1e-5, atol=2e-6 * np.sqrt(k))
    elif d == np.float64:
        tol = dict(rtol=1e-12, atol=4e-15 * np.sqrt(k))
    else:
        tol = dict(exact=True)
    CASES.append(Case(OpKind.MatMul, f"{name}-{d.name}", fn, ref, args, dtype=d, **tol))


def mm(a, b):
    return bind(OpKind.MatMul, [a, b])


for d in NUMERIC:
    for m, k, n in [(1, 1, 1), (7, 7, 7), (129, 7, 1), (1, 129, 7), (7, 129, 129), (33, 16, 70)]:
        _add(f"{m}x{k}x{n}", mm, np.matmul, [rand((m, k), d), rand((k, n), d)], d)
    _add("k0", mm, np.matmul, [rand((5, 0), d), rand((0, 3), d)], d)
    _add("m0", mm, np.matmul, [rand((0, 4), d), rand((4, 3), d)], d)
    # batch dims: equal, broadcast from A or B, different ranks, size-1 in the middle
    _add("batch", mm, np.matmul, [rand((3, 7, 9), d), rand((3, 9, 5), d)], d)
    _add("bcastA", mm, np.matmul, [rand((1, 7, 17), d), rand((4, 17, 9), d)], d)
    _add("bcastB", mm, np.matmul, [rand((2, 3, 6, 8), d), rand((8, 129), d)], d)
    _add("bcast2", mm, np.matmul, [rand((2, 1, 5, 7), d), rand((1, 3, 7, 6), d)], d)
    _add("batch0", mm, np.matmul, [rand((0, 4, 3), d), rand((1, 3, 2), d)], d)
    # non-contiguous operands: a transpose and a strided slice, lowered to copies first
    _add("aT", lambda a, b: mm(a.T, b), lambda a, b: a.T @ b,
         [rand((129, 7), d), rand((129, 9), d)], d, k=129)
    _add("bStep", lambda a, b: mm(a, b[::2]), lambda a, b: a @ b[::2],
         [rand((7, 65), d), rand((130, 33), d)], d)
    _add("bT-batch", lambda a, b: mm(a, b.transpose((0, 2, 1))),
         lambda a, b: a @ b.transpose(0, 2, 1), [rand((2, 9, 16), d), rand((2, 24, 16), d)], d)
