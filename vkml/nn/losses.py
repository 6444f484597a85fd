"""PyTorch's regression, binary and divergence losses, and the vector-norm helpers
(`normalize`, `cosine_similarity`), with torch's argument names and defaults.

All are compositions of elementwise operators and reductions: the elementwise part of a
loss fuses with its reduction's input.

>>> import vkml.numpy as vnp
>>> float(huber_loss(vnp.asarray([0.0, 3.0]), vnp.asarray([0.0, 0.0])))
1.25
"""
from __future__ import annotations

from typing import Any

from .. import numpy as vnp
from ..array import Array
from ..trace import dtypes as dt
from ..trace.shapes import ShapeError, broadcast_shapes, normalize_axis

__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "huber_loss",
           "smooth_l1_loss", "kl_div", "cosine_similarity", "normalize"]


def _floats(*xs: Any) -> list:
    from .functional import _common_float
    return _common_float("loss", *xs)


def _reduce(name: str, loss: Array, reduction: str) -> Array:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return vnp.sum(loss)
    if reduction == "mean":
        return vnp.mean(loss)
    raise ValueError(f"{name}: reduction {reduction!r} is not one of 'mean', 'sum', 'none'")


def _same_shape(name: str, a: Array, b: Array) -> None:
    if a.shape != b.shape:
        raise ShapeError(f"{name}: target shape {b.shape} must equal input shape {a.shape} "
                         f"(PyTorch requires the same size)")


def binary_cross_entropy(input: Any, target: Any, weight: Any = None, size_average=None,
                         reduce=None, reduction: str = "mean") -> Array:
    """-(t log p + (1 - t) log(1 - p)) on probabilities p, each log clamped at -100 as
    PyTorch does (so p = 0 or 1 gives a finite loss).

    >>> round(float(binary_cross_entropy(vnp.asarray([0.5]), vnp.asarray([1.0]))), 4)
    0.6931
    """
    p, t, w = _floats(input, target, weight)
    _same_shape("binary_cross_entropy", p, t)
    loss = -(t * vnp.maximum(vnp.log(p), -100.0) + (1.0 - t) * vnp.maximum(vnp.log1p(-p), -100.0))
    if w is not None:
        loss = loss * w
    return _reduce("binary_cross_entropy", loss, reduction)


def binary_cross_entropy_with_logits(input: Any, target: Any, weight: Any = None, size_average=None,
                                     reduce=None, reduction: str = "mean",
                                     pos_weight: Any = None) -> Array:
    """binary_cross_entropy(sigmoid(x), t) computed stably from the logits x;
    pos_weight (broadcast along the last axis, one per class) scales the positive term.

    >>> round(float(binary_cross_entropy_with_logits(vnp.asarray([0.0]), vnp.asarray([1.0]))), 4)
    0.6931
    """
    from .activations import logsigmoid
    x, t, w, pw = _floats(input, target, weight, pos_weight)
    _same_shape("binary_cross_entropy_with_logits", x, t)
    pos = logsigmoid(x) * t
    if pw is not None:
        pos = pos * pw
    loss = -(pos + (1.0 - t) * logsigmoid(-x))
    if w is not None:
        loss = loss * w
    return _reduce("binary_cross_entropy_with_logits", loss, reduction)


def huber_loss(input: Any, target: Any, reduction: str = "mean", delta: float = 1.0) -> Array:
    """0.5 d^2 where |d| < delta, else delta * (|d| - 0.5 delta), d = input - target.

    >>> huber_loss(vnp.asarray([0.5, 2.0]), vnp.zeros(2), reduction="none").numpy().tolist()
    [0.125, 1.5]
    """
    if delta <= 0:
        raise ValueError(f"huber_loss: delta {delta} must be positive")
    x, t = _floats(input, target)
    d = x - t
    a = vnp.abs(d)
    loss = vnp.where(a < delta, d * d * 0.5, (a - 0.5 * delta) * delta)
    return _reduce("huber_loss", loss, reduction)


def smooth_l1_loss(input: Any, target: Any, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0) -> Array:
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta = 0: the L1 loss).

    >>> smooth_l1_loss(vnp.asarray([0.5, 2.0]), vnp.zeros(2), reduction="none").numpy().tolist()
    [0.125, 1.5]
    """
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta {beta} must be non-negative")
    x, t = _floats(input, target)
    d = x - t
    a = vnp.abs(d)
    if beta == 0:
        return _reduce("smooth_l1_loss", a, reduction)
    loss = vnp.where(a < beta, d * d * (0.5 / beta), a - 0.5 * beta)
    return _reduce("smooth_l1_loss", loss, reduction)


def kl_div(input: Any, target: Any, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False) -> Array:
    """Pointwise KL divergence t * (log t - input), input being log-probabilities (0 where
    t = 0); log_target=True takes the target as log-probabilities too. reduction
    "batchmean" divides the sum by input.shape[0] (the true KL divergence per example).

    >>> lp = vnp.log(vnp.asarray([0.5, 0.5]))
    >>> float(kl_div(lp, vnp.asarray([0.5, 0.5]), reduction="sum"))
    0.0
    """
    x, t = _floats(input, target)
    if log_target:
        loss = vnp.exp(t) * (t - x)
    else:
        pos = t > 0
        # log of a clamped t: the gradient of the untaken branch stays finite at t = 0
        loss = vnp.where(pos, t * (vnp.log(vnp.where(pos, t, 1.0)) - x), 0.0 * x)
    if reduction == "batchmean":
        return vnp.sum(loss) / float(x.shape[0] if x.ndim else 1)
    return _reduce("kl_div", loss, reduction)


def _norm(x: Array, p: float, dim: int) -> Array:
    if p == 2:
        return vnp.sqrt(vnp.sum(x * x, axis=dim, keepdims=True))
    if p == 1:
        return vnp.sum(vnp.abs(x), axis=dim, keepdims=True)
    if p == float("inf"):
        return vnp.max(vnp.abs(x), axis=dim, keepdims=True)
    return vnp.power(vnp.sum(vnp.power(vnp.abs(x), float(p)), axis=dim, keepdims=True), 1.0 / p)


def normalize(input: Any, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None) -> Array:
    """x / max(||x||_p, eps) along dim (L_p normalisation, as F.normalize).

    >>> normalize(vnp.asarray([[3.0, 4.0]])).numpy().tolist()
    [[0.6000000238418579, 0.800000011920929]]
    """
    if out is not None:
        raise TypeError("normalize: out= is not supported (vkml arrays are immutable)")
    (x,) = _floats(input)
    if x.ndim == 0:
        raise ShapeError("normalize: input must have at least one dimension")
    d = normalize_axis("normalize", dim, x.ndim)
    return x / vnp.maximum(_norm(x, p, d), eps)


def cosine_similarity(x1: Any, x2: Any, dim: int = 1, eps: float = 1e-8) -> Array:
    """x1 . x2 / (max(||x1||, eps) * max(||x2||, eps)) along dim (the inputs broadcast),
    PyTorch's formula.

    >>> float(cosine_similarity(vnp.asarray([1.0, 0.0]), vnp.asarray([1.0, 1.0]), dim=0)) > 0.707
    True
    """
    a, b = _floats(x1, x2)
    shape = broadcast_shapes("cosine_similarity", a.shape, b.shape)
    if len(shape) == 0:
        raise ShapeError("cosine_similarity: inputs must have at least one dimension")
    a, b = vnp.broadcast_to(a, shape), vnp.broadcast_to(b, shape)
    d = normalize_axis("cosine_similarity", dim, len(shape))
    na = vnp.maximum(vnp.sqrt(vnp.sum(a * a, axis=d)), eps)
    nb = vnp.maximum(vnp.sqrt(vnp.sum(b * b, axis=d)), eps)
    return vnp.sum(a * b, axis=d) / (na * nb)
