"""The standard layers: Linear, Conv2d, pooling, normalisation, Dropout, Embedding, ...

Each layer is a `Module` (a pytree, see base.py) whose forward pass calls
`vkml.nn.functional`. Parameters are initialised at construction, on the device, with
PyTorch's default initialisers, from a `key=` argument (`vkml.random.key(0)` when omitted).

>>> import vkml.numpy as vnp, vkml.random as vr
>>> net = Sequential(Linear(4, 8, key=vr.key(1)), ReLU(), Linear(8, 2, key=vr.key(2)))
>>> net(vnp.ones((3, 4))).shape
(3, 2)
"""
from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Sequence

from .. import numpy as vnp
from .. import random as vr
from ..array import Array
from ..tensor import Tensor
from ..trace import dtypes as dt
from ..trace.shapes import ShapeError, size_of
from . import functional as F
from .base import Module

__all__ = ["Module", "Linear", "Conv2d", "MaxPool2d", "AvgPool2d", "BatchNorm2d", "LayerNorm",
           "Dropout", "Embedding", "Flatten", "ReLU", "GELU", "SiLU", "Sigmoid", "Tanh",
           "Identity", "Lambda", "Sequential"]


def _param(a: Array) -> Array:
    """Every trainable array a layer creates is a Tensor that requires grad, so the same
    module serves the functional face (it is still an Array leaf of the pytree) and the
    PyTorch face (`loss.backward()` fills `.grad`, `optim.SGD` steps it)."""
    return a if isinstance(a, Tensor) else Tensor(a, requires_grad=True)


def _assign(module: Module, name: str, value: Array) -> None:
    """Set module state (BatchNorm's running statistics) on the module being called.

    Eagerly that is the user's module, updated in place as PyTorch does. Inside a
    transform it is the transform's traced copy of a module argument: the copy gets the
    traced value (later reads in the same forward pass see it, and a function that returns
    the module returns the new state), while the module the user passed in is left as it
    was, since a transformed function is pure. A module the transformed function closes
    over instead (whose state is concrete or another trace's) keeps its state: storing a
    value of this trace there would leak a tracer out of the transform."""
    t = getattr(value, "_trace", None)
    if t is None or getattr(getattr(module, name), "_trace", None) is t:
        object.__setattr__(module, name, value)


def _key(key: Any) -> Array:
    return vr.key(0) if key is None else key


def _kaiming_uniform(key: Array, shape: tuple, fan_in: int, dtype, a: float = math.sqrt(5)) -> Array:
    """PyTorch's kaiming_uniform_ (leaky-relu gain with slope a, fan_in mode): U(-b, b) with
    b = sqrt(2 / (1 + a^2)) * sqrt(3 / fan_in); a = sqrt(5) gives 1 / sqrt(fan_in)."""
    bound = math.sqrt(2.0 / (1.0 + a * a)) * math.sqrt(3.0 / fan_in) if fan_in > 0 else 0.0
    return vr.uniform(key, shape, dtype, minval=-bound, maxval=bound)


def _bias_uniform(key: Array, shape: tuple, fan_in: int, dtype) -> Array:
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return vr.uniform(key, shape, dtype, minval=-bound, maxval=bound)


def _positive(cls: str, what: str, v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f"{cls}: {what} {v!r} must be a non-negative int")
    return v


# --------------------------------------------------------------------------- layers with weights


class Linear(Module):
    """y = x @ weight.T + bias, weight of shape (out_features, in_features).

    Initialised as PyTorch: weight kaiming-uniform with a = sqrt(5), bias
    U(-1/sqrt(in_features), 1/sqrt(in_features)).

    >>> Linear(3, 2).weight.shape
    (2, 3)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, key: Any = None,
                 dtype=dt.float32):
        self.in_features = _positive("Linear", "in_features", in_features)
        self.out_features = _positive("Linear", "out_features", out_features)
        kw, kb = vr.split(_key(key))
        self.weight = _param(_kaiming_uniform(kw, (out_features, in_features), in_features, dtype))
        self.bias = _param(_bias_uniform(kb, (out_features,), in_features, dtype)) if bias else None

    def forward(self, x: Any) -> Array:
        return F.linear(x, self.weight, self.bias)


class Conv2d(Module):
    """2-d convolution over NCHW input, weight (out_channels, in_channels // groups, kh, kw).

    Initialised as PyTorch (kaiming-uniform a = sqrt(5), bias U(-1/sqrt(fan_in), ...) with
    fan_in = in_channels // groups * kh * kw).

    >>> Conv2d(3, 8, 3, padding=1)(vnp.ones((2, 3, 5, 5))).shape
    (2, 8, 5, 5)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True, *,
                 key: Any = None, dtype=dt.float32):
        k = F._pair("Conv2d", "kernel_size", kernel_size, 1)
        self.in_channels = _positive("Conv2d", "in_channels", in_channels)
        self.out_channels = _positive("Conv2d", "out_channels", out_channels)
        if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or \
                in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: groups={groups!r} must be a positive int dividing "
                             f"in_channels={in_channels} and out_channels={out_channels}")
        self.kernel_size = k
        self.stride = F._pair("Conv2d", "stride", stride, 1)
        if isinstance(padding, str):    # checked here, as PyTorch does, not at the first call
            F._check_padding_string("Conv2d", padding, self.stride)
            self.padding = padding
        else:
            self.padding = F._pair("Conv2d", "padding", padding, 0)
        self.dilation = F._pair("Conv2d", "dilation", dilation, 1)
        self.groups = groups
        fan_in = in_channels // groups * k[0] * k[1]
        kw, kb = vr.split(_key(key))
        self.weight = _param(_kaiming_uniform(kw, (out_channels, in_channels // groups) + k, fan_in, dtype))
        self.bias = _param(_bias_uniform(kb, (out_channels,), fan_in, dtype)) if bias else None

    def forward(self, x: Any) -> Array:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Embedding(Module):
    """A lookup table: ids of any shape -> ids.shape + (embedding_dim,); weight N(0, 1).

    >>> Embedding(10, 4)(vnp.asarray([1, 2])).shape
    (2, 4)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, *, key: Any = None, dtype=dt.float32):
        self.num_embeddings = _positive("Embedding", "num_embeddings", num_embeddings)
        self.embedding_dim = _positive("Embedding", "embedding_dim", embedding_dim)
        self.weight = _param(vr.normal(_key(key), (num_embeddings, embedding_dim), dtype))

    def forward(self, ids: Any) -> Array:
        return F.embedding(ids, self.weight)


# --------------------------------------------------------------------------- normalisation


def _norm_state(m, name: str, num_features: int, eps: float, momentum: float, affine: bool,
                track_running_stats: bool, dtype) -> None:
    """The fields torch's normalisation layers share (its _NormBase): the affine weight and
    bias when affine, the running statistics when track_running_stats."""
    m.num_features = _positive(name, "num_features", num_features)
    m.eps, m.momentum = float(eps), float(momentum)
    m.affine, m.track_running_stats = bool(affine), bool(track_running_stats)
    m.weight = _param(vnp.ones((num_features,), dtype)) if affine else None
    m.bias = _param(vnp.zeros((num_features,), dtype)) if affine else None
    m.running_mean = vnp.zeros((num_features,), dtype) if track_running_stats else None
    m.running_var = vnp.ones((num_features,), dtype) if track_running_stats else None


class BatchNorm2d(Module):
    """Batch normalisation of NCHW input per channel.

    In train mode it normalises with the batch statistics and updates running_mean /
    running_var (PyTorch's momentum, unbiased variance) without a gradient path; in eval
    mode it uses the running statistics. weight starts at ones, bias at zeros.

    Called eagerly, the module is updated in place, as in PyTorch. Under a transform
    (jit, grad, vmap, ...) the function is pure: the model passed in keeps its statistics,
    and the new ones are in the model the function returns, e.g.
    `vkml.value_and_grad(lambda m: (loss(m(x)), m), has_aux=True)(model)` gives
    ((loss, model with new statistics), gradients).

    >>> bn = BatchNorm2d(3)
    >>> bn(vnp.ones((2, 3, 4, 4))).shape
    (2, 3, 4, 4)
    """
    # num_batches_tracked counts the train-mode calls as torch does; it is a float (in the
    # statistics' dtype, exact to 2**24 for float32) so the module stays a differentiable
    # pytree (vkml.grad refuses integer leaves); load_state_dict takes torch's int64
    _buffers = ("running_mean", "running_var", "num_batches_tracked")
    _optional_state = ("num_batches_tracked",)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, track_running_stats: bool = True, *, dtype=dt.float32):
        _norm_state(self, "BatchNorm2d", num_features, eps, momentum, affine, track_running_stats, dtype)
        self.num_batches_tracked = vnp.zeros((), dtype) if track_running_stats else None

    def forward(self, x: Any) -> Array:
        x = vnp.asarray(x)
        if x.ndim != 4 or x.shape[1] != self.num_features:
            raise ShapeError(f"BatchNorm2d({self.num_features}): input must be NCHW with "
                             f"{self.num_features} channels, got shape {x.shape}")
        batch_stats = self.training or not self.track_running_stats
        y, m, v = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                               training=batch_stats, momentum=self.momentum, eps=self.eps,
                               return_running=True)
        if self.training and self.track_running_stats:
            _assign(self, "running_mean", m.astype(self.running_mean.dtype))
            _assign(self, "running_var", v.astype(self.running_var.dtype))
            _assign(self, "num_batches_tracked", self.num_batches_tracked + 1.0)
        return y


class LayerNorm(Module):
    """Normalise over the trailing normalized_shape axes; weight ones, bias zeros.

    >>> LayerNorm(4)(vnp.ones((2, 4))).shape
    (2, 4)
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, *, dtype=dt.float32):
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape = tuple(_positive("LayerNorm", "normalized_shape", d) for d in ns)
        self.eps = float(eps)
        self.weight = _param(vnp.ones(ns, dtype)) if elementwise_affine else None
        self.bias = _param(vnp.zeros(ns, dtype)) if elementwise_affine and bias else None

    def forward(self, x: Any) -> Array:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


# --------------------------------------------------------------------------- parameter-free


class MaxPool2d(Module):
    """Max pooling (stride defaults to kernel_size).

    >>> MaxPool2d(2)(vnp.ones((1, 1, 4, 4))).shape
    (1, 1, 2, 2)
    """

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1):
        self.kernel_size = F._pair("MaxPool2d", "kernel_size", kernel_size, 1)
        self.stride = self.kernel_size if stride is None else F._pair("MaxPool2d", "stride", stride, 1)
        self.padding = F._pair("MaxPool2d", "padding", padding, 0)
        self.dilation = F._pair("MaxPool2d", "dilation", dilation, 1)
        F._pool_args("MaxPool2d", self.kernel_size, self.stride, self.padding, self.dilation)

    def forward(self, x: Any) -> Array:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation)


class AvgPool2d(Module):
    """Average pooling (stride defaults to kernel_size).

    >>> AvgPool2d(2)(vnp.ones((1, 1, 4, 4))).shape
    (1, 1, 2, 2)
    """

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 count_include_pad: bool = True):
        self.kernel_size = F._pair("AvgPool2d", "kernel_size", kernel_size, 1)
        self.stride = self.kernel_size if stride is None else F._pair("AvgPool2d", "stride", stride, 1)
        self.padding = F._pair("AvgPool2d", "padding", padding, 0)
        F._pool_args("AvgPool2d", self.kernel_size, self.stride, self.padding)
        self.count_include_pad = bool(count_include_pad)

    def forward(self, x: Any) -> Array:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding,
                            count_include_pad=self.count_include_pad)


class Dropout(Module):
    """Inverted dropout with probability p; call m(x, key=key) in train mode (a fresh key
    per call), identity in eval mode.

    >>> Dropout(0.5).eval()(vnp.ones(3)).numpy().tolist()
    [1.0, 1.0, 1.0]
    """

    def __init__(self, p: float = 0.5):
        if isinstance(p, bool) or not isinstance(p, (int, float)):
            raise TypeError(f"Dropout: probability p must be a float in [0, 1], got {p!r}")
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: probability p={p} must be in [0, 1]")
        self.p = float(p)

    def forward(self, x: Any, *, key: Any = None) -> Array:
        if self.training and self.p > 0.0 and key is None:
            raise ValueError(f"Dropout(p={self.p}) in train mode needs a random key: call it as "
                             f"m(x, key=key) with a fresh vkml.random key each step (split one), "
                             f"or call .eval() to make it the identity")
        return F.dropout(x, self.p, key, self.training)


class Flatten(Module):
    """Merge axes start_dim..end_dim into one (by default all but the batch axis).

    >>> Flatten()(vnp.ones((2, 3, 4))).shape
    (2, 12)
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        for what, v in (("start_dim", start_dim), ("end_dim", end_dim)):
            if isinstance(v, bool) or not hasattr(v, "__index__"):
                raise TypeError(f"Flatten: {what} must be an int, got {v!r}")
        self.start_dim, self.end_dim = int(start_dim), int(end_dim)

    def forward(self, x: Any) -> Array:
        x = vnp.asarray(x)
        nd = max(x.ndim, 1)
        if not (-nd <= self.start_dim < nd and -nd <= self.end_dim < nd) or \
                self.start_dim % nd > self.end_dim % nd:
            raise ShapeError(f"Flatten(start_dim={self.start_dim}, end_dim={self.end_dim}): invalid "
                             f"for input of shape {x.shape}")
        if x.ndim == 0:
            return vnp.reshape(x, (1,))
        s, e = self.start_dim % nd, self.end_dim % nd
        return vnp.reshape(x, x.shape[:s] + (size_of(x.shape[s:e + 1]),) + x.shape[e + 1:])


class ReLU(Module):
    """max(x, 0)."""

    def forward(self, x: Any) -> Array:
        return F.relu(x)


class GELU(Module):
    """x * Phi(x); approximate="tanh" for the tanh approximation."""

    def __init__(self, approximate: str = "none"):
        if approximate not in ("none", "tanh", True, False):
            raise ValueError(f"GELU: approximate {approximate!r} must be 'none' or 'tanh'")
        self.approximate = approximate

    def forward(self, x: Any) -> Array:
        return F.gelu(x, self.approximate)


class SiLU(Module):
    """x * sigmoid(x)."""

    def forward(self, x: Any) -> Array:
        return F.silu(x)


class Sigmoid(Module):
    """1 / (1 + exp(-x))."""

    def forward(self, x: Any) -> Array:
        return F.sigmoid(x)


class Tanh(Module):
    """tanh(x)."""

    def forward(self, x: Any) -> Array:
        return vnp.tanh(x)


class Identity(Module):
    """Returns its input."""

    def forward(self, x: Any) -> Any:
        return x


class Lambda(Module):
    """Wraps a plain function as a parameter-free layer (the function is static structure).

    >>> Lambda(lambda x: x * 2.0)(vnp.ones(2)).numpy().tolist()
    [2.0, 2.0]
    """

    def __init__(self, fn: Callable):
        if not callable(fn):
            raise TypeError(f"Lambda: {fn!r} is not callable")
        self.fn = fn

    def forward(self, x: Any) -> Any:
        return self.fn(x)


def _takes_key(layer: Module) -> bool:
    try:
        return "key" in inspect.signature(layer.forward).parameters
    except (TypeError, ValueError):
        return False


class Sequential(Module):
    """Layers applied in order; plain functions are wrapped in Lambda. Called with key=,
    it splits the key among the layers that take one (Dropout).

    >>> net = Sequential(Linear(2, 3), ReLU(), Dropout(0.1))
    >>> net.eval()(vnp.ones((1, 2))).shape
    (1, 3)
    >>> list(net.state_dict())[:2]
    ['0.weight', '0.bias']
    """
    _unnamed = ("layers",)     # torch's names: `0.weight`, not `layers.0.weight`

    def __init__(self, *layers: Module | Callable):
        out = []
        for i, l in enumerate(layers):
            if isinstance(l, Module):
                out.append(l)
            elif callable(l):
                out.append(Lambda(l))
            else:
                raise TypeError(f"Sequential: layer {i} ({type(l).__name__}) is neither a Module "
                                f"nor a function")
        self.layers = out

    def forward(self, x: Any, *, key: Any = None) -> Any:
        keyed = [l for l in self.layers if _takes_key(l)]
        keys = iter(vr.split(key, len(keyed))) if key is not None and keyed else None
        for l in self.layers:
            if keys is not None and _takes_key(l):
                x = l(x, key=next(keys))
            else:
                x = l(x)
        return x

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return Sequential(*self.layers[i])
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self):
        return iter(self.layers)

    def append(self, layer: Module) -> "Sequential":
        self.layers.append(layer if isinstance(layer, Module) else Lambda(layer))
        return self


# --------------------------------------------------------------------------- more of torch.nn (nn/layers.py)

from .layers import (CELU, ELU, GLU, SELU, Conv1d, ConvTranspose1d, ConvTranspose2d,  # noqa: E402
                     GroupNorm, Hardsigmoid, Hardswish, Hardtanh, InstanceNorm2d, LeakyReLU,
                     LogSigmoid, LogSoftmax, Mish, ModuleDict, ModuleList, MultiheadAttention,
                     ReLU6, RMSNorm, Softmax, Softmin, Softplus, Softsign, AdaptiveAvgPool2d,
                     Upsample)
from . import layers as _layers  # noqa: E402

__all__ += _layers.__all__
from .recurrent import GRU, GRUCell, LSTM, LSTMCell  # noqa: E402
from . import recurrent as _recurrent  # noqa: E402

__all__ += _recurrent.__all__
