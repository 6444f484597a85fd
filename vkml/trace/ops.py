"""THE registry: one OpKind and one OpSpec per operator.

Everything that needs a fact about an operator (the tracer's shape and dtype checks, the
executor's kernel dispatch, the generated docs, the coverage tests, the gradient table)
reads it from `SPECS` here. Nothing else lists operators.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from . import dtypes as dt
from .dtypes import DTypeError
from .shapes import ShapeError, broadcast_shapes, conv_out, normalize_axes, size_of


class OpKind(enum.Enum):
    """Every operator a graph can hold."""
    # members are singletons compared by identity: hash them so too (Enum's hashes the
    # name in Python, a measurable part of every cache lookup keyed by an operator)
    __hash__ = object.__hash__
    # leaves and creation
    Input = "Input"; Const = "Const"; Full = "Full"; Arange = "Arange"; Rand = "Rand"
    # unary
    Neg = "Neg"; Reciprocal = "Reciprocal"; Exp = "Exp"; Log = "Log"; Log1p = "Log1p"
    Expm1 = "Expm1"; Sqrt = "Sqrt"; Rsqrt = "Rsqrt"; Sin = "Sin"; Cos = "Cos"; Tanh = "Tanh"
    Sigmoid = "Sigmoid"; Abs = "Abs"; Sign = "Sign"; Erf = "Erf"; Erfc = "Erfc"; Relu = "Relu"
    Gelu = "Gelu"; Silu = "Silu"; Floor = "Floor"; Ceil = "Ceil"; Trunc = "Trunc"; Rint = "Rint"
    Cast = "Cast"; Copy = "Copy"; StopGradient = "StopGradient"
    # binary
    Add = "Add"; Sub = "Sub"; Mul = "Mul"; Div = "Div"; Pow = "Pow"; Maximum = "Maximum"
    Minimum = "Minimum"; Where = "Where"; IntegerPow = "IntegerPow"; Atan2 = "Atan2"
    # bitwise (bool and int32 only)
    BitwiseAnd = "BitwiseAnd"; BitwiseOr = "BitwiseOr"; BitwiseXor = "BitwiseXor"
    BitwiseNot = "BitwiseNot"; ShiftLeft = "ShiftLeft"; ShiftRight = "ShiftRight"
    FloorDivide = "FloorDivide"; Remainder = "Remainder"; Gcd = "Gcd"
    # comparisons
    Equal = "Equal"; NotEqual = "NotEqual"; Less = "Less"; LessEqual = "LessEqual"
    Greater = "Greater"; GreaterEqual = "GreaterEqual"
    # reductions and scans
    Sum = "Sum"; Mean = "Mean"; Max = "Max"; Min = "Min"; Prod = "Prod"; ArgMax = "ArgMax"
    ArgMin = "ArgMin"; Cumsum = "Cumsum"
    # sorting
    ArgSort = "ArgSort"
    # movement
    Reshape = "Reshape"; Permute = "Permute"; Expand = "Expand"; Slice = "Slice"; Pad = "Pad"
    Concat = "Concat"; Flip = "Flip"
    # indexing, contraction, windows, and the four scatters
    IndexSelect = "IndexSelect"; ScatterAdd = "ScatterAdd"; MatMul = "MatMul"; Im2Col = "Im2Col"
    Col2Im = "Col2Im"; MaxPool2d = "MaxPool2d"; MaxPool2dBackward = "MaxPool2dBackward"
    SliceBackward = "SliceBackward"
    CheckIndex = "CheckIndex"; ScatterReduce = "ScatterReduce"
    # normalised exponentials
    Softmax = "Softmax"; LogSoftmax = "LogSoftmax"
    # control flow: a loop over a traced body subgraph, and one of its several results
    Scan = "Scan"; Part = "Part"; While = "While"
    # linear algebra (factorisations and solves, batched over leading axes)
    Cholesky = "Cholesky"; TriangularSolve = "TriangularSolve"; Solve = "Solve"
    LuPivots = "LuPivots"; LuPivotsToPermutation = "LuPivotsToPermutation"; Lu = "Lu"
    # spectral decompositions (vkml/linalg/spectral.py), each one node with a packed output
    Eigh = "Eigh"; Svd = "Svd"; Qr = "Qr"


class Grad(enum.Enum):
    """An operator's gradient status: the groups of autograd-semantics.txt."""
    RULE = "has a rule"
    LEAF = "leaf or creation: nothing to propagate to, it has no differentiable inputs"
    BOOLEAN = "boolean result: not differentiable, the output is not a float"
    DISCONTINUOUS = ("discontinuous or integral: the derivative is zero almost everywhere "
                     "and undefined at the steps")
    INTEGER = ("integer operator: defined on bool and int32 only, whose values carry no "
               "gradient")


@dataclass(frozen=True)
class OpSpec:
    """Everything declared about one operator."""
    kind: OpKind
    arity: int | None                 # None: variadic (Concat)
    attrs: tuple[str, ...]
    shape_rule: Callable[[list[tuple], dict], tuple]
    dtype_rule: Callable[[list[np.dtype], dict], np.dtype]
    dtypes: tuple[np.dtype, ...]      # dtypes of the (first) data operand the kernel takes
    kernel: str | None                # kernel family in vkml/vulkan/kernels, None for Input/Const
    grad: Grad
    doc: str
    family: str = ""                  # for docs and coverage grouping
    extra: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.kind.value


SPECS: dict[OpKind, OpSpec] = {}


def spec(kind: OpKind) -> OpSpec:
    return SPECS[kind]


def _declare(kind: OpKind, *, arity: int | None, attrs: Sequence[str], shape_rule: Callable,
             dtype_rule: Callable, dtypes: Sequence[np.dtype], kernel: str | None, grad: Grad,
             doc: str, family: str) -> None:
    SPECS[kind] = OpSpec(kind, arity, tuple(attrs), shape_rule, dtype_rule, tuple(dtypes),
                         kernel, grad, doc, family)


# --------------------------------------------------------------------------- helpers

def _need(op: str, dtypes_in: Sequence[np.dtype], allowed: Sequence[np.dtype], what="operand"):
    for d in dtypes_in:
        if np.dtype(d) not in allowed:
            raise DTypeError(f"{op}: {what} dtype {np.dtype(d)} is not supported; valid: "
                             f"{', '.join(str(a) for a in allowed)}")


def _same(op: str, ds: Sequence[np.dtype]):
    if len({np.dtype(d) for d in ds}) > 1:
        raise DTypeError(f"{op}: operand dtypes {', '.join(str(d) for d in ds)} differ; "
                         f"cast them to one dtype first (vkml.numpy promotes automatically)")


def _shape_attr(op, shape):
    if not isinstance(shape, tuple) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ShapeError(f"{op}: shape {shape!r} must be a tuple of non-negative ints")
    return shape


def _dtype_attr(op, a, allowed=dt.ALL):
    d = np.dtype(a["dtype"])
    _need(op, [d], allowed, "requested")
    return d


# --------------------------------------------------------------------------- leaves

def _leaf_shape(op):
    return lambda s, a: _shape_attr(op, tuple(a["shape"]))


for _k, _doc in [
    (OpKind.Input, "A graph input: a placeholder bound to an argument when the graph runs."),
    (OpKind.Const, "A constant captured from outside the traced function (a device array)."),
]:
    _declare(_k, arity=0,
             attrs=("shape", "dtype", "value" if _k is OpKind.Const else "index"),
             shape_rule=_leaf_shape(_k.value),
             dtype_rule=lambda s, a, _o=_k.value: _dtype_attr(_o, a), dtypes=dt.ALL, kernel=None,
             grad=Grad.LEAF, doc=_doc, family="leaf")

_declare(OpKind.Full, arity=0, attrs=("shape", "dtype", "value"), shape_rule=_leaf_shape("Full"),
         dtype_rule=lambda s, a: _dtype_attr("Full", a), dtypes=dt.ALL, kernel="fill",
         grad=Grad.LEAF, doc="An array of `shape` filled with `value`.", family="leaf")


def _arange_shape(s, a):
    n = a["n"]
    if not isinstance(n, int) or n < 0:
        raise ShapeError(f"Arange: length {n!r} must be a non-negative int")
    return (n,)


_declare(OpKind.Arange, arity=0, attrs=("n", "start", "step", "dtype"), shape_rule=_arange_shape,
         dtype_rule=lambda s, a: _dtype_attr("Arange", a, dt.NUMERIC), dtypes=dt.NUMERIC,
         kernel="arange", grad=Grad.LEAF, doc="`start + step * i` for i in [0, n).", family="leaf")


def _rand_shape(s, a):
    # a batch of keys (..., 2) draws one independent block per key (how vmap batches Rand)
    if len(s[0]) < 1 or s[0][-1] != 2:
        raise ShapeError(f"Rand: key must have shape (2,) or a batch of keys (..., 2), got {s[0]}; "
                         f"make one with vkml.random.key")
    return tuple(s[0][:-1]) + _shape_attr("Rand", tuple(a["shape"]))


def _rand_dtype(d, a):
    _need("Rand", d, (dt.int32,), "key")
    return _dtype_attr("Rand", a, dt.NUMERIC)


_declare(OpKind.Rand, arity=1, attrs=("shape", "dtype"), shape_rule=_rand_shape,
         dtype_rule=_rand_dtype, dtypes=(dt.int32,), kernel="rand", grad=Grad.LEAF,
         doc="Counter-based random numbers (Philox-4x32-10) keyed by an int32[2] key: uniform in "
             "[0, 1) for float dtypes, uniformly random 32-bit words for int32. A batch of keys "
             "(..., 2) gives key.shape[:-1] + shape, each key's block exactly its own draw.",
         family="leaf")

# --------------------------------------------------------------------------- elementwise


def _same_shape(s, a):
    return s[0]


def _unary_dtype(op, allowed):
    def rule(d, a):
        _need(op, d, allowed)
        return np.dtype(d[0])
    return rule


_UNARY = {
    OpKind.Neg: (dt.NUMERIC, "-x"),
    OpKind.Reciprocal: (dt.FLOATS, "1 / x"),
    OpKind.Exp: (dt.FLOATS, "e**x"),
    OpKind.Log: (dt.FLOATS, "natural logarithm; -inf at 0, nan below"),
    OpKind.Log1p: (dt.FLOATS, "log(1 + x), accurate near 0"),
    OpKind.Expm1: (dt.FLOATS, "exp(x) - 1, accurate near 0"),
    OpKind.Sqrt: (dt.FLOATS, "square root; nan below 0"),
    OpKind.Rsqrt: (dt.FLOATS, "1 / sqrt(x)"),
    OpKind.Sin: (dt.FLOATS, "sine"),
    OpKind.Cos: (dt.FLOATS, "cosine"),
    OpKind.Tanh: (dt.FLOATS, "hyperbolic tangent"),
    OpKind.Sigmoid: (dt.FLOATS, "1 / (1 + exp(-x)), computed without overflow"),
    OpKind.Abs: (dt.NUMERIC, "|x|"),
    OpKind.Sign: (dt.NUMERIC, "-1, 0 or 1 (nan stays nan)"),
    OpKind.Erf: (dt.FLOATS, "the error function"),
    OpKind.Erfc: (dt.FLOATS, "1 - erf(x), accurate for large x"),
    OpKind.Relu: (dt.NUMERIC, "max(x, 0)"),
    OpKind.Gelu: (dt.FLOATS, "x * Phi(x) (exact, via erfc) or its tanh approximation "
                             "when `approximate`"),
    OpKind.Silu: (dt.FLOATS, "x * sigmoid(x)"),
    # exact in GLSL; piecewise constant, so their rules give the zero gradient, as JAX's
    OpKind.Floor: (dt.FLOATS, "largest integer <= x (-0 and nan kept)"),
    OpKind.Ceil: (dt.FLOATS, "smallest integer >= x (-0 and nan kept)"),
    OpKind.Trunc: (dt.FLOATS, "x rounded toward zero"),
    OpKind.Rint: (dt.FLOATS, "x rounded to the nearest integer, halves to even"),
}
for _k, (_ds, _doc) in _UNARY.items():
    # Sign is piecewise constant: its rule gives the zero gradient, as jax.grad(jnp.sign)
    _declare(_k, arity=1, attrs=("approximate",) if _k is OpKind.Gelu else (),
             shape_rule=_same_shape, dtype_rule=_unary_dtype(_k.value, _ds), dtypes=_ds,
             kernel="elementwise", grad=Grad.RULE, doc=_doc, family="unary")


def _cast_dtype(d, a):
    return _dtype_attr("Cast", a)


_declare(OpKind.Cast, arity=1, attrs=("dtype",), shape_rule=_same_shape, dtype_rule=_cast_dtype,
         dtypes=dt.ALL, kernel="elementwise", grad=Grad.RULE,
         doc="Convert to `dtype` (float to int truncates toward zero; to bool is x != 0).",
         family="unary")
_declare(OpKind.Copy, arity=1, attrs=(), shape_rule=_same_shape,
         dtype_rule=_unary_dtype("Copy", dt.ALL), dtypes=dt.ALL, kernel="elementwise",
         grad=Grad.RULE, doc="A fresh contiguous copy.", family="unary")
_declare(OpKind.StopGradient, arity=1, attrs=(), shape_rule=_same_shape,
         dtype_rule=_unary_dtype("StopGradient", dt.ALL), dtypes=dt.ALL, kernel="elementwise",
         grad=Grad.RULE,
         doc="The identity, through which no gradient flows (its rule returns none); graph "
             "simplification removes it once differentiation is done.", family="unary")


def _bcast(op):
    return lambda s, a: broadcast_shapes(op, *s)


def _binary_dtype(op, allowed):
    def rule(d, a):
        _same(op, d)
        _need(op, d, allowed)
        return np.dtype(d[0])
    return rule


_BINARY = {
    OpKind.Add: (dt.NUMERIC, "x + y"),
    OpKind.Sub: (dt.NUMERIC, "x - y"),
    OpKind.Mul: (dt.NUMERIC, "x * y"),
    OpKind.Div: (dt.FLOATS, "x / y (true division)"),
    OpKind.Pow: (dt.NUMERIC, "x ** y; negative x with integral y is exact, otherwise nan. On "
                             "int32 exact binary exponentiation, wrapping as NumPy's; a "
                             "negative exponent (which NumPy refuses) gives the truncated "
                             "1 / x ** -y: 1 or -1 for x = 1 or -1, else 0"),
    OpKind.Maximum: (dt.ALL, "elementwise max; nan propagates; on bool it is logical or"),
    OpKind.Minimum: (dt.ALL, "elementwise min; nan propagates; on bool it is logical and"),
    # the one kernel of the inverse trigonometric family: arctan, arcsin, arccos are
    # compositions over it (atan2(x, sqrt((1-x)(1+x))) keeps arcsin accurate near +-1)
    OpKind.Atan2: (dt.FLOATS, "atan2(y, x): the angle of the point (x, y) in [-pi, pi], with "
                              "C99's (and NumPy's) signed zeros and infinities"),
}
for _k, (_ds, _doc) in _BINARY.items():
    _declare(_k, arity=2, attrs=(), shape_rule=_bcast(_k.value),
             dtype_rule=_binary_dtype(_k.value, _ds), dtypes=_ds, kernel="elementwise",
             grad=Grad.RULE, doc=_doc + "; shapes broadcast.", family="binary")


def _where_dtype(d, a):
    _need("Where", d[:1], (dt.bool_,), "condition")
    _same("Where", d[1:])
    return np.dtype(d[1])


_declare(OpKind.Where, arity=3, attrs=(), shape_rule=_bcast("Where"), dtype_rule=_where_dtype,
         dtypes=dt.ALL, kernel="elementwise", grad=Grad.RULE, doc="cond ? x : y; shapes broadcast.",
         family="binary")


def integer_pow_exponent(e) -> int | float | None:
    """e as IntegerPow's exponent (an int, or a float k + 0.5), or None when it is neither.

    >>> integer_pow_exponent(2.0), integer_pow_exponent(-1.5), integer_pow_exponent(0.3)
    (2, -1.5, None)
    """
    if isinstance(e, (bool, np.bool_)):
        return int(e)
    if isinstance(e, (int, np.integer)):
        return int(e)
    if isinstance(e, (float, np.floating)) and np.isfinite(e) and abs(e) < 2.0 ** 52:
        if float(e).is_integer():
            return int(e)
        if (2.0 * float(e)).is_integer():
            return float(e)
    return None


def _integer_pow_dtype(d, a):
    e = a["exponent"]
    n = integer_pow_exponent(e)
    if n is None or type(n) is not type(e):
        raise DTypeError(f"IntegerPow: exponent {e!r} must be an int or a float k + 0.5 "
                         f"(normalise it with integer_pow_exponent)")
    _need("IntegerPow", d, dt.NUMERIC)
    if not dt.is_float(d[0]) and (isinstance(e, float) or e < 0):
        raise DTypeError(f"IntegerPow: an {np.dtype(d[0])} base needs a non-negative integer "
                         f"exponent, got {e!r}; cast the base to a float dtype")
    return np.dtype(d[0])


# An operator, not a rewrite in vkml.numpy.power (as jax.lax.integer_pow): its rule is
# again an IntegerPow, n * x ** (n - 1), so every order of derivative stays on exact
# multiplication chains (a rewrite to Mul nodes would differentiate to a sum of products,
# and x ** 2.0 through Pow to exp(log)); a power is one node of the graph, fused like any
# elementwise operator, with its chain emitted once by the kernel.
_declare(OpKind.IntegerPow, arity=1, attrs=("exponent",), shape_rule=_same_shape,
         dtype_rule=_integer_pow_dtype, dtypes=dt.NUMERIC, kernel="elementwise", grad=Grad.RULE,
         doc="x ** n for a constant n that is an integer or k + 0.5, as a chain of multiplications "
             "(binary exponentiation; then times sqrt(x) for the half, then the reciprocal for "
             "n < 0), so x ** 1 is x and x ** 2 is x * x exactly; n = 0 gives 1 (nan too). The "
             "special values at -0 and -inf are NumPy's: x ** 0.5 is sqrt(x), the other halves "
             "take C's pow rules. An int32 base needs n >= 0 and wraps on overflow.",
         family="unary")


def _cmp_dtype(op, allowed):
    def rule(d, a):
        _same(op, d)
        _need(op, d, allowed)
        return dt.bool_
    return rule


for _k, _sym in [(OpKind.Equal, "=="), (OpKind.NotEqual, "!="), (OpKind.Less, "<"),
                 (OpKind.LessEqual, "<="), (OpKind.Greater, ">"), (OpKind.GreaterEqual, ">=")]:
    _declare(_k, arity=2, attrs=(), shape_rule=_bcast(_k.value),
             dtype_rule=_cmp_dtype(_k.value, dt.ALL), dtypes=dt.ALL, kernel="elementwise",
             grad=Grad.BOOLEAN,
             doc=f"x {_sym} y as bool (False < True, as NumPy); shapes broadcast.",
             family="compare")

_BITWISE = {
    OpKind.BitwiseAnd: (dt.INTEGRAL, "x & y: bitwise and (logical and on bool)"),
    OpKind.BitwiseOr: (dt.INTEGRAL, "x | y: bitwise or (logical or on bool)"),
    OpKind.BitwiseXor: (dt.INTEGRAL, "x ^ y: bitwise exclusive or (logical xor on bool)"),
    # NumPy's int32 results for counts outside [0, 32) (it reads a count as unsigned, so a
    # negative one is a huge one); GLSL leaves them undefined, so the kernel tests the count
    OpKind.ShiftLeft: (dt.INTS, "x << y; a count y < 0 or >= 32 gives 0 (as NumPy)"),
    OpKind.ShiftRight: (dt.INTS, "x >> y, arithmetic (the sign bit is copied in); a count y "
                                 "< 0 or >= 32 gives -1 for negative x and 0 otherwise (as "
                                 "NumPy)"),
}
for _k, (_ds, _doc) in _BITWISE.items():
    _declare(_k, arity=2, attrs=(), shape_rule=_bcast(_k.value),
             dtype_rule=_binary_dtype(_k.value, _ds), dtypes=_ds, kernel="elementwise",
             grad=Grad.INTEGER, doc=_doc + "; shapes broadcast.", family="binary")
# NumPy's integer-valued division: on int32 exact (x // 0 and x % 0 are 0, INT_MIN // -1
# wraps); on floats npy_divmod's algorithm over an exact fmod
# (FloorDivide is piecewise constant: its rule gives the zero gradient, as Sign's and JAX's)
_declare(OpKind.FloorDivide, arity=2, attrs=(), shape_rule=_bcast("FloorDivide"),
         dtype_rule=_binary_dtype("FloorDivide", dt.NUMERIC), dtypes=dt.NUMERIC,
         kernel="elementwise", grad=Grad.RULE,
         doc="x // y: the quotient rounded toward -inf, as NumPy (floats: (x - fmod(x, y)) / y "
             "snapped to an integer; x // 0 is x / 0; int32: x // 0 is 0, INT_MIN // -1 wraps); "
             "shapes broadcast.", family="binary")
_declare(OpKind.Remainder, arity=2, attrs=(), shape_rule=_bcast("Remainder"),
         dtype_rule=_binary_dtype("Remainder", dt.NUMERIC), dtypes=dt.NUMERIC, kernel="elementwise",
         grad=Grad.RULE,
         doc="x % y with the sign of y, as NumPy (from an exact fmod; floats: x % 0 is nan, a zero "
             "remainder takes y's sign; int32: x % 0 is 0); shapes broadcast.", family="binary")
# a kernel, not a composition: Euclid needs up to 45 remainder steps on int32, which as
# operators would be ~140 nodes per call; in GLSL it is a short loop
_declare(OpKind.Gcd, arity=2, attrs=(), shape_rule=_bcast("Gcd"),
         dtype_rule=_binary_dtype("Gcd", dt.INTS), dtypes=dt.INTS, kernel="elementwise",
         grad=Grad.INTEGER,
         doc="The greatest common divisor of |x| and |y| by Euclid's algorithm, as NumPy "
             "(gcd(0, 0) is 0; |INT_MIN| wraps to INT_MIN as NumPy's abs); shapes broadcast.",
         family="binary")
_declare(OpKind.BitwiseNot, arity=1, attrs=(), shape_rule=_same_shape,
         dtype_rule=_unary_dtype("BitwiseNot", dt.INTEGRAL), dtypes=dt.INTEGRAL,
         kernel="elementwise", grad=Grad.INTEGER,
         doc="~x: bitwise not (-x - 1) on int32, logical not on bool.", family="unary")

# --------------------------------------------------------------------------- reductions


def _reduce_shape(op):
    def rule(s, a):
        nd = len(s[0])
        axes = normalize_axes(op, a["axes"], nd)
        if tuple(a["axes"]) != axes:
            raise ShapeError(f"{op}: axes attribute must be normalised, got {a['axes']}")
        for ax in axes:
            if s[0][ax] == 0 and op in ("Max", "Min", "ArgMax", "ArgMin"):
                raise ShapeError(f"{op}: zero-size axis {ax} of shape {s[0]} has no "
                                 f"{op.lower()}; reduce over non-empty axes")
        if a["keepdims"]:
            return tuple(1 if i in axes else d for i, d in enumerate(s[0]))
        return tuple(d for i, d in enumerate(s[0]) if i not in axes)
    return rule


_REDUCE = {
    OpKind.Sum: (dt.NUMERIC, None, "sum over `axes`"),
    OpKind.Mean: (dt.FLOATS, None, "mean over `axes` (nan for an empty reduction)"),
    OpKind.Max: (dt.ALL, None, "maximum over `axes`; nan propagates"),
    OpKind.Min: (dt.ALL, None, "minimum over `axes`; nan propagates"),
    OpKind.Prod: (dt.NUMERIC, None, "product over `axes`, as a pairwise tree"),
    OpKind.ArgMax: (dt.NUMERIC, dt.int32, "flat index (C order over `axes`) of the first "
                                          "maximum; nan counts as the maximum"),
    OpKind.ArgMin: (dt.NUMERIC, dt.int32, "flat index (C order over `axes`) of the first "
                                          "minimum; nan counts as the minimum"),
}
for _k, (_ds, _out, _doc) in _REDUCE.items():
    def _rdt(d, a, _op=_k.value, _ds=_ds, _out=_out):
        _need(_op, d, _ds)
        return _out if _out is not None else np.dtype(d[0])
    _grad = Grad.DISCONTINUOUS if _k in (OpKind.ArgMax, OpKind.ArgMin) else Grad.RULE
    _declare(_k, arity=1, attrs=("axes", "keepdims"), shape_rule=_reduce_shape(_k.value),
             dtype_rule=_rdt, dtypes=_ds, kernel="reduce", grad=_grad, doc=_doc + ".",
             family="reduce")


def _axis_shape(op):
    def rule(s, a):
        nd = len(s[0])
        if not (isinstance(a["axis"], int) and 0 <= a["axis"] < nd):
            raise ShapeError(f"{op}: axis {a['axis']} is out of range for shape {s[0]}")
        return s[0]
    return rule


_declare(OpKind.Cumsum, arity=1, attrs=("axis",), shape_rule=_axis_shape("Cumsum"),
         dtype_rule=_unary_dtype("Cumsum", dt.NUMERIC), dtypes=dt.NUMERIC, kernel="scan",
         grad=Grad.RULE, doc="Inclusive running sum along `axis`.", family="reduce")
for _k, _doc in [(OpKind.Softmax, "exp(x - max) / sum(exp(x - max)) along `axis`"),
                 (OpKind.LogSoftmax, "x - max - log(sum(exp(x - max))) along `axis`")]:
    _declare(_k, arity=1, attrs=("axis",), shape_rule=_axis_shape(_k.value),
             dtype_rule=_unary_dtype(_k.value, dt.FLOATS), dtypes=dt.FLOATS, kernel="softmax",
             grad=Grad.RULE, doc=_doc + ", numerically stable.", family="reduce")

def _argsort_shape(s, a):
    if not isinstance(a["descending"], bool):
        raise ShapeError(f"ArgSort: descending {a['descending']!r} must be a bool")
    return _axis_shape("ArgSort")(s, a)


def _argsort_dtype(d, a):
    _need("ArgSort", d, dt.ALL)
    return dt.int32


# One operator for the permutation only, not values and positions: a graph node has one
# output, and the values are then a gather (IndexSelect) through it, so sort's gradient
# is IndexSelect's rule (a ScatterAdd of the cotangent), every order, with no new adjoint.
_declare(OpKind.ArgSort, arity=1, attrs=("axis", "descending"), shape_rule=_argsort_shape,
         dtype_rule=_argsort_dtype, dtypes=dt.ALL, kernel="sort", grad=Grad.DISCONTINUOUS,
         doc="The stable sorting permutation along `axis` as int32 positions: "
             "x[out[j]] is ascending (descending when `descending`), equal keys keep their "
             "order; NaN sorts after every number (before, descending: the reverse of "
             "ascending order with ties kept, as jnp.argsort), -0.0 equals 0.0, as NumPy.",
         family="reduce")

# --------------------------------------------------------------------------- movement


def _reshape_shape(s, a):
    new = _shape_attr("Reshape", tuple(a["shape"]))
    if size_of(new) != size_of(s[0]):
        raise ShapeError(f"Reshape: cannot reshape {s[0]} ({size_of(s[0])} elements) to {new} "
                         f"({size_of(new)} elements)")
    return new


def _permute_shape(s, a):
    perm = tuple(a["perm"])
    if sorted(perm) != list(range(len(s[0]))):
        raise ShapeError(f"Permute: {perm} is not a permutation of the axes of shape {s[0]}")
    return tuple(s[0][p] for p in perm)


def _expand_shape(s, a):
    new = _shape_attr("Expand", tuple(a["shape"]))
    old = s[0]
    if len(new) < len(old) or any(o not in (1, n) for o, n in zip(old[::-1], new[::-1])):
        raise ShapeError(f"Expand: cannot broadcast {old} to {new}; each dimension must equal "
                         f"the target's or be 1")
    return new


def _slice_shape(s, a):
    shape = s[0]
    st, sp, stp = a["starts"], a["stops"], a["steps"]
    if not (len(st) == len(sp) == len(stp) == len(shape)):
        raise ShapeError(f"Slice: starts/stops/steps need one entry per axis of {shape}")
    out = []
    for d, b, e, k in zip(shape, st, sp, stp):
        if k == 0:
            raise ShapeError("Slice: step 0 is not allowed")
        # slice.indices gives start -1 for a reversed slice of an empty axis: allowed when empty
        out.append(len(range(b, e, k)) if (-1 <= b <= d and -1 <= e <= d) else -1)
        if out[-1] < 0 or (out[-1] > 0 and not 0 <= b < d):
            raise ShapeError(f"Slice: start {b}, stop {e}, step {k} out of range for extent {d}; "
                             f"normalise them with slice.indices")
    return tuple(out)


def _pad_shape(s, a):
    pads = a["pads"]
    if len(pads) != len(s[0]) or any(lo < 0 or hi < 0 for lo, hi in pads):
        raise ShapeError(f"Pad: pads {pads} need one non-negative (low, high) pair per axis of {s[0]}")
    return tuple(d + lo + hi for d, (lo, hi) in zip(s[0], pads))


def _same_dtype(d, a):
    return np.dtype(d[0])


def _concat_shape(s, a):
    ax = a["axis"]
    if not s:
        raise ShapeError("Concat: needs at least one array")
    nd = len(s[0])
    if not 0 <= ax < max(nd, 1) or nd == 0:
        raise ShapeError(f"Concat: axis {ax} out of range for shapes {s}; 0-d arrays cannot be joined")
    for sh in s:
        if len(sh) != nd or any(x != y for i, (x, y) in enumerate(zip(sh, s[0])) if i != ax):
            raise ShapeError(f"Concat: shapes {', '.join(map(str, s))} differ outside axis {ax}")
    return tuple(sum(sh[ax] for sh in s) if i == ax else d for i, d in enumerate(s[0]))


def _concat_dtype(d, a):
    _same("Concat", d)
    return np.dtype(d[0])


def _flip_shape(s, a):
    normalize_axes("Flip", a["axes"], len(s[0]))
    return s[0]


_declare(OpKind.Reshape, arity=1, attrs=("shape",), shape_rule=_reshape_shape,
         dtype_rule=_same_dtype, dtypes=dt.ALL, kernel="movement", grad=Grad.RULE,
         doc="Same elements in C order, new shape.", family="movement")
_declare(OpKind.Permute, arity=1, attrs=("perm",), shape_rule=_permute_shape, dtype_rule=_same_dtype,
         dtypes=dt.ALL, kernel="movement", grad=Grad.RULE,
         doc="Reorder axes: out.shape[i] = x.shape[perm[i]].", family="movement")
_declare(OpKind.Expand, arity=1, attrs=("shape",), shape_rule=_expand_shape, dtype_rule=_same_dtype,
         dtypes=dt.ALL, kernel="movement", grad=Grad.RULE,
         doc="Broadcast to `shape` (NumPy rules).", family="movement")
_declare(OpKind.Slice, arity=1, attrs=("starts", "stops", "steps"), shape_rule=_slice_shape,
         dtype_rule=_same_dtype, dtypes=dt.ALL, kernel="movement", grad=Grad.RULE,
         doc="Basic slicing with a start, stop and (non-zero) step per axis.", family="movement")
_declare(OpKind.Pad, arity=1, attrs=("pads", "value"), shape_rule=_pad_shape, dtype_rule=_same_dtype,
         dtypes=dt.ALL, kernel="movement", grad=Grad.RULE,
         doc="Constant padding: (low, high) per axis.", family="movement")
_declare(OpKind.Concat, arity=None, attrs=("axis",), shape_rule=_concat_shape,
         dtype_rule=_concat_dtype, dtypes=dt.ALL, kernel="movement", grad=Grad.RULE,
         doc="Join along `axis`.", family="movement")
_declare(OpKind.Flip, arity=1, attrs=("axes",), shape_rule=_flip_shape, dtype_rule=_same_dtype,
         dtypes=dt.ALL, kernel="movement", grad=Grad.RULE,
         doc="Reverse the order of elements along `axes`.", family="movement")

# --------------------------------------------------------------------------- indexing


def _index_dtype(op):
    def rule(d, a):
        _need(op, d[1:], (dt.int32,), "index")
        if op in ("ScatterAdd", "ScatterReduce"):
            _need(op, d[:1], dt.NUMERIC)
        return np.dtype(d[0])
    return rule


def _index_select_shape(s, a):
    x, idx = s
    ax = a["axis"]
    if len(idx) != 1:
        raise ShapeError(f"IndexSelect: index must be 1-d, got shape {idx}")
    if not 0 <= ax < len(x):
        raise ShapeError(f"IndexSelect: axis {ax} out of range for shape {x}")
    if x[ax] == 0 and idx[0] > 0:
        raise ShapeError(f"IndexSelect: cannot index into zero-size axis {ax} of shape {x}")
    return x[:ax] + (idx[0],) + x[ax + 1:]


def _scatter_shape(s, a, op="ScatterAdd"):
    src, idx = s
    ax, size = a["axis"], a["size"]
    if len(idx) != 1 or not 0 <= ax < len(src) or src[ax] != idx[0]:
        raise ShapeError(f"{op}: index of shape {idx} must be 1-d with one entry per "
                         f"position of axis {ax} of source {src}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0 or (size == 0 and idx[0]):
        raise ShapeError(f"{op}: size {size!r} must be an int >= 0 (>= 1 when the index "
                         f"of shape {idx} is non-empty)")
    return src[:ax] + (size,) + src[ax + 1:]


SCATTER_REDUCTIONS = ("max", "min", "mul")


def _scatter_reduce_shape(s, a):
    if a["reduce"] not in SCATTER_REDUCTIONS:
        raise ShapeError(f"ScatterReduce: reduce {a['reduce']!r} is not one of "
                         f"{', '.join(SCATTER_REDUCTIONS)}")
    return _scatter_shape(s, a, "ScatterReduce")


_declare(OpKind.IndexSelect, arity=2, attrs=("axis",), shape_rule=_index_select_shape,
         dtype_rule=_index_dtype("IndexSelect"), dtypes=dt.ALL, kernel="index", grad=Grad.RULE,
         doc="Gather whole slices along `axis`: out[.., j, ..] = x[.., idx[j], ..]. Negative "
             "indices count from the end (once); out-of-range indices are clamped, as JAX's "
             "gathers do. The surface (take, indexing, embedding) raises IndexError for a concrete"
             " out-of-range index first; a traced one is clamped unless `vkml.debug.checks` puts a"
             " CheckIndex before it.",
         family="index")
_declare(OpKind.ScatterAdd, arity=2, attrs=("axis", "size"), shape_rule=_scatter_shape,
         dtype_rule=_index_dtype("ScatterAdd"), dtypes=dt.NUMERIC, kernel="index", grad=Grad.RULE,
         doc="Deterministic scatter-add: out[.., idx[j], ..] += src[.., j, ..] into zeros with "
             "`size` positions along `axis` (adjoint of IndexSelect). Negative indices count from "
             "the end (once); out-of-range updates are dropped, as JAX's scatters do (so an index "
             "that IndexSelect clamped gets no gradient, as in JAX).", family="index")


# The fifth scatter, earned: `x.at[i].max / min / multiply` (and the last-write choice
# behind `.at[i].set`, a max of positions) combine several updates of one destination by
# a max, min or product, which no sum of gathers expresses; its gradient is again built
# from forward operators (gathers, ScatterAdd and ScatterReduce itself).
_declare(OpKind.ScatterReduce, arity=2, attrs=("axis", "size", "reduce"),
         shape_rule=_scatter_reduce_shape, dtype_rule=_index_dtype("ScatterReduce"),
         dtypes=dt.NUMERIC, kernel="index", grad=Grad.RULE,
         doc="Deterministic scatter-reduce: out[.., p, ..] is the max, min or product "
             "(`reduce`) of src[.., j, ..] over the j with idx[j] = p, into `size` positions "
             "along `axis`; a position no index reaches holds the reduction's identity (-inf / "
             "+inf, INT_MIN / INT_MAX for int32, 1). nan propagates through max and min; int32 "
             "products wrap. Indices as ScatterAdd's (negative wrap once, out of range dropped). "
             "It exists because `x.at[i].max/min/multiply` combine duplicate updates by other "
             "than a sum (and `.at[i].set` picks its write by a max of positions); its gradient "
             "shares ties evenly (max, min) and is the product of the others (mul).",
         family="index")


def _check_index_attrs(s, a):
    size, ignore = a["size"], a["ignore"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ShapeError(f"CheckIndex: size {size!r} must be an int >= 0")
    if ignore is not None and not isinstance(ignore, int):
        raise ShapeError(f"CheckIndex: ignore {ignore!r} must be an int or None")
    return s[0]


_declare(OpKind.CheckIndex, arity=1, attrs=("size", "negative", "ignore", "what", "axis"),
         shape_rule=_check_index_attrs, dtype_rule=_unary_dtype("CheckIndex", (dt.int32,)),
         dtypes=(dt.int32,), kernel="index", grad=Grad.INTEGER,
         doc="Indices passed through unchanged, each checked on the device to lie in [0, size) "
             "([-size, size) when `negative`; `ignore`, where not None, is allowed too); the host "
             "raises IndexError naming `what` (the function), an out-of-range value and the "
             "bound (`axis` for an index, None for a class label) after the program runs. Put "
             "before a gather by the surface under `vkml.debug.checks`.", family="index")


def _matmul_shape(s, a):
    x, y = s
    if len(x) < 2 or len(y) < 2:
        raise ShapeError(f"MatMul: operands need rank >= 2, got {x} and {y}")
    if x[-1] != y[-2]:
        raise ShapeError(f"MatMul: contraction mismatch, {x} @ {y}: {x[-1]} != {y[-2]}")
    batch = broadcast_shapes("MatMul", x[:-2], y[:-2])
    return batch + (x[-2], y[-1])


_declare(OpKind.MatMul, arity=2, attrs=(), shape_rule=_matmul_shape,
         dtype_rule=_binary_dtype("MatMul", dt.NUMERIC), dtypes=dt.NUMERIC, kernel="matmul",
         grad=Grad.RULE,
         doc="Batched matrix product (..., m, k) @ (..., k, n); batch dims broadcast.",
         family="contract")


def _win(a):
    return tuple(a["kernel"]), tuple(a["stride"]), tuple(a["padding"]), tuple(a["dilation"])


def _check_win(op, a):
    k, st, p, d = _win(a)
    for name, v, lo in (("kernel", k, 1), ("stride", st, 1), ("padding", p, 0), ("dilation", d, 1)):
        if len(v) != 2 or any(not isinstance(x, int) or x < lo for x in v):
            raise ShapeError(f"{op}: {name} {v} must be two ints >= {lo}")
    return k, st, p, d


def _spatial(op, x, a):
    if len(x) != 4:
        raise ShapeError(f"{op}: input must be NCHW (rank 4), got shape {x}")
    k, st, p, d = _check_win(op, a)
    return (conv_out(op, x[2], k[0], st[0], p[0], d[0]), conv_out(op, x[3], k[1], st[1], p[1], d[1]))


def _im2col_shape(s, a):
    x = s[0]
    oh, ow = _spatial("Im2Col", x, a)
    k = a["kernel"]
    return (x[0], x[1] * k[0] * k[1], oh * ow)


def _col2im_shape(s, a):
    c = s[0]
    H, W = a["output_size"]
    k = a["kernel"]
    if len(c) != 3 or c[1] % (k[0] * k[1]):
        raise ShapeError(f"Col2Im: columns must be (N, C*kh*kw, L) with kernel {k}, got {c}")
    oh, ow = _spatial("Col2Im", (c[0], c[1] // (k[0] * k[1]), H, W), a)
    if c[2] != oh * ow:
        raise ShapeError(f"Col2Im: columns {c} hold {c[2]} windows but output {H}x{W} with "
                         f"these window attributes has {oh * ow}")
    return (c[0], c[1] // (k[0] * k[1]), H, W)


def _pool_shape(s, a):
    x = s[0]
    oh, ow = _spatial("MaxPool2d", x, a)
    return (x[0], x[1], oh, ow)


def _pool_bwd_shape(s, a):
    x, g = s
    if _pool_shape([x], a) != g:
        raise ShapeError(f"MaxPool2dBackward: gradient {g} does not match pooling of {x} "
                         f"(expected {_pool_shape([x], a)})")
    return x


def _float_same(op):
    def rule(d, a):
        _same(op, d)
        _need(op, d, dt.FLOATS)
        return np.dtype(d[0])
    return rule


_WIN = ("kernel", "stride", "padding", "dilation")
_declare(OpKind.Im2Col, arity=1, attrs=_WIN, shape_rule=_im2col_shape,
         dtype_rule=_float_same("Im2Col"), dtypes=dt.FLOATS, kernel="window", grad=Grad.RULE,
         doc="Unfold NCHW sliding windows to (N, C*kh*kw, OH*OW), PyTorch's unfold "
             "layout; zero padding.", family="window")
_declare(OpKind.Col2Im, arity=1, attrs=("output_size",) + _WIN, shape_rule=_col2im_shape,
         dtype_rule=_float_same("Col2Im"), dtypes=dt.FLOATS, kernel="window", grad=Grad.RULE,
         doc="Fold (N, C*kh*kw, L) columns back to NCHW, summing where windows overlap (adjoint of "
             "Im2Col); deterministic.", family="window")
_declare(OpKind.MaxPool2d, arity=1, attrs=_WIN, shape_rule=_pool_shape,
         dtype_rule=_unary_dtype("MaxPool2d", dt.NUMERIC), dtypes=dt.NUMERIC, kernel="window",
         grad=Grad.RULE,
         doc="Max over NCHW windows; padding counts as -inf (INT_MIN for int32, the dtype is "
             "kept); nan propagates.", family="window")
_declare(OpKind.MaxPool2dBackward, arity=2, attrs=_WIN, shape_rule=_pool_bwd_shape,
         dtype_rule=_float_same("MaxPool2dBackward"), dtypes=dt.FLOATS, kernel="window",
         grad=Grad.RULE,
         doc="Route each window's gradient to the first maximum of that window in x (adjoint of "
             "MaxPool2d); deterministic.", family="window")


def _slice_bwd_shape(s, a):
    shape = _shape_attr("SliceBackward", tuple(a["shape"]))
    fwd = _slice_shape([shape], a)
    if fwd != s[0]:
        raise ShapeError(f"SliceBackward: gradient {s[0]} does not match slicing {shape} "
                         f"(expected {fwd})")
    return shape


_declare(OpKind.SliceBackward, arity=1, attrs=("shape", "starts", "stops", "steps"),
         shape_rule=_slice_bwd_shape, dtype_rule=_same_dtype, dtypes=dt.ALL, kernel="movement",
         grad=Grad.RULE,
         doc="Place the input at the sliced positions of zeros of `shape` (adjoint of Slice).",
         family="movement")

# --------------------------------------------------------------------------- control flow
# A Scan holds its body as a Graph (attribute `body`) whose inputs are the loop's
# constants, then its carries, then one step's slices of the scanned arrays, and whose
# outputs are the new carries, then one step's outputs. The node itself is a token (a
# bool array of shape (0,)); its results are Part nodes: the final carries, then each
# step output stacked along a new leading axis of `length`. Being one node whatever the
# trip count, a loop costs the tracer, the transforms and the lowering one body.

TOKEN_SHAPE = (0,)


def scan_outputs(body, n_carry: int, length: int) -> list[tuple[tuple, np.dtype]]:
    """(shape, dtype) of each result of a Scan: its carries, then its stacked outputs."""
    outs = [(tuple(o.shape), np.dtype(o.dtype)) for o in body.outputs]
    return outs[:n_carry] + [((length,) + s, d) for s, d in outs[n_carry:]]


def loop_outputs(op: "OpKind", a: dict) -> list[tuple[tuple, np.dtype]]:
    """(shape, dtype) of each result of a Scan or a While (node op, attributes `a`)."""
    if op is OpKind.Scan:
        return scan_outputs(a["body"], a["n_carry"], a["length"])
    ins, nc = _avals(a["body"].inputs), a["n_consts"]
    t = a.get("transpose")
    if t is None:
        return ins[nc:nc + a["n_carry"]]
    return [ins[nc + k] for k in t[0]] + [ins[k] for k in t[1]]


LOOPS = frozenset({OpKind.Scan, OpKind.While})     # nodes whose results are Parts


def _avals(nodes) -> list[tuple[tuple, np.dtype]]:
    return [(tuple(n.shape), np.dtype(n.dtype)) for n in nodes]


def _scan_shape(s, a):
    body, length, nc, nk = a["body"], a["length"], a["n_consts"], a["n_carry"]
    if not isinstance(length, int) or isinstance(length, bool) or length < 0:
        raise ShapeError(f"Scan: length {length!r} must be an int >= 0")
    ins = _avals(body.inputs)
    if len(s) != len(ins):
        raise ShapeError(f"Scan: the body takes {len(ins)} operands, got {len(s)}")
    outs = _avals(body.outputs)
    if len(outs) < nk or _avals(body.outputs[:nk]) != ins[nc:nc + nk]:
        raise ShapeError(f"Scan: body carry output {outs[:nk]} and input {ins[nc:nc + nk]} "
                         f"must have identical types")
    for i, (sh, (want, _)) in enumerate(zip(s, ins)):
        want = want if i < nc + nk else (length,) + want
        if tuple(sh) != want:
            raise ShapeError(f"Scan: operand {i} has shape {tuple(sh)}, the body expects {want}")
    return TOKEN_SHAPE


def _scan_dtype(d, a):
    ins = _avals(a["body"].inputs)
    for i, (got, (_, want)) in enumerate(zip(d, ins)):
        if np.dtype(got) != want:
            raise DTypeError(f"Scan: operand {i} has dtype {np.dtype(got)}, the body expects {want}")
    return dt.bool_


def _part_shape(s, a):
    if tuple(s[0]) != TOKEN_SHAPE:
        raise ShapeError(f"Part: operand must be a Scan (shape {TOKEN_SHAPE}), got shape {s[0]}")
    return _shape_attr("Part", tuple(a["shape"]))


_declare(OpKind.Scan, arity=None, attrs=("body", "length", "reverse", "n_consts", "n_carry", "saved"),
         shape_rule=_scan_shape, dtype_rule=_scan_dtype, dtypes=dt.ALL, kernel="control",
         grad=Grad.RULE,
         doc="A loop of `length` steps over the subgraph `body` (traced once): operands are "
             "`n_consts` constants, `n_carry` initial carries, then arrays scanned along their "
             "leading axis (last to first when `reverse`). Each step maps (constants, carries, "
             "slices) to (new carries, step outputs); the results, read through Part, are the "
             "final carries and the step outputs stacked. Its gradient is a Scan in the other "
             "direction over the body's gradient, from the carries of every step (which it "
             "outputs too, for that use); lowered, the body's dispatches are recorded once and "
             "replayed `length` times in one command buffer. `saved`: its last `n_carry` step "
             "outputs are the carries each step began from (what its gradient reads; dropped "
             "before it runs where nothing reads them).", family="control")


def _while_shape(s, a):
    body, cond, nc, nk = a["body"], a["cond"], a["n_consts"], a["n_carry"]
    ins = _avals(body.inputs)
    if _avals(cond.inputs) != ins:
        raise ShapeError("While: the body and the predicate must take the same inputs")
    if _avals(body.outputs) != ins[nc:nc + nk]:
        raise ShapeError(f"While: body carry output {_avals(body.outputs)} and input "
                         f"{ins[nc:nc + nk]} must have identical types")
    lead = tuple(cond.outputs[0].shape)
    if len(cond.outputs) != 1 or cond.outputs[0].dtype != dt.bool_ or any(
            tuple(c.shape[:len(lead)]) != lead for c in body.inputs[nc:nc + nk]):
        raise ShapeError(f"While: the predicate must be one bool array of the carries' leading "
                         f"(batch) shape, got {_avals(cond.outputs)}")
    want = [sh for sh, _ in ins]
    t = a.get("transpose")
    if t is not None:      # a While's reverse rule: then the final carries' cotangents
        want += [want[nc + k] for k in t[0]]
    if len(s) != len(want):
        raise ShapeError(f"While: takes {len(want)} operands, got {len(s)}")
    for i, (sh, w) in enumerate(zip(s, want)):
        if tuple(sh) != tuple(w):
            raise ShapeError(f"While: operand {i} has shape {tuple(sh)}, the body expects {tuple(w)}")
    return TOKEN_SHAPE


def _while_dtype(d, a):
    for i, (got, (_, want)) in enumerate(zip(d, _avals(a["body"].inputs))):
        if np.dtype(got) != want:
            raise DTypeError(f"While: operand {i} has dtype {np.dtype(got)}, the body expects {want}")
    return dt.bool_


_declare(OpKind.While, arity=None, attrs=("body", "cond", "n_consts", "n_carry", "transpose"),
         shape_rule=_while_shape, dtype_rule=_while_dtype, dtypes=dt.ALL, kernel="control",
         grad=Grad.RULE,
         doc="A loop whose trip count is found by running it (lax.while_loop): operands are "
             "`n_consts` constants then `n_carry` initial carries; while the subgraph `cond` "
             "(constants, carries) -> bool holds, the subgraph `body` maps (constants, carries) "
             "to new carries. Its results, read through Part, are the final carries. A batched "
             "loop's predicate has the carries' leading batch shape: it runs while any lane's "
             "holds, and a lane whose predicate fails keeps its carry. Lowered, a submission "
             "runs a chunk of steps that each select the new carry only where the predicate "
             "holds, then the host reads whether any lane's still does. Forward mode is a While "
             "over (carry, tangent); reverse mode raises as JAX's does (`transpose`: the "
             "reverse rule's node, whose own rule is that forward loop, so vkml's jvp, the "
             "transpose of its vjp, works; it cannot run).", family="control")
_declare(OpKind.Part, arity=1, attrs=("index", "shape", "dtype"), shape_rule=_part_shape,
         dtype_rule=lambda d, a: _dtype_attr("Part", a), dtypes=dt.ALL, kernel="control",
         grad=Grad.RULE,
         doc="Result `index` of a Scan (its final carries, then its stacked step outputs) or "
             "of a While (its final carries).",
         family="control")
# --------------------------------------------------------------------------- linear algebra

# the factorisations compute in float32 or float64 only (the surface widens other floats)
_LINALG = (dt.float32, dt.float64)


def _square(op, s):
    if len(s) < 2 or s[-1] != s[-2]:
        raise ShapeError(f"{op}: needs square matrices (..., n, n), got shape {tuple(s)}")
    return tuple(s)


def _square_shape(op):
    return lambda s, a: _square(op, s[0])


def _solve_shape(op):
    def rule(s, a):
        m, b = s
        _square(op, m)
        if len(b) < 2 or b[-2] != m[-1] or tuple(b[:-2]) != tuple(m[:-2]):
            raise ShapeError(f"{op}: right-hand side must be (..., n, k) with the matrix's batch "
                             f"dims and n = {m[-1]}, got matrix {tuple(m)} and right-hand side "
                             f"{tuple(b)}")
        if op == "TriangularSolve":
            for k in ("lower", "trans", "unit"):
                if not isinstance(a[k], bool):
                    raise ShapeError(f"TriangularSolve: {k} {a[k]!r} must be a bool")
        return tuple(b)
    return rule


def _pivots_shape(s, a):
    return _square("LuPivots", s[0])[:-1]


def _perm_shape(s, a):
    if len(s[0]) < 1:
        raise ShapeError(f"LuPivotsToPermutation: pivots need rank >= 1, got {s[0]}")
    return s[0]


def _lu_shape(s, a):
    m, p = s
    _square("Lu", m)
    if tuple(p) != tuple(m[:-1]):
        raise ShapeError(f"Lu: permutation must have shape {tuple(m[:-1])} for matrices {tuple(m)}, "
                         f"got {tuple(p)}")
    return tuple(m)


def _linalg_same(op):
    def rule(d, a):
        _same(op, d)
        _need(op, d, _LINALG)
        return np.dtype(d[0])
    return rule


def _lu_dtype(d, a):
    _need("Lu", d[:1], _LINALG)
    _need("Lu", d[1:], (dt.int32,), "permutation")
    return np.dtype(d[0])


def _pivots_dtype(d, a):
    _need("LuPivots", d, _LINALG)
    return dt.int32


_declare(OpKind.Cholesky, arity=1, attrs=("symmetrize",), shape_rule=_square_shape("Cholesky"),
         dtype_rule=_unary_dtype("Cholesky", _LINALG), dtypes=_LINALG, kernel="linalg",
         grad=Grad.RULE,
         doc="The lower Cholesky factor L (L L^T = S, zeros above the diagonal) of each matrix "
             "S whose lower triangle is the input's (the upper triangle is not read), or with "
             "symmetrize S = (x + x^T) / 2, as jax.numpy.linalg.cholesky "
             "(read as the kernel loads x: no kernel of its own). A matrix that is not positive "
             "definite (a pivot <= 0 or nan) gives a matrix of nan, as JAX.",
         family="linalg")
_declare(OpKind.TriangularSolve, arity=2, attrs=("lower", "trans", "unit"),
         shape_rule=_solve_shape("TriangularSolve"), dtype_rule=_linalg_same("TriangularSolve"),
         dtypes=_LINALG, kernel="linalg", grad=Grad.RULE,
         doc="X with op(A) X = B for each triangular A (..., n, n) and B (..., n, k) of the same "
             "batch: op(A) is A, or A^T when `trans`; only A's `lower` (else upper) triangle is "
             "read, and its diagonal taken as ones when `unit`. A zero pivot gives inf/nan.",
         family="linalg")
_declare(OpKind.Solve, arity=2, attrs=(), shape_rule=_solve_shape("Solve"),
         dtype_rule=_linalg_same("Solve"), dtypes=_LINALG, kernel="linalg", grad=Grad.RULE,
         doc="X with A X = B for each A (..., n, n) and B (..., n, k) of the same batch, by "
             "Gaussian elimination with partial pivoting (LAPACK's pivot choice). A singular A "
             "gives inf/nan.", family="linalg")
_declare(OpKind.LuPivots, arity=1, attrs=(), shape_rule=_pivots_shape, dtype_rule=_pivots_dtype,
         dtypes=_LINALG, kernel="linalg", grad=Grad.DISCONTINUOUS,
         doc="The row interchanges of LU factorisation with partial pivoting, as LAPACK's getrf "
             "(and JAX's `pivots`), 0-based: at step j row j was swapped with row out[j] >= j "
             "(the first of largest magnitude in column j).", family="linalg")
_declare(OpKind.LuPivotsToPermutation, arity=1, attrs=(), shape_rule=_perm_shape,
         dtype_rule=_unary_dtype("LuPivotsToPermutation", (dt.int32,)), dtypes=(dt.int32,),
         kernel="linalg", grad=Grad.INTEGER,
         doc="The permutation perm that the row interchanges `pivots` (LuPivots) make of "
             "0..n-1: a[perm] = L U, as JAX's lu_pivots_to_permutation.", family="linalg")
_declare(OpKind.Lu, arity=2, attrs=(), shape_rule=_lu_shape, dtype_rule=_lu_dtype,
         dtypes=_LINALG, kernel="linalg", grad=Grad.RULE,
         doc="LU factorisation without pivoting of the rows a[perm] (perm from LuPivots, so that "
             "it is LU with partial pivoting), packed: the strict lower triangle is L's (unit "
             "diagonal implied), the upper triangle U's; a[perm] = L U. A zero pivot gives "
             "inf/nan.", family="linalg")
# --------------------------------------------------------------------------- spectral


def _matrices(op, s, square=False):
    x = s[0]
    if len(x) < 2:
        raise ShapeError(f"{op}: operand needs rank >= 2 (a stack of matrices), got shape {x}")
    if square and x[-1] != x[-2]:
        raise ShapeError(f"{op}: operand must be a stack of square matrices, got shape {x}")
    return x[:-2], x[-2], x[-1]


def _eigh_shape(s, a):
    b, n, _ = _matrices("Eigh", s, square=True)
    return b + (n + 1, n)


def _svd_shape(s, a):
    b, m, n = _matrices("Svd", s)
    return b + (m + n + 1, min(m, n))


def _qr_shape(s, a):
    if not isinstance(a["complete"], bool):
        raise ShapeError(f"Qr: complete {a['complete']!r} must be a bool")
    b, m, n = _matrices("Qr", s)
    return b + (m, (m if a["complete"] else min(m, n)) + n)


# A graph node has one output, so each decomposition packs its factors into one array
# that the surface slices (as ArgSort leaves the values to a gather): one kernel computes
# every factor together, and the rule sees the cotangents of all of them at once.
_declare(OpKind.Eigh, arity=1, attrs=(), shape_rule=_eigh_shape,
         dtype_rule=_unary_dtype("Eigh", dt.FLOATS), dtypes=dt.FLOATS, kernel="spectral",
         grad=Grad.RULE,
         doc="Eigendecomposition of symmetric matrices (..., n, n) by parallel cyclic Jacobi, "
             "packed as (..., n + 1, n): rows :n hold the orthonormal eigenvectors as columns, "
             "row n the eigenvalues in ascending order. Reads the whole matrix, which must be "
             "symmetric (vkml.numpy.linalg.eigh symmetrizes first).", family="linalg")
_declare(OpKind.Svd, arity=1, attrs=(), shape_rule=_svd_shape,
         dtype_rule=_unary_dtype("Svd", dt.FLOATS), dtypes=dt.FLOATS, kernel="spectral",
         grad=Grad.RULE,
         doc="Thin singular value decomposition of (..., m, n) by one-sided Jacobi, packed as "
             "(..., m + n + 1, k), k = min(m, n): rows :m hold U, rows m:m + n hold V (so A = "
             "U diag(s) V^T), row m + n the singular values in descending order.",
         family="linalg")
_declare(OpKind.Qr, arity=1, attrs=("complete",), shape_rule=_qr_shape,
         dtype_rule=_unary_dtype("Qr", dt.FLOATS), dtypes=dt.FLOATS, kernel="spectral",
         grad=Grad.RULE,
         doc="Householder QR of (..., m, n), packed as (..., m, kq + n) with kq = m when "
             "`complete` else min(m, n): columns :kq hold Q, rows :kq of columns kq: hold the "
             "upper-triangular R (the rest zero). R's diagonal has LAPACK's signs.",
         family="linalg")

# The shape rule of each operator in words (for the generated docs); the functions above
# are the executable form.
_SHAPE_WORDS = {
    "leaf": "`shape` attribute",
    "unary": "same as the input",
    "binary": "NumPy broadcast of the operand shapes",
    "compare": "NumPy broadcast of the operand shapes",
    "reduce": "input shape with `axes` removed (kept as size 1 with `keepdims`)",
}
_SHAPE_OVERRIDES = {
    OpKind.Arange: "(n,)",
    OpKind.Rand: "`shape` attribute (key must be (2,))",
    OpKind.Cumsum: "same as the input",
    OpKind.ArgSort: "same as the input",
    OpKind.Softmax: "same as the input",
    OpKind.LogSoftmax: "same as the input",
    OpKind.Reshape: "`shape` (same number of elements)",
    OpKind.Permute: "out[i] = in[perm[i]]",
    OpKind.Expand: "`shape` (input dims equal or 1, aligned from the right)",
    OpKind.Slice: "len(range(start, stop, step)) per axis",
    OpKind.Pad: "in + low + high per axis",
    OpKind.Concat: "inputs equal outside `axis`; sizes along `axis` add",
    OpKind.Flip: "same as the input",
    OpKind.IndexSelect: "x with `axis` replaced by len(idx)",
    OpKind.ScatterAdd: "src with `axis` replaced by `size`",
    OpKind.ScatterReduce: "src with `axis` replaced by `size`",
    OpKind.MatMul: "broadcast(batch) + (m, n) from (..., m, k) @ (..., k, n)",
    OpKind.Im2Col: "(N, C*kh*kw, OH*OW) from NCHW, OH = (H + 2p - d(kh-1) - 1) // s + 1",
    OpKind.Col2Im: "(N, C, H, W) with (H, W) = `output_size`",
    OpKind.MaxPool2d: "(N, C, OH, OW), OH as for Im2Col",
    OpKind.MaxPool2dBackward: "shape of x",
    OpKind.SliceBackward: "`shape` attribute (the sliced array's original shape)",
    OpKind.CheckIndex: "same as the input",
    OpKind.Scan: "(0,): a token; its results are Part nodes",
    OpKind.Part: "`shape` attribute (a final carry, or a step output stacked to (length, ...))",
    OpKind.While: "(0,): a token; its results are Part nodes (the final carries)",
    OpKind.Cholesky: "same as the input (..., n, n)",
    OpKind.TriangularSolve: "the right-hand side's (..., n, k)",
    OpKind.Solve: "the right-hand side's (..., n, k)",
    OpKind.LuPivots: "(..., n) from (..., n, n)",
    OpKind.LuPivotsToPermutation: "same as the input",
    OpKind.Lu: "same as the matrices (..., n, n)",
    OpKind.Eigh: "(..., n + 1, n) from (..., n, n)",
    OpKind.Svd: "(..., m + n + 1, min(m, n)) from (..., m, n)",
    OpKind.Qr: "(..., m, kq + n) from (..., m, n), kq = m if `complete` else min(m, n)",
}
for _k, _s in SPECS.items():
    _s.extra["shape"] = _SHAPE_OVERRIDES.get(_k) or _SHAPE_WORDS.get(_s.family, "see doc")

assert set(SPECS) == set(OpKind), set(OpKind) - set(SPECS)


def infer(kind: OpKind, shapes: list[tuple], dtypes_: list[np.dtype], attrs: dict) -> tuple[tuple, np.dtype]:
    """Check operands and attributes and return the output (shape, dtype)."""
    sp = SPECS[kind]
    if sp.arity is not None and len(shapes) != sp.arity:
        raise TypeError(f"{sp.name}: takes {sp.arity} operands, got {len(shapes)}")
    missing = set(sp.attrs) - set(attrs)
    if missing:
        raise TypeError(f"{sp.name}: missing attributes {sorted(missing)}")
    d = sp.dtype_rule(list(dtypes_), attrs)
    s = sp.shape_rule(list(shapes), attrs)
    return tuple(int(x) for x in s), np.dtype(d)
