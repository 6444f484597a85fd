"""vkml.numpy's rounding and math compositions (issue 17) against NumPy float64.

Random data plus special values (nan, +-inf, +-0, huge and tiny) in float32 and float64;
dtype classes and 0-d/size-0 shapes are in tests/test_numpy_classes.py, kernel cases of
Floor/Ceil/Trunc/Rint in tests/ops/cases_elementwise.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.test_util import check_grads

from tests.ops.cases import flushes_subnormals

F32, F64, I32, B = np.float32, np.float64, np.int32, np.bool_
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-300, 1e30, -3e38, 1e300, 0.5, -0.5,
           1.5, -2.5, 1.0, -1.0, 3.0, 700.0, -710.0, 88.0, 1e-20]


def values(d, n=300, seed=17):
    """SPECIAL and 2n random values of d; the same for every test whatever ran before it
    (the workers of a parallel run take the tests in any order)."""
    R = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        return np.concatenate([np.asarray(SPECIAL).astype(d), R.normal(0, 3, n).astype(d),
                               (R.normal(0, 1, n) * 10.0 ** R.integers(-20, 20, n)).astype(d)])


def _subnormal32(a) -> np.ndarray:
    a = np.asarray(a)
    return (a.dtype == F32) & (a != 0) & (np.abs(a) < np.finfo(F32).tiny)


def judge(got, want, d, rtol=None, what="", atol=0.0, operands=()):
    """got (vkml) equals NumPy's float64 answer rounded to d, nan and the sign of 0 included.

    On a device that flushes float32 subnormals (NVIDIA; Vulkan leaves it to the device),
    elements with a subnormal operand or result are not judged."""
    g = np.asarray(got)
    assert g.dtype == np.dtype(d), (what, g.dtype, d)
    with np.errstate(all="ignore"):
        w = np.asarray(want).astype(d)
    skip = np.zeros(g.shape, bool)
    if flushes_subnormals():
        for a in tuple(operands) + ((w,) if w.dtype == F32 else ()):
            skip |= np.broadcast_to(_subnormal32(a), g.shape)
    if w.dtype.kind in "bi":
        np.testing.assert_array_equal(g[~skip], w[~skip], err_msg=what)
        return
    r = rtol if rtol is not None else (4e-15 if d == F64 else 4e-7)
    with np.errstate(invalid="ignore"):
        ok = skip | (g == w) | (np.isnan(g) & np.isnan(w)) | (np.abs(g - w) <= r * np.abs(w) + atol)
    bad = np.nonzero(~ok)
    assert ok.all(), f"{what}: got {g[bad][:5]}, NumPy {w[bad][:5]}"
    zero = (w == 0) & ~skip
    np.testing.assert_array_equal(np.signbit(g[zero]), np.signbit(w[zero]), err_msg=what + " (-0)")


EXACT_UNARY = {"floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "fix": np.fix,
               "rint": np.rint, "round": np.round, "around": np.around, "fabs": np.fabs,
               "isinf": np.isinf, "isposinf": np.isposinf, "isneginf": np.isneginf,
               "signbit": np.signbit, "positive": np.positive, "real": np.real,
               "imag": np.imag, "conj": np.conj}
APPROX_UNARY = {"deg2rad": (np.deg2rad, 2), "rad2deg": (np.rad2deg, 2),
                "log2": (np.log2, 4), "log10": (np.log10, 4), "exp2": (np.exp2, 4),
                "sinh": (np.sinh, 8), "cosh": (np.cosh, 8)}


@pytest.mark.parametrize("d", [F32, F64])
@pytest.mark.parametrize("name", sorted(EXACT_UNARY) + sorted(APPROX_UNARY))
def test_unary_values(name, d):
    x = values(d)
    if name in ("log2", "log10"):
        x = np.concatenate([x, np.abs(x), 2.0 ** np.arange(-20, 20).astype(d),
                            10.0 ** np.arange(-7, 8).astype(d)]).astype(d)
    f, ulps = (EXACT_UNARY[name], None) if name in EXACT_UNARY else APPROX_UNARY[name]
    with np.errstate(all="ignore"):
        want = f(x.astype(F64))
    rtol = None if ulps is None else ulps * np.finfo(d).eps
    out = B if np.asarray(want).dtype == B else d
    judge(getattr(vnp, name)(vnp.asarray(x)), want, out, rtol, f"{name}({np.dtype(d)})", operands=(x,))


BINARY = {"fmax": (np.fmax, 0), "fmin": (np.fmin, 0), "heaviside": (np.heaviside, 0),
          "copysign": (np.copysign, 0), "isclose": (np.isclose, 0),
          "float_power": (np.float_power, 8), "logaddexp": (np.logaddexp, 4),
          "logaddexp2": (np.logaddexp2, 4), "hypot": (np.hypot, 4)}


@pytest.mark.parametrize("d", [F32, F64])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_values_with_broadcasting(name, d):
    x = values(d, 40)
    y = values(d, 40, seed=18)[::-1][:, None]     # every special against every special, broadcast
    f, ulps = BINARY[name]
    if name == "float_power":
        x = np.abs(x)
    with np.errstate(all="ignore"):
        want = f(x.astype(F64), y.astype(F64))
    if name == "isclose":
        want = np.isclose(x, y)   # judged on the operands' own values
    got = getattr(vnp, name)(vnp.asarray(x), vnp.asarray(y))
    assert got.shape == want.shape
    # max + log1p(...) cancels where the answer is near 0: NumPy's own formula, whose
    # error is a few ulp of the larger operand
    scale = np.where(np.isfinite(x) & np.isfinite(y), np.maximum(np.abs(x), np.abs(y)), 0)
    atol = 4 * np.finfo(d).eps * scale if name.startswith("logaddexp") else 0.0
    judge(got, want, B if name == "isclose" else d,
          ulps * np.finfo(d).eps if ulps else 4 * np.finfo(d).eps, f"{name}({np.dtype(d)})", atol,
          operands=(x, y))


def test_isclose_options_and_infinities():
    a = vnp.asarray([1.0, np.inf, -np.inf, np.nan, 1.0, 0.0], F64)
    b = vnp.asarray([1.0 + 1e-6, np.inf, np.inf, np.nan, np.inf, 1e-9], F64)
    for kw in [{}, {"equal_nan": True}, {"rtol": 0.0, "atol": 0.0}, {"rtol": 1e-7}]:
        np.testing.assert_array_equal(np.asarray(vnp.isclose(a, b, **kw)),
                                      np.isclose(np.asarray(a), np.asarray(b), **kw), str(kw))


def test_signbit_and_copysign_of_negative_nan_documented():
    # no operator reads a nan's sign bit: signbit(-nan) is False (NumPy: True)
    assert not bool(vnp.signbit(vnp.asarray([-np.nan])).numpy()[0])


@pytest.mark.parametrize("d", [F32, F64])
def test_round_decimals(d):
    x = np.concatenate([values(d), np.array([1.25, 2.675, -0.125, 15.5, 1234.5678, -25.0], d)])
    for dec in [-3, -1, 0, 1, 2, 5]:
        with np.errstate(all="ignore"):
            want = np.round(x, dec)        # NumPy's own algorithm in d: same roundings
        judge(vnp.round(vnp.asarray(x), dec), want, d, 4 * np.finfo(d).eps, f"round {dec}")


def test_round_integers_and_bools():
    # (no overflowing answers: NumPy's, through float64, are INT_MIN there)
    x = np.array([15, 25, -35, -15, 5, 0, 44, 2147483044, -2147483044, 149, -150, 250, -2500,
                  1500, -500], I32)
    for dec in [-10, -9, -3, -2, -1, 0, 2]:
        judge(vnp.round(vnp.asarray(x), dec), np.round(x, dec), I32, what=f"int round {dec}")
    judge(vnp.round(vnp.asarray([True, False])), [1.0, 0.0], F32)
    for name in ("floor", "ceil", "trunc", "fix"):
        got = getattr(vnp, name)(vnp.asarray(x))
        assert got.dtype == I32 and np.array_equal(np.asarray(got), x)
        assert getattr(vnp, name)(vnp.asarray([True])).dtype == B
    assert vnp.rint(vnp.asarray(x[:3])).dtype == F32


def test_dtypes_of_integer_and_bool_inputs():
    i, b = vnp.asarray([1, -2], I32), vnp.asarray([True, False])
    for name in ("fabs", "deg2rad", "log2", "exp2", "sinh", "cosh", "rint"):
        assert getattr(vnp, name)(i).dtype == F32, name
        assert getattr(vnp, name)(b).dtype == F32, name
    for name in ("isinf", "isposinf", "isneginf", "signbit"):
        assert getattr(vnp, name)(i).dtype == B and getattr(vnp, name)(b).dtype == B
    np.testing.assert_array_equal(np.asarray(vnp.signbit(i)), [False, True])
    assert vnp.fmax(i, b).dtype == I32 and vnp.fmax(b, b).dtype == B
    for name in ("hypot", "logaddexp", "copysign", "heaviside", "float_power"):
        assert getattr(vnp, name)(i, i).dtype == F32, name
        assert getattr(vnp, name)(i, vnp.asarray([1.0], F64)).dtype == F64, name
    assert vnp.nan_to_num(i).dtype == I32 and vnp.imag(i).dtype == I32
    with pytest.raises(TypeError, match="positive"):
        vnp.positive(b)


@pytest.mark.parametrize("d", [F32, F64])
def test_nan_to_num(d):
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 1.5], d)
    judge(vnp.nan_to_num(vnp.asarray(x)), np.nan_to_num(x), d)
    judge(vnp.nan_to_num(vnp.asarray(x), nan=-1.0, posinf=7.0, neginf=-8.0),
          np.nan_to_num(x, nan=-1.0, posinf=7.0, neginf=-8.0), d)


def test_overflow_free_ranges():
    big = np.array([709.0, 710.0, -710.0, 711.0, 1e5], F64)
    with np.errstate(over="ignore"):   # NumPy's own overflow to inf at 1e5
        want_s, want_c = np.sinh(big), np.cosh(big)
    judge(vnp.sinh(vnp.asarray(big)), want_s, F64, 8e-16 * 8)
    judge(vnp.cosh(vnp.asarray(big)), want_c, F64, 8e-16 * 8)
    x = np.array([1e300, 1e-300, 3e-320, 0.0], F64)
    judge(vnp.hypot(vnp.asarray(x), vnp.asarray(x[::-1])), np.hypot(x, x[::-1]), F64, 1e-15)
    judge(vnp.logaddexp(vnp.asarray(x), vnp.asarray(-x)), np.logaddexp(x, -x), F64, 1e-15)


def _a(*v):
    return vnp.asarray(np.array(v, F64))


X = _a(0.31, -1.7, 2.2, -0.45, 0.0)
Y = _a(1.1, 0.4, -2.5, -0.45, 3.0)


@pytest.mark.parametrize("name", ["deg2rad", "rad2deg", "log2", "log10", "exp2", "sinh",
                                  "cosh", "fabs", "positive", "real", "conj", "nan_to_num",
                                  "floor", "ceil", "trunc", "fix", "rint", "round"])
def test_unary_gradients(name):
    f = getattr(vnp, name)
    x = _a(0.31, 1.7, 2.2, 0.45, 3.3) if name in ("log2", "log10", "fabs") else X
    if name in ("floor", "ceil", "trunc", "fix", "rint", "round"):
        x = _a(0.31, -1.7, 2.2, -0.45, 3.3)   # away from the steps: the gradient is 0
        check_grads(lambda v: f(v) * v, (x,), order=1)
    else:
        check_grads(f, (x,), order=1)


@pytest.mark.parametrize("name", ["fmax", "fmin", "copysign", "float_power", "logaddexp",
                                  "logaddexp2", "hypot", "heaviside"])
def test_binary_gradients(name):
    f = getattr(vnp, name)
    x, y = _a(0.31, -1.7, 2.2, -0.45, 0.9), _a(1.1, 0.4, -2.5, 0.6, 3.0)
    if name == "float_power":
        x = _a(0.31, 1.7, 2.2, 0.45, 0.9)
    check_grads(f, (x, y), order=1)


@pytest.mark.parametrize("name", ["sinh", "cosh", "log2", "exp2"])
def test_second_order_unary(name):
    check_grads(getattr(vnp, name), (_a(0.31, 1.7, 2.2, 0.45, 3.3),), order=2)


@pytest.mark.parametrize("name", ["logaddexp", "hypot"])
def test_second_order_binary(name):
    check_grads(getattr(vnp, name), (_a(0.31, -1.7, 2.2, 0.45), _a(1.1, 0.4, -2.5, 0.6)), order=2)


def test_logaddexp_gradient_at_a_tie_is_half():
    x = _a(0.5, -1.0)
    gx = vkml.grad(lambda a, b: vnp.sum(vnp.logaddexp(a, b)), argnums=(0, 1))(x, x)
    np.testing.assert_allclose(np.asarray(gx[0]), [0.5, 0.5], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gx[1]), [0.5, 0.5], rtol=1e-12)


# --------------------------------------------------------------------------- trigonometric,
# hyperbolic, cbrt, sinc, fmod, gcd, lcm (the compositions over Atan2 and Gcd)

def _wide(d, n=4000, seed=3):
    """Magnitudes log-uniform over the float range of d (both signs), plus SPECIAL."""
    R = np.random.default_rng(seed)
    top = 38 if d == F32 else 300
    with np.errstate(all="ignore"):
        x = 10.0 ** R.uniform(-top, top, n) * R.choice([-1.0, 1.0], n)
        return np.concatenate([np.asarray(SPECIAL), x]).astype(d)


def _unit(d, n=4000, seed=4):
    """[-1, 1], crowded at the ends (1 - 10^-k) and at 0, where arcsin/arctanh are hardest."""
    R = np.random.default_rng(seed)
    x = np.concatenate([R.uniform(-1, 1, n), 1 - 10.0 ** R.uniform(-16, 0, n),
                        10.0 ** R.uniform(-30, 0, n)]) * R.choice([-1.0, 1.0], 3 * n)
    return np.concatenate([x, [1.0, -1.0, 0.0, -0.0, 1.5, -2.0, np.nan]]).astype(d)


# name -> (NumPy oracle, domain, bound in ulp of the dtype): the measured maxima on these
# points were tan 2.3, arctan 0.6, arcsin 2.2, arccos 2.7, arcsinh 1.0, arccosh 3.0,
# arctanh 2.0, cbrt 3.0 (float64; its Newton step rounds three times), sinc 1.0
INVERSE = {"tan": (np.tan, _wide, 3), "arctan": (np.arctan, _wide, 1),
           "arcsin": (np.arcsin, _unit, 3), "arccos": (np.arccos, _unit, 3),
           "arcsinh": (np.arcsinh, _wide, 2), "arccosh": (np.arccosh, _wide, 3),
           "arctanh": (np.arctanh, _unit, 2), "cbrt": (np.cbrt, _wide, 3),
           "sinc": (np.sinc, _wide, 2)}


@pytest.mark.parametrize("d", [F32, F64])
@pytest.mark.parametrize("name", sorted(INVERSE))
def test_inverse_and_hyperbolic_values(name, d):
    f, domain, ulps = INVERSE[name]
    x = domain(d)
    atol = 2 * np.finfo(d).smallest_subnormal
    if name == "arccosh":
        x = np.concatenate([x, np.abs(x) + 1, 1 + np.abs(_unit(d))]).astype(d)
    with np.errstate(all="ignore"):
        want = f(x.astype(F64))
    if name == "sinc":
        # sin(pi x) / (pi x) with pi x rounded to d, as NumPy computes it in d: near the zeros
        # (integer x) only an absolute bound means anything
        x = x[np.abs(x) < (1e6 if d == F32 else 1e12)]
        with np.errstate(all="ignore"):
            want, atol = np.sinc(x), 4 * np.finfo(d).eps
    judge(getattr(vnp, name)(vnp.asarray(x)), want, d, ulps * np.finfo(d).eps,
          f"{name}({np.dtype(d)})", atol=atol, operands=(x,))


@pytest.mark.parametrize("d", [F32, F64])
def test_arctan2_quadrants_and_extremes(d):
    v = np.asarray([0.0, -0.0, 1.0, -1.0, 1e-30, -3e38, np.inf, -np.inf, np.nan, 2.5]).astype(d)
    y, x = (a.ravel() for a in np.meshgrid(v, v))
    judge(vnp.arctan2(vnp.asarray(y), vnp.asarray(x)), np.arctan2(y.astype(F64), x.astype(F64)), d,
          2 * np.finfo(d).eps, "arctan2 edges")
    # int operands become float32, as NumPy's (float64 there)
    assert vnp.arctan2(1, 2).dtype == F32 and vnp.arctan(vnp.asarray([1], I32)).dtype == F32


def test_cbrt_perfect_cubes_exact_and_sign():
    for d in (F32, F64):
        q = np.concatenate([np.arange(-200, 201), 2.0 ** np.arange(-40, 41), [0.5, -0.25, 1.5]]).astype(d)
        c = (q.astype(F64) ** 3).astype(d)
        got = vnp.cbrt(vnp.asarray(c)).numpy()
        # the exact root (this platform's float64 np.cbrt is 1 ulp off on most of these)
        np.testing.assert_array_equal(got, q)
        assert np.signbit(vnp.cbrt(vnp.asarray(np.asarray([-0.0], d))).numpy()[0])


def test_fmod_values_sign_of_dividend():
    for d in (F32, F64):
        v = np.asarray([0.0, -0.0, 1.0, -1.0, 0.1, -0.3, 2.5, 7.0, -7.5, 1e-30, 3e38, -3e38,
                        np.inf, -np.inf, np.nan]).astype(d)
        x, y = (a.ravel() for a in np.meshgrid(v, v))
        with np.errstate(all="ignore"):
            want = np.fmod(x, y)
        judge(vnp.fmod(vnp.asarray(x), vnp.asarray(y)), want, d, 0.0, f"fmod({np.dtype(d)})")
    v = np.asarray([0, 1, -1, 2, -2, 3, -7, 7, 2147483647, -2147483647, -2147483648], I32)
    x, y = (a.ravel() for a in np.meshgrid(v, v))
    with np.errstate(all="ignore"):
        want = np.fmod(x, y)
    np.testing.assert_array_equal(vnp.fmod(vnp.asarray(x), vnp.asarray(y)).numpy(), want)


def test_gcd_lcm_int32():
    R = np.random.default_rng(8)
    v = np.concatenate([[0, 1, -1, 6, -4, 12, -18, 46368, 28657, 2147483647],
                        R.integers(-10**6, 10**6, 40)]).astype(I32)
    x, y = (a.ravel() for a in np.meshgrid(v, v))
    np.testing.assert_array_equal(vnp.gcd(vnp.asarray(x), vnp.asarray(y)).numpy(), np.gcd(x, y))
    small = v[np.abs(v) < 50000]
    x, y = (a.ravel() for a in np.meshgrid(small, small))
    np.testing.assert_array_equal(vnp.lcm(vnp.asarray(x), vnp.asarray(y)).numpy(), np.lcm(x, y))
    assert vnp.gcd(vnp.asarray([True]), 4).dtype == I32
    with pytest.raises(vnp.DTypeError, match="gcd"):
        vnp.gcd(vnp.asarray([1.5]), 2)
    with pytest.raises(vnp.DTypeError, match="lcm"):
        vnp.lcm(2, vnp.asarray([1.5]))


GRAD_POINTS = {"tan": [0.3, -1.1], "arctan": [0.3, -2.5], "arcsin": [0.3, -0.8],
               "arccos": [0.3, -0.8], "arcsinh": [0.3, -2.5], "arccosh": [1.3, 4.0],
               "arctanh": [0.3, -0.8], "cbrt": [0.3, -2.5], "sinc": [0.3, -1.7, 1e-4, 0.0]}


@pytest.mark.parametrize("name", sorted(GRAD_POINTS))
def test_inverse_and_hyperbolic_grads(name):
    check_grads(getattr(vnp, name), (vnp.asarray(GRAD_POINTS[name], F64),), order=2)


def test_arctan2_fmod_grads():
    y, x = vnp.asarray([0.3, -1.2, 2.0], F64), vnp.asarray([-0.7, 0.4, 1.5], F64)
    check_grads(vnp.arctan2, (y, x), order=2)
    check_grads(vnp.fmod, (vnp.asarray([7.3, -5.2, 0.4], F64), vnp.asarray([2.1, 1.5, -3.0], F64)), order=2)


def test_grads_at_domain_edges_as_jax():
    g = lambda f, v: float(vkml.grad(lambda t: f(t))(vnp.asarray(v, F64)))  # noqa: E731
    assert g(vnp.arcsin, 1.0) == np.inf and g(vnp.arcsin, -1.0) == np.inf
    assert g(vnp.arccos, 1.0) == -np.inf and g(vnp.arctanh, 1.0) == np.inf
    assert g(vnp.arccosh, 1.0) == np.inf
    assert g(vnp.sinc, 0.0) == 0.0
    h = float(vkml.grad(vkml.grad(vnp.sinc))(vnp.asarray(0.0, F64)))
    assert abs(h + np.pi ** 2 / 3) < 1e-12
