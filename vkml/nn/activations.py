"""PyTorch's other activations (`torch.nn.functional` names, arguments and defaults).

Each is a short composition of elementwise registry operators, so a chain of them fuses
into one kernel and is differentiated by the ordinary rules. Where PyTorch switches
formulas (softplus's threshold, elu's branch) the switch is a `where`, whose untaken side
is evaluated on an argument clamped to its safe range, so no inf or nan leaks into the
gradient.

>>> import vkml.numpy as vnp
>>> leaky_relu(vnp.asarray([-1.0, 2.0])).numpy().tolist()
[-0.009999999776482582, 2.0]
"""
from __future__ import annotations

from typing import Any

from .. import numpy as vnp
from ..array import Array
from ..trace import dtypes as dt
from ..trace.shapes import ShapeError, normalize_axis

__all__ = ["leaky_relu", "elu", "celu", "selu", "softplus", "softsign", "hardsigmoid",
           "hardswish", "hardtanh", "relu6", "mish", "logsigmoid", "glu", "softmin"]

# SELU's constants, as PyTorch and the paper (Klambauer et al. 2017) give them
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _float(x: Any) -> Array:
    x = vnp.asarray(x)
    return x if dt.is_float(x.dtype) else x.astype(dt.float32)


def leaky_relu(input: Any, negative_slope: float = 0.01, inplace: bool = False) -> Array:
    """x where x > 0, else negative_slope * x (the slope is also the gradient at 0).

    >>> leaky_relu(vnp.asarray([-2.0, 3.0]), 0.5).numpy().tolist()
    [-1.0, 3.0]
    """
    x = _float(input)
    return vnp.where(x > 0, x, x * negative_slope)


def _exp_branch(x: Array, alpha: float) -> Array:
    """alpha * (exp(x / alpha) - 1) on x <= 0; x is clamped so the other side never overflows."""
    return vnp.expm1(vnp.minimum(x, 0.0) * (1.0 / alpha)) * alpha


def elu(input: Any, alpha: float = 1.0, inplace: bool = False) -> Array:
    """x where x > 0, else alpha * (exp(x) - 1).

    >>> round(float(elu(vnp.asarray(-1.0))), 4)
    -0.6321
    """
    x = _float(input)
    return vnp.where(x > 0, x, vnp.expm1(vnp.minimum(x, 0.0)) * alpha)


def celu(input: Any, alpha: float = 1.0, inplace: bool = False) -> Array:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).

    >>> round(float(celu(vnp.asarray(-1.0), 2.0)), 4)
    -0.7869
    """
    if alpha == 0:
        raise ValueError("celu: alpha must not be 0 (it divides x)")
    x = _float(input)
    return vnp.where(x > 0, x, _exp_branch(x, float(alpha)))


def selu(input: Any, inplace: bool = False) -> Array:
    """scale * (max(0, x) + min(0, alpha * (exp(x) - 1))) with the self-normalising
    constants alpha = 1.6733, scale = 1.0507.

    >>> round(float(selu(vnp.asarray(1.0))), 4)
    1.0507
    """
    x = _float(input)
    return vnp.where(x > 0, x, vnp.expm1(vnp.minimum(x, 0.0)) * _SELU_ALPHA) * _SELU_SCALE


def softplus(input: Any, beta: float = 1.0, threshold: float = 20.0) -> Array:
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (PyTorch's
    linear regime, which also keeps exp from overflowing).

    >>> round(float(softplus(vnp.asarray(0.0))), 4)
    0.6931
    >>> float(softplus(vnp.asarray(30.0)))
    30.0
    """
    x = _float(input)
    bx = x * beta
    soft = vnp.log1p(vnp.exp(vnp.minimum(bx, threshold))) * (1.0 / beta)
    return vnp.where(bx > threshold, x, soft)


def softsign(input: Any) -> Array:
    """x / (1 + |x|).

    >>> softsign(vnp.asarray([-1.0, 3.0])).numpy().tolist()
    [-0.5, 0.75]
    """
    x = _float(input)
    return x / (vnp.abs(x) + 1.0)


def hardtanh(input: Any, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Array:
    """x clamped to [min_val, max_val].

    >>> hardtanh(vnp.asarray([-3.0, 0.5, 3.0])).numpy().tolist()
    [-1.0, 0.5, 1.0]
    """
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val {min_val} must not exceed max_val {max_val}")
    return vnp.clip(_float(input), min_val, max_val)


def relu6(input: Any, inplace: bool = False) -> Array:
    """min(max(x, 0), 6).

    >>> relu6(vnp.asarray([-1.0, 7.0])).numpy().tolist()
    [0.0, 6.0]
    """
    return vnp.clip(_float(input), 0.0, 6.0)


def hardsigmoid(input: Any, inplace: bool = False) -> Array:
    """relu6(x + 3) / 6: 0 below -3, 1 above 3, linear between.

    >>> hardsigmoid(vnp.asarray([-4.0, 0.0, 4.0])).numpy().tolist()
    [0.0, 0.5, 1.0]
    """
    return vnp.clip(_float(input) * (1.0 / 6.0) + 0.5, 0.0, 1.0)


def hardswish(input: Any, inplace: bool = False) -> Array:
    """x * relu6(x + 3) / 6 (MobileNetV3).

    >>> hardswish(vnp.asarray([-4.0, 3.0])).numpy().tolist()
    [-0.0, 3.0]
    """
    x = _float(input)
    return x * hardsigmoid(x)


def mish(input: Any, inplace: bool = False) -> Array:
    """x * tanh(softplus(x)).

    >>> round(float(mish(vnp.asarray(1.0))), 4)
    0.8651
    """
    x = _float(input)
    return x * vnp.tanh(softplus(x))


def logsigmoid(input: Any) -> Array:
    """log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)), finite for every x.

    >>> round(float(logsigmoid(vnp.asarray(0.0))), 4)
    -0.6931
    """
    x = _float(input)
    return vnp.minimum(x, 0.0) - vnp.log1p(vnp.exp(-vnp.abs(x)))


def glu(input: Any, dim: int = -1) -> Array:
    """a * sigmoid(b), where a and b are the two halves of input along dim.

    >>> glu(vnp.asarray([2.0, 0.0])).numpy().tolist()
    [1.0]
    """
    from .functional import sigmoid
    x = _float(input)
    if x.ndim == 0:
        raise ShapeError("glu: input must have at least one dimension, got a 0-d array")
    d = normalize_axis("glu", dim, x.ndim)
    if x.shape[d] % 2:
        raise ShapeError(f"glu: Halving dimension must be even, but dimension {d} is size "
                         f"{x.shape[d]} (input shape {x.shape})")
    a, b = vnp.split(x, 2, axis=d)
    return a * sigmoid(b)


def softmin(input: Any, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Array:
    """softmax(-x) along dim (PyTorch's implicit choice when dim is None: 0 for 0-, 1- and
    3-d input, else 1).

    >>> softmin(vnp.asarray([0.0, 0.0]), dim=0).numpy().tolist()
    [0.5, 0.5]
    """
    from .functional import softmax
    x = _float(input) if dtype is None else vnp.asarray(input).astype(dtype)
    if dim is None:
        dim = 0 if x.ndim in (0, 1, 3) else 1
    if x.ndim == 0:
        return vnp.ones_like(x)
    return softmax(-x, axis=dim)
