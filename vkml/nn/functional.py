"""vkml.nn.functional: stateless neural-network operations (PyTorch's names and layouts).

Everything here is a composition of registry operators (through `vkml.numpy` and
`vkml.array.bind`), so each function runs on the device, traces under every transform and
is differentiated by the ordinary rules: no function here has a backward of its own.
Layouts are PyTorch's: images NCHW, convolution weights OIHW, `linear` weights (out, in).

>>> import vkml.numpy as vnp, vkml.nn.functional as F
>>> F.relu(vnp.asarray([-1.0, 2.0])).numpy().tolist()
[0.0, 2.0]
"""
from __future__ import annotations

from typing import Any, Sequence

from .. import numpy as vnp
from .. import random as vrandom
from ..array import Array, bind
from ..autodiff import no_grad, stop_gradient
from ..debug import check_index
from ..trace import dtypes as dt
from ..trace.dtypes import DTypeError
from ..trace.ops import OpKind
from ..trace.shapes import ShapeError, conv_out, normalize_axes, normalize_axis

__all__ = ["relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "logsumexp",
           "one_hot", "nll_loss", "cross_entropy", "mse_loss", "linear", "conv2d", "max_pool2d",
           "avg_pool2d", "batch_norm", "layer_norm", "dropout", "embedding"]


# --------------------------------------------------------------------------- helpers


def _float(x: Any, name: str) -> Array:
    """x as a float Array (integer and bool inputs become float32, like vkml.numpy)."""
    x = vnp.asarray(x)
    return x if dt.is_float(x.dtype) else x.astype(dt.float32)


def _common_float(name: str, *xs: Any) -> list[Array]:
    """Arrays of one float dtype, the operands' promotion (jax.numpy's: float16 with
    float16 stays float16, with bfloat16 or float32 it is float32; integer and bool
    operands count as float32)."""
    arrs = [None if x is None else _float(x, name) for x in xs]
    d = dt.promote(*[a.dtype for a in arrs if a is not None]) if any(a is not None for a in arrs) else dt.float32
    return [None if a is None else (a if a.dtype == d else a.astype(d)) for a in arrs]


def _pair(name: str, what: str, v: Any, lo: int) -> tuple[int, int]:
    """An int or a pair of ints, each >= lo, as a pair."""
    t = (v, v) if isinstance(v, int) and not isinstance(v, bool) else tuple(v)
    if len(t) != 2 or not all(isinstance(i, int) and not isinstance(i, bool) and i >= lo for i in t):
        raise ValueError(f"{name}: {what} {v!r} must be an int or a pair of ints >= {lo}")
    return t


def _batched4(name: str, x: Array) -> tuple[Array, bool]:
    """(NCHW view of x, whether x was an unbatched CHW image)."""
    if x.ndim == 3:
        return vnp.expand_dims(x, 0), True
    if x.ndim != 4:
        raise ShapeError(f"{name}: input must be NCHW (rank 4) or CHW (rank 3), got shape {x.shape}")
    return x, False


def _reduction(name: str, loss: Array, reduction: str, count: Array | None = None) -> Array:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return vnp.sum(loss)
    if reduction == "mean":
        return vnp.mean(loss) if count is None else vnp.sum(loss) / count
    raise ValueError(f"{name}: reduction {reduction!r} is not one of 'mean', 'sum', 'none'")


# --------------------------------------------------------------------------- activations


def relu(x: Any) -> Array:
    """max(x, 0); the gradient at 0 is 0.

    >>> relu(vnp.asarray([-1.0, 0.5])).numpy().tolist()
    [0.0, 0.5]
    """
    x = vnp.asarray(x)
    if x.dtype == dt.bool_:
        x = x.astype(dt.int32)
    return bind(OpKind.Relu, [x])


def gelu(x: Any, approximate: bool | str = False) -> Array:
    """x * Phi(x), exactly (via erfc) or with the tanh approximation.

    approximate: False / "none" (exact, the default) or True / "tanh" (JAX's and PyTorch's
    spellings both work).

    >>> round(float(gelu(vnp.asarray(1.0))), 4)
    0.8413
    """
    if approximate in (False, "none"):
        approx = False
    elif approximate in (True, "tanh"):
        approx = True
    else:
        raise ValueError(f"gelu: approximate {approximate!r} must be False/'none' or True/'tanh'")
    return bind(OpKind.Gelu, [_float(x, "gelu")], approximate=approx)


def silu(x: Any) -> Array:
    """x * sigmoid(x) (also called swish).

    >>> float(silu(vnp.asarray(0.0)))
    0.0
    """
    return bind(OpKind.Silu, [_float(x, "silu")])


def sigmoid(x: Any) -> Array:
    """1 / (1 + exp(-x)), without overflow.

    >>> float(sigmoid(vnp.asarray(0.0)))
    0.5
    """
    return bind(OpKind.Sigmoid, [_float(x, "sigmoid")])


def tanh(x: Any) -> Array:
    """Hyperbolic tangent."""
    return vnp.tanh(x)


def _dim(name: str, axis: Any, dim: Any, default: Any) -> Any:
    """torch's dim= beside numpy's axis= (one of them; axis at its default counts as unset)."""
    if dim is None:
        return axis
    if axis is not default:
        raise TypeError(f"{name}: pass dim= or axis=, not both")
    return dim


def softmax(x: Any, axis: int = -1, *, dim: int | None = None) -> Array:
    """exp(x) / sum(exp(x)) along axis (or torch's dim=), numerically stable.

    >>> softmax(vnp.asarray([0.0, 0.0])).numpy().tolist()
    [0.5, 0.5]
    """
    x = _float(x, "softmax")
    axis = _dim("softmax", axis, dim, -1)
    return bind(OpKind.Softmax, [x], axis=normalize_axis("softmax", axis, x.ndim))


def log_softmax(x: Any, axis: int = -1, *, dim: int | None = None) -> Array:
    """x - logsumexp(x) along axis (or torch's dim=), numerically stable.

    >>> [round(v, 4) for v in log_softmax(vnp.asarray([0.0, 0.0])).numpy().tolist()]
    [-0.6931, -0.6931]
    """
    x = _float(x, "log_softmax")
    axis = _dim("log_softmax", axis, dim, -1)
    return bind(OpKind.LogSoftmax, [x], axis=normalize_axis("log_softmax", axis, x.ndim))


def logsumexp(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False, *,
              dim: int | Sequence[int] | None = None, keepdim: bool | None = None) -> Array:
    """log(sum(exp(x))) over axis (None: all; or torch's dim=, keepdim=), stable for large |x|.

    The shift is a stop-gradient max (the gradient is exactly softmax); a slice that is all
    -inf gives -inf, not nan. The implementation is `vkml.scipy.special.logsumexp`'s.

    >>> round(float(logsumexp(vnp.asarray([1000.0, 1000.0]))), 3)
    1000.693
    """
    from ..scipy.special import logsumexp as _lse
    x = _float(x, "logsumexp")
    axis = _dim("logsumexp", axis, dim, None)
    keepdims = keepdims if keepdim is None else keepdim
    return _lse(x, axis=axis, keepdims=keepdims)


# --------------------------------------------------------------------------- losses


def one_hot(labels: Any, num_classes: int, dtype=dt.float32) -> Array:
    """labels (integers) to one-hot vectors along a new last axis; out-of-range labels
    (including negative ones) give all-zero rows. num_classes must be a positive int
    (ValueError otherwise, as jax.nn.one_hot; PyTorch's -1 for "infer" is not supported).

    >>> one_hot(vnp.asarray([0, 2]), 3).numpy().tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    """
    if isinstance(num_classes, bool) or not hasattr(num_classes, "__index__"):
        raise TypeError(f"one_hot: num_classes must be an int, got {num_classes!r}")
    if num_classes.__index__() < 1:
        # as jax.nn.one_hot; PyTorch's -1 (infer from the labels) would need the labels'
        # values on the host, which a traced call does not have
        raise ValueError(f"one_hot: num_classes must be a positive int, got {num_classes} "
                         f"(pass the number of classes explicitly)")
    labels = vnp.asarray(labels)
    if labels.dtype not in (dt.int32, dt.bool_):
        raise DTypeError(f"one_hot: labels must be integers, got {labels.dtype}")
    classes = vnp.arange(num_classes.__index__())
    return vnp.equal(vnp.expand_dims(labels.astype(dt.int32), -1), classes).astype(dtype)


def _class_last(name: str, logits: Any) -> tuple[Array, int]:
    """(log-probabilities with the class axis last, number of classes); the class axis is
    axis 1 for rank >= 2 (PyTorch: (N, C) or (N, C, d1, ...)) and axis 0 for rank 1."""
    x = _float(logits, name)
    if x.ndim == 0:
        raise ShapeError(f"{name}: logits must have a class axis, got a 0-d array")
    cls = 1 if x.ndim >= 2 else 0
    logp = log_softmax(x, axis=cls)
    if cls != x.ndim - 1:
        logp = vnp.moveaxis(logp, cls, -1)
    return logp, x.shape[cls]


def nll_loss(log_probs: Any, labels: Any, reduction: str = "mean", ignore_index: int = -100, *,
             weight: Any = None) -> Array:
    """Negative log-likelihood of integer labels under log-probabilities (class axis 1, or 0
    for a single unbatched example); as cross_entropy without the log_softmax (labels
    checked in the same way).

    >>> lp = vnp.log(vnp.asarray([[0.5, 0.5]]))
    >>> round(float(nll_loss(lp, vnp.asarray([1]))), 4)
    0.6931
    """
    lp = _float(log_probs, "nll_loss")
    shown = lp.shape
    if lp.ndim == 0:
        raise ShapeError("nll_loss: log_probs must have a class axis, got a 0-d array")
    if lp.ndim >= 3:
        lp = vnp.moveaxis(lp, 1, -1)
    return _nll(lp, lp.shape[-1], labels, reduction, 0.0, ignore_index, "nll_loss", shown, weight)


def _nll(logp: Array, C: int, labels: Any, reduction: str, smoothing: float, ignore_index: int,
         name: str, shown: tuple, weight: Any = None) -> Array:
    labels = vnp.asarray(labels)
    if weight is not None:
        # PyTorch's per-class rescaling: each term scaled by its class's weight, and a
        # "mean" over class labels divides by the summed weights of the labels it counts
        weight = vnp.asarray(weight).astype(logp.dtype)
        if weight.shape != (C,):
            raise ShapeError(f"{name}: weight must have shape ({C},), one per class, got {weight.shape}")
    want = logp.shape[:-1]
    if dt.is_float(labels.dtype):
        # class probabilities, same layout as the logits
        if labels.shape != shown:
            raise ShapeError(f"{name}: probability targets must have the logits' shape {shown}, "
                             f"got {labels.shape}; integer class labels have shape {want}")
        t = labels.astype(logp.dtype)
        if len(shown) >= 3:
            t = vnp.moveaxis(t, 1, -1)
        if smoothing:
            t = t * (1.0 - smoothing) + smoothing / C
        if weight is not None:
            t = t * weight
        return _reduction(name, -vnp.sum(t * logp, axis=-1), reduction)
    if labels.dtype != dt.int32:
        raise DTypeError(f"{name}: labels must be int32 class indices (or float class "
                         f"probabilities), got {labels.dtype}")
    if labels.shape != want:
        raise ShapeError(f"{name}: labels of shape {labels.shape} do not match logits of shape "
                         f"{shown}; expected labels of shape {want} (one class index per example)")
    labels = check_index(name, labels, C, None, negative=False, ignore=int(ignore_index))
    hit = vnp.equal(vnp.expand_dims(labels, -1), vnp.arange(C))
    wlogp = logp if weight is None else logp * weight
    loss = -vnp.sum(vnp.where(hit, wlogp, 0.0), axis=-1)
    if smoothing:
        loss = loss * (1.0 - smoothing) - vnp.mean(wlogp, axis=-1) * smoothing
    valid = vnp.not_equal(labels, int(ignore_index))
    loss = vnp.where(valid, loss, 0.0)
    if weight is None:
        return _reduction(name, loss, reduction, vnp.sum(valid.astype(loss.dtype)))
    label_w = vnp.sum(vnp.where(vnp.logical_and(hit, vnp.expand_dims(valid, -1)), weight, 0.0), axis=-1)
    return _reduction(name, loss, reduction, vnp.sum(label_w))


def cross_entropy(logits: Any, labels: Any, reduction: str = "mean", label_smoothing: float = 0.0,
                  ignore_index: int = -100, *, weight: Any = None) -> Array:
    """Softmax cross-entropy, PyTorch's `F.cross_entropy`.

    logits: (N, C), (C,) or (N, C, d1, ...) (class axis 1). labels: int32 class indices of
    shape (N,), () or (N, d1, ...), or float class probabilities of the logits' shape.
    label_smoothing mixes the target with the uniform distribution; labels equal to
    ignore_index contribute nothing, and "mean" averages over the others. weight (C,)
    rescales each class's terms, and "mean" then divides by the labels' summed weights. A concrete label
    outside [0, C) (other than ignore_index) raises IndexError, as PyTorch does; a traced
    one (jit, grad, vmap) selects no class and contributes only the smoothing term, unless
    `vkml.debug.checks` is on (then the device checks it).

    >>> logits = vnp.asarray([[2.0, 0.0], [0.0, 2.0]])
    >>> round(float(cross_entropy(logits, vnp.asarray([0, 1]))), 4)
    0.1269
    """
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing {label_smoothing} must be in [0, 1]")
    logp, C = _class_last("cross_entropy", logits)
    shown = vnp.asarray(logits).shape
    return _nll(logp, C, labels, reduction, float(label_smoothing), ignore_index, "cross_entropy",
                shown, weight)


def mse_loss(pred: Any, target: Any, reduction: str = "mean") -> Array:
    """Mean squared error (shapes broadcast, as PyTorch does with a warning).

    >>> float(mse_loss(vnp.asarray([1.0, 3.0]), vnp.asarray([1.0, 1.0])))
    2.0
    """
    p, t = _common_float("mse_loss", pred, target)
    d = p - t
    return _reduction("mse_loss", d * d, reduction)


# --------------------------------------------------------------------------- layers


def linear(x: Any, w: Any, b: Any = None) -> Array:
    """x @ w.T + b, with w of shape (out_features, in_features) (PyTorch's layout).

    >>> linear(vnp.ones((2, 3)), vnp.ones((4, 3)), vnp.zeros(4)).shape
    (2, 4)
    """
    x, w, b = _common_float("linear", x, w, b)
    if w.ndim != 2:
        raise ShapeError(f"linear: weight must be (out_features, in_features), got shape {w.shape}")
    if x.ndim == 0 or x.shape[-1] != w.shape[1]:
        raise ShapeError(f"linear: input of shape {x.shape} does not match weight {w.shape}: the "
                         f"input's last axis must be in_features = {w.shape[1]}")
    y = vnp.matmul(x, vnp.transpose(w))
    if b is not None:
        if b.shape != (w.shape[0],):
            raise ShapeError(f"linear: bias must have shape ({w.shape[0]},), got {b.shape}")
        y = y + b
    return y


def _check_padding_string(name: str, padding: str, stride: tuple) -> None:
    """PyTorch's construction-time checks of a padding string (its messages)."""
    if padding not in ("valid", "same"):
        raise ValueError(f"{name}: Invalid padding string {padding!r}, should be one of "
                         f"{{'valid', 'same'}} (or pass an int or a pair of ints)")
    if padding == "same" and stride != (1, 1):
        raise ValueError(f"{name}: padding='same' is not supported for strided convolutions "
                         f"(stride {stride}); pad explicitly with an int or a pair")


def _conv_padding(name: str, padding: Any, k: tuple, dil: tuple, stride: tuple):
    """((lo_h, hi_h), (lo_w, hi_w)) from an int, a pair, 'valid' or 'same'."""
    if isinstance(padding, str):
        _check_padding_string(name, padding, stride)
        if padding == "valid":
            return ((0, 0), (0, 0))
        out = []
        for kk, d in zip(k, dil):
            total = d * (kk - 1)
            out.append((total // 2, total - total // 2))
        return tuple(out)
    p = _pair(name, "padding", padding, 0)
    return ((p[0], p[0]), (p[1], p[1]))


def conv2d(x: Any, w: Any, b: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1) -> Array:
    """2-d convolution (cross-correlation, as PyTorch) by Im2Col + one batched matmul.

    x: (N, C, H, W) or (C, H, W); w: (O, C // groups, kh, kw); b: (O,) or None. padding is
    an int, a pair, "valid" or "same" (stride 1). groups > 1 splits the channels into
    independent groups, all contracted by the same matmul.

    >>> conv2d(vnp.ones((1, 2, 5, 5)), vnp.ones((3, 2, 3, 3)), padding=1).shape
    (1, 3, 5, 5)
    """
    x, w, b = _common_float("conv2d", x, w, b)
    x, unbatched = _batched4("conv2d", x)
    if w.ndim != 4:
        raise ShapeError(f"conv2d: weight must be OIHW (rank 4), got shape {w.shape}")
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"conv2d: groups {groups!r} must be a positive int")
    N, C, H, W = x.shape
    O, Cg, kh, kw = w.shape
    if kh < 1 or kw < 1:
        raise ShapeError(f"conv2d: weight {w.shape} has an empty kernel; kh and kw must be >= 1")
    if C % groups or O % groups or Cg != C // groups:
        raise ShapeError(f"conv2d: input {x.shape} with weight {w.shape} and groups={groups}: "
                         f"need C % groups == 0, O % groups == 0 and weight.shape[1] == C // groups "
                         f"(= {C // groups if C % groups == 0 else C / groups})")
    st = _pair("conv2d", "stride", stride, 1)
    dil = _pair("conv2d", "dilation", dilation, 1)
    (plh, phh), (plw, phw) = _conv_padding("conv2d", padding, (kh, kw), dil, st)
    if plh != phh or plw != phw:   # asymmetric ('same' with an even kernel): pad explicitly
        x = vnp.pad(x, ((0, 0), (0, 0), (plh, phh), (plw, phw)))
        plh = plw = 0
        N, C, H, W = x.shape
    oh = conv_out("conv2d", H, kh, st[0], plh, dil[0])
    ow = conv_out("conv2d", W, kw, st[1], plw, dil[1])
    cols = bind(OpKind.Im2Col, [x], kernel=(kh, kw), stride=st, padding=(plh, plw), dilation=dil)
    K, L = Cg * kh * kw, oh * ow
    if groups == 1:
        y = vnp.matmul(vnp.reshape(w, (O, K)), cols)                       # (N, O, L)
    else:
        # Im2Col's rows are channel-major, so each group's rows are one contiguous block
        y = vnp.matmul(vnp.reshape(w, (groups, O // groups, K)),
                       vnp.reshape(cols, (N, groups, K, L)))               # (N, G, O/G, L)
    y = vnp.reshape(y, (N, O, oh, ow))
    if b is not None:
        if b.shape != (O,):
            raise ShapeError(f"conv2d: bias must have shape ({O},), got {b.shape}")
        y = y + vnp.reshape(b, (1, O, 1, 1))
    return y[0] if unbatched else y


def _pool_args(name: str, kernel_size, stride, padding, dilation=1):
    k = _pair(name, "kernel_size", kernel_size, 1)
    st = k if stride is None else _pair(name, "stride", stride, 1)
    p = _pair(name, "padding", padding, 0)
    d = _pair(name, "dilation", dilation, 1)
    if p[0] * 2 > k[0] or p[1] * 2 > k[1]:
        raise ValueError(f"{name}: padding {p} must be at most half the kernel size {k}")
    return k, st, p, d


def max_pool2d(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Array:
    """Max over sliding windows of NCHW (or CHW) input; stride defaults to kernel_size and
    padding counts as -inf. ceil_mode rounds the output size up (torch's rule: the last
    window starts inside the input or its left padding); return_indices also returns,
    as int32, the flat index h * W + w of each maximum in its input plane.

    >>> max_pool2d(vnp.ones((1, 1, 4, 4)), 2).shape
    (1, 1, 2, 2)
    """
    x = vnp.asarray(x)
    # the max of integers is an integer: int32 (and bool, as int32) keep an integer dtype
    x, unbatched = _batched4("max_pool2d", x.astype(dt.int32) if x.dtype == dt.bool_ else x)
    k, st, p, d = _pool_args("max_pool2d", kernel_size, stride, padding, dilation)
    if ceil_mode or return_indices:
        from .sampling import max_pool2d_full
        out = max_pool2d_full(x, k, st, p, d, ceil_mode, return_indices)
        if not return_indices:
            return out[0] if unbatched else out
        return (out[0][0], out[1][0]) if unbatched else out
    y = bind(OpKind.MaxPool2d, [x], kernel=k, stride=st, padding=p, dilation=d)
    return y[0] if unbatched else y


def avg_pool2d(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Array:
    """Mean over sliding windows of NCHW (or CHW) input (zero padding), by Im2Col + sum.

    count_include_pad=False divides each window by the number of real (unpadded) elements.
    ceil_mode rounds the output size up, as torch (a window past the padded input divides
    by what it covers).

    >>> avg_pool2d(vnp.ones((1, 1, 4, 4)), 2).numpy().tolist()
    [[[[1.0, 1.0], [1.0, 1.0]]]]
    """
    x, unbatched = _batched4("avg_pool2d", _float(x, "avg_pool2d"))
    k, st, p, d = _pool_args("avg_pool2d", kernel_size, stride, padding)
    if ceil_mode:
        from .sampling import avg_pool2d_ceil
        y = avg_pool2d_ceil(x, k, st, p, count_include_pad, divisor_override)
        return y[0] if unbatched else y
    N, C, H, W = x.shape
    oh, ow = conv_out("avg_pool2d", H, k[0], st[0], p[0], 1), conv_out("avg_pool2d", W, k[1], st[1], p[1], 1)
    win = dict(kernel=k, stride=st, padding=p, dilation=d)
    cols = bind(OpKind.Im2Col, [vnp.reshape(x, (N * C, 1, H, W))], **win)   # (N*C, kh*kw, L)
    s = vnp.sum(cols, axis=1)
    if divisor_override is not None:
        if not isinstance(divisor_override, int) or divisor_override <= 0:
            raise ValueError(f"avg_pool2d: divisor_override {divisor_override!r} must be a positive int")
        y = s / float(divisor_override)
    elif count_include_pad or p == (0, 0):
        y = s / float(k[0] * k[1])
    else:
        counts = vnp.sum(bind(OpKind.Im2Col, [vnp.ones((1, 1, H, W), x.dtype)], **win), axis=1)
        y = s / counts
    y = vnp.reshape(y, (N, C, oh, ow))
    return y[0] if unbatched else y


# --------------------------------------------------------------------------- normalisation


def _channel_shape(x: Array) -> tuple:
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def batch_norm(x: Any, running_mean: Any = None, running_var: Any = None, weight: Any = None,
               bias: Any = None, training: bool = False, momentum: float = 0.1, eps: float = 1e-5,
               return_running: bool = False):
    """Batch normalisation over every axis but axis 1 (channels): (N, C), (N, C, L), NCHW.

    training=True normalises with the batch statistics (biased variance); otherwise with
    running_mean / running_var. With return_running=True the result is
    (out, new_running_mean, new_running_var): PyTorch's update
    `(1 - momentum) * running + momentum * batch_stat` with the unbiased batch variance,
    computed without a gradient path (None where the running statistic is None, and the
    old values unchanged when not training).

    >>> y = batch_norm(vnp.asarray([[1.0], [3.0]]), training=True)
    >>> [round(v, 3) for v in y.numpy().ravel().tolist()]
    [-1.0, 1.0]
    """
    x, rm, rv, w, b = _common_float("batch_norm", x, running_mean, running_var, weight, bias)
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: input must be (N, C, ...), got shape {x.shape}")
    C = x.shape[1]
    for nm, v in (("running_mean", rm), ("running_var", rv), ("weight", w), ("bias", b)):
        if v is not None and v.shape != (C,):
            raise ShapeError(f"batch_norm: {nm} must have shape ({C},) for input {x.shape}, got {v.shape}")
    axes = tuple(i for i in range(x.ndim) if i != 1)
    cs = _channel_shape(x)
    if training:
        n = x.size // max(C, 1)
        if n <= 1:
            raise ValueError(f"batch_norm: training needs more than 1 value per channel, got input "
                             f"{x.shape}")
        mean = vnp.mean(x, axis=axes, keepdims=True)
        var = vnp.mean(vnp.square(x - mean), axis=axes, keepdims=True)
    else:
        if rm is None or rv is None:
            raise ValueError("batch_norm: evaluation (training=False) needs running_mean and running_var")
        mean, var = vnp.reshape(stop_gradient(rm), cs), vnp.reshape(stop_gradient(rv), cs)
    y = (x - mean) * vnp.rsqrt(var + eps)
    if w is not None:
        y = y * vnp.reshape(w, cs)
    if b is not None:
        y = y + vnp.reshape(b, cs)
    if not return_running:
        return y
    if not training:
        return y, rm, rv
    with no_grad():
        bm = stop_gradient(vnp.reshape(mean, (C,)))
        bv = stop_gradient(vnp.reshape(var, (C,))) * (n / (n - 1))
        new_m = None if rm is None else stop_gradient(rm) * (1.0 - momentum) + bm * momentum
        new_v = None if rv is None else stop_gradient(rv) * (1.0 - momentum) + bv * momentum
    return y, new_m, new_v


def layer_norm(x: Any, normalized_shape: int | Sequence[int], weight: Any = None, bias: Any = None,
               eps: float = 1e-5) -> Array:
    """Normalise over the trailing axes given by normalized_shape (biased variance), then
    scale by weight and shift by bias (both of normalized_shape, optional).

    >>> [round(v, 3) for v in layer_norm(vnp.asarray([1.0, 3.0]), 2).numpy().tolist()]
    [-1.0, 1.0]
    """
    x, w, b = _common_float("layer_norm", x, weight, bias)
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(ns)
    if k == 0 or k > x.ndim or tuple(x.shape[x.ndim - k:]) != ns:
        raise ShapeError(f"layer_norm: normalized_shape {ns} must be the trailing dims of the "
                         f"input, got input shape {x.shape}")
    axes = tuple(range(x.ndim - k, x.ndim))
    mean = vnp.mean(x, axis=axes, keepdims=True)
    c = x - mean
    y = c * vnp.rsqrt(vnp.mean(vnp.square(c), axis=axes, keepdims=True) + eps)
    for nm, v in (("weight", w), ("bias", b)):
        if v is not None and v.shape != ns:
            raise ShapeError(f"layer_norm: {nm} must have shape {ns}, got {v.shape}")
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


# --------------------------------------------------------------------------- regularisation, lookup


def dropout(x: Any, p: float = 0.5, key: Any = None, training: bool = True) -> Array:
    """Zero each element with probability p and scale the rest by 1 / (1 - p) (inverted
    dropout); identity when not training or p == 0. Needs a vkml.random key when it acts.

    >>> import vkml.random as vr
    >>> dropout(vnp.ones(4), 0.5, vr.key(0)).shape
    (4,)
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability p={p} must be in [0, 1]")
    x = vnp.asarray(x)
    if not training or p == 0.0:
        return x
    if key is None:
        raise ValueError(f"dropout: p={p} in training mode needs a random key (dropout(x, p, "
                         f"key=vkml.random.key(...))); pass training=False for the identity")
    if not dt.is_float(x.dtype):
        x = x.astype(dt.float32)
    if p == 1.0:
        return x * 0.0
    keep = vrandom.bernoulli(key, 1.0 - p, x.shape)
    return vnp.where(keep, x * (1.0 / (1.0 - p)), 0.0)


def embedding(ids: Any, weight: Any) -> Array:
    """Rows of weight (num_embeddings, dim) picked by integer ids of any shape: the result
    has shape ids.shape + (dim,). Negative ids count from the end. A concrete id out of
    range raises IndexError; a traced one (jit, grad, vmap) is clamped, as in JAX, unless
    `vkml.debug.checks` is on (then the device checks it).

    >>> embedding(vnp.asarray([[0, 1]]), vnp.ones((3, 4))).shape
    (1, 2, 4)
    """
    ids, weight = vnp.asarray(ids), vnp.asarray(weight)
    if ids.dtype not in (dt.int32, dt.bool_):
        raise DTypeError(f"embedding: ids must be integers, got {ids.dtype}")
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be (num_embeddings, embedding_dim), got {weight.shape}")
    return vnp.take(weight, ids.astype(dt.int32), axis=0, _what="embedding")


# --------------------------------------------------------------------------- PyTorch's other functions
# (in modules of their own; exported here under torch.nn.functional's names)

from .activations import (celu, elu, glu, hardsigmoid, hardswish, hardtanh, leaky_relu,  # noqa: E402
                          logsigmoid, mish, relu6, selu, softmin, softplus, softsign)
from .losses import (binary_cross_entropy, binary_cross_entropy_with_logits,  # noqa: E402
                     cosine_similarity, huber_loss, kl_div, normalize, smooth_l1_loss)
from . import activations as _activations, losses as _losses  # noqa: E402

__all__ += _activations.__all__ + _losses.__all__
from .attention import scaled_dot_product_attention  # noqa: E402
from .convs import conv1d, conv_transpose1d, conv_transpose2d  # noqa: E402
from .norms import group_norm, instance_norm, rms_norm  # noqa: E402
from . import attention as _attention, convs as _convs, norms as _norms  # noqa: E402

__all__ += _attention.__all__ + _convs.__all__ + _norms.__all__
from .sampling import adaptive_avg_pool2d, interpolate, pad  # noqa: E402
from . import sampling as _sampling  # noqa: E402

__all__ += _sampling.__all__
