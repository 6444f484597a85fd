"""Cases for the reduce family: Sum Mean Max Min Prod ArgMax ArgMin, Cumsum, Softmax and
LogSoftmax, each on every dtype of its spec.

The reduction kernels address the input as (kept, reduced) through merged strides, so
the cases aim at what gets that wrong: several non-adjacent reduced axes, no axes, all
axes, size-1 axes (dropped when merging) and size-0 axes (empty reductions: Sum 0,
Prod 1, Mean nan), inputs that are themselves a movement's result (`x.T`, `x[::2]`),
and lengths that are not a multiple of the 4-wide loads. NaN handling (Max/Min
propagate, ArgMax/ArgMin pick the first NaN) and ties (first index) are checked exactly.
"""
from __future__ import annotations

import numpy as np

from vkml.array import bind
from vkml.trace.ops import OpKind

from .cases import Case, rand, tol

FLOATS = (np.float32, np.float64)
NUMERIC = (np.int32, np.float32, np.float64)
ALL = (np.bool_, np.int32, np.float32, np.float64)
CASES: list[Case] = []


def _add(op, name, fn, ref, args, dtype, **kw):
    d = np.dtype(dtype)
    if d.kind == "f" and "rtol" not in kw:
        kw["rtol"], kw["atol"] = tol(d, rtol32=2e-5, atol32=2e-5)
    CASES.append(Case(op, f"{name}-{d.name}", fn, ref, args, dtype=d, **kw))


def _red(op, axes, keepdims=False, pre=lambda x: x):
    return lambda x: bind(op, [pre(x)], axes=axes, keepdims=keepdims)


_NP = {OpKind.Sum: np.sum, OpKind.Mean: np.mean, OpKind.Max: np.max, OpKind.Min: np.min,
       OpKind.Prod: np.prod, OpKind.ArgMax: np.argmax, OpKind.ArgMin: np.argmin}


def _np_red(op, axes, keepdims=False, pre=lambda x: x):
    f = _NP[op]
    if op in (OpKind.ArgMax, OpKind.ArgMin):
        (ax,) = axes
        return lambda x: f(pre(x), axis=ax, keepdims=keepdims)
    return lambda x: f(pre(x), axis=axes, keepdims=keepdims)


def _data(shape, d, op):
    # products of many factors in [-2, 2] under- or overflow float32; keep them near 1
    if op is OpKind.Prod and np.dtype(d).kind == "f":
        return rand(shape, d, 0.5, 1.5)
    if op is OpKind.Prod and np.dtype(d).kind == "i":
        return rand(shape, d, -3, 3)
    return rand(shape, d)


# ---------------------------------------------------------------- Sum Mean Max Min Prod
T_, S_ = lambda x: x.T, lambda x: x[::2]
for op, dts in [(OpKind.Sum, NUMERIC), (OpKind.Mean, FLOATS), (OpKind.Max, ALL),
                (OpKind.Min, ALL), (OpKind.Prod, NUMERIC)]:
    for d in dts:
        for name, shape, axes, keep, pre in [
            ("all", (3, 5, 7), (0, 1, 2), False, None),
            ("last", (6, 37), (1,), False, None),
            ("first", (37, 6), (0,), True, None),
            ("middle", (3, 9, 4), (1,), False, None),
            ("two-apart", (2, 3, 4, 5), (0, 2), True, None),
            ("1-and-3", (2, 3, 4, 8), (1, 3), False, None),
            ("none", (3, 4), (), False, None),
            ("size1-axes", (1, 5, 1, 3), (0, 2, 3), False, None),
            ("long-row", (2, 1001), (1,), False, None),
            ("long-col", (513, 3), (0,), False, None),
            ("of-T", (4, 6), (1,), False, T_),
            ("of-strided", (9, 5), (0,), False, S_),
        ]:
            p = pre or (lambda x: x)
            _add(op, name, _red(op, axes, keep, p), _np_red(op, axes, keep, p),
                 [_data(shape, d, op)], d)
        # a zero-size kept axis: empty output
        _add(op, "size0-out", _red(op, (1,)), _np_red(op, (1,)), [rand((0, 4), d)], d)
    # empty reductions: the identity (Mean: nan)
    for d in dts:
        if op is OpKind.Sum:
            _add(op, "empty", _red(op, (0,)), lambda x: np.zeros(x.shape[1:], x.dtype),
                 [rand((0, 3), d)], d)
        elif op is OpKind.Prod:
            _add(op, "empty", _red(op, (0, 2), True), lambda x: np.ones((1, 3, 1), x.dtype),
                 [rand((2, 3, 0), d)], d)
        elif op is OpKind.Mean:
            _add(op, "empty", _red(op, (1,)), lambda x: np.full((4,), np.nan),
                 [rand((4, 0), d)], d)

for d in FLOATS:
    nanx = rand((5, 8), d)
    nanx[1, 3] = np.nan
    nanx[3, 0] = np.nan
    nanx[4, 7] = np.inf
    nanx[0, 1] = -np.inf
    for op in (OpKind.Max, OpKind.Min):
        _add(op, "nan-propagates", _red(op, (1,)), _np_red(op, (1,)), [nanx], d)
        _add(op, "nan-all", _red(op, (0, 1)), _np_red(op, (0, 1)), [nanx], d)
    # a zero times inf is nan; zeros alone give (signed) zero
    z = rand((4, 40), d, 0.5, 1.5)
    z[1, 5] = 0.0
    z[2, ::3] = 0.0
    _add(OpKind.Prod, "zeros", _red(OpKind.Prod, (1,)), _np_red(OpKind.Prod, (1,)), [z], d)
    # mixed magnitudes whose product is representable
    mag = np.array([[1e-30, 1e20, 1e15, 3.0, 1e-10, 2.0] * 4], d)
    _add(OpKind.Prod, "magnitudes", _red(OpKind.Prod, (1,)), _np_red(OpKind.Prod, (1,)),
         [mag], d, rtol=1e-5 if d == np.float32 else 1e-12, atol=0.0)

# int32 sums and products accumulate in int64: partial results beyond int32 are exact
# when the result fits (one that does not raises OverflowError: tests/vulkan/test_reduce.py)
big = np.tile(np.array([2**30, 2**30, -2**30, 2**30, -2**30, -2**30, 7], np.int32), (3, 1))
_add(OpKind.Sum, "int-partials-beyond-int32", _red(OpKind.Sum, (1,)),
     lambda x: np.sum(x, axis=1, dtype=np.int64), [big], np.int32)
fac = np.where(rand((3, 40), np.int32, 0, 1) > 0, 1, -1).astype(np.int32)
fac[:, ::20] = 2**10
fac[2, ::8] = 2**10                 # 2**50: the partial product passes 2**31 before the zero
fac[2, 37] = 0
_add(OpKind.Prod, "int-partials-beyond-int32", _red(OpKind.Prod, (1,)),
     lambda x: np.prod(x, axis=1, dtype=np.int64), [fac], np.int32)

# bool Max/Min are any/all
for op in (OpKind.Max, OpKind.Min):
    b = np.zeros((4, 6), bool)
    b[1, 2] = True
    b[3] = True
    _add(op, "any-all", _red(op, (1,)), _np_red(op, (1,)), [b], np.bool_)

# ---------------------------------------------------------------- ArgMax ArgMin
for op in (OpKind.ArgMax, OpKind.ArgMin):
    for d in NUMERIC:
        for name, shape, axes, keep, pre in [
            ("last", (6, 37), (1,), False, None),
            ("first", (37, 6), (0,), True, None),
            ("middle", (3, 9, 4), (1,), False, None),
            ("long-row", (2, 1001), (1,), False, None),
            ("of-T", (4, 6), (1,), False, T_),
            ("of-strided", (9, 5), (0,), False, S_),
            ("size1", (5, 1), (1,), False, None),
        ]:
            p = pre or (lambda x: x)
            _add(op, name, _red(op, axes, keep, p), _np_red(op, axes, keep, p),
                 [rand(shape, d)], d, exact=True)
        # ties everywhere: the first index wins
        ties = rand((7, 50), d, -1, 1).round()
        _add(op, "ties", _red(op, (1,)), _np_red(op, (1,)), [ties.astype(d)], d, exact=True)
        _add(op, "ties-col", _red(op, (0,)), _np_red(op, (0,)), [ties.astype(d)], d, exact=True)
        # the flat C-order index over several reduced axes
        x = rand((3, 4, 5, 6), d, -1000, 1000)
        _add(op, "two-axes", _red(op, (1, 3)),
             lambda x, f=_NP[op]: f(x.transpose(0, 2, 1, 3).reshape(3, 5, 24), axis=2),
             [x], d, exact=True)
        _add(op, "size0-out", _red(op, (1,)), _np_red(op, (1,)), [rand((0, 4), d)], d, exact=True)
    for d in FLOATS:
        x = rand((4, 9), d)
        x[1, 4] = np.nan
        x[1, 7] = np.nan
        x[2, 0] = np.inf
        x[3, 2] = -np.inf
        _add(op, "nan-first", _red(op, (1,)), _np_red(op, (1,)), [x], d, exact=True)

# ---------------------------------------------------------------- Cumsum
CS = OpKind.Cumsum
for d in NUMERIC:
    for name, shape, axis, pre in [
        ("1d", (13,), 0, None),
        ("last", (4, 37), 1, None),
        ("first", (37, 4), 0, None),
        ("middle", (2, 9, 3), 1, None),
        ("long", (2, 3001), 1, None),
        ("size1", (1, 5), 0, None),
        ("of-T", (5, 6), 1, T_),
        ("of-strided", (11, 3), 0, S_),
    ]:
        p = pre or (lambda x: x)
        _add(CS, name, lambda x, a=axis, p=p: bind(CS, [p(x)], axis=a),
             lambda x, a=axis, p=p: np.cumsum(p(x), axis=a), [rand(shape, d)], d)
    for shape, axis in [((0, 4), 1), ((3, 0), 1)]:
        _add(CS, f"size0-{shape}", lambda x, a=axis: bind(CS, [x], axis=a),
             lambda x, a=axis: np.cumsum(x, axis=a), [rand(shape, d)], d)

# ---------------------------------------------------------------- Softmax LogSoftmax


def softmax_ref(x, axis, log):
    """JAX's formulas: shift by the (nan-propagating) max, then exp / sum or shift - log sum."""
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        sh = x - m
        s = np.exp(sh).sum(axis=axis, keepdims=True)
        return sh - np.log(s) if log else np.exp(sh) / s


for op, log in ((OpKind.Softmax, False), (OpKind.LogSoftmax, True)):
    for d in FLOATS:
        for name, shape, axis, pre in [
            ("1d", (13,), 0, None),
            ("last", (6, 37), 1, None),
            ("first", (37, 6), 0, None),
            ("middle", (2, 9, 3), 1, None),
            ("long-row", (2, 3001), 1, None),
            ("size1-axis", (4, 1), 1, None),
            ("of-T", (5, 6), 1, T_),
            ("of-strided", (11, 3), 0, S_),
            ("size0", (0, 5), 1, None),
        ]:
            p = pre or (lambda x: x)
            _add(op, name, lambda x, a=axis, p=p, op=op: bind(op, [p(x)], axis=a),
                 lambda x, a=axis, p=p, log=log: softmax_ref(p(x), a, log),
                 [rand(shape, d, -6, 6)], d)
        # -inf entries give 0 (-inf for log); an all -inf row, a nan or a +inf give nan
        x = rand((5, 6), d)
        x[0, 2] = -np.inf
        x[1, :] = -np.inf
        x[2, 3] = np.nan
        x[3, 1] = np.inf
        x[4, ::2] = -np.inf
        for name, axis, arr in (("inf-rows", 1, x), ("inf-cols", 0, np.ascontiguousarray(x.T))):
            _add(op, name, lambda x, a=axis, op=op: bind(op, [x], axis=a),
                 lambda x, a=axis, log=log: softmax_ref(x, a, log), [arr], d)
        # large logits: no overflow after the shift
        big = rand((3, 8), d, -1, 1) + np.array([[0.0], [80.0], [1e4]], d)
        _add(op, "large", lambda x, op=op: bind(op, [x], axis=1),
             lambda x, log=log: softmax_ref(x, 1, log), [big.astype(d)], d)
