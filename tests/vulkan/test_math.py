"""Accuracy of the shader math library (vkml/vulkan/shaders/math32.glsl and math64.glsl).

Each function is swept over 10^5 points spanning its finite range, in float32 and float64,
and the largest error, in ulp of the result's dtype, must stay under a tight bound (the
measured maximum plus a little room). The oracle is NumPy in x86 80-bit long double where
that exists (its own error is ~1/2000 ulp of a double), else float64 with one ulp more room;
erf/erfc use math.erf/erfc (glibc, < 1 ulp). float64 matters most: gradient checks take
central differences in float64, so a function that is only float32-accurate there turns
into a gradient error of ~1e-8 instead of ~1e-11.

Also checked: the inf/nan/signed-zero/subnormal cases against NumPy, pow's C99 table,
sin/cos at the arguments hardest for range reduction, and that the float32 library never
needs float64 (devices without shaderFloat64 must still compile every float kernel).
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from tests.ops.cases import flush32, flushes_subnormals
import pytest

import vkml.numpy as vnp
from vkml.array import bind
from vkml.trace.ops import OpKind
from vkml.vulkan.lower.elementwise import SHADERS

F32, F64 = np.float32, np.float64
N = 100_000
_LD = np.longdouble if np.finfo(np.longdouble).nmant >= 63 else np.float64
_ORACLE_SLACK = 0.0 if _LD is not np.float64 else 1.0    # ulp, when the oracle is float64

_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _run(op, *xs):
    return np.asarray(bind(op, [vnp.asarray(x) for x in xs]))


def _ulps(got, want, dtype):
    """|got - want| in units of the spacing of dtype at want (want in higher precision)."""
    wd = want.astype(dtype)
    sp = np.spacing(np.abs(wd)).astype(want.dtype)
    return np.abs(got.astype(want.dtype) - want) / sp


def _rng(seed):
    return np.random.default_rng(seed)


def _logu(r, lo, hi, n, signed=True):
    x = np.exp(r.uniform(math.log(lo), math.log(hi), n))
    return x * r.choice([-1.0, 1.0], n) if signed else x


# name -> (op, oracle on long double (or float64), {dtype: generator(rng, n)}, {dtype: max ulp})
_SWEEPS = {
    "exp": (OpKind.Exp, np.exp,
            {F32: lambda r, n: r.uniform(-87.3, 88.7, n), F64: lambda r, n: r.uniform(-708.3, 709.7, n)},
            {F32: 2.0, F64: 2.0}),
    "log": (OpKind.Log, np.log,
            {F32: lambda r, n: _logu(r, 1.2e-38, 3.4e38, n, False),
             F64: lambda r, n: _logu(r, 2.3e-308, 1.7e308, n, False)},
            {F32: 1.0, F64: 1.0}),
    "log-near-1": (OpKind.Log, np.log, {F32: lambda r, n: r.uniform(0.5, 2.0, n),
                                        F64: lambda r, n: r.uniform(0.5, 2.0, n)},
                   {F32: 1.0, F64: 1.0}),
    "log1p": (OpKind.Log1p, np.log1p,
              {d: (lambda r, n, big=big: np.concatenate([_logu(r, 1e-30, 0.999, n // 2),
                                                        _logu(r, 1e-3, big, n - n // 2, False)]))
               for d, big in ((F32, 3e38), (F64, 1e308))},
              {F32: 1.5, F64: 1.5}),
    "expm1": (OpKind.Expm1, np.expm1,
              {d: (lambda r, n, hi=hi: np.concatenate([_logu(r, 1e-30, 1.0, n // 2),
                                                      r.uniform(-60.0, hi, n - n // 2)]))
               for d, hi in ((F32, 88.7), (F64, 709.7))},
              {F32: 2.0, F64: 2.5}),
    "sin": (OpKind.Sin, np.sin,
            {F32: lambda r, n: r.uniform(-10, 10, n), F64: lambda r, n: r.uniform(-10, 10, n)},
            {F32: 1.5, F64: 1.5}),
    "sin-huge": (OpKind.Sin, np.sin,
                 {F32: lambda r, n: _logu(r, 1e-20, 3.4e38, n),
                  F64: lambda r, n: _logu(r, 1e-20, 1.7e308, n)},
                 {F32: 1.5, F64: 1.5}),
    "cos": (OpKind.Cos, np.cos,
            {F32: lambda r, n: r.uniform(-10, 10, n), F64: lambda r, n: r.uniform(-10, 10, n)},
            {F32: 1.5, F64: 1.5}),
    "cos-huge": (OpKind.Cos, np.cos,
                 {F32: lambda r, n: _logu(r, 1e-20, 3.4e38, n),
                  F64: lambda r, n: _logu(r, 1e-20, 1.7e308, n)},
                 {F32: 1.5, F64: 1.5}),
    "tanh": (OpKind.Tanh, np.tanh,
             {F32: lambda r, n: _logu(r, 1e-30, 30.0, n), F64: lambda r, n: _logu(r, 1e-30, 30.0, n)},
             {F32: 3.0, F64: 3.0}),
    "sigmoid": (OpKind.Sigmoid, lambda x: 1 / (1 + np.exp(-x)),
                {F32: lambda r, n: r.uniform(-87.0, 88.0, n), F64: lambda r, n: r.uniform(-708.0, 708.0, n)},
                {F32: 3.0, F64: 3.0}),
    "erf": (OpKind.Erf, _erf,
            {F32: lambda r, n: _logu(r, 1e-30, 6.0, n), F64: lambda r, n: _logu(r, 1e-30, 6.0, n)},
            {F32: 2.5, F64: 3.0}),
    # every float32 checked (bench-style, outside the suite): erf 2.01 ulp at most (0.7835,
    # past the series seam), erfc 6.04 (7.8226: the Chebyshev sum's rounding, in exp's
    # argument, is relative error there)
    "erfc": (OpKind.Erfc, _erfc,
             {F32: lambda r, n: r.uniform(-6.0, 9.1, n), F64: lambda r, n: r.uniform(-6.0, 26.5, n)},
             {F32: 6.5, F64: 7.0}),
}


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(_SWEEPS))
def test_sweep(name, dtype):
    op, oracle, gens, bounds = _SWEEPS[name]
    x = gens[dtype](_rng(sum(map(ord, name))), N).astype(dtype)
    got = _run(op, x)
    oracle_in = x.astype(np.float64) if op in (OpKind.Erf, OpKind.Erfc) else x.astype(_LD)
    with np.errstate(all="ignore"):
        want = np.asarray(oracle(oracle_in)).astype(_LD)
    tiny = np.finfo(dtype).tiny
    # the ranges keep results normal; subnormal results are checked in test_special_values
    ok = np.isfinite(want.astype(dtype)) & (np.abs(want) >= tiny)
    assert ok.mean() > 0.99, f"{name}: sweep range produces too many non-normal results"
    err = _ulps(got[ok], want[ok], dtype)
    i = int(np.argmax(err))
    bound = bounds[dtype] + (_ORACLE_SLACK if dtype is F64 else 0.0)
    assert err[i] <= bound, (f"{name} {np.dtype(dtype).name}: {float(err[i]):.2f} ulp at x={x[ok][i]!r}: "
                             f"got {got[ok][i]!r}, want {want[ok][i]!r} (bound {bound} ulp)")


# Where the float32 formulas change (math32.glsl computes both sides and selects, or the
# reduction's k steps, or x is clamped): every float within 4000 of each point, held to the
# sweep's bound. Random sweeps hit such seams only by chance.
_SEAMS32 = {
    "exp": [-103.97, -87.34, -0.3466, 0.3466, 88.72],          # subnormal / normal, k = 0, overflow
    "expm1": [-17.67, -17.33, -1.0397, -0.3466, 0.3466, 1.0397, 16.64, 16.98, 88.72],
    "tanh": [0.1733, 0.52, 0.55, 8.49, 8.84, 9.01, 9.1],      # polynomial / exp, k steps, clamp
    "log": [0.70710677, 1.4142135],                             # m's range [sqrt(1/2), sqrt(2))
    # x itself / 1 + x rounded, u = 1 + x at sqrt(1/2) and sqrt(2), log1p(x) = x below 2^-25
    "log1p": [-0.5, -0.2928932, -0.29, 0.29, 0.41421357, -2.9802322e-08, 2.9802322e-08],
    "erf": [-0.75, 0.75],                                       # series / 1 - erfc
    "erfc": [-0.5, 0.5, -10.1, 10.1],                           # 1 - series / Chebyshev, clamp
}


@pytest.mark.parametrize("name", list(_SEAMS32))
def test_float32_seams(name):
    op, oracle, _, bounds = _SWEEPS[name]
    c = np.array(_SEAMS32[name], F32).view(np.int32)
    x = (c[:, None] + np.arange(-4000, 4000, dtype=np.int32)).ravel().view(F32)
    got = _run(op, x)
    with np.errstate(all="ignore"):
        want = np.asarray(oracle(x.astype(_LD))).astype(_LD)
        ok = np.isfinite(want.astype(F32))
    assert (np.isinf(got) == ~ok).all(), f"{name}: overflow threshold moved"
    if flushes_subnormals():                # NVIDIA: subnormal results may come back as 0
        ok &= np.abs(want) >= np.finfo(F32).tiny
    err = _ulps(got[ok], want[ok], F32)     # subnormal results in units of the smallest one
    i = int(np.argmax(err))
    assert err[i] <= bounds[F32], (f"{name} float32: {float(err[i]):.2f} ulp at x={x[ok][i]!r}: "
                                   f"got {got[ok][i]!r}, want {want[ok][i]!r}")


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
def test_pow_sweep(dtype):
    """x^y over the whole range of results: exp(y log x) magnifies log's error by |y log x|
    (up to ~700), which is why log is carried in double-double (float-float)."""
    r = _rng(7)
    lim = 87.0 if dtype is F32 else 708.0
    a = _logu(r, 1e-300 if dtype is F64 else 1e-37, 1e300 if dtype is F64 else 1e37, N, False)
    b = r.uniform(-lim, lim, N) / np.log(a)
    # and negative bases with integral exponents (odd ones keep the sign)
    a2 = -np.exp(r.uniform(-5, 5, N // 4))
    b2 = r.integers(-40, 41, N // 4).astype(np.float64)
    A = np.concatenate([a, a2]).astype(dtype)
    B = np.concatenate([b, b2]).astype(dtype)
    got = _run(OpKind.Pow, A, B)
    with np.errstate(all="ignore"):
        want = np.power(A.astype(_LD), B.astype(_LD))
        ok = np.isfinite(want.astype(dtype)) & (np.abs(want) >= np.finfo(dtype).tiny)
    err = _ulps(got[ok], want[ok], dtype)
    i = int(np.argmax(err))
    bound = (3.5 if dtype is F32 else 2.0) + (_ORACLE_SLACK if dtype is F64 else 0.0)
    assert err[i] <= bound, f"pow: {float(err[i]):.2f} ulp at {A[ok][i]!r} ** {B[ok][i]!r}"


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("op", [OpKind.Sin, OpKind.Cos], ids=lambda o: o.value)
def test_sin_cos_near_multiples_of_half_pi(op, dtype):
    """The floats nearest k pi/2 leave the smallest reduced arguments, where any precision
    lost in the reduction shows up as relative error; the last two are the known hardest
    float64 and float32 arguments (|x - k pi/2| ~ 2^-61 and 2^-29 relative)."""
    k = np.concatenate([np.arange(1, 20001), np.round(np.logspace(5, 15, 2000))])
    x = (k * (np.pi / 2)).astype(dtype)
    with np.errstate(over="ignore"):     # the float64 case overflows float32 (to inf, dropped)
        x = np.concatenate([x, np.nextafter(x, np.inf), np.nextafter(x, -np.inf),
                            np.array([6381956970095103 * 2.0 ** 797, 16367173 * 2.0 ** 72])]).astype(dtype)
    x = x[np.isfinite(x)]
    got = _run(op, x)
    want = (np.sin if op is OpKind.Sin else np.cos)(x.astype(_LD))
    ok = np.abs(want) >= np.finfo(dtype).tiny
    err = _ulps(got[ok], want[ok], dtype)
    i = int(np.argmax(err))
    assert err[i] <= 1.5 + (_ORACLE_SLACK if dtype is F64 else 0.0), \
        f"{op.value}({x[ok][i]!r}) = {got[ok][i]!r}, want {want[ok][i]!r}: {float(err[i]):.2f} ulp"


def _same(got, want):
    """Equal as IEEE values: nan matches nan, zeros must agree in sign, finite values to 4 eps."""
    eps = np.finfo(got.dtype).eps
    with np.errstate(all="ignore"):
        close = (got == want) | (np.abs(got - want) <= 4 * eps * np.abs(want))
    ok = np.where(np.isnan(want), np.isnan(got), close)
    return ok & np.where(want == 0, np.signbit(got) == np.signbit(want), True)


_UNARY_ORACLES = {
    OpKind.Exp: np.exp, OpKind.Log: np.log, OpKind.Log1p: np.log1p, OpKind.Expm1: np.expm1,
    OpKind.Sin: np.sin, OpKind.Cos: np.cos, OpKind.Tanh: np.tanh,
    OpKind.Sigmoid: lambda x: 1 / (1 + np.exp(-x)), OpKind.Erf: _erf, OpKind.Erfc: _erfc,
}


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("op", list(_UNARY_ORACLES), ids=lambda o: o.value)
def test_special_values(op, dtype):
    """inf, nan, signed zeros, subnormals and the largest finite values as NumPy has them.
    (lavapipe keeps subnormals; the library scales them instead of relying on it.)"""
    fi = np.finfo(dtype)
    x = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, fi.tiny, fi.tiny / 8, -fi.tiny / 8,
                  fi.smallest_subnormal, fi.max, -fi.max, fi.eps, 0.5, -0.5, 2.0, 1e-20, -1e-20, 100.0,
                  -100.0, 1000.0, -1000.0, np.pi / 4, np.pi / 2, np.pi, 3 * np.pi / 2], dtype)
    got = _run(op, x)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = np.asarray(_UNARY_ORACLES[op](x.astype(np.float64))).astype(dtype)
        ok = _same(got, want)
        if dtype == F32 and flushes_subnormals():
            # NVIDIA flushes float32 subnormals in arithmetic: they count as signed zeros
            xf = flush32(x)
            wf = flush32(np.asarray(_UNARY_ORACLES[op](xf.astype(np.float64))).astype(dtype))
            ok |= _same(got, wf) | _same(got, flush32(want))
            # on such a device a subnormal input's result is not specified (Vulkan leaves
            # denormal handling to the implementation unless float controls are enabled)
            ok |= (x != 0) & (np.abs(x) < np.finfo(F32).tiny)
    assert ok.all(), [(x[i], got[i], want[i]) for i in np.nonzero(~ok)[0]]


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
def test_pow_special_values(dtype):
    """C99 / NumPy pow: x^0 = 1^y = 1 even for nan; signed zeros and infinities; a negative
    base needs an integral exponent, and odd exponents keep its sign."""
    v = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, np.inf, -np.inf, np.nan,
                  2.5, -2.5, 1e10, -1e10, 1e-10, 2.0 ** 60, -(2.0 ** 60) - 2 ** 8], dtype)
    a, b = (m.ravel() for m in np.meshgrid(v, v, indexing="ij"))
    got = _run(OpKind.Pow, a, b)
    with np.errstate(all="ignore"):
        want = np.power(a.astype(np.float64), b.astype(np.float64)).astype(dtype)
    ok = _same(got, want) & np.where(np.isinf(want), np.signbit(got) == np.signbit(want), True)
    assert ok.all(), [(a[i], b[i], got[i], want[i]) for i in np.nonzero(~ok)[0]]


def test_float32_library_needs_no_float64():
    """Float kernels include only math32.glsl; it must not use double or 64-bit integers."""
    src = (SHADERS / "math32.glsl").read_text()
    code = "\n".join(line.split("//")[0] for line in src.splitlines())
    for word in ("double", "dvec", "int64", "uint64", "LF"):
        assert word not in code, f"math32.glsl uses {word}"
