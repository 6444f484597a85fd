"""Cases for the elementwise family (unary ops, Cast, Copy, StopGradient, binary ops,
Where, comparisons) and the creation kernels Full and Arange, on every dtype of each spec.

Elementwise kernels address every operand through (offset, strides) read from meta, with
broadcast axes as stride 0 and size-1 axes merged away, so each op gets: broadcasting
((3, 1, 4) against (5, 1)), size-0 and size-1 axes, 0-d operands, and inputs that are the
result of a movement (`x.T`, `x[::2]`). The float math (math32.glsl / math64.glsl) gets
edge values where NumPy defines the answer (log(0) = -inf, nan propagation through
maximum, sign(nan) = nan, relu(nan) = nan, exp overflow, ...) and a "wide" case per op and
dtype that sweeps the whole finite range with atol = 0, so a loss of relative accuracy in
the tails (erfc(x) for large x, sin of huge arguments, exp near overflow, log of tiny
values, ...) fails. Each reference is NumPy in float64 rounded to the case's dtype, so
float32 overflow and underflow compare like the kernel's.
"""
from __future__ import annotations

import math

import numpy as np

from vkml.array import bind
from vkml.trace.ops import OpKind

from .cases import RNG, Case, rand, tol

F32, F64, I32, BOOL = np.float32, np.float64, np.int32, np.bool_
FLOATS = (F32, F64)
NUMERIC = (I32, F32, F64)
ALL = (BOOL, I32, F32, F64)
INF, NAN = math.inf, math.nan
CASES: list[Case] = []


def _add(op, name, fn, ref, args, dtype, **kw):
    d = np.dtype(dtype)
    if d.kind == "f" and "rtol" not in kw and not kw.get("exact"):
        kw["rtol"], kw["atol"] = tol(d)
    CASES.append(Case(op, f"{name}-{d.name}", fn, ref, args, dtype=d, **kw))


def _rounded(f, out_dtype):
    """The float64 oracle f rounded to out_dtype, with NumPy's warnings silenced."""
    def ref(*a):
        with np.errstate(all="ignore"):
            return np.asarray(f(*a)).astype(out_dtype)
    return ref


def _arr(values, d):
    with np.errstate(all="ignore"):
        return np.array(values, dtype=np.float64).astype(d)


def _logu(lo, hi, n, d, signed=True):
    """n values with magnitudes log-uniform in [lo, hi] (random signs when signed)."""
    x = np.exp(RNG.uniform(math.log(lo), math.log(hi), n))
    if signed:
        x *= RNG.choice([-1.0, 1.0], n)
    return x.astype(d)


def _unif(lo, hi, n, d):
    return RNG.uniform(lo, hi, n).astype(d)


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _gelu_exact(x):
    return 0.5 * x * _erfc(-x / math.sqrt(2))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


# --------------------------------------------------------------------------- unary, float
# op -> (oracle, random domain, edge values, wide-range generator (n, dtype) -> values)
_BIG = {F32: 3e38, F64: 1e308}
# halves (ties of Rint), both sides of 0 and -1, values where the float's ulp is 0.5, 1, 2
_ROUND_EDGES = [0.0, -0.0, NAN, INF, -INF, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, -0.2, -0.7, -1.0,
                0.49999997, -0.9999999, 1e-40, -1e-40, 8388607.5, -8388608.5, 8388609.0,
                4503599627370495.5, -4503599627370497.0, 1e20, -3e38]


def _round_wide(n, d):
    """Quarters (exact ties and near-ties) and values across the whole finite range."""
    r = np.random.default_rng(17)
    return np.concatenate([(r.integers(-400, 400, n // 2) / 4).astype(d),
                           _logu(1e-30, 3e38 if d is F32 else 1e300, n - n // 2, d)])


_UNARY_FLOAT = {
    OpKind.Neg: (np.negative, (-4, 4), [0.0, -0.0, 1.5, -2.0, INF, -INF, NAN, 3e38], None),
    OpKind.Reciprocal: (np.reciprocal, (0.25, 4),
                        [0.0, -0.0, INF, -INF, NAN, 2.0, -4.0, 1e-30, -3e30],
                        lambda n, d: _logu(1e-37 if d is F32 else 1e-300, 1e37 if d is F32 else 1e300, n, d)),
    OpKind.Exp: (np.exp, (-10, 10),
                 [0.0, -0.0, 1.0, -1.0, 88.0, 89.0, -87.0, -110.0, 700.0, 710.0, -740.0, -800.0,
                  INF, -INF, NAN, 1e-30],
                 lambda n, d: _unif(-87, 88.7, n, d) if d is F32 else _unif(-708, 709.7, n, d)),
    OpKind.Log: (np.log, (0.01, 100),
                 [0.0, -0.0, -1.0, 1.0, INF, -INF, NAN, 1e-40, 1e-310, 3e38, 1e308, 0.999999, 1.000001],
                 lambda n, d: _logu(1.2e-38 if d is F32 else 2.3e-308, _BIG[d], n, d, signed=False)),
    OpKind.Log1p: (np.log1p, (-0.9, 10),
                   [-1.0, -2.0, 0.0, -0.0, 1e-10, -1e-10, 1e-30, 1e30, INF, -INF, NAN, -0.5, 3.0,
                    -0.999999],
                   lambda n, d: np.concatenate([_logu(1e-30, 0.999, n // 2, d),
                                                _logu(1e-3, _BIG[d], n - n // 2, d, signed=False)])),
    OpKind.Expm1: (np.expm1, (-3, 3),
                   [0.0, -0.0, 1e-10, -1e-10, 1e-30, 88.0, 89.0, 700.0, -100.0, INF, -INF, NAN, 0.3, -0.4],
                   lambda n, d: np.concatenate([_logu(1e-30, 1.0, n // 2, d),
                                                _unif(-60, 88.7 if d is F32 else 709.7, n - n // 2, d)])),
    OpKind.Sqrt: (np.sqrt, (0.01, 10), [0.0, -0.0, -1.0, INF, -INF, NAN, 4.0, 2.0, 1e-40],
                  lambda n, d: _logu(1.2e-38 if d is F32 else 2.3e-308, _BIG[d], n, d, signed=False)),
    OpKind.Rsqrt: (lambda x: 1 / np.sqrt(x), (0.01, 10), [0.0, INF, 4.0, 0.25, -1.0, NAN],
                   lambda n, d: _logu(1e-37 if d is F32 else 1e-300, _BIG[d], n, d, signed=False)),
    OpKind.Sin: (np.sin, (-7, 7),
                 [0.0, -0.0, math.pi / 2, math.pi, -math.pi, 1e4, -1e6, 1e20, 3e38, 1e300, INF, -INF, NAN,
                  0.785, 0.786],
                 lambda n, d: _logu(1e-20, 3e38 if d is F32 else 1e308, n, d)),
    OpKind.Cos: (np.cos, (-7, 7),
                 [0.0, -0.0, math.pi / 2, math.pi, -math.pi, 1e4, -1e6, 1e20, 3e38, 1e300, INF, -INF, NAN,
                  0.785, 0.786],
                 lambda n, d: _logu(1e-20, 3e38 if d is F32 else 1e308, n, d)),
    OpKind.Tanh: (np.tanh, (-3, 3),
                  [0.0, -0.0, 1e-10, -1e-30, 0.5, -3.0, 9.0, 9.2, 19.0, 20.0, -20.0, 1000.0, INF, -INF, NAN],
                  lambda n, d: _logu(1e-30, 30.0, n, d)),
    OpKind.Sigmoid: (_sigmoid, (-6, 6),
                     [0.0, -0.0, 1.0, -1.0, 50.0, -50.0, 100.0, -100.0, 800.0, -800.0, INF, -INF, NAN],
                     lambda n, d: _unif(-87, 88, n, d) if d is F32 else _unif(-700, 700, n, d)),
    OpKind.Abs: (np.abs, (-4, 4), [0.0, -0.0, -INF, INF, NAN, -3.5, 2.0, -1e-40], None),
    OpKind.Sign: (np.sign, (-4, 4), [0.0, -0.0, NAN, INF, -INF, -3.0, 2.5, 1e-40, -1e-40], None),
    OpKind.Erf: (_erf, (-3, 3),
                 [0.0, -0.0, 1e-10, -1e-30, 0.3, 0.5, -0.7, 2.0, -5.0, 6.5, 10.0, INF, -INF, NAN],
                 lambda n, d: _logu(1e-30, 7.0, n, d)),
    OpKind.Erfc: (_erfc, (-3, 3),
                  [0.0, -0.0, -INF, INF, NAN, -1.0, 0.3, 0.5, 3.0, 9.0, 10.0, 11.0, 26.0, 28.0, -30.0],
                  lambda n, d: _unif(-6, 9.1, n, d) if d is F32 else _unif(-6, 26.5, n, d)),
    OpKind.Relu: (lambda x: np.where(np.isnan(x) | (x > 0), x, 0.0), (-4, 4),
                  [NAN, -0.0, 0.0, -INF, INF, -1.0, 2.0], None),
    OpKind.Silu: (lambda x: x * _sigmoid(x), (-6, 6),
                  [0.0, -0.0, 1.0, -1.0, 50.0, -50.0, 100.0, -100.0, INF, NAN],
                  lambda n, d: _unif(-87, 88, n, d) if d is F32 else _unif(-700, 700, n, d)),
}


def _unary_layout_cases(op, prefix, fn, ref, d, lo, hi):
    """Random data in [lo, hi] through every layout the kernel must handle."""
    _add(op, f"{prefix}random-3x1x5", fn, ref, [rand((3, 1, 5), d, lo, hi)], d)
    _add(op, f"{prefix}transposed", lambda x: fn(x.T), lambda x: ref(x.T), [rand((4, 6), d, lo, hi)], d)
    _add(op, f"{prefix}strided", lambda x: fn(x[::2]), lambda x: ref(x[::2]), [rand((9, 3), d, lo, hi)], d)
    _add(op, f"{prefix}size0", fn, ref, [rand((0, 3), d, lo, hi)], d)
    _add(op, f"{prefix}0d", fn, ref, [rand((), d, lo, hi)], d)
    # one element past a 256-thread workgroup
    _add(op, f"{prefix}257", fn, ref, [rand((257,), d, lo, hi)], d)


for _op, (_f, (_lo, _hi), _edges, _wide) in _UNARY_FLOAT.items():
    for _d in FLOATS:
        _fn = (lambda op: lambda x: bind(op, [x]))(_op)
        _ref = _rounded(_f, _d)
        _unary_layout_cases(_op, "", _fn, _ref, _d, _lo, _hi)
        _add(_op, "edges", _fn, _ref, [_arr(_edges, _d)], _d)
        if _wide is not None:
            # whole finite range, relative error only (atol 0)
            _add(_op, "wide", _fn, _ref, [_wide(2000, _d)], _d, rtol=tol(_d)[0], atol=0.0)

# Floor, Ceil, Trunc, Rint: exact. Their data come from a generator of their own, so the
# shared stream (every later case's data, Prod's int rows included) stays as it was.
_RR = np.random.default_rng(1717)
for _op, _f in [(OpKind.Floor, np.floor), (OpKind.Ceil, np.ceil), (OpKind.Trunc, np.trunc),
                (OpKind.Rint, np.rint)]:
    for _d in FLOATS:
        _fn = (lambda op: lambda x: bind(op, [x]))(_op)
        _ref = _rounded(_f, _d)
        for _nm, _pre, _shape in [("3x1x5", lambda x: x, (3, 1, 5)), ("transposed", lambda x: x.T, (4, 6)),
                                  ("strided", lambda x: x[::2], (9, 3)), ("size0", lambda x: x, (0, 3)),
                                  ("0d", lambda x: x, ()), ("257", lambda x: x, (257,))]:
            _x = _RR.uniform(-6, 6, _shape).astype(_d)
            _add(_op, _nm, (lambda fn, pre: lambda x: fn(pre(x)))(_fn, _pre),
                 (lambda ref, pre: lambda x: ref(pre(x)))(_ref, _pre), [_x], _d, exact=True)
        _add(_op, "edges", _fn, _ref, [_arr(_ROUND_EDGES, _d)], _d, exact=True)
        _add(_op, "wide", _fn, _ref, [_round_wide(2000, _d)], _d, exact=True)

# Gelu: exact (erfc) and tanh approximation
for _d in FLOATS:
    for _approx, _g in [(False, _gelu_exact), (True, _gelu_tanh)]:
        _fn = (lambda a: lambda x: bind(OpKind.Gelu, [x], approximate=a))(_approx)
        _nm = "tanh-" if _approx else "exact-"
        _ref = _rounded(_g, _d)
        _unary_layout_cases(OpKind.Gelu, _nm, _fn, _ref, _d, -4, 4)
        _add(OpKind.Gelu, _nm + "edges", _fn, _ref,
             [_arr([0.0, -0.0, 1.0, -1.0, 5.0, -5.0, 10.0, -10.0, 1e-20, INF, NAN], _d)], _d)
    # the exact form's tail needs erfc's relative accuracy (x Phi(x) for x << 0)
    _add(OpKind.Gelu, "exact-wide", lambda x: bind(OpKind.Gelu, [x], approximate=False),
         _rounded(_gelu_exact, _d),
         # float32 stops at 8: rounding x / sqrt(2) alone moves erfc by 2 z^2 ulp
         [_unif(-8, 8, 2000, _d) if _d is F32 else _unif(-37, 37, 2000, _d)], _d,
         rtol=tol(_d)[0], atol=0.0)

# --------------------------------------------------------------------------- unary, int32
_INT_EDGES = [0, 1, -1, 7, -13, 2147483647, -2147483647]
for _op, _f in [(OpKind.Neg, np.negative), (OpKind.Abs, np.abs), (OpKind.Sign, np.sign),
                (OpKind.Relu, lambda x: np.maximum(x, 0))]:
    _fn = (lambda op: lambda x: bind(op, [x]))(_op)
    _unary_layout_cases(_op, "", _fn, _f, I32, -50, 50)
    _add(_op, "edges", _fn, _f, [np.array(_INT_EDGES, I32)], I32)

# --------------------------------------------------------------------------- Copy, StopGradient
_EDGE_DATA = {F32: _arr([0.0, -0.0, INF, -INF, NAN, 1e-40, 3e38], F32),
              F64: _arr([0.0, -0.0, INF, -INF, NAN, 1e-310, 1e308], F64),
              I32: np.array([0, -1, 2147483647, -2147483648], I32),
              BOOL: np.array([True, False, True], BOOL)}
for _op in (OpKind.Copy, OpKind.StopGradient):
    for _d in ALL:
        _fn = (lambda op: lambda x: bind(op, [x]))(_op)
        for _nm, _pre, _shape in [("3x1x5", lambda x: x, (3, 1, 5)), ("transposed", lambda x: x.T, (4, 6)),
                                  ("strided", lambda x: x[::2], (9, 3)), ("size0", lambda x: x, (0, 3)),
                                  ("0d", lambda x: x, ())]:
            _add(_op, _nm, (lambda fn, pre: lambda x: fn(pre(x)))(_fn, _pre), _pre,
                 [rand(_shape, _d)], _d, exact=True)
        _add(_op, "edges", _fn, lambda x: x, [_EDGE_DATA[_d]], _d, exact=True)

# --------------------------------------------------------------------------- Cast
# values each source dtype can hold, and those valid for each destination (float -> int
# is defined only for finite values in range; it truncates toward zero)
_CAST_SRC = {
    F32: [0.0, -0.0, 0.4, -0.6, 1.5, -2.7, 100.9, -9999.5, 16777216.0, 1e-40, 3e38, INF, -INF, NAN],
    F64: [0.0, -0.0, 0.1, -0.6, 1.5, -2.7, 100.9, -9999.5, 2147483647.9, -2147483648.5, 16777217.0,
          1e-40, 1e-300, 1e300, 3.4028235677973366e38, INF, -INF, NAN],
    I32: [0, 1, -1, 7, -123456, 16777217, 2147483647, -2147483648],
    BOOL: [True, False, False, True],
}


def _cast_values(src, dst):
    vals = _CAST_SRC[src]
    if np.dtype(src).kind == "f" and np.dtype(dst) == I32:
        vals = [v for v in vals if math.isfinite(v) and -2147483649 < v < 2147483648]
    return np.array(vals, dtype=np.float64).astype(src) if np.dtype(src).kind == "f" else np.array(vals, src)


for _src in ALL:
    for _dst in ALL:
        _fn = (lambda dst: lambda x: bind(OpKind.Cast, [x], dtype=np.dtype(dst)))(_dst)
        _ref = _rounded(lambda x: x, _dst)
        _to = f"to-{np.dtype(_dst).name}-"
        _add(OpKind.Cast, _to + "values", _fn, _ref, [_cast_values(_src, _dst)], _src, exact=True)
        _add(OpKind.Cast, _to + "transposed", (lambda f: lambda x: f(x.T))(_fn),
             (lambda r: lambda x: r(x.T))(_ref), [rand((3, 5), _src, -100, 100)], _src, exact=True)
        _add(OpKind.Cast, _to + "size0", _fn, _ref, [rand((2, 0), _src)], _src, exact=True)

# --------------------------------------------------------------------------- binary


def _binary_data(op, shape, d):
    """Random operands in each op's domain."""
    if op is OpKind.Div and np.dtype(d).kind == "f":
        return rand(shape, d, -4, 4), (rand(shape, d, 0.5, 3) * np.where(rand(shape, BOOL), 1, -1)).astype(d)
    if op is OpKind.Pow:
        return rand(shape, d, 0.1, 3), rand(shape, d, -3, 3)
    return rand(shape, d, -5, 5), rand(shape, d, -5, 5)


_FLOAT_SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -0.5, 1e-30, 3e38, -3e38, INF, -INF, NAN]
_INT_SPECIAL = [0, 1, -1, 7, -13, 46341, 2147483647, -2147483647]


def _grid(values, d):
    """Every ordered pair of values, as two flat operands."""
    a = _arr(values, d) if np.dtype(d).kind == "f" else np.array(values, d)
    x, y = np.meshgrid(a, a, indexing="ij")
    return x.ravel(), y.ravel()


def _binary_cases(op, f, d, special=True):
    fn = lambda x, y: bind(op, [x, y])
    ref = _rounded(f, d)
    shapes = [("bcast-3x1x4-5x1", (3, 1, 4), (5, 1)), ("bcast-0d-right", (2, 3), ()),
              ("bcast-0d-left", (), (4,)), ("size0", (0, 3), (1, 3)), ("size1", (1, 5), (1, 1)),
              ("257", (257,), (257,))]
    for nm, sx, sy in shapes:
        x, _ = _binary_data(op, sx, d)
        _, y = _binary_data(op, sy, d)
        _add(op, nm, fn, ref, [x, y], d)
    x, y = _binary_data(op, (4, 3), d)
    _add(op, "transposed", lambda x, y: bind(op, [x.T, y]), lambda x, y: ref(x.T, y),
         [x.T.copy(), y], d)
    x, y = _binary_data(op, (6, 4), d)
    _add(op, "strided-bcast", lambda x, y: bind(op, [x[::2], y[1]]),
         lambda x, y: ref(x[::2], y[1]), [x, y], d)
    if special:
        vals = _FLOAT_SPECIAL if np.dtype(d).kind == "f" else _INT_SPECIAL
        _add(op, "edges", fn, ref, list(_grid(vals, d)), d)


for _op, _f, _dts in [(OpKind.Add, np.add, NUMERIC), (OpKind.Sub, np.subtract, NUMERIC),
                      (OpKind.Mul, np.multiply, NUMERIC), (OpKind.Div, np.divide, FLOATS),
                      (OpKind.Maximum, np.maximum, NUMERIC), (OpKind.Minimum, np.minimum, NUMERIC)]:
    for _d in _dts:
        _binary_cases(_op, _f, _d)

# Maximum / Minimum on bool are logical or / and
for _op, _f in [(OpKind.Maximum, np.logical_or), (OpKind.Minimum, np.logical_and)]:
    _add(_op, "bcast-3x1x4-5x1", lambda x, y, op=_op: bind(op, [x, y]), _f,
         [rand((3, 1, 4), BOOL), rand((5, 1), BOOL)], BOOL)
    _add(_op, "transposed", lambda x, y, op=_op: bind(op, [x.T, y]), lambda x, y, f=_f: f(x.T, y),
         [rand((4, 3), BOOL), rand((3, 4), BOOL)], BOOL)
    _add(_op, "size0", lambda x, y, op=_op: bind(op, [x, y]), _f,
         [rand((0, 2), BOOL), rand((2,), BOOL)], BOOL)
    _add(_op, "all-pairs", lambda x, y, op=_op: bind(op, [x, y]), _f,
         [np.array([False, False, True, True]), np.array([False, True, False, True])], BOOL)

# Pow: C99/NumPy special cases, negative bases with integral exponents, and the whole range
_POW_SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 2.5, -2.5, 1e10, 1e-10,
                INF, -INF, NAN]
for _d in FLOATS:
    _binary_cases(OpKind.Pow, np.power, _d, special=False)
    _pw = lambda x, y: bind(OpKind.Pow, [x, y])
    _add(OpKind.Pow, "edges", _pw, _rounded(np.power, _d), list(_grid(_POW_SPECIAL, _d)), _d)
    _add(OpKind.Pow, "negative-base-int-exponent", _pw, _rounded(np.power, _d),
         [-rand((300,), _d, 0.2, 4), RNG.integers(-25, 26, 300).astype(_d)], _d)
    # x^y = exp(y log x) with |y log x| up to the overflow threshold: log's error is
    # multiplied by |y log x|, so this needs the extended-precision log
    _lim = 85.0 if _d is F32 else 700.0
    _a = _logu(1e-30, 1e30, 2000, np.float64, signed=False)
    _b = RNG.uniform(-_lim, _lim, 2000) / np.log(_a)
    _add(OpKind.Pow, "wide", _pw, _rounded(np.power, _d), [_a.astype(_d), _b.astype(_d)], _d,
         rtol=tol(_d)[0], atol=0.0)



def _int_pow_ref(x, y):
    """NumPy's int32 power (wrapping), and the operator's value for y < 0."""
    x, y = np.broadcast_arrays(np.asarray(x, np.int32), np.asarray(y, np.int32))
    with np.errstate(all="ignore"):
        out = np.power(x, np.maximum(y, 0)).astype(np.int32)
    neg = np.where(x == 1, 1, np.where(x == -1, np.where(y % 2 == 1, -1, 1), 0)).astype(np.int32)
    return np.where(y < 0, neg, out)


_ipw = lambda x, y: bind(OpKind.Pow, [x, y])
_add(OpKind.Pow, "int-exact", _ipw, _int_pow_ref,
     [RNG.integers(-12, 13, 400).astype(np.int32), RNG.integers(0, 9, 400).astype(np.int32)],
     np.int32, exact=True)
_add(OpKind.Pow, "int-wraps", _ipw, _int_pow_ref,
     [RNG.integers(-2**31, 2**31 - 1, 300).astype(np.int32), RNG.integers(0, 70, 300).astype(np.int32)],
     np.int32, exact=True)
_add(OpKind.Pow, "int-edges", _ipw, _int_pow_ref,
     list(_grid([0, 1, -1, 2, -2, 3, 46341, -2147483647, 31, 32, -3, -2147483648], np.int32)),
     np.int32, exact=True)
_add(OpKind.Pow, "int-bcast", _ipw, _int_pow_ref,
     [RNG.integers(-5, 6, (3, 1)).astype(np.int32), np.arange(5, dtype=np.int32)], np.int32, exact=True)

# --------------------------------------------------------------------------- Where
for _d in ALL:
    _w = lambda c, x, y: bind(OpKind.Where, [c, x, y])
    _add(OpKind.Where, "bcast", _w, np.where,
         [rand((3, 1), BOOL), rand((1, 4), _d), rand((3, 4), _d)], _d)
    _add(OpKind.Where, "0d-cond", _w, np.where, [np.array(True), rand((2, 3), _d), rand((3,), _d)], _d)
    _add(OpKind.Where, "transposed", lambda c, x, y: bind(OpKind.Where, [c.T, x, y[::2]]),
         lambda c, x, y: np.where(c.T, x, y[::2]),
         [rand((4, 3), BOOL), rand((3, 4), _d), rand((6, 4), _d)], _d)
    _add(OpKind.Where, "size0", _w, np.where,
         [rand((0, 1), BOOL), rand((1, 3), _d), rand((3,), _d)], _d)
    _add(OpKind.Where, "edges", _w, np.where,
         [np.array([True, False, True, False, True, False, True]), _EDGE_DATA[_d][:1].repeat(7),
          np.resize(_EDGE_DATA[_d], 7)], _d)

# --------------------------------------------------------------------------- comparisons


def _ties(shape, d):
    """Small integers in dtype d, so that equal pairs are common."""
    return rand(shape, d, -2, 2) if np.dtype(d) == BOOL else rand(shape, I32, -2, 2).astype(d)


for _op, _f, _dts in [(OpKind.Equal, np.equal, ALL), (OpKind.NotEqual, np.not_equal, ALL),
                      (OpKind.Less, np.less, NUMERIC), (OpKind.LessEqual, np.less_equal, NUMERIC),
                      (OpKind.Greater, np.greater, NUMERIC),
                      (OpKind.GreaterEqual, np.greater_equal, NUMERIC)]:
    for _d in _dts:
        _c = (lambda op: lambda x, y: bind(op, [x, y]))(_op)
        _add(_op, "bcast-3x1x4-5x1", _c, _f, [_ties((3, 1, 4), _d), _ties((5, 1), _d)], _d)
        _add(_op, "transposed", (lambda op: lambda x, y: bind(op, [x.T, y[::2]]))(_op),
             (lambda f: lambda x, y: f(x.T, y[::2]))(_f), [_ties((4, 3), _d), _ties((6, 4), _d)], _d)
        _add(_op, "bcast-0d", _c, _f, [_ties((), _d), _ties((2, 5), _d)], _d)
        _add(_op, "size0", _c, _f, [_ties((3, 0), _d), _ties((1, 1), _d)], _d)
        if np.dtype(_d).kind == "f":
            # nan compares false (not-equal true); -0 == 0; infinities order
            _add(_op, "edges", _c, _f, list(_grid(_FLOAT_SPECIAL, _d)), _d)
        elif _d is I32:
            _add(_op, "edges", _c, _f, list(_grid(_INT_SPECIAL, _d)), _d)

# --------------------------------------------------------------------------- Full


def _full_case(shape, value, d):
    name = f"{value!r}-{'x'.join(map(str, shape)) or '0d'}"
    _add(OpKind.Full, name, lambda: bind(OpKind.Full, [], shape=shape, dtype=np.dtype(d), value=value),
         lambda: np.full(shape, value, dtype=d), [], d, exact=True)


# exact bits: float32(0.1), negative zero, inf/nan, subnormals, the int32 extremes
_FULL_VALUES = {F32: [0.1, -0.0, INF, NAN, 3e38, 1e-40], F64: [0.1, -1e-310, 1e308, NAN],
                I32: [-7, 2147483647, -2147483648], BOOL: [True, False]}
for _d, _vals in _FULL_VALUES.items():
    for _shape in [(2, 3), (), (0, 4), (300,)]:
        _full_case(_shape, _vals[0], _d)
    for _v in _vals[1:]:
        _full_case((2, 3), _v, _d)

# --------------------------------------------------------------------------- Arange


def _arange_case(n, start, step, d):
    def ref():
        # the kernel computes start + step * i in the output dtype
        return (np.asarray(start, d) + np.asarray(step, d) * np.arange(n).astype(d)).astype(d)
    _add(OpKind.Arange, f"n{n}-start{start}-step{step}",
         lambda: bind(OpKind.Arange, [], n=n, start=start, step=step, dtype=np.dtype(d)), ref, [], d)


for _d, _params in {I32: [(10, -3, 2), (0, 0, 1), (1, 5, -1), (300, 100, -3)],
                    F32: [(7, 0.5, 0.1), (0, 0.0, 1.0), (300, -1.25, 0.01), (5, 3.0, -0.75)],
                    F64: [(7, 0.5, 0.1), (0, 0.0, 1.0), (300, -1.25, 0.01), (5, 3.0, -0.75)]}.items():
    for _n, _start, _step in _params:
        _arange_case(_n, _start, _step, _d)

# --------------------------------------------------------------------------- bitwise
# int32 over the whole range (the sign bit included) and bool as 0/1 words; shift counts
# outside [0, 32) get NumPy's int32 answers (0, or the sign for a right shift)
_INT_BITS = [0, 1, -1, 6, -8, 0x55555555, -0x55555556, 2147483647, -2147483648]
_COUNTS = [0, 1, 2, 30, 31, 32, 33, 100, -1, -31, -32, -2147483648, 2147483647]
for _op, _f in [(OpKind.BitwiseAnd, np.bitwise_and), (OpKind.BitwiseOr, np.bitwise_or),
                (OpKind.BitwiseXor, np.bitwise_xor)]:
    _c = (lambda op: lambda x, y: bind(op, [x, y]))(_op)
    for _nm, _sx, _sy in [("bcast-3x1x4-5x1", (3, 1, 4), (5, 1)), ("0d-left", (), (4,)),
                          ("size0", (0, 3), (1, 3)), ("257", (257,), (257,))]:
        _add(_op, _nm, _c, _f, [rand(_sx, I32, -2**31, 2**31 - 1), rand(_sy, I32, -2**31, 2**31 - 1)],
             I32, exact=True)
    _add(_op, "transposed", (lambda op: lambda x, y: bind(op, [x.T, y[::2]]))(_op),
         (lambda f: lambda x, y: f(x.T, y[::2]))(_f),
         [rand((4, 3), I32, -100, 100), rand((6, 4), I32, -100, 100)], I32, exact=True)
    _add(_op, "edges", _c, _f, list(_grid(_INT_BITS, I32)), I32, exact=True)
    _add(_op, "all-pairs", _c, _f,
         [np.array([False, False, True, True]), np.array([False, True, False, True])], BOOL, exact=True)
    _add(_op, "bcast", _c, _f, [rand((3, 1, 4), BOOL), rand((5, 1), BOOL)], BOOL, exact=True)
for _op, _f in [(OpKind.ShiftLeft, np.left_shift), (OpKind.ShiftRight, np.right_shift)]:
    _c = (lambda op: lambda x, y: bind(op, [x, y]))(_op)
    _x, _y = np.meshgrid(np.array(_INT_BITS, I32), np.array(_COUNTS, I32), indexing="ij")
    _add(_op, "edges", _c, _f, [_x.ravel(), _y.ravel()], I32, exact=True)
    _add(_op, "bcast-3x1x4-5x1", _c, _f, [rand((3, 1, 4), I32, -2**31, 2**31 - 1),
                                         rand((5, 1), I32, -3, 40)], I32, exact=True)
    _add(_op, "transposed", (lambda op: lambda x, y: bind(op, [x.T, y]))(_op),
         (lambda f: lambda x, y: f(x.T, y))(_f), [rand((4, 3), I32, -1000, 1000), rand((3, 4), I32, 0, 31)],
         I32, exact=True)
    _add(_op, "size0", _c, _f, [rand((0, 2), I32), rand((2,), I32)], I32, exact=True)
_bn = lambda x: bind(OpKind.BitwiseNot, [x])
_add(OpKind.BitwiseNot, "edges", _bn, np.invert, [np.array(_INT_BITS, I32)], I32, exact=True)
_add(OpKind.BitwiseNot, "transposed", lambda x: _bn(x.T), lambda x: np.invert(x.T),
     [rand((4, 3), I32, -2**31, 2**31 - 1)], I32, exact=True)
_add(OpKind.BitwiseNot, "size0", _bn, np.invert, [rand((0, 3), I32)], I32, exact=True)
_add(OpKind.BitwiseNot, "values", _bn, np.invert, [np.array([True, False, True])], BOOL, exact=True)
_add(OpKind.BitwiseNot, "strided", lambda x: _bn(x[::2]), lambda x: np.invert(x[::2]),
     [rand((9, 3), BOOL)], BOOL, exact=True)

# comparisons on bool order False < True (as NumPy)
for _op, _f in [(OpKind.Less, np.less), (OpKind.LessEqual, np.less_equal),
                (OpKind.Greater, np.greater), (OpKind.GreaterEqual, np.greater_equal)]:
    _c = (lambda op: lambda x, y: bind(op, [x, y]))(_op)
    _add(_op, "all-pairs", _c, _f,
         [np.array([False, False, True, True]), np.array([False, True, False, True])], BOOL)
    _add(_op, "bcast-3x1x4-5x1", _c, _f, [rand((3, 1, 4), BOOL), rand((5, 1), BOOL)], BOOL)

# --------------------------------------------------------------------------- IntegerPow
# x ** n against NumPy's power: 1 and 2 exactly (one rounding, as the oracle's), longer
# chains within a few roundings; the specials at 0, -0, +-inf and nan are C's pow (and
# sqrt's for 0.5, which is what NumPy's power gives there)
_IPOW_SPECIAL = [0.0, -0.0, 1.0, -1.0, 3.0, -3.0, 0.5, -0.75, 1e10, 1e-10, INF, -INF, NAN]


def _ipow(e):
    return lambda x: bind(OpKind.IntegerPow, [x], exponent=e)


def _ipow_ref(e, d):
    return _rounded(lambda x: np.power(x, e), d)


for _d in FLOATS:
    for _e in (1, 2):
        _add(OpKind.IntegerPow, f"exact-{_e}", _ipow(_e), _ipow_ref(_e, _d), [rand((300,), _d, -1e3, 1e3)],
             _d, exact=True)
    for _e in (0, 1, 2, 3, 4, 7, 10, 31, -1, -2, -3, -7, 0.5, 1.5, 2.5, -0.5, -1.5, -3.5):
        _add(OpKind.IntegerPow, f"edges-{_e}", _ipow(_e), _ipow_ref(_e, _d), [_arr(_IPOW_SPECIAL, _d)], _d)
        _add(OpKind.IntegerPow, f"random-{_e}", _ipow(_e), _ipow_ref(_e, _d), [rand((3, 1, 5), _d, -3, 3)], _d)
    _add(OpKind.IntegerPow, "transposed", lambda x: _ipow(3)(x.T), lambda x, r=_ipow_ref(3, _d): r(x.T),
         [rand((4, 6), _d)], _d)
    _add(OpKind.IntegerPow, "strided-half", lambda x: _ipow(-2.5)(x[::2]),
         lambda x, r=_ipow_ref(-2.5, _d): r(x[::2]), [rand((9, 3), _d, 0.1, 4)], _d)
    _add(OpKind.IntegerPow, "size0", _ipow(5), _ipow_ref(5, _d), [rand((0, 3), _d)], _d)
    _add(OpKind.IntegerPow, "0d", _ipow(-1), _ipow_ref(-1, _d), [rand((), _d, 0.5, 2)], _d)
    # a long chain: about log2(n) squarings, each doubling the relative error (n ulp at most)
    _add(OpKind.IntegerPow, "long-chain-100", _ipow(100), _ipow_ref(100, _d),
         [_unif(0.5, 2.0, 500, _d)], _d, rtol=100 * np.finfo(_d).eps, atol=0.0)
for _e in (0, 1, 2, 3, 5, 13, 31, 32):
    # int32 wraps on overflow as NumPy's does
    _add(OpKind.IntegerPow, f"int-{_e}", _ipow(_e), lambda x, e=_e: np.power(x, e),
         [np.array(_INT_SPECIAL + [-2, 3, -5, 100, 65536], I32)], I32, exact=True)
_add(OpKind.IntegerPow, "int-transposed", lambda x: _ipow(3)(x.T), lambda x: np.power(x.T, 3),
     [rand((4, 6), I32, -1000, 1000)], I32, exact=True)

# --------------------------------------------------------------------------- FloorDivide, Remainder
# NumPy's integer division: floor, the remainder takes the divisor's sign, x // 0 and x % 0
# are 0, INT_MIN // -1 wraps
_DIV_INTS = [0, 1, -1, 2, -2, 3, -3, 7, -7, 2147483647, -2147483647, -2147483648]
for _op, _f in [(OpKind.FloorDivide, np.floor_divide), (OpKind.Remainder, np.remainder)]:
    _c = (lambda op: lambda x, y: bind(op, [x, y]))(_op)
    _ref = (lambda f: lambda x, y: _rounded(f, I32)(x, y))(_f)
    _add(_op, "edges", _c, _ref, list(_grid(_DIV_INTS, I32)), I32, exact=True)
    _add(_op, "bcast-3x1x4-5x1", _c, _ref, [rand((3, 1, 4), I32, -100, 100), rand((5, 1), I32, -9, 9)],
         I32, exact=True)
    _add(_op, "transposed", (lambda op: lambda x, y: bind(op, [x.T, y[::2]]))(_op),
         (lambda r: lambda x, y: r(x.T, y[::2]))(_ref),
         [rand((4, 3), I32, -2**31, 2**31 - 1), rand((6, 4), I32, -2**31, 2**31 - 1)], I32, exact=True)
    _add(_op, "size0", _c, _ref, [rand((0, 3), I32), rand((3,), I32)], I32, exact=True)

# floats: NumPy's divmod over an exact fmod (quotients up to 2^277 in float32), inf, nan and
# the signs of zeros; the oracle is NumPy in the case's own dtype (its fmod is exact too)
_DIV_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.1, -0.3, 2.5, 7.0, -7.0, 1e-30, 3e38, -3e38, INF, -INF, NAN]
for _op, _f in [(OpKind.FloorDivide, np.floor_divide), (OpKind.Remainder, np.remainder)]:
    _c = (lambda op: lambda x, y: bind(op, [x, y]))(_op)
    for _d in FLOATS:
        _ref = (lambda f, d: lambda x, y: _rounded(f, d)(x.astype(d), y.astype(d)))(_f, _d)
        _add(_op, "edges", _c, _ref, list(_grid(_DIV_FLOATS, _d)), _d, exact=True)
        _add(_op, "bcast-3x1x4-5x1", _c, _ref, [rand((3, 1, 4), _d, -20, 20), rand((5, 1), _d, -3, 3)],
             _d, exact=True)
        _add(_op, "transposed", (lambda op: lambda x, y: bind(op, [x.T, y[::2]]))(_op),
             (lambda r: lambda x, y: r(x.T, y[::2]))(_ref), [rand((4, 3), _d), rand((6, 4), _d)], _d, exact=True)
        _big = 1e30 if _d is F32 else 1e300
        _add(_op, "wide", _c, _ref, [_logu(1e-30, _big, 500, _d), _logu(1e-30, _big, 500, _d)], _d, exact=True)
        _add(_op, "size0", _c, _ref, [rand((0, 3), _d), rand((3,), _d)], _d, exact=True)

# --------------------------------------------------------------------------- Atan2
# C99's quadrants and signed zeros on every pair of edge values (the oracle in the case's
# own dtype, which NumPy computes exactly enough to compare signs), and magnitudes over
# 60 decades with every sign combination at a tolerance of 3 ulp (float32: Vulkan lets a device's
# float32 division be 2.5 ulp off, and NVIDIA's is) / 2e-16 (float64), rounded results that
# underflow to subnormals within a few of the smallest steps
_ATAN2_SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 1e-30, -1e-30, 3e38, -3e38, INF, -INF, NAN]
_at2 = lambda y, x: bind(OpKind.Atan2, [y, x])
for _d in FLOATS:
    _binary_cases(OpKind.Atan2, np.arctan2, _d, special=False)
    _add(OpKind.Atan2, "edges", _at2, _rounded(np.arctan2, _d), list(_grid(_ATAN2_SPECIAL, _d)), _d,
         rtol=3.6e-7 if _d is F32 else 2.3e-16, atol=0.0)
    _add(OpKind.Atan2, "wide", _at2, _rounded(lambda y, x: np.arctan2(y.astype(F64), x.astype(F64)), _d),
         [_logu(1e-30, 1e30, 3000, _d), _logu(1e-30, 1e30, 3000, _d)], _d,
         rtol=3.6e-7 if _d is F32 else 2.3e-16, atol=3e-45 if _d is F32 else 1e-322)
    _add(OpKind.Atan2, "unit-box", _at2, _rounded(lambda y, x: np.arctan2(y.astype(F64), x.astype(F64)), _d),
         [rand((3000,), _d, -3, 3), rand((3000,), _d, -3, 3)], _d,
         rtol=3.6e-7 if _d is F32 else 2.3e-16, atol=0.0)

# --------------------------------------------------------------------------- Gcd
# signs, zeros, INT_MIN (whose magnitude wraps, as NumPy's) and consecutive Fibonacci
# numbers (Euclid's longest chains on int32)
_GCD_INTS = [0, 1, -1, 6, -4, 12, -18, 2147483647, -2147483648, 46368, 28657, 1836311903, 1134903170]
_gcd = lambda x, y: bind(OpKind.Gcd, [x, y])
_add(OpKind.Gcd, "edges", _gcd, np.gcd, list(_grid(_GCD_INTS, I32)), I32, exact=True)
_add(OpKind.Gcd, "bcast-3x1x4-5x1", _gcd, np.gcd, [rand((3, 1, 4), I32, -1000, 1000), rand((5, 1), I32, -60, 60)],
     I32, exact=True)
_add(OpKind.Gcd, "transposed", lambda x, y: _gcd(x.T, y[::2]), lambda x, y: np.gcd(x.T, y[::2]),
     [rand((4, 3), I32, -2**31, 2**31 - 1), rand((6, 4), I32, -2**31, 2**31 - 1)], I32, exact=True)
_add(OpKind.Gcd, "size0", _gcd, np.gcd, [rand((0, 3), I32), rand((3,), I32)], I32, exact=True)
