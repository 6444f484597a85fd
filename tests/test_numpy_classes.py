"""Whole classes of inputs, looped over every public `vkml.numpy` function and every registry
operator, against NumPy: 0-d arrays with each axis spelling, size-0 arrays and size-0 axes,
bool and int32 inputs, NaN/Inf, and the arguments NumPy refuses.

The rule for each case: where NumPy raises, vkml raises an instance of the same exception
type (numpy.exceptions.AxisError included: vkml's AxisError subclasses it); where NumPy
returns, vkml returns the same shape and values with the dtype mapped onto vkml's set
(a NumPy integer result is int32, a float result is float64 only when an input was
float64, else float32: jax.numpy's promotion with integer input to a float function
giving float32). Values are compared with NumPy computed in float64 on the same inputs.

A public function or operator missing from the tables below fails
`test_every_public_function_is_classified` / `test_every_operator_is_classified`: a new
one has to be put in a class or excluded with a reason.
"""
from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
import vkml.nn.functional as F
from vkml.array import bind
from vkml.trace.ops import SPECS, OpKind

F32, F64, I32, B = np.float32, np.float64, np.int32, np.bool_
LOW = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
LOW_EPS = {LOW[0]: 2.0 ** -10, LOW[1]: 2.0 ** -7}    # one ulp at 1: 16-bit results round once
DTYPES = (B, I32, F32, F64)
OTHER = "issue 14: other branch"      # behaviours another branch of issue 14 changes

# --------------------------------------------------------------------------- the oracle


def np_error_type(e: BaseException) -> type:
    """The exception type vkml must raise an instance of where NumPy raised e: NumPy's
    AxisError itself, otherwise the nearest builtin type (UFuncTypeError -> TypeError)."""
    for t in type(e).__mro__:
        if t is np.exceptions.AxisError or t.__module__ == "builtins":
            return t
    return Exception


def vk_dtype(np_dtype, inputs) -> np.dtype:
    """NumPy's result dtype on vkml's four dtypes (see the module docstring)."""
    k = np.dtype(np_dtype).kind
    if np.dtype(np_dtype) in LOW and any(isinstance(x, np.ndarray) and x.dtype == np_dtype for x in inputs):
        return np.dtype(np_dtype)       # a 16-bit float operand keeps its dtype (jax.numpy's rule)
    if k == "b":
        return np.dtype(B)
    if k in "iu":
        return np.dtype(I32)
    f64 = any(isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.dtype.itemsize == 8
              for x in inputs)
    return np.dtype(F64 if f64 else F32)


def upcast(x):
    return x.astype(F64) if isinstance(x, np.ndarray) and (x.dtype.kind == "f" or x.dtype in LOW) else x


def run_np(fn, *args, **kw):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*args, **kw)


def to_vk(x):
    return vnp.asarray(x) if isinstance(x, np.ndarray) else x


def same(vk_fn, np_fn, args, kw=None, float_fn=False, rtol=None, what=""):
    """vk_fn(*args as vkml arrays, **kw) behaves as np_fn(*args, **kw) (see module doc).

    float_fn: a float function in vkml (integer and bool input become float32), where NumPy
    keeps integers (reciprocal) or picks float16 (exp of bool): judged against NumPy on
    float64 input, expecting float32."""
    kw = kw or {}
    nargs = [a.astype(F64) if float_fn and isinstance(a, np.ndarray) and a.dtype.kind in "biu"
             else a for a in args]
    try:
        want_t = run_np(np_fn, *nargs, **kw)
    except Exception as e:
        t = np_error_type(e)
        with pytest.raises(t):
            vk_fn(*[to_vk(a) for a in args], **kw)
        return
    got = vk_fn(*[to_vk(a) for a in args], **kw)
    want = run_np(np_fn, *[upcast(a) for a in nargs], **kw)
    if float_fn and not any(isinstance(a, np.ndarray) and a.dtype == F64 for a in args):
        want_t = np.asarray(want_t).astype(F32)
    _judge(got, want, want_t, args, rtol, what)


def _judge(got, want, want_t, args, rtol, what):
    if isinstance(want, (list, tuple)) and not isinstance(got, vkml.Array):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), (what, got, want)
        for g, w, wt in zip(got, want, want_t):
            _judge(g, w, wt, args, rtol, what)
        return
    if not isinstance(got, vkml.Array):           # shape, ndim, size, allclose
        assert got == want, (what, got, want)
        return
    want = np.asarray(want)
    d = vk_dtype(np.asarray(want_t).dtype, args)
    assert got.dtype == d, f"{what}: dtype {got.dtype}, NumPy says {np.asarray(want_t).dtype} -> {d}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, NumPy {want.shape}"
    g = np.asarray(got)
    if d.kind in "bi":
        np.testing.assert_array_equal(g, want.astype(d), err_msg=what)
        return
    w = want.astype(d).astype(F64)    # NumPy's float64 answer rounded to the result dtype
    r = rtol if rtol is not None else (1e-12 if d == F64 else LOW_EPS.get(d, 1e-5))
    a = 1e-12 if d == F64 else 1e-6
    np.testing.assert_allclose(g.astype(F64), w, rtol=r, atol=a, equal_nan=True, err_msg=what)


def build(shape, dtype, kind="plain"):
    """Deterministic test data: `plain` small values, `special` (and `special_late`, the
    nans elsewhere) with nan, inf, -inf, +-0."""
    n = int(np.prod(shape))
    if dtype == B:
        return (np.arange(n) % 3 == 1).reshape(shape)
    if np.dtype(dtype).kind == "i":
        return ((np.arange(n) * 7) % 11 - 5).astype(dtype).reshape(shape)
    if kind.startswith("special"):
        base = np.array([np.nan, 1.5, np.inf, -0.0, -np.inf, 0.0, -2.25, 3.0, 0.5, -1.0])
        if kind == "special_late":   # nan after the extremes: argmax must still find it
            base = np.array([1.5, np.inf, -0.0, -np.inf, np.nan, 0.0, -2.25, 3.0, np.nan, -1.0])
    else:
        base = np.array([0.75, -1.5, 2.25, 0.5, -0.25, 1.25, 3.0, -2.0, 1.0, 0.125])
    return np.resize(base, n).astype(dtype).reshape(shape)


def positive(shape, dtype):
    """build's data moved into the domain of log, sqrt, reciprocal (bool stays as it is)."""
    x = build(shape, dtype)
    return x if np.dtype(dtype) == B else np.asarray(np.abs(x) + 1, dtype)

# --------------------------------------------------------------------------- classification


def logsumexp_np(x, axis=None, keepdims=False):
    """The definition (test values are small): -inf over no elements, as scipy and torch."""
    return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))


def _erf(x):
    return np.vectorize(math.erf, otypes=[F64])(x)


# Reductions and other functions of one array and an `axis`:
# name -> (NumPy function, takes keepdims, float_fn)
AXIS_FNS = {
    "sum": (np.sum, True, False), "prod": (np.prod, True, False), "max": (np.max, True, False),
    "min": (np.min, True, False), "amax": (np.amax, True, False), "amin": (np.amin, True, False),
    "mean": (np.mean, True, False), "any": (np.any, True, False), "all": (np.all, True, False),
    "argmax": (np.argmax, True, False), "argmin": (np.argmin, True, False),
    "var": (np.var, True, False), "std": (np.std, True, False),
    "cumsum": (np.cumsum, False, False), "squeeze": (np.squeeze, False, False),
    "flip": (np.flip, False, False),
    # more reductions (vkml/reductions.py; their own tests: tests/test_numpy_reductions.py)
    "count_nonzero": (np.count_nonzero, True, False), "ptp": (np.ptp, True, False),
    "nansum": (np.nansum, True, False), "nanprod": (np.nanprod, True, False),
    "nanmax": (np.nanmax, True, False), "nanmin": (np.nanmin, True, False),
    "nanmean": (np.nanmean, True, False), "nanvar": (np.nanvar, True, False),
    "nanstd": (np.nanstd, True, False), "nanargmax": (np.nanargmax, True, False),
    "nanargmin": (np.nanargmin, True, False), "average": (np.average, True, False),
}
# Elementwise functions of one array: name -> (NumPy oracle, float_fn, domain builder)
UNARY = {
    "exp": (np.exp, True, build), "log": (np.log, True, positive),
    "log1p": (np.log1p, True, positive), "expm1": (np.expm1, True, build),
    "sqrt": (np.sqrt, True, positive), "rsqrt": (lambda x: 1 / np.sqrt(x), True, positive),
    "reciprocal": (lambda x: 1 / x if x.dtype.kind == "f" else np.reciprocal(x), True, positive),
    "tanh": (np.tanh, True, build), "sin": (np.sin, True, build), "cos": (np.cos, True, build),
    "erf": (_erf, True, build), "erfc": (lambda x: 1 - _erf(x), True, build),
    "negative": (np.negative, False, build), "abs": (np.abs, False, build),
    "absolute": (np.absolute, False, build), "sign": (np.sign, False, build),
    "square": (np.square, False, build), "isnan": (np.isnan, False, build),
    "isfinite": (np.isfinite, False, build), "logical_not": (np.logical_not, False, build),
    "ravel": (np.ravel, False, build), "copy": (np.copy, False, build),
    "invert": (np.invert, False, build), "bitwise_not": (np.bitwise_not, False, build),
    "floor": (np.floor, False, build), "ceil": (np.ceil, False, build),
    "trunc": (np.trunc, False, build), "fix": (np.fix, False, build),
    "rint": (np.rint, True, build), "round": (np.round, False, build),
    "around": (np.round, False, build), "positive": (np.positive, False, build),
    "fabs": (np.fabs, True, build), "deg2rad": (np.deg2rad, True, build),
    "rad2deg": (np.rad2deg, True, build), "radians": (np.radians, True, build),
    "degrees": (np.degrees, True, build), "isinf": (np.isinf, False, build),
    "isposinf": (np.isposinf, False, build), "isneginf": (np.isneginf, False, build),
    "signbit": (np.signbit, False, build),
    "log2": (np.log2, True, positive), "log10": (np.log10, True, positive),
    "exp2": (np.exp2, True, build), "sinh": (np.sinh, True, build),
    "cosh": (np.cosh, True, build), "real": (np.real, False, build),
    # NumPy's conj makes a bool int8; jax.numpy's (and vkml's) keeps the array as it is
    "imag": (np.imag, False, build), "conj": (np.real, False, build),
    "conjugate": (np.real, False, build),
    # trigonometric and hyperbolic compositions (accuracy: tests/test_numpy_math.py)
    "tan": (np.tan, True, build), "arctan": (np.arctan, True, build),
    "arcsin": (np.arcsin, True, build), "arccos": (np.arccos, True, build),
    "arcsinh": (np.arcsinh, True, build), "arccosh": (np.arccosh, True, positive),
    "arctanh": (np.arctanh, True, build), "cbrt": (np.cbrt, True, build),
    "sinc": (np.sinc, True, build),
}
# Elementwise functions of two arrays: name -> (NumPy oracle, float_fn)
BINARY = {
    "add": (np.add, False), "subtract": (np.subtract, False), "multiply": (np.multiply, False),
    "divide": (np.divide, False), "true_divide": (np.true_divide, False),
    "maximum": (np.maximum, False), "minimum": (np.minimum, False),
    "logical_and": (np.logical_and, False), "logical_or": (np.logical_or, False),
    "equal": (np.equal, False), "not_equal": (np.not_equal, False), "less": (np.less, False),
    "less_equal": (np.less_equal, False), "greater": (np.greater, False),
    "greater_equal": (np.greater_equal, False),
    "bitwise_and": (np.bitwise_and, False), "bitwise_or": (np.bitwise_or, False),
    "bitwise_xor": (np.bitwise_xor, False), "left_shift": (np.left_shift, False),
    "right_shift": (np.right_shift, False), "floor_divide": (np.floor_divide, False),
    "remainder": (np.remainder, False), "mod": (np.mod, False), "divmod": (np.divmod, False),
    "power": (np.power, False),
    "fmax": (np.fmax, False), "fmin": (np.fmin, False), "heaviside": (np.heaviside, True),
    "copysign": (np.copysign, True), "isclose": (np.isclose, False),
    # NumPy's float_power is float64 always; vkml's (as jax.numpy's) the promoted float
    "float_power": (np.power, True), "logaddexp": (np.logaddexp, True),
    "logaddexp2": (np.logaddexp2, True), "hypot": (np.hypot, True),
    "arctan2": (np.arctan2, True), "fmod": (np.fmod, False),
}
# Argument classes for creation functions: name -> list of (args, kwargs)
CREATION = {
    "zeros": [((s,), {}) for s in [(2.0,), 2.0, -1, (-1,), (2, -1), (True,), True, (), (0,),
                                    (2, 0), np.int64(3), (np.int64(2), 1), None, "3"]],
    "ones": [((s,), {}) for s in [(2.0,), -1, (2, -1), (True,), (), (0, 3)]],
    "empty": [((s,), {}) for s in [(2.0,), -1, (), (0,)]],
    "full": [(((2.0,), 1), {}), ((-1, 1), {}), (((), 2.5), {}), (((0,), 1), {}),
             (((2,), True), {}), (((2,), np.float64(1.5)), {}), (((2,), np.int64(3)), {})],
    "eye": [((n,), {}) for n in [-3, 0, 1, 3, 2.0, True]]
           + [((3, m), {}) for m in [-3, 0, 2, 3.0]] + [((3,), {"k": k}) for k in [1, -5, 5, 1.5]],
    "arange": [(a, {}) for a in [(0, 10, 0), (float("nan"),), (float("inf"),), ("a",), (1, 2, 0.0),
                                 (10, 0), (0, 10, -1), (np.array([3]),), (np.array(3),), (2.5,),
                                 (0, 1, 0.25), (None,), (0,), (-3,), (5, 1, -2)]],
    "linspace": [(a, {}) for a in [(0, 1, -1), (0, 1, 2.5), (0, 1, 2.0), (0, 1, 0), (0, 1, 1),
                                   (0, 1, np.int64(3)), (0, 1, True), (0, 1, "3"),
                                   (0, 1, np.array(3)), (0, 1, None)]]
                + [((0, 1, 1), {"endpoint": False}), ((2, 3, 4), {"endpoint": False})],
}
# Functions with their own class tests below (shape functions taking an axis and more)
OWN_TESTS = {
    "swapaxes", "moveaxis", "expand_dims", "concatenate", "stack", "split", "take", "reshape",
    "transpose", "broadcast_to", "broadcast_arrays", "where", "clip", "matmul", "dot", "vdot",
    "outer", "zeros_like", "ones_like", "full_like", "pad", "asarray", "array", "astype",
    "shape", "ndim", "size", "allclose", "einsum",
    "nan_to_num",   # its default posinf is the dtype's: tests/test_numpy_math.py
    # shapes and joining: tests/test_numpy_shapes.py
    "tri", "tril", "triu", "diagonal", "trace", "diag", "diagflat", "roll", "rot90", "flipud",
    "fliplr", "atleast_1d", "atleast_2d", "atleast_3d", "vstack", "row_stack", "hstack", "dstack",
    "column_stack", "tensordot", "inner", "kron", "cross", "diff", "ediff1d", "repeat", "tile",
    "append", "array_split", "vsplit", "hsplit", "dsplit", "meshgrid",
    # index helpers and selectors: tests/test_numpy_more_shapes.py (r_ and c_ there too)
    "rollaxis", "indices", "ix_", "unravel_index", "ravel_multi_index", "select", "piecewise",
    # indexing, gather and scatter: tests/test_indexing.py
    "take_along_axis", "put_along_axis", "nonzero", "argwhere", "flatnonzero",
    # sorting, selection and running reductions: tests/test_numpy_sorting.py
    "sort", "argsort", "partition", "argpartition", "median", "quantile", "percentile",
    "searchsorted", "unique", "cumprod", "cummax", "cummin", "logcumsumexp", "nancumsum",
    "nancumprod",
    # int32 only (NumPy refuses floats): tests/test_numpy_math.py
    "gcd", "lcm",
}
EXCLUDED: dict[str, str] = {   # name -> reason
}


def public_functions() -> set[str]:
    """The public functions vkml.numpy defines (NumPy's names on vkml arrays)."""
    return {n for n, v in vars(vnp).items() if not n.startswith("_") and callable(v)
            and not isinstance(v, type) and getattr(v, "__module__", None) == "vkml.numpy"}


def test_every_public_function_is_classified():
    known = set(AXIS_FNS) | set(UNARY) | set(BINARY) | set(CREATION) \
        | OWN_TESTS | set(EXCLUDED)
    assert public_functions() - known == set(), "unclassified: add them to a table here"
    assert known - public_functions() == set(), "stale names in the tables"


# --------------------------------------------------------------------------- axis classes

AXIS_SPELLINGS = [None, 0, -1, 1, -2, (0,), (), (0, -1), (-1,), 1.0, True, np.int64(0)]
SPELLING_EXCLUDED = {
    ("flip", True): "NumPy's flip reads axis=True as axis 1 (operator.index); vkml refuses a "
                    "bool axis everywhere, as NumPy's reductions do (TypeError)",
    ("mean", True): "NumPy checks a bool axis against the rank before refusing it (TypeError on "
                    "a 2-d array, AxisError on a 0-d one); vkml refuses it first: TypeError",
    ("var", True): "as mean", ("std", True): "as mean",
    ("nanmean", True): "as mean (for integer input, which NumPy hands to mean)",
    ("nanvar", True): "as nanmean", ("nanstd", True): "as nanmean", ("average", True): "as mean",
}


@pytest.mark.parametrize("name", sorted(AXIS_FNS) + ["logsumexp"])
@pytest.mark.parametrize("dtype", [F32, I32, B])
def test_0d_with_every_axis_spelling(name, dtype):
    fn, kd, float_fn = AXIS_FNS.get(name, (logsumexp_np, True, True))
    vk = F.logsumexp if name == "logsumexp" else getattr(vnp, name)
    if name == "logsumexp" and dtype != F32:
        return     # a float function: its dtype class is nn's
    x = np.array(True) if dtype == B else np.asarray(build((), dtype) + 2, dtype)
    for ax in AXIS_SPELLINGS:
        if (name, ax) in SPELLING_EXCLUDED and type(ax) is bool:
            continue
        same(lambda a: vk(a, axis=ax), lambda a: fn(a, axis=ax), [x], float_fn=float_fn,
             what=f"{name}(0-d {np.dtype(dtype)}, axis={ax!r})")
        if kd:
            same(lambda a: vk(a, axis=ax, keepdims=True), lambda a: fn(a, axis=ax, keepdims=True),
                 [x], float_fn=float_fn, what=f"{name}(0-d, axis={ax!r}, keepdims)")


def test_0d_reductions_regressions():
    """The spellings of issue 14 that raised IndexError: tuple index out of range."""
    x = vnp.asarray(3.0)
    for fn in (lambda: x.sum(0), lambda: x.prod(0), lambda: x.max(-1), lambda: x.min(0),
               lambda: F.logsumexp(x, 0), lambda: x.squeeze(0), lambda: x.any(0), lambda: x.all(-1)):
        assert fn().shape == () and float(fn()) in (3.0, 1.0)
    assert int(x.argmax(0)) == 0 and int(x.argmin(-1)) == 0
    assert vnp.cumsum(x, 0).shape == (1,)
    with pytest.raises(np.exceptions.AxisError, match="mean: axis 0 .* rank 0"):
        x.mean(0)           # NumPy refuses mean/var/std over axis 0 of a 0-d array
    with pytest.raises(IndexError):
        x.sum((0,))         # and any tuple of axes
    with pytest.raises(TypeError, match="argmax: axis"):
        x.argmax((0,))


EMPTY_SHAPES = [(0,), (2, 0), (0, 3), (0, 0)]
EMPTY_AXES = [None, 0, 1, -1, (0, 1), (), (1,)]


@pytest.mark.parametrize("name", sorted(AXIS_FNS) + ["logsumexp"])
def test_size0_inputs_and_axes(name):
    fn, kd, float_fn = AXIS_FNS.get(name, (logsumexp_np, True, True))
    vk = F.logsumexp if name == "logsumexp" else getattr(vnp, name)
    for shape in EMPTY_SHAPES:
        for dtype in (F32, I32, B) if name != "logsumexp" else (F32,):
            x = np.zeros(shape, dtype)
            for ax in EMPTY_AXES:
                same(lambda a: vk(a, axis=ax), lambda a: fn(a, axis=ax), [x], float_fn=float_fn,
                     what=f"{name}({np.dtype(dtype)}{list(shape)}, axis={ax!r})")
                if kd and dtype == F32:
                    same(lambda a: vk(a, axis=ax, keepdims=True),
                         lambda a: fn(a, axis=ax, keepdims=True), [x], float_fn=float_fn,
                         what=f"{name}({list(shape)}, axis={ax!r}, keepdims)")


def test_empty_reduction_errors_are_value_errors_naming_the_reduction():
    for fn, op in [(vnp.max, "maximum"), (vnp.min, "minimum")]:
        with pytest.raises(ValueError, match=f"zero-size array to reduction operation {op}.*(2, 0)"):
            fn(vnp.zeros((2, 0)), axis=1)
    with pytest.raises(ValueError, match=r"argmax: attempt to get argmax of an empty sequence"):
        vnp.argmax(vnp.zeros((0,)))
    assert bool(vnp.any(vnp.zeros((0,)))) is False and bool(vnp.all(vnp.zeros((0,)))) is True


@pytest.mark.parametrize("name", sorted(AXIS_FNS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_dtype_and_nan_classes_of_axis_functions(name, dtype):
    fn, kd, float_fn = AXIS_FNS[name]
    vk = getattr(vnp, name)
    kinds = ["plain", "special", "special_late"] if np.dtype(dtype).kind == "f" else ["plain"]
    for kind in kinds:
        x = build((2, 5), dtype, kind)
        for ax in (None, 0, 1, -1) if name != "squeeze" else (None,):
            same(lambda a: vk(a, axis=ax), lambda a: fn(a, axis=ax), [x], float_fn=float_fn,
                 what=f"{name}({np.dtype(dtype)} {kind}, axis={ax})")


# --------------------------------------------------------------------------- elementwise

SHAPES = [(), (0,), (2, 0), (3,)]


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_dtype_shape_and_special_value_classes(name):
    fn, float_fn, domain = UNARY[name]
    vk = getattr(vnp, name)
    for dtype in DTYPES:
        for shape in SHAPES:
            same(vk, fn, [domain(shape, dtype)], float_fn=float_fn,
                 what=f"{name}({np.dtype(dtype)}{list(shape)})")
        if np.dtype(dtype).kind == "f":
            same(vk, fn, [build((10,), dtype, "special")], float_fn=float_fn,
                 what=f"{name}({np.dtype(dtype)} nan/inf/+-0)")


BINARY_SHAPES = [((), ()), ((), (0,)), ((2, 0), (0,)), ((2, 0), (1,)), ((3,), ()), ((2, 1), (3,))]


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_dtype_shape_and_special_value_classes(name):
    fn, float_fn = BINARY[name]
    vk = getattr(vnp, name)
    for dx in DTYPES:
        for dy in DTYPES:
            for sx, sy in BINARY_SHAPES:
                same(vk, fn, [build(sx, dx), build(sy, dy)], float_fn=float_fn,
                     what=f"{name}({np.dtype(dx)}{list(sx)}, {np.dtype(dy)}{list(sy)})")
    for d in (F32, F64):   # nan, inf, +-0 against each other (0/0, inf-inf, max(nan, 1), ...)
        x = build((10,), d, "special")
        same(vk, fn, [x[:, None], x[None, :]], what=f"{name}({np.dtype(d)} specials)")


# --------------------------------------------------------------------------- creation


@pytest.mark.parametrize("name", sorted(CREATION))
def test_creation_argument_classes(name):
    fn, vk = getattr(np, name), getattr(vnp, name)
    for args, kw in CREATION[name]:
        what = f"{name}{args!r} {kw}"
        try:
            want = run_np(fn, *args, **kw)
        except Exception as e:
            with pytest.raises(np_error_type(e)):
                vk(*args, **kw)
            continue
        got = vk(*args, **kw)
        want = np.asarray(want)
        assert got.shape == want.shape, what
        if name != "empty":   # NumPy's empty is uninitialised
            np.testing.assert_allclose(np.asarray(got, F64), want.astype(F64), rtol=1e-6,
                                       err_msg=what)


def test_creation_regressions():
    """Issue 14: these were accepted (a truncated float shape, an empty eye)."""
    with pytest.raises(ValueError, match="eye: negative dimensions"):
        vnp.eye(-3, 3)
    with pytest.raises(ValueError, match="eye: negative dimensions"):
        vnp.eye(-3)
    for fn in (lambda: vnp.zeros((2.0,)), lambda: vnp.ones((2.0,)), lambda: vnp.full((2.0,), 1)):
        with pytest.raises(TypeError, match="float 2.0 cannot be interpreted as an integer"):
            fn()
    with pytest.raises(ValueError, match="zeros: negative dimensions are not allowed"):
        vnp.zeros((3, -2))
    import vkml.random as vr
    for fn in (vr.uniform, vr.normal):
        with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
            fn(vr.key(0), (2.0,))
        with pytest.raises(ValueError, match="negative"):
            fn(vr.key(0), (2, -1))
    with pytest.raises(ZeroDivisionError):
        vnp.arange(0, 3, 0)
    with pytest.raises(ValueError):     # and still a ValueError, as vkml has said
        vnp.arange(0, 3, 0)


# --------------------------------------------------------------------------- shape functions


def test_axis_taking_shape_functions_on_0d_and_size0():
    x0, e = np.array(2.5, F32), np.zeros((2, 0), F32)
    for ax in [0, -1, 1, -2]:
        for x in (x0, e):
            what = f"axis {ax} on {x.shape}"
            same(lambda a: vnp.swapaxes(a, ax, 0), lambda a: np.swapaxes(a, ax, 0), [x], what=what)
            same(lambda a: vnp.moveaxis(a, ax, 0), lambda a: np.moveaxis(a, ax, 0), [x], what=what)
            same(lambda a: vnp.expand_dims(a, ax), lambda a: np.expand_dims(a, ax), [x], what=what)
            same(lambda a: vnp.stack([a, a], ax), lambda a: np.stack([a, a], ax), [x], what=what)
            same(lambda a: vnp.concatenate([a, a], ax), lambda a: np.concatenate([a, a], ax), [x],
                 what=what)
            same(lambda a: vnp.split(a, 1, ax), lambda a: np.split(a, 1, ax), [x], what=what)
            same(lambda a: vnp.take(a, np.zeros(0, np.int32), ax),
                 lambda a: np.take(a, np.zeros(0, np.int32), ax), [x], what=what)
        same(lambda a: vnp.take(a, np.array([0]), ax), lambda a: np.take(a, np.array([0]), ax),
             [x0], what=f"take 0-d axis {ax}")
    for x in (x0, e):
        same(vnp.transpose, np.transpose, [x])
        same(lambda a: vnp.reshape(a, (-1,)), lambda a: np.reshape(a, (-1,)), [x])
        same(lambda a: vnp.reshape(a, (0, -1)), lambda a: np.reshape(a, (0, -1)), [x])
        same(lambda a: vnp.broadcast_to(a, (3, 2, 0)), lambda a: np.broadcast_to(a, (3, 2, 0)), [x])
        same(lambda a: vnp.broadcast_to(a, (2, -1)), lambda a: np.broadcast_to(a, (2, -1)), [x])
        same(lambda a: vnp.reshape(a, (2.0,)), lambda a: np.reshape(a, (2.0,)), [x])
        same(lambda a: vnp.broadcast_arrays(a, a), lambda a: np.broadcast_arrays(a, a), [x])
        same(lambda a: vnp.where(a > 0, a, 1.0), lambda a: np.where(a > 0, a, np.float32(1)), [x])
        same(lambda a: vnp.clip(a, 0, 1), lambda a: np.clip(a, 0, 1), [x])
        same(lambda a: vnp.pad(a, 1), lambda a: np.pad(a, 1), [x])
        same(vnp.zeros_like, np.zeros_like, [x])
        same(vnp.ones_like, np.ones_like, [x])
        same(lambda a: vnp.full_like(a, 2), lambda a: np.full_like(a, 2), [x])
        same(vnp.asarray, np.asarray, [x])
        same(vnp.array, np.array, [x])
        same(lambda a: vnp.astype(a, I32), lambda a: a.astype(I32), [x])
        same(vnp.shape, np.shape, [x])
        same(vnp.ndim, np.ndim, [x])
        same(vnp.size, np.size, [x])
        same(lambda a: vnp.allclose(a, a), lambda a: np.allclose(a, a), [x])
        same(lambda a: vnp.outer(a, a), lambda a: np.outer(a, a), [x])
        same(lambda a: vnp.vdot(a, a), lambda a: np.vdot(a, a), [x])
        same(lambda a: vnp.dot(a, a.T), lambda a: np.dot(a, a.T), [x])
        same(lambda a: vnp.matmul(a, a.T), lambda a: np.matmul(a, a.T), [x])
        for spec in ("...,...", "...->", "...,...->"):
            same(lambda a: vnp.einsum(spec, a, a) if "," in spec else vnp.einsum(spec, a),
                 lambda a: np.einsum(spec, a, a) if "," in spec else np.einsum(spec, a), [x],
                 what=f"einsum {spec!r} on {x.shape}")
    same(lambda a: vnp.einsum("ij,kj->ik", a, a), lambda a: np.einsum("ij,kj->ik", a, a), [e])
    same(lambda a: vnp.matmul(a.T, a), lambda a: np.matmul(a.T, a), [e])   # k = 2, result (0, 0)
    same(lambda a: vnp.matmul(a, a.T), lambda a: np.matmul(a, a.T), [e])   # k = 0: zeros (2, 2)


def test_big_endian_inputs_are_converted_on_upload():
    for d in (">f4", ">f8", ">i4", ">i8", ">u2"):
        x = np.arange(-1, 3).astype(d) if "u" not in d else np.arange(3).astype(d)
        same(vnp.asarray, np.asarray, [x], what=d)
        same(lambda a: a + 1, lambda a: a + 1, [x], what=d)


def test_index_classes():
    x = np.arange(12, dtype=F32).reshape(3, 4)
    for idx in ([], [[]], ([],), (slice(None), []), ([], 0), np.zeros(0, np.int64)):
        same(lambda a: a[idx], lambda a: a[idx], [x], what=f"x[{idx!r}]")
    for idx in (np.zeros(0, F64), slice(None, 2.0)):
        same(lambda a: a[idx], lambda a: a[idx], [x], what=f"x[{idx!r}]")
    a = vnp.asarray(x)
    np.testing.assert_array_equal(np.asarray(a[:vnp.asarray(2)]), x[:np.array(2)])
    for bad in (vnp.asarray([2]), vnp.asarray(True), vnp.asarray(2.0)):
        with pytest.raises(TypeError, match="slice indices must be integers"):
            a[:bad]        # NumPy: only a 0-d integer array converts to an index
    same(lambda a: a[a > 3], lambda a: a[a > 3], [x], what="x[x > 3]")
    with pytest.raises(IndexError, match="boolean index did not match"):
        a[x[:2] > 3]       # NumPy's IndexError for a mask of the wrong shape


# --------------------------------------------------------------------------- registry


def _refuse_other_dtypes(kind, make):
    """bind(kind) on each dtype not in the spec's dtypes raises DTypeError (a TypeError)."""
    for d in DTYPES:
        if np.dtype(d) not in SPECS[kind].dtypes:
            with pytest.raises(vkml.DTypeError):
                make(np.dtype(d))


_SIG = lambda x: 1 / (1 + np.exp(-x))   # noqa: E731
OP_UNARY = {
    OpKind.Neg: np.negative, OpKind.Reciprocal: lambda x: 1 / x, OpKind.Exp: np.exp,
    OpKind.Log: np.log, OpKind.Log1p: np.log1p, OpKind.Expm1: np.expm1, OpKind.Sqrt: np.sqrt,
    OpKind.Rsqrt: lambda x: 1 / np.sqrt(x), OpKind.Sin: np.sin, OpKind.Cos: np.cos,
    OpKind.Tanh: np.tanh, OpKind.Sigmoid: _SIG, OpKind.Abs: np.abs, OpKind.Sign: np.sign,
    OpKind.Erf: _erf, OpKind.Erfc: lambda x: 1 - _erf(x), OpKind.Relu: lambda x: np.maximum(x, 0),
    OpKind.Gelu: lambda x: x * 0.5 * (1 + _erf(x / np.sqrt(2))), OpKind.Silu: lambda x: x * _SIG(x),
    OpKind.Copy: lambda x: x, OpKind.StopGradient: lambda x: x, OpKind.BitwiseNot: np.invert,
    OpKind.Floor: np.floor, OpKind.Ceil: np.ceil, OpKind.Trunc: np.trunc, OpKind.Rint: np.rint,
}
OP_BINARY = {
    OpKind.Add: np.add, OpKind.Sub: np.subtract, OpKind.Mul: np.multiply, OpKind.Div: np.divide,
    OpKind.Pow: np.power, OpKind.Maximum: np.maximum, OpKind.Minimum: np.minimum,
    OpKind.BitwiseAnd: np.bitwise_and, OpKind.BitwiseOr: np.bitwise_or,
    OpKind.BitwiseXor: np.bitwise_xor, OpKind.ShiftLeft: np.left_shift,
    OpKind.ShiftRight: np.right_shift, OpKind.FloorDivide: np.floor_divide,
    OpKind.Remainder: np.remainder, OpKind.Atan2: np.arctan2, OpKind.Gcd: np.gcd,
}
OP_REDUCE = {OpKind.Sum: np.sum, OpKind.Mean: np.mean, OpKind.Max: np.max, OpKind.Min: np.min,
             OpKind.Prod: np.prod, OpKind.ArgMax: np.argmax, OpKind.ArgMin: np.argmin}
# movement, casts, scans, contraction, where: one test of their 0-d and size-0 forms
OP_SHAPES = {OpKind.Reshape, OpKind.Permute, OpKind.Expand, OpKind.Slice, OpKind.Pad,
             OpKind.Concat, OpKind.Flip, OpKind.Cast, OpKind.Cumsum, OpKind.Softmax,
             OpKind.LogSoftmax, OpKind.MatMul, OpKind.Where}
OP_EXCLUDED = {
    OpKind.Input: "a graph leaf without operands",
    OpKind.Const: "a graph leaf without operands",
    OpKind.Full: "creation: its argument classes are vnp.full's (test_creation_argument_classes)",
    OpKind.Arange: "creation: its argument classes are vnp.arange's",
    OpKind.Rand: "creation from a key: tests/test_random.py",
    **{k: "a bool result (this table's oracle keeps the operand dtype): the vnp comparisons are "
          "in BINARY, 0-d and size-0 kernel cases in tests/ops/cases_elementwise.py"
       for k in (OpKind.Equal, OpKind.NotEqual, OpKind.Less, OpKind.LessEqual, OpKind.Greater,
                 OpKind.GreaterEqual)},
    OpKind.IntegerPow: "needs its exponent attribute: 0-d and size-0 cases in "
                       "tests/ops/cases_elementwise.py",
    OpKind.IndexSelect: "index bounds, eager and traced: tests/test_debug.py",
    OpKind.ScatterAdd: "index bounds, eager and traced: tests/test_debug.py",
    OpKind.CheckIndex: "the index bounds check of vkml.debug: tests/test_debug.py",
    OpKind.ScatterReduce: "made by .at[].min/max/multiply/set: their index forms, bounds and "
                          "0-d and size-0 cases in tests/test_indexing.py",
    OpKind.Im2Col: "NCHW windows: no 0-d form; shapes in tests/ops/cases_window.py",
    OpKind.Col2Im: "NCHW windows: no 0-d form; shapes in tests/ops/cases_window.py",
    OpKind.MaxPool2d: "NCHW windows: no 0-d form; shapes in tests/ops/cases_window.py",
    OpKind.MaxPool2dBackward: "NCHW windows: no 0-d form; shapes in tests/ops/cases_window.py",
    OpKind.SliceBackward: "the adjoint of Slice, made by its gradient rule only",
    OpKind.Scan: "a loop over a traced body: vkml.lax.scan, tests/lax/test_control.py",
    OpKind.Part: "a result of a Scan: vkml.lax.scan, tests/lax/test_control.py",
    OpKind.While: "a loop to a traced predicate: vkml.lax.while_loop, tests/lax/test_control.py",
    **{k: "matrices (..., n, n) only: no 0-d form; size-1, batched and empty-batch cases in "
          "tests/ops/cases_linalg.py, the surface in tests/linalg"
       for k in (OpKind.Cholesky, OpKind.TriangularSolve, OpKind.Solve, OpKind.LuPivots,
                 OpKind.LuPivotsToPermutation, OpKind.Lu)},
    **{k: "a decomposition of stacks of matrices (rank >= 2, no 0-d form): size-1, batched and "
          "non-contiguous cases in tests/ops/cases_spectral.py and tests/linalg/test_spectral.py"
       for k in (OpKind.Eigh, OpKind.Svd, OpKind.Qr)},
    OpKind.ArgSort: "needs its axis and order attributes: 0-d and size-0 through vnp.argsort "
                    "in tests/test_numpy_sorting.py, size-0 kernel cases in tests/ops/cases_sort.py",
}


def test_every_operator_is_classified():
    classified = set(OP_UNARY) | set(OP_BINARY) | set(OP_REDUCE) | OP_SHAPES | set(OP_EXCLUDED)
    assert set(SPECS) - classified == set(), "unclassified operators: add them here"


@pytest.mark.parametrize("kind", sorted(OP_UNARY, key=lambda k: k.value), ids=lambda k: k.value)
def test_unary_operators_on_0d_and_size0(kind):
    attrs = {"approximate": False} if kind is OpKind.Gelu else {}
    for d in SPECS[kind].dtypes:
        for shape in SHAPES:
            x = build(shape, d)
            if kind in (OpKind.Log, OpKind.Sqrt, OpKind.Rsqrt, OpKind.Reciprocal, OpKind.Log1p):
                x = positive(shape, d)
            got = bind(kind, [vnp.asarray(x)], **attrs)
            assert got.shape == shape and got.dtype == np.dtype(d), (kind, shape, d)
            want = run_np(OP_UNARY[kind], upcast(x))
            _judge(got, want, np.asarray(want).astype(d), [x], None, f"{kind.value}{shape}")
    _refuse_other_dtypes(kind, lambda d: bind(kind, [vnp.asarray(build((2,), d))], **attrs))


@pytest.mark.parametrize("kind", sorted(OP_BINARY, key=lambda k: k.value), ids=lambda k: k.value)
def test_binary_operators_on_0d_and_size0(kind):
    for d in SPECS[kind].dtypes:
        for sx, sy in BINARY_SHAPES:
            x, y = positive(sx, d), build(sy, d)
            if kind is OpKind.Pow and np.dtype(d).kind == "i":
                y = np.abs(y)   # NumPy refuses y < 0; the op's value there: cases_elementwise
            got = bind(kind, [vnp.asarray(x), vnp.asarray(y)])
            want = run_np(OP_BINARY[kind], upcast(x), upcast(y))
            _judge(got, want, np.asarray(want).astype(d), [x, y], None, f"{kind.value}{sx}{sy}")
    _refuse_other_dtypes(kind, lambda d: bind(kind, [vnp.asarray(build((2,), d))] * 2))


@pytest.mark.parametrize("kind", sorted(OP_REDUCE, key=lambda k: k.value), ids=lambda k: k.value)
def test_reduce_operators_on_0d_and_size0(kind):
    fn = OP_REDUCE[kind]
    out = SPECS[kind].dtype_rule([F32], {"axes": (), "keepdims": False})
    for d in SPECS[kind].dtypes:
        for shape, axes in [((), ()), ((0,), ()), ((0,), (0,)), ((2, 0), (0,)), ((2, 0), (1,)),
                            ((2, 0), (0, 1)), ((0, 3), (1,)), ((3,), ())]:
            x = build(shape, d)
            make = lambda: bind(kind, [vnp.asarray(x)], axes=axes, keepdims=False)  # noqa: E731
            if kind in (OpKind.ArgMax, OpKind.ArgMin):
                if len(axes) != 1:
                    continue   # one axis (vnp flattens for None)
                ref = lambda a: fn(a, axis=axes[0])  # noqa: E731
            else:
                ref = lambda a: fn(a, axis=axes)  # noqa: E731
            try:
                want = run_np(ref, upcast(x))
            except ValueError:
                with pytest.raises(vkml.ShapeError):
                    make()
                continue
            rd = np.dtype(out) if out == I32 else np.dtype(d)
            _judge(make(), want, np.asarray(want).astype(rd), [x], None,
                   f"{kind.value}{shape} axes {axes}")
    _refuse_other_dtypes(kind, lambda d: bind(kind, [vnp.asarray(build((2,), d))], axes=(0,),
                                              keepdims=False))


def test_movement_and_other_operators_on_0d_and_size0():
    s, e = build((), F32), build((2, 0), F32)
    S, E = vnp.asarray(s), vnp.asarray(e)
    cases = [
        (bind(OpKind.Reshape, [S], shape=(1, 1)), s.reshape(1, 1)),
        (bind(OpKind.Reshape, [E], shape=(0, 5)), e.reshape(0, 5)),
        (bind(OpKind.Permute, [S], perm=()), s),
        (bind(OpKind.Permute, [E], perm=(1, 0)), e.T),
        (bind(OpKind.Expand, [S], shape=(2, 0)), np.broadcast_to(s, (2, 0))),
        (bind(OpKind.Expand, [S], shape=(3,)), np.broadcast_to(s, (3,))),
        (bind(OpKind.Slice, [S], starts=(), stops=(), steps=()), s),
        (bind(OpKind.Slice, [E], starts=(0, 0), stops=(1, 0), steps=(1, 1)), e[:1]),
        (bind(OpKind.Pad, [S], pads=(), value=0.0), s),
        (bind(OpKind.Pad, [E], pads=((0, 0), (1, 1)), value=2.0), np.pad(e, ((0, 0), (1, 1)), constant_values=2)),
        (bind(OpKind.Concat, [E, E], axis=1), np.concatenate([e, e], 1)),
        (bind(OpKind.Concat, [E, E], axis=0), np.concatenate([e, e], 0)),
        (bind(OpKind.Flip, [S], axes=()), s),
        (bind(OpKind.Flip, [E], axes=(0, 1)), e[::-1, ::-1]),
        (bind(OpKind.Cast, [S], dtype=I32), s.astype(I32)),
        (bind(OpKind.Cast, [E], dtype=B), e.astype(B)),
        (bind(OpKind.Cumsum, [E], axis=1), np.cumsum(e, 1)),
        (bind(OpKind.Cumsum, [E], axis=0), np.cumsum(e, 0)),
        (bind(OpKind.Softmax, [E], axis=1), e),
        (bind(OpKind.LogSoftmax, [E], axis=0), e),
        (bind(OpKind.MatMul, [E, vnp.zeros((0, 3))]), np.zeros((2, 3))),
        (bind(OpKind.Where, [vnp.asarray(True), S, E]), np.where(True, s, e)),
        (bind(OpKind.Where, [vnp.asarray(False), S, S]), s),
    ]
    for got, want in cases:
        want = np.asarray(want)
        assert got.shape == want.shape, (got, want.shape)
        np.testing.assert_array_equal(np.asarray(got), want.astype(got.dtype))
    for kind, attrs in [(OpKind.Cumsum, {"axis": 0}), (OpKind.Softmax, {"axis": 0}),
                        (OpKind.Flip, {"axes": (0,)}), (OpKind.Concat, {"axis": 0})]:
        with pytest.raises(vkml.ShapeError):       # 0-d has no axis 0 (vnp reshapes first)
            bind(kind, [S], **attrs)


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "amax", "amin", "squeeze", "logsumexp"])
def test_0d_reductions_under_grad_and_jit(name):
    """The 0-d spellings trace too: a reduction over no axes is the identity, derivative 1."""
    vk = F.logsumexp if name == "logsumexp" else getattr(vnp, name)
    for ax in (0, -1, ()):
        x = vnp.asarray(np.float64(2.5))
        assert float(vkml.jit(lambda a: vk(a, axis=ax))(x)) == 2.5
        assert float(vkml.grad(lambda a: vk(a, axis=ax))(x)) == 1.0


@pytest.mark.parametrize("name", sorted(n for n in AXIS_FNS if hasattr(vkml.Array, n)))
def test_array_methods_take_the_same_axis_spellings(name):
    """x.sum(0) and friends are the functions: same results and same refusals on 0-d."""
    fn = AXIS_FNS[name][0]
    x = np.array(1.5, F32)
    for ax in AXIS_SPELLINGS:
        if (name, ax) in SPELLING_EXCLUDED and type(ax) is bool:
            continue
        same(lambda a: getattr(a, name)(axis=ax), lambda a: fn(a, axis=ax), [x],
             what=f"Array.{name}(axis={ax!r})")
