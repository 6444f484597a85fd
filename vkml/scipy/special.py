"""scipy.special's functions on vkml arrays, composed from vkml.numpy operations (so every
one runs as Vulkan kernels, and grad, vmap and jit go through them), with scipy's values
and jax.scipy.special's gradients.

Integer and bool input becomes float32, as jax.numpy's float functions do.

>>> import vkml.numpy as vnp
>>> [round(v, 4) for v in erfinv(vnp.asarray([0.0, 0.5, -0.9], "float64")).numpy().tolist()]
[0.0, 0.4769, -1.1631]
>>> round(float(logsumexp(vnp.asarray([1000.0, 1000.0]))), 3)
1000.693
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from .. import numpy as vnp
from ..array import Array, bind
from ..autodiff import stop_gradient
from ..trace import dtypes as dt
from ..trace.ops import OpKind
from ..trace.shapes import normalize_axes

__all__ = ["erf", "erfc", "erfinv", "logsumexp", "expit", "logit", "xlogy", "xlog1py", "gammaln",
           "digamma"]


def _floats(name: str, *xs) -> list[Array]:
    xs = [vnp.asarray(x) for x in xs]
    d = dt.float32
    for x in xs:
        if x.dtype == dt.float64:
            d = dt.float64
    return [x.astype(d) if x.dtype != d else x for x in xs]


def erf(x: Any) -> Array:
    """The error function (vkml.numpy.erf).

    >>> round(float(erf(1.0)), 6)
    0.842701
    """
    return vnp.erf(*_floats("erf", x))


def erfc(x: Any) -> Array:
    """1 - erf(x), accurate in the tail (vkml.numpy.erfc).

    >>> float(erfc(30.0))
    0.0
    """
    return vnp.erfc(*_floats("erfc", x))


# Giles' single-precision erfinv ("Approximating the erfinv function", GPU Computing Gems):
# a polynomial in w = -log(1 - y^2), central below w = 5 and in sqrt(w) above; two Newton
# steps on erf (erfc in the tail, where 1 - y is exact) then reach the dtype's precision
_GILES_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                  -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_GILES_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
               -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _horner(coefs, w):
    p = coefs[0]
    for c in coefs[1:]:
        p = p * w + c
    return p


def erfinv(y: Any) -> Array:
    """The inverse of erf on (-1, 1): ±inf at ±1, nan outside [-1, 1]; derivative
    sqrt(pi)/2 exp(erfinv(y)^2), as jax.scipy.special.erfinv's.

    >>> round(float(erfinv(vnp.asarray(0.999, "float64"))), 6)
    2.326754
    """
    (y,) = _floats("erfinv", y)
    neg = vnp.signbit(y)
    a = vnp.where(neg, -y, y)                          # |y| without abs's zero gradient at 0
    inside = a < 1.0
    s = vnp.where(inside, a, 0.5)                      # the untaken values stay finite
    w = -vnp.log((1.0 - s) * (1.0 + s))
    x = s * vnp.where(w < 5.0, _horner(_GILES_CENTRAL, w - 2.5),
                      _horner(_GILES_TAIL, vnp.sqrt(vnp.maximum(w, 5.0)) - 3.0))
    tail = s > 0.5
    for _ in range(4):
        slope = _TWO_OVER_SQRT_PI * vnp.exp(-(x * x))
        # Newton's step on erf(x) = s, and in the tail on log erfc(x) = log(1 - s) (1 - s is
        # exact there, and the log is nearly linear in x where erfc falls like exp(-x^2))
        c = vnp.erfc(x)
        step_tail = (vnp.log(1.0 - s) - vnp.log(c)) * c / slope
        x = x - vnp.where(tail, step_tail, (vnp.erf(x) - s) / slope)
    x = vnp.where(inside, x, vnp.where(a == 1.0, math.inf, math.nan))
    return vnp.where(neg, -x, x)


def logsumexp(a: Any, axis: int | Sequence[int] | None = None, b: Any = None,
              keepdims: bool = False, return_sign: bool = False):
    """log(sum(b * exp(a))) over axis (None: all), as scipy's: stable for large |a|; an
    all -inf slice gives -inf; with `b`, a negative sum gives nan unless return_sign, which
    returns (log|sum|, sign). The shift is a stop-gradient max, so the gradient is exactly
    the softmax (times b). `vkml.nn.functional.logsumexp` is this function.

    >>> v, s = logsumexp(vnp.asarray([0.0, 0.0]), b=vnp.asarray([1.0, -2.0]), return_sign=True)
    >>> round(float(v), 6), float(s)
    (0.0, -1.0)
    """
    if b is None:
        (a,) = _floats("logsumexp", a)
    else:
        a, b = _floats("logsumexp", a, b)
        a, b = vnp.broadcast_arrays(a, b)
    axes = normalize_axes("logsumexp", axis, a.ndim, scalar_0d=True)
    if vnp._reduced_size(a, axes) == 0:    # over no elements: log(0) = -inf, as scipy
        out = vnp.log(vnp.sum(vnp.exp(a) if b is None else b * vnp.exp(a), axis=axes,
                              keepdims=keepdims))
        return (out, vnp.sign(vnp.exp(out))) if return_sign else out
    m = stop_gradient(vnp.max(a, axis=axes, keepdims=True))
    m = vnp.where(vnp.isfinite(m), m, 0.0)
    e = vnp.exp(a - m)
    total = vnp.sum(e if b is None else b * e, axis=axes, keepdims=True)
    if return_sign:
        sign = vnp.sign(total)
        out = vnp.log(vnp.abs(total)) + m
    else:
        out = vnp.log(total) + m                       # log of a negative sum: nan, as scipy
    if not keepdims and axes:
        out = vnp.squeeze(out, axes)
        if return_sign:
            sign = vnp.squeeze(sign, axes)
    return (out, sign) if return_sign else out


def expit(x: Any) -> Array:
    """The logistic sigmoid 1 / (1 + exp(-x)), without overflow.

    >>> float(expit(0.0))
    0.5
    """
    return bind(OpKind.Sigmoid, _floats("expit", x))


def logit(p: Any) -> Array:
    """log(p / (1 - p)) as log(p) - log1p(-p): -inf at 0, inf at 1, nan outside [0, 1].

    >>> round(float(logit(0.75)), 6)
    1.098612
    """
    (p,) = _floats("logit", p)
    return vnp.log(p) - vnp.log1p(-p)


def _xlog(name: str, x, y, log, lo: float) -> Array:
    x, y = _floats(name, x, y)
    x, y = vnp.broadcast_arrays(x, y)
    # x log(y) itself where it is finite: its gradient is then jax's (log(y) in x, x / y in y,
    # at x = 0 too); 0 where x == 0 and log(y) is not finite (scipy's value)
    regular = vnp.logical_and(y > lo, vnp.isfinite(y))
    safe = vnp.where(regular, y, lo + 1.0)
    out = vnp.where(regular, x * log(safe), x * log(y))
    return vnp.where(vnp.logical_and(x == 0.0, vnp.logical_not(regular)), 0.0, out)


def xlogy(x: Any, y: Any) -> Array:
    """x * log(y), with 0 where x == 0 (even where log(y) is -inf or nan), as scipy's.

    >>> xlogy(vnp.asarray([0.0, 2.0]), vnp.asarray([0.0, 1.0])).numpy().tolist()
    [0.0, 0.0]
    """
    return _xlog("xlogy", x, y, vnp.log, 0.0)


def xlog1py(x: Any, y: Any) -> Array:
    """x * log1p(y), with 0 where x == 0 (even at y = -1), as scipy's.

    >>> xlog1py(vnp.asarray([0.0, 1.0]), vnp.asarray([-1.0, 0.0])).numpy().tolist()
    [0.0, 0.0]
    """
    return _xlog("xlog1py", x, y, vnp.log1p, -1.0)


# Lanczos's approximation (g = 7, 9 terms), relative error near float64's epsilon for x >= 1/2
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012,
            9.9843695780195716e-6, 1.5056327351493116e-7)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _lgamma_right(x: Array) -> Array:
    """log Gamma(x) for x >= 1/2 by Lanczos."""
    z = x - 1.0
    s = _LANCZOS[0]
    for i, c in enumerate(_LANCZOS[1:], start=1):
        s = s + c / (z + float(i))
    t = z + 7.5
    return _HALF_LOG_2PI + (z + 0.5) * vnp.log(t) - t + vnp.log(s)


def _frac(x: Array) -> Array:
    """x - round(x), exact: |sin(pi x)| and tan(pi x) from it keep their relative accuracy
    near the integers, where pi * x itself would have lost it to rounding."""
    return x - vnp.rint(x)


def gammaln(x: Any) -> Array:
    """log|Gamma(x)|: Lanczos for x >= 1/2, the reflection log(pi / |sin(pi x)|) -
    gammaln(1 - x) below; inf at 0 and the negative integers, as scipy's. The derivative is
    digamma(x) (composition of the same formulas).

    >>> [round(v, 6) for v in gammaln(vnp.asarray([0.5, 3.0, 10.0, -2.5], "float64")).numpy().tolist()]
    [0.572365, 0.693147, 12.801827, -0.056244]
    """
    (x,) = _floats("gammaln", x)
    right = x >= 0.5
    xr = vnp.where(right, x, 1.0 - x)                  # both branches see arguments >= 1/2
    lg = _lgamma_right(xr)
    pole = vnp.logical_and(vnp.logical_not(right), x == vnp.floor(x))
    sin = vnp.abs(vnp.sin(math.pi * _frac(vnp.where(pole, 0.5, x))))
    left = math.log(math.pi) - vnp.log(sin) - lg
    out = vnp.where(right, lg, left)
    return vnp.where(pole, math.inf, vnp.where(vnp.isnan(x), x, out))


def digamma(x: Any) -> Array:
    """The derivative of gammaln: the recurrence up by 8 then Stirling's series through
    x^-12 for x > 0, the reflection psi(1 - x) - pi / tan(pi x) below; -inf at 0 and nan at
    the negative integers, as scipy's.

    >>> [round(v, 6) for v in digamma(vnp.asarray([1.0, 0.5, 10.0, -0.5], "float64")).numpy().tolist()]
    [-0.577216, -1.96351, 2.251753, 0.03649]
    """
    (x,) = _floats("digamma", x)
    pos = x > 0.0
    z = vnp.where(pos, x, 1.0 - x)                     # > 0 on both branches
    shift = 0.0
    for k in range(8):
        shift = shift + 1.0 / (z + float(k))
    w = z + 8.0
    r = 1.0 / (w * w)
    series = r * (1 / 12 - r * (1 / 120 - r * (1 / 252 - r * (1 / 240 - r * (1 / 132 - r * (691 / 32760))))))
    psi = vnp.log(w) - 0.5 / w - series - shift
    pole = vnp.logical_and(vnp.logical_not(pos), x == vnp.floor(x))
    t = vnp.tan(math.pi * _frac(vnp.where(pole, 0.25, x)))
    out = vnp.where(pos, psi, psi - math.pi / t)
    out = vnp.where(pole, vnp.where(x == 0.0, -math.inf, math.nan), out)
    return vnp.where(vnp.isnan(x), x, out)
