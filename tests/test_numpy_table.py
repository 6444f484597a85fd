"""One table with a case for every public `vkml.numpy` function: its value against NumPy in
float64 and, where it is differentiable, its gradient against NumPy's own central differences.

A public name without a case here (or an entry in NO_CASE with the reason) fails
`test_every_public_name_has_a_case`, so a new function cannot land untested. The other tests
of vkml.numpy go deep on one family each (classes of inputs, special values, errors); this one
is broad: every name, one generic call, and the gradient wherever jax.numpy's is defined.

A case is `(f, args, diff)`: `f(m, *args)` is called with m = numpy and m = vkml.numpy on the
same float64/int/bool NumPy arrays (the result dtype is NumPy's mapped onto vkml's set as in
tests/test_numpy_classes.py), `diff` lists the argument positions to differentiate
(empty: not differentiable, or integer/bool valued). The gradient checked is that of
`sum(w * f(...))` for a fixed random w (a sum over every output of a tuple-valued f), so every
output element gets its own cotangent.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp

from tests.test_numpy_classes import public_functions, vk_dtype

F64, I32 = np.float64, np.int32
RNG = np.random.default_rng(20261202)


def r(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape)


def pos(*shape):
    return r(*shape, lo=0.3, hi=2.0)


def unit(*shape):
    return r(*shape, lo=-0.9, hi=0.9)


def ints(*shape, lo=-5, hi=6):
    return RNG.integers(lo, hi, size=shape).astype(I32)


def bools(*shape):
    return RNG.random(shape) < 0.5


def away(*shape):
    """Values at least 0.1 from an integer, so floor/round-like steps are not straddled by
    the difference quotient (whose gradient is then the true zero)."""
    return np.floor(r(*shape, lo=-4, hi=4)) + RNG.uniform(0.1, 0.9, size=shape)


def apart(*shape):
    """Distinct values at least 0.05 apart, so max/min/sort-like selections are stable under a
    finite-difference step."""
    n = int(np.prod(shape))
    return (RNG.permutation(n) * 0.1 - 0.05 * n).reshape(shape) + RNG.uniform(0, 0.02, shape)


def u(name):
    return lambda m, x: getattr(m, name)(x)


def b(name):
    return lambda m, x, y: getattr(m, name)(x, y)


def _put(m, x, i, v, axis):
    """put_along_axis as a function: NumPy's works in place, vkml's returns the new array."""
    if m is np:
        x = x.copy()
        np.put_along_axis(x, i, v, axis)
        return x
    return m.put_along_axis(x, i, v, axis, inplace=False)


def _nan(a):
    a = a.copy()
    a[0, 1] = a[2, 3] = np.nan
    return a


X, Y = r(3, 4), r(3, 4)
CASES: dict[str, tuple] = {
    # elementwise, unary
    **{n: (u(n), (r(2, 3),), (0,)) for n in [
        "abs", "absolute", "negative", "positive", "sin", "cos", "tanh", "exp", "expm1", "exp2",
        "sinh", "cosh", "square", "sign", "conj", "conjugate", "real", "fabs",
        "deg2rad", "degrees", "rad2deg", "radians", "copy", "ravel"]},
    **{n: (u(n), (pos(2, 3),), (0,)) for n in [
        "log", "log1p", "log2", "log10", "sqrt", "reciprocal"]},
    **{n: (lambda m, x, n=n: getattr(m, n)(x) if m is vnp else np.vectorize(getattr(math, n))(x),
           (r(2, 3),), (0,)) for n in ["erf", "erfc"]},
    **{n: (u(n), (r(2, 3),), (0,)) for n in ["tan", "arctan", "arcsinh", "cbrt", "sinc"]},
    **{n: (u(n), (unit(2, 3),), (0,)) for n in ["arcsin", "arccos", "arctanh"]},
    "arccosh": (u("arccosh"), (pos(2, 3) + 1.0,), (0,)),
    "arctan2": (b("arctan2"), (r(3, 4), r(4)), (0, 1)),
    "fmod": (b("fmod"), (away(3, 4) * 2, np.array([1.5, -2.5, 3.5, 1.25])), (0,)),
    **{n: (b(n), (ints(3, 4, lo=-12, hi=13), ints(4, lo=-9, hi=10)), ()) for n in ["gcd", "lcm"]},
    "rsqrt": (lambda m, x: vnp.rsqrt(x) if m is vnp else 1 / np.sqrt(x), (pos(2, 3),), (0,)),
    **{n: (u(n), (away(2, 3),), (0,)) for n in ["floor", "ceil", "trunc", "rint", "fix", "round",
                                                 "around"]},
    "imag": (u("imag"), (r(2, 3),), (0,)),
    **{n: (u(n), (r(2, 3),), ()) for n in ["isfinite", "isnan", "isinf", "isposinf", "isneginf",
                                            "signbit", "logical_not"]},
    **{n: (u(n), (ints(2, 3),), ()) for n in ["bitwise_not", "invert"]},
    "nan_to_num": (lambda m, x: m.nan_to_num(x, nan=1.5, posinf=3.0, neginf=-3.0),
                   (np.array([np.nan, np.inf, -np.inf, 0.5, -2.0]),), ()),
    # elementwise, binary
    **{n: (b(n), (X, Y), (0, 1)) for n in [
        "add", "subtract", "multiply", "logaddexp", "logaddexp2", "hypot", "copysign"]},
    **{n: (b(n), (r(3, 4), apart(4)), (0, 1)) for n in ["maximum", "minimum", "fmax", "fmin"]},
    **{n: (b(n), (X, pos(4) + 0.5), (0, 1)) for n in ["divide", "true_divide"]},
    "power": (b("power"), (pos(3, 4), r(4)), (0, 1)),
    "float_power": (b("float_power"), (pos(3, 4), r(4)), (0, 1)),
    **{n: (b(n), (away(3, 4) * 2, np.array([1.5, -2.5, 3.5, 1.25])), ()) for n in [
        "mod", "remainder", "floor_divide"]},
    "divmod": (b("divmod"), (away(3, 4) * 2, np.array([1.5, -2.5, 3.5, 1.25])), ()),
    "heaviside": (b("heaviside"), (np.array([-1.0, 0.0, 2.0]), np.array([0.5, 0.25, 0.5])), ()),
    **{n: (b(n), (X, Y), ()) for n in [
        "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
        "logical_or"]},
    **{n: (b(n), (ints(3, 4), ints(4)), ()) for n in ["bitwise_and", "bitwise_or", "bitwise_xor"]},
    **{n: (b(n), (ints(3, 4), ints(4, lo=0, hi=5)), ()) for n in ["left_shift", "right_shift"]},
    "isclose": (b("isclose"), (X, X + np.where(X > 0, 1e-9, 1.0)), ()),
    "allclose": (b("allclose"), (X, X + 1e-9), ()),
    "where": (lambda m, c, x, y: m.where(c, x, y), (bools(3, 4), X, r(4)), (1, 2)),
    "clip": (lambda m, x: m.clip(x, -1.0, 1.2), (apart(3, 4) / 3,), (0,)),
    # reductions
    **{n: (lambda m, x, n=n: getattr(m, n)(x, axis=1), (apart(3, 4),), (0,)) for n in [
        "sum", "prod", "max", "min", "amax", "amin", "mean", "var", "std", "cumsum"]},
    **{n: (lambda m, x, n=n: getattr(m, n)(x, axis=0), (apart(3, 4),), ()) for n in [
        "argmax", "argmin"]},
    **{n: (lambda m, x, n=n: getattr(m, n)(x, axis=-1), (bools(3, 4),), ()) for n in ["any",
                                                                                       "all"]},
    **{n: (lambda m, x, n=n: getattr(m, n)(x, axis=1), (_nan(apart(3, 4)),), (0,)) for n in [
        "nansum", "nanprod", "nanmax", "nanmin", "nanmean", "nanvar", "nanstd"]},
    **{n: (lambda m, x, n=n: getattr(m, n)(x, axis=1), (_nan(apart(3, 4)),), ()) for n in [
        "nanargmax", "nanargmin"]},
    "ptp": (lambda m, x: m.ptp(x, axis=0), (apart(3, 4),), (0,)),
    "count_nonzero": (lambda m, x: m.count_nonzero(x, axis=1), (ints(3, 4, lo=-1, hi=2),), ()),
    "average": (lambda m, x, w: m.average(x, axis=1, weights=w), (r(3, 4), pos(4)), (0, 1)),
    # sorting, selection and running reductions
    "sort": (lambda m, x: m.sort(x, axis=0), (apart(3, 4),), (0,)),
    "argsort": (lambda m, x: m.argsort(x, axis=-1, kind="stable"), (ints(3, 5, lo=0, hi=3),), ()),
    "partition": (lambda m, x: m.partition(x, 2, axis=1)[:, 2], (apart(3, 5),), (0,)),
    "argpartition": (lambda m, x: m.take_along_axis(x, m.argpartition(x, 2, axis=1)[:, 2:3], 1),
                     (apart(3, 5),), (0,)),
    "median": (lambda m, x: m.median(x, axis=1), (apart(3, 4),), (0,)),
    "quantile": (lambda m, x: m.quantile(x, np.array([0.1, 0.75]), axis=0), (apart(5, 2),), (0,)),
    "percentile": (lambda m, x: m.percentile(x, 30.0, axis=None), (apart(3, 4),), (0,)),
    "searchsorted": (lambda m, a, v: m.searchsorted(a, v, side="right"),
                     (np.array([0.0, 1.0, 1.0, 2.5]), np.array([[1.0, -1.0], [3.0, 2.0]])), ()),
    "unique": (lambda m, x: m.unique(x, return_counts=True), (ints(12, lo=0, hi=5),), ()),
    "cumprod": (lambda m, x: m.cumprod(x, axis=1), (r(3, 4),), (0,)),
    "cummax": (lambda m, x: np.maximum.accumulate(x, axis=1) if m is np else m.cummax(x, axis=1),
               (apart(3, 4),), (0,)),
    "cummin": (lambda m, x: np.minimum.accumulate(x, axis=0) if m is np else m.cummin(x, axis=0),
               (apart(3, 4),), (0,)),
    "logcumsumexp": (lambda m, x: np.logaddexp.accumulate(x, axis=1) if m is np
                     else m.logcumsumexp(x, axis=1), (r(3, 4),), (0,)),
    "nancumsum": (lambda m, x: m.nancumsum(x, axis=1), (_nan(r(3, 4)),), (0,)),
    "nancumprod": (lambda m, x: m.nancumprod(x, axis=1), (_nan(r(3, 4)),), (0,)),
    # contraction
    "matmul": (b("matmul"), (r(2, 3, 4), r(4, 2)), (0, 1)),
    "dot": (b("dot"), (r(3, 4), r(4, 2)), (0, 1)),
    "vdot": (b("vdot"), (r(2, 3), r(2, 3)), (0, 1)),
    "outer": (b("outer"), (r(3), r(2, 2)), (0, 1)),
    "inner": (b("inner"), (r(2, 3), r(4, 3)), (0, 1)),
    "tensordot": (lambda m, x, y: m.tensordot(x, y, ([0, 2], [1, 0])), (r(2, 3, 4), r(4, 2)),
                  (0, 1)),
    "kron": (b("kron"), (r(2, 3), r(3, 2)), (0, 1)),
    "cross": (b("cross"), (r(4, 3), r(3)), (0, 1)),
    "einsum": (lambda m, x, y: m.einsum("ij,jk,k->i", x, y, y[0]), (r(2, 3), r(3, 4)), (0, 1)),
    # movement, shape and joining
    "reshape": (lambda m, x: m.reshape(x, (4, -1)), (r(2, 3, 2),), (0,)),
    "transpose": (lambda m, x: m.transpose(x, (1, 2, 0)), (r(2, 3, 4),), (0,)),
    "swapaxes": (lambda m, x: m.swapaxes(x, 0, 2), (r(2, 3, 4),), (0,)),
    "moveaxis": (lambda m, x: m.moveaxis(x, 0, -1), (r(2, 3, 4),), (0,)),
    "expand_dims": (lambda m, x: m.expand_dims(x, (0, 2)), (r(2, 3),), (0,)),
    "squeeze": (lambda m, x: m.squeeze(x, 1), (r(2, 1, 3),), (0,)),
    "broadcast_to": (lambda m, x: m.broadcast_to(x, (2, 3, 4)), (r(3, 1),), (0,)),
    "broadcast_arrays": (lambda m, x, y: m.broadcast_arrays(x, y), (r(3, 1), r(4)), (0, 1)),
    "flip": (lambda m, x: m.flip(x, 1), (r(2, 3),), (0,)),
    "flipud": (u("flipud"), (r(3, 2),), (0,)),
    "fliplr": (u("fliplr"), (r(3, 2),), (0,)),
    "roll": (lambda m, x: m.roll(x, (1, -2), (0, 1)), (r(3, 4),), (0,)),
    "rot90": (lambda m, x: m.rot90(x, 3, (1, 0)), (r(2, 3),), (0,)),
    "pad": (lambda m, x: m.pad(x, ((1, 0), (2, 1))), (r(2, 3),), (0,)),
    "concatenate": (lambda m, x, y: m.concatenate([x, y], 1), (r(2, 3), r(2, 1)), (0, 1)),
    "stack": (lambda m, x, y: m.stack([x, y], -1), (r(2, 3), r(2, 3)), (0, 1)),
    "vstack": (lambda m, x, y: m.vstack([x, y]), (r(3), r(2, 3)), (0, 1)),
    "row_stack": (lambda m, x, y: m.vstack([x, y]) if m is np else m.row_stack([x, y]),
                  (r(3), r(2, 3)), (0, 1)),
    "hstack": (lambda m, x, y: m.hstack([x, y]), (r(2, 3), r(2, 1)), (0, 1)),
    "dstack": (lambda m, x, y: m.dstack([x, y]), (r(2, 3), r(2, 3)), (0, 1)),
    "column_stack": (lambda m, x, y: m.column_stack([x, y]), (r(3), r(3, 2)), (0, 1)),
    "append": (lambda m, x, y: m.append(x, y, 0), (r(2, 3), r(1, 3)), (0, 1)),
    "split": (lambda m, x: m.split(x, [1, 3], 1), (r(2, 4),), (0,)),
    "array_split": (lambda m, x: m.array_split(x, 3, 1), (r(2, 5),), (0,)),
    "vsplit": (lambda m, x: m.vsplit(x, 2), (r(4, 3),), (0,)),
    "hsplit": (lambda m, x: m.hsplit(x, [1]), (r(2, 3),), (0,)),
    "dsplit": (lambda m, x: m.dsplit(x, 2), (r(2, 1, 4),), (0,)),
    "atleast_1d": (u("atleast_1d"), (np.array(1.5),), (0,)),
    "atleast_2d": (u("atleast_2d"), (r(3),), (0,)),
    "atleast_3d": (u("atleast_3d"), (r(2, 3),), (0,)),
    "take": (lambda m, x: m.take(x, np.array([2, 0, 2]), axis=1), (r(2, 3),), (0,)),
    "take_along_axis": (lambda m, x: m.take_along_axis(x, np.array([[2, 0], [1, 1]]), 1),
                        (r(2, 3),), (0,)),
    "put_along_axis": (lambda m, x, v: _put(m, x, np.array([[2], [0]]), v, 1),
                       (r(2, 3), r(2, 1)), (0, 1)),
    "nonzero": (lambda m, x: m.nonzero(x), (ints(3, 4, lo=-1, hi=2),), ()),
    "argwhere": (lambda m, x: m.argwhere(x), (ints(3, 4, lo=-1, hi=2),), ()),
    "flatnonzero": (lambda m, x: m.flatnonzero(x), (ints(3, 4, lo=-1, hi=2),), ()),
    "repeat": (lambda m, x: m.repeat(x, [2, 0, 1], 1), (r(2, 3),), (0,)),
    "tile": (lambda m, x: m.tile(x, (2, 1, 2)), (r(2, 3),), (0,)),
    "tril": (lambda m, x: m.tril(x, -1), (r(3, 4),), (0,)),
    "triu": (lambda m, x: m.triu(x, 1), (r(2, 3, 4),), (0,)),
    "diag": (lambda m, x: m.diag(x, 1), (r(3),), (0,)),
    "diagflat": (lambda m, x: m.diagflat(x, -1), (r(2, 2),), (0,)),
    "diagonal": (lambda m, x: m.diagonal(x, 1, 0, 2), (r(3, 2, 4),), (0,)),
    "trace": (lambda m, x: m.trace(x, -1), (r(3, 4),), (0,)),
    "diff": (lambda m, x: m.diff(x, 2, 0), (r(5, 3),), (0,)),
    "ediff1d": (lambda m, x: m.ediff1d(x, to_begin=[1.0]), (r(2, 3),), (0,)),
    "meshgrid": (lambda m, x, y: m.meshgrid(x, y, indexing="ij"), (r(3), r(2)), (0, 1)),
    "astype": (lambda m, x: x.astype(np.float32).astype(F64) if m is np
               else m.astype(m.astype(x, np.float32), F64), (r(2, 3),), ()),   # rounds: no FD check
    "rollaxis": (lambda m, x: m.rollaxis(x, 2, 0), (r(2, 3, 4),), (0,)),
    "select": (lambda m, c, x, y: m.select([c, ~c], [x, y], 0.5), (bools(3, 4), X, r(4)), (1, 2)),
    "piecewise": (lambda m, x: m.piecewise(x, [x < 0, x > 1], [lambda v: v * v, 2.0, lambda v: -v]),
                  (away(3, 4) / 2,), (0,)),
    "indices": (lambda m: m.indices((2, 3)), (), ()),
    "ix_": (lambda m: m.ix_(np.array([0, 2]), np.array([1, 0, 3])), (), ()),
    "unravel_index": (lambda m: m.unravel_index(np.array([0, 5, 11]), (3, 4)), (), ()),
    "ravel_multi_index": (lambda m: m.ravel_multi_index((np.array([0, 2]), np.array([3, 1])),
                                                        (3, 4)), (), ()),
    # creation and attributes
    "asarray": (lambda m, x: m.asarray(x), (r(2, 3),), (0,)),
    "array": (lambda m, x: m.array(x), (r(2, 3),), (0,)),
    "zeros": (lambda m: m.zeros((2, 3)), (), ()),
    "ones": (lambda m: m.ones((2, 3), I32), (), ()),
    "empty": (lambda m: m.empty((2, 0)), (), ()),
    "full": (lambda m: m.full((2, 3), 1.5), (), ()),
    "zeros_like": (lambda m, x: m.zeros_like(x), (r(2, 3),), ()),
    "ones_like": (lambda m, x: m.ones_like(x), (r(2, 3),), ()),
    "full_like": (lambda m, x: m.full_like(x, 2.5), (r(2, 3),), ()),
    "arange": (lambda m: m.arange(1, 7, 2), (), ()),
    "linspace": (lambda m: m.linspace(0.0, 1.0, 5), (), ()),
    "eye": (lambda m: m.eye(3, 4, 1), (), ()),
    "tri": (lambda m: m.tri(3, 4, -1), (), ()),
    "shape": (lambda m, x: m.shape(x), (r(2, 3),), ()),
    "ndim": (lambda m, x: m.ndim(x), (r(2, 3),), ()),
    "size": (lambda m, x: m.size(x), (r(2, 3),), ()),
}
NO_CASE: dict[str, str] = {   # name -> why it has no case here
}


def test_every_public_name_has_a_case():
    names = public_functions()
    assert names - set(CASES) - set(NO_CASE) == set(), "add a case to CASES"
    assert (set(CASES) | set(NO_CASE)) - names == set(), "stale names in CASES"


def leaves(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def as_np(v):
    return np.asarray(v) if isinstance(v, vkml.Array) else v


@pytest.mark.parametrize("name", sorted(CASES))
def test_value_against_numpy(name):
    f, args, _ = CASES[name]
    want, got = leaves(f(np, *args)), leaves(f(vnp, *args))
    assert len(got) == len(want), name
    for g, w in zip(got, want):
        if not isinstance(w, np.ndarray) and not isinstance(w, np.generic):
            assert as_np(g) == w, (name, g, w)    # shape, ndim, size, allclose: Python values
            continue
        g = as_np(g)
        assert g.shape == w.shape, (name, g.shape, w.shape)
        assert g.dtype == vk_dtype(w.dtype, args), (name, g.dtype, w.dtype)
        if w.dtype.kind == "f":
            tol = 1e-12 if g.dtype == F64 else 1e-6
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


def _weights(out) -> list:
    return [RNG.standard_normal(np.shape(o)) for o in leaves(out)]


def _loss(m, f, ws):
    def loss(*a):
        return sum(m.sum(w * o) for w, o in zip(ws, leaves(f(m, *a))))
    return loss


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c[2]))
def test_gradient_against_central_differences(name):
    f, args, diff = CASES[name]
    ws = _weights(f(np, *args))
    np_loss, vk_loss = _loss(np, f, ws), _loss(vnp, f, ws)
    h = 1e-6
    for i in diff:
        got = np.asarray(vkml.grad(vk_loss, argnums=i)(*args))
        want = np.zeros(np.shape(args[i]))
        for j in np.ndindex(want.shape):
            plus, minus = list(args), list(args)
            plus[i], minus[i] = np.array(args[i], F64), np.array(args[i], F64)
            plus[i][j] += h
            minus[i][j] -= h
            want[j] = (np_loss(*plus) - np_loss(*minus)) / (2 * h)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"{name}, arg {i}")
