"""vkml.scipy.special against float64 oracles built from Python's math module (scipy is not
a dependency): math.erf/erfc, erfinv by bisection on math.erf(c), math.lgamma, digamma from
its exact values at integers and half-integers (and the recurrence), and finite differences
for the gradients (check_grads, order 2)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import vkml.numpy as vnp
from vkml.scipy import special as S
from vkml.test_util import check_grads

F32, F64 = np.float32, np.float64
R = np.random.default_rng(11)
EULER = 0.57721566490153286061


def v(f, *xs, d=F64):
    return np.asarray(f(*[vnp.asarray(np.asarray(x, d)) for x in xs]))


def _erfinv_ref(y: float) -> float:
    """erf^-1 by bisection on erfc in the tail (1 - y is exact there) and erf elsewhere."""
    if y in (1.0, -1.0):
        return math.copysign(math.inf, y)
    if y == 0.0:
        return y
    a = abs(y)
    lo, hi = 0.0, 10.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if (math.erfc(mid) > 1.0 - a) if a > 0.5 else (math.erf(mid) < a):
            lo = mid
        else:
            hi = mid
    return math.copysign(0.5 * (lo + hi), y)


def _digamma_ref(x: float) -> float:
    """psi at integers and half-integers (exact series), shifted by the recurrence."""
    n = math.floor(x)
    frac = x - n
    assert frac in (0.0, 0.5)
    if frac == 0.0:
        return -EULER + sum(1.0 / k for k in range(1, int(n)))
    return -EULER - 2 * math.log(2) + sum(2.0 / (2 * k - 1) for k in range(1, int(n) + 1))


def test_erf_erfc_against_math():
    x = np.concatenate([R.uniform(-6, 6, 200), [0.0, -0.0, 1e-300, 30.0, -30.0]])
    np.testing.assert_allclose(v(S.erf, x), [math.erf(t) for t in x], rtol=1e-15, atol=1e-300)
    np.testing.assert_allclose(v(S.erfc, x), [math.erfc(t) for t in x], rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("d", [F32, F64])
def test_erfinv_values_and_edges(d):
    y = np.concatenate([R.uniform(-1, 1, 300), 1 - 10.0 ** -R.uniform(1, 15 if d == F64 else 7, 50),
                        [0.0, 0.5, 0.51, -0.999999, 1e-30]]).astype(d)
    want = np.array([_erfinv_ref(float(t)) for t in y])
    got = v(S.erfinv, y, d=d)
    assert got.dtype == d
    np.testing.assert_allclose(got, want, rtol=2e-15 if d == F64 else 4e-7, atol=1e-300)
    edges = v(S.erfinv, [1.0, -1.0, 1.5, -2.0, np.nan, -0.0], d=d)
    assert edges[0] == np.inf and edges[1] == -np.inf and np.isnan(edges[2:5]).all()
    assert edges[5] == 0 and np.signbit(edges[5])


def test_logsumexp_matches_scipy_semantics():
    a = R.standard_normal((3, 4)) * 50
    want = np.log(np.sum(np.exp(a - a.max(1, keepdims=True)), 1)) + a.max(1)
    np.testing.assert_allclose(np.asarray(S.logsumexp(a, axis=1)), want, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(S.logsumexp(a, axis=(0, 1), keepdims=True)),
                               [[np.log(np.exp(a - a.max()).sum()) + a.max()]], rtol=1e-14)
    b = R.uniform(0.5, 2.0, (3, 4))
    np.testing.assert_allclose(np.asarray(S.logsumexp(a, axis=0, b=b)),
                               np.log(np.sum(b * np.exp(a - a.max(0)), 0)) + a.max(0), rtol=1e-13)
    # a negative weighted sum: nan, or its log magnitude and sign with return_sign
    val, sign = S.logsumexp(np.array([0.0, 0.0]), b=np.array([1.0, -3.0]), return_sign=True)
    assert np.isclose(float(val), math.log(2.0)) and float(sign) == -1.0
    assert np.isnan(float(S.logsumexp(np.array([0.0, 0.0]), b=np.array([1.0, -3.0]))))
    assert float(S.logsumexp(np.array([-np.inf, -np.inf]))) == -np.inf
    assert float(S.logsumexp(np.zeros((0,)))) == -np.inf


def test_expit_logit_xlogy_xlog1py():
    x = R.uniform(-30, 30, 100)
    np.testing.assert_allclose(v(S.expit, x), 1 / (1 + np.exp(-x)), rtol=1e-14)
    p = np.concatenate([R.uniform(0, 1, 100), [0.0, 1.0, 0.5, -0.1, 1.1]])
    with np.errstate(all="ignore"):
        want = np.log(p / (1 - p))
    np.testing.assert_allclose(v(S.logit, p), want, rtol=1e-12, equal_nan=True)
    xs = np.array([0.0, 0.0, 0.0, 2.0, 1.5, 0.0, -1.0])
    ys = np.array([0.0, -1.0, 2.0, 3.0, 0.0, np.inf, 0.5])
    with np.errstate(all="ignore"):
        want = np.where(xs == 0, 0.0, xs * np.log(ys))
        want1 = np.where(xs == 0, 0.0, xs * np.log1p(ys - 1.0))
    np.testing.assert_allclose(v(S.xlogy, xs, ys), want, rtol=1e-15, equal_nan=True)
    np.testing.assert_allclose(v(S.xlog1py, xs, ys - 1.0), want1, rtol=1e-14, equal_nan=True)


def test_gammaln_against_math_lgamma():
    x = np.concatenate([R.uniform(0.01, 30, 200), 10.0 ** R.uniform(1, 300, 50), R.uniform(-30, 0, 100),
                        [0.5, 1.0, 2.0, 1e-300]])
    x = x[np.abs(x - np.round(x)) > 1e-6]      # off the poles
    want = np.array([math.lgamma(t) for t in x])
    np.testing.assert_allclose(v(S.gammaln, x), want, rtol=2e-13, atol=2e-14)
    poles = v(S.gammaln, [0.0, -1.0, -7.0])
    assert (poles == np.inf).all()


def test_digamma_exact_points_and_reflection():
    pts = [0.5, 1.0, 1.5, 2.0, 3.5, 7.0, 12.5, 40.0, 100.5]
    np.testing.assert_allclose(v(S.digamma, pts), [_digamma_ref(t) for t in pts], rtol=1e-13, atol=1e-14)
    neg = np.array([-0.5, -1.5, -3.5])      # psi(x) = psi(1 - x) - pi / tan(pi x)
    want = [_digamma_ref(1 - t) - math.pi / math.tan(math.pi * t) for t in neg]
    np.testing.assert_allclose(v(S.digamma, neg), want, rtol=1e-12, atol=1e-12)
    # the derivative of lgamma at generic points (central differences of math.lgamma)
    x = R.uniform(0.2, 20, 50)
    h = 1e-5
    fd = [(math.lgamma(t + h) - math.lgamma(t - h)) / (2 * h) for t in x]
    np.testing.assert_allclose(v(S.digamma, x), fd, rtol=1e-7, atol=1e-7)
    edges = v(S.digamma, [0.0, -2.0, np.nan])
    assert edges[0] == -np.inf and np.isnan(edges[1:]).all()


@pytest.mark.parametrize("name, f, args", [
    ("logsumexp", lambda a, b: S.logsumexp(a, axis=1, b=b), [R.standard_normal((2, 3)), R.uniform(0.5, 2, (2, 3))]),
    ("expit", S.expit, [R.standard_normal(5)]),
    ("logit", S.logit, [R.uniform(0.1, 0.9, 5)]),
    ("xlogy", S.xlogy, [R.standard_normal(4), R.uniform(0.5, 2, 4)]),
    ("xlog1py", S.xlog1py, [R.standard_normal(4), R.uniform(-0.5, 2, 4)]),
    ("gammaln", S.gammaln, [np.array([0.7, 2.3, 9.1, -0.4, -2.7])]),
    ("digamma", S.digamma, [np.array([0.7, 2.3, 9.1, -0.4, -2.7])]),
], ids=lambda p: p if isinstance(p, str) else "")
def test_gradients_order_2(name, f, args):
    check_grads(f, [vnp.asarray(a) for a in args], order=2)


def test_erfinv_gradients_order_2():
    """Both branches (erf below |y| = 1/2, log erfc above); reverse mode only: its graph of
    Newton steps is large, and forward mode is the same rules transposed."""
    check_grads(S.erfinv, [vnp.asarray(np.array([-0.9, 0.1, 0.7]))], order=2, modes=("rev",))


def test_gradients_at_jax_edges():
    """grad xlogy in x at x = 0 is log(y), as jax's; erfinv's derivative is
    sqrt(pi)/2 exp(erfinv(y)^2); digamma is gammaln's derivative."""
    import vkml
    g = vkml.grad(lambda x: S.xlogy(x, 3.0))(vnp.asarray(0.0, "float64"))
    assert np.isclose(float(g), math.log(3.0))
    y = 0.3
    g = vkml.grad(S.erfinv)(vnp.asarray(y, "float64"))
    assert np.isclose(float(g), math.sqrt(math.pi) / 2 * math.exp(_erfinv_ref(y) ** 2), rtol=1e-13)
    g = vkml.grad(S.gammaln)(vnp.asarray(3.5, "float64"))
    assert np.isclose(float(g), _digamma_ref(3.5), rtol=1e-12)


def test_integer_input_is_float32_and_float64_stays():
    assert S.gammaln(vnp.asarray([3])).dtype == F32
    assert S.erfinv(vnp.asarray([0.5], "float64")).dtype == F64
    assert S.logsumexp(vnp.asarray([1, 2])).dtype == F32
