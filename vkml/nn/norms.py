"""Group, RMS and instance normalisation (torch.nn.functional's group_norm, rms_norm,
instance_norm), composed of means over reshaped views: each is a few reductions whose
elementwise tails fuse.

>>> import vkml.numpy as vnp
>>> group_norm(vnp.ones((2, 4, 3)), 2).shape
(2, 4, 3)
"""
from __future__ import annotations

from typing import Any, Sequence

import ml_dtypes as _ml_dtypes  # finfo of bfloat16 too, whatever numpy
import numpy as np

from .. import numpy as vnp
from ..array import Array
from ..autodiff import no_grad, stop_gradient
from ..trace.shapes import ShapeError

__all__ = ["group_norm", "rms_norm", "instance_norm"]


def _floats(name: str, *xs: Any) -> list:
    from .functional import _common_float
    return _common_float(name, *xs)


def _affine(name: str, y: Array, w: Array | None, b: Array | None) -> Array:
    C = y.shape[1]
    cs = (1, C) + (1,) * (y.ndim - 2)
    for nm, v in (("weight", w), ("bias", b)):
        if v is not None and v.shape != (C,):
            raise ShapeError(f"{name}: {nm} must have shape ({C},) for input {y.shape}, got {v.shape}")
    if w is not None:
        y = y * vnp.reshape(w, cs)
    if b is not None:
        y = y + vnp.reshape(b, cs)
    return y


def group_norm(input: Any, num_groups: int, weight: Any = None, bias: Any = None,
               eps: float = 1e-5) -> Array:
    """Normalise each group of C / num_groups channels of (N, C, *) over the group's
    channels and all spatial positions (biased variance), then a per-channel affine.

    >>> [round(v, 3) for v in group_norm(vnp.asarray([[1.0, 3.0]]), 1).numpy().ravel().tolist()]
    [-1.0, 1.0]
    """
    x, w, b = _floats("group_norm", input, weight, bias)
    if x.ndim < 2:
        raise ShapeError(f"group_norm: input must be (N, C, *), got shape {x.shape}")
    N, C = x.shape[:2]
    if not isinstance(num_groups, int) or num_groups < 1 or C % num_groups:
        raise ValueError(f"group_norm: Expected number of channels in input to be divisible by "
                         f"num_groups, but got input of shape {x.shape} and num_groups={num_groups}")
    g = vnp.reshape(x, (N, num_groups, -1))
    mean = vnp.mean(g, axis=2, keepdims=True)
    c = g - mean
    y = c * vnp.rsqrt(vnp.mean(c * c, axis=2, keepdims=True) + eps)
    return _affine("group_norm", vnp.reshape(y, x.shape), w, b)


def rms_norm(input: Any, normalized_shape: int | Sequence[int], weight: Any = None,
             eps: float | None = None) -> Array:
    """x / sqrt(mean(x^2) + eps) over the trailing normalized_shape axes, times weight;
    eps None is the dtype's machine epsilon (torch's default).

    >>> [round(v, 4) for v in rms_norm(vnp.asarray([3.0, 4.0]), 2).numpy().tolist()]
    [0.8485, 1.1314]
    """
    x, w = _floats("rms_norm", input, weight)
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(ns)
    if k == 0 or k > x.ndim or tuple(x.shape[x.ndim - k:]) != ns:
        raise ShapeError(f"rms_norm: normalized_shape {ns} must be the trailing dims of the "
                         f"input, got input shape {x.shape}")
    if w is not None and w.shape != ns:
        raise ShapeError(f"rms_norm: weight must have shape {ns}, got {w.shape}")
    e = float(_ml_dtypes.finfo(x.dtype).eps) if eps is None else float(eps)
    axes = tuple(range(x.ndim - k, x.ndim))
    y = x * vnp.rsqrt(vnp.mean(x * x, axis=axes, keepdims=True) + e)
    return y if w is None else y * w


def instance_norm(input: Any, running_mean: Any = None, running_var: Any = None, weight: Any = None,
                  bias: Any = None, use_input_stats: bool = True, momentum: float = 0.1,
                  eps: float = 1e-5, *, return_running: bool = False):
    """Normalise each (example, channel) of (N, C, *) over its spatial positions (biased
    variance), then a per-channel affine. use_input_stats=False normalises with the
    running statistics instead. With return_running=True the result is (out, new_mean,
    new_var), torch's update: the momentum average of the per-instance statistics' batch
    mean (unbiased variance), without a gradient path.

    >>> instance_norm(vnp.ones((2, 3, 4, 4))).shape
    (2, 3, 4, 4)
    """
    x, rm, rv, w, b = _floats("instance_norm", input, running_mean, running_var, weight, bias)
    if x.ndim < 3:
        raise ShapeError(f"instance_norm: input must be (N, C, *spatial), got shape {x.shape}")
    C = x.shape[1]
    cs = (1, C) + (1,) * (x.ndim - 2)
    axes = tuple(range(2, x.ndim))
    n = int(np.prod(x.shape[2:]))
    if use_input_stats:
        if n <= 1:
            raise ValueError(f"instance_norm: Expected more than 1 spatial element when training, "
                             f"got input of shape {x.shape}")
        mean = vnp.mean(x, axis=axes, keepdims=True)
        c = x - mean
        var = vnp.mean(c * c, axis=axes, keepdims=True)
        y = c * vnp.rsqrt(var + eps)
    else:
        if rm is None or rv is None:
            raise ValueError("instance_norm: use_input_stats=False needs running_mean and running_var")
        y = (x - vnp.reshape(stop_gradient(rm), cs)) * vnp.rsqrt(vnp.reshape(stop_gradient(rv), cs) + eps)
    y = _affine("instance_norm", y, w, b)
    if not return_running:
        return y
    if not use_input_stats:
        return y, rm, rv
    with no_grad():
        bm = stop_gradient(vnp.mean(vnp.reshape(mean, x.shape[:2]), axis=0))
        bv = stop_gradient(vnp.mean(vnp.reshape(var, x.shape[:2]), axis=0)) * (n / (n - 1))
        new_m = None if rm is None else stop_gradient(rm) * (1.0 - momentum) + bm * momentum
        new_v = None if rv is None else stop_gradient(rv) * (1.0 - momentum) + bv * momentum
    return y, new_m, new_v
