"""More of torch.nn's layers: Conv1d, the transposed convolutions, GroupNorm, RMSNorm,
InstanceNorm2d, MultiheadAttention, and the containers ModuleList and ModuleDict.

Parameter names, shapes and initialisers are torch's, so a torch state dict (converted to
NumPy) has the same keys and shapes as `state_dict()` here.

>>> import vkml.numpy as vnp
>>> mha = MultiheadAttention(8, 2, batch_first=True)
>>> out, w = mha(vnp.ones((3, 5, 8)), vnp.ones((3, 5, 8)), vnp.ones((3, 5, 8)))
>>> out.shape, w.shape
((3, 5, 8), (3, 5, 5))
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Iterator, Sequence

from .. import numpy as vnp
from .. import random as vr
from ..array import Array
from ..trace import dtypes as dt
from ..trace.dtypes import DTypeError
from ..trace.shapes import ShapeError
from . import functional as F
from .attention import attention_weights
from .base import Module
from .modules import (Linear, _assign, _bias_uniform, _kaiming_uniform, _key, _norm_state, _param,
                      _positive)

__all__ = ["Conv1d", "ConvTranspose1d", "ConvTranspose2d", "GroupNorm", "RMSNorm",
           "InstanceNorm2d", "MultiheadAttention", "ModuleList", "ModuleDict", "LeakyReLU", "ELU",
           "CELU", "SELU", "Softplus", "Softsign", "Hardsigmoid", "Hardswish", "Hardtanh", "ReLU6",
           "Mish", "LogSigmoid", "GLU", "Softmax", "LogSoftmax", "Softmin", "AdaptiveAvgPool2d",
           "Upsample"]


def _groups(cls: str, groups: Any, cin: int, cout: int) -> int:
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or cin % groups \
            or cout % groups:
        raise ValueError(f"{cls}: groups={groups!r} must be a positive int dividing "
                         f"in_channels={cin} and out_channels={cout}")
    return groups


def _zeros_mode(cls: str, padding_mode: str) -> None:
    if padding_mode != "zeros":
        raise NotImplementedError(f"{cls}: padding_mode {padding_mode!r} is not supported; only "
                                  f"'zeros' (pad with F.pad first for the other modes)")


# --------------------------------------------------------------------------- convolutions


class Conv1d(Module):
    """1-d convolution over (N, C, L), weight (out_channels, in_channels // groups, k).

    >>> Conv1d(3, 8, 3, padding=1)(vnp.ones((2, 3, 10))).shape
    (2, 8, 10)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", *, key: Any = None, dtype=dt.float32):
        from .convs import _one
        _zeros_mode("Conv1d", padding_mode)
        self.in_channels = _positive("Conv1d", "in_channels", in_channels)
        self.out_channels = _positive("Conv1d", "out_channels", out_channels)
        self.groups = _groups("Conv1d", groups, in_channels, out_channels)
        k = _one("Conv1d", "kernel_size", kernel_size, 1)
        self.kernel_size = (k,)
        self.stride = (_one("Conv1d", "stride", stride, 1),)
        if isinstance(padding, str):
            F._check_padding_string("Conv1d", padding, (1, self.stride[0]))
            self.padding = padding
        else:
            self.padding = (_one("Conv1d", "padding", padding, 0),)
        self.dilation = (_one("Conv1d", "dilation", dilation, 1),)
        fan_in = in_channels // groups * k
        kw, kb = vr.split(_key(key))
        self.weight = _param(_kaiming_uniform(kw, (out_channels, in_channels // groups, k), fan_in, dtype))
        self.bias = _param(_bias_uniform(kb, (out_channels,), fan_in, dtype)) if bias else None

    def forward(self, x: Any) -> Array:
        p = self.padding if isinstance(self.padding, str) else self.padding[0]
        return F.conv1d(x, self.weight, self.bias, self.stride[0], p, self.dilation[0], self.groups)


class _ConvTransposeNd(Module):
    _cls, _nd = "", 0

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, output_padding: Any = 0, groups: int = 1, bias: bool = True,
                 dilation: Any = 1, padding_mode: str = "zeros", *, key: Any = None,
                 dtype=dt.float32):
        from .convs import _one
        cls, nd = self._cls, self._nd
        _zeros_mode(cls, padding_mode)
        tup = (lambda what, v, lo: (_one(cls, what, v, lo),)) if nd == 1 else \
            (lambda what, v, lo: F._pair(cls, what, v, lo))
        self.in_channels = _positive(cls, "in_channels", in_channels)
        self.out_channels = _positive(cls, "out_channels", out_channels)
        self.groups = _groups(cls, groups, in_channels, out_channels)
        self.kernel_size = tup("kernel_size", kernel_size, 1)
        self.stride = tup("stride", stride, 1)
        self.padding = tup("padding", padding, 0)
        self.output_padding = tup("output_padding", output_padding, 0)
        self.dilation = tup("dilation", dilation, 1)
        # torch computes fan_in from weight.shape[1] (= out_channels // groups) times the kernel
        fan_in = out_channels // groups * math.prod(self.kernel_size)
        kw, kb = vr.split(_key(key))
        shape = (in_channels, out_channels // groups) + self.kernel_size
        self.weight = _param(_kaiming_uniform(kw, shape, fan_in, dtype))
        self.bias = _param(_bias_uniform(kb, (out_channels,), fan_in, dtype)) if bias else None

    def _output_padding(self, x: Array, output_size: Any) -> tuple:
        if output_size is None:
            return self.output_padding
        size = tuple(output_size)[-self._nd:]
        spatial = x.shape[-self._nd:]
        out = []
        for i, want in enumerate(size):
            base = ((spatial[i] - 1) * self.stride[i] - 2 * self.padding[i]
                    + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
            extra = want - base
            if not 0 <= extra < max(self.stride[i], self.dilation[i]):
                raise ValueError(f"{self._cls}: requested output_size {tuple(output_size)} is not "
                                 f"reachable from input {x.shape} (the smallest is {base}, at most "
                                 f"{max(self.stride[i], self.dilation[i]) - 1} more)")
            out.append(extra)
        return tuple(out)

    def forward(self, x: Any, output_size: Any = None) -> Array:
        x = vnp.asarray(x)
        op = self._output_padding(x, output_size)
        fn = F.conv_transpose1d if self._nd == 1 else F.conv_transpose2d
        unpack = (lambda t: t[0]) if self._nd == 1 else (lambda t: t)
        return fn(x, self.weight, self.bias, unpack(self.stride), unpack(self.padding), unpack(op),
                  self.groups, unpack(self.dilation))


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-d convolution, weight (in_channels, out_channels // groups, k).

    >>> ConvTranspose1d(2, 3, 3, stride=2)(vnp.ones((1, 2, 5))).shape
    (1, 3, 11)
    """
    _cls, _nd = "ConvTranspose1d", 1


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-d convolution, weight (in_channels, out_channels // groups, kh, kw).

    >>> ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=1)(vnp.ones((1, 2, 4, 4))).shape
    (1, 3, 8, 8)
    """
    _cls, _nd = "ConvTranspose2d", 2


# --------------------------------------------------------------------------- normalisation


class GroupNorm(Module):
    """Group normalisation of (N, C, *); weight ones, bias zeros (per channel).

    >>> GroupNorm(2, 4)(vnp.ones((3, 4, 5))).shape
    (3, 4, 5)
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 *, dtype=dt.float32):
        if not isinstance(num_groups, int) or num_groups < 1 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels={num_channels} must be divisible by "
                             f"num_groups={num_groups}")
        self.num_groups, self.num_channels = num_groups, _positive("GroupNorm", "num_channels", num_channels)
        self.eps, self.affine = float(eps), bool(affine)
        self.weight = _param(vnp.ones((num_channels,), dtype)) if affine else None
        self.bias = _param(vnp.zeros((num_channels,), dtype)) if affine else None

    def forward(self, x: Any) -> Array:
        x = vnp.asarray(x)
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ShapeError(f"GroupNorm({self.num_groups}, {self.num_channels}): input must be "
                             f"(N, {self.num_channels}, *), got shape {x.shape}")
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) over the trailing normalized_shape axes, times weight (ones).

    >>> RMSNorm(4)(vnp.ones((2, 4))).shape
    (2, 4)
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True, *, dtype=dt.float32):
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape = tuple(_positive("RMSNorm", "normalized_shape", d) for d in ns)
        self.eps = None if eps is None else float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        self.weight = _param(vnp.ones(ns, dtype)) if elementwise_affine else None

    def forward(self, x: Any) -> Array:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class InstanceNorm2d(Module):
    """Instance normalisation of (N, C, H, W) or (C, H, W): each example's channel over its
    own positions. torch's defaults: affine=False, track_running_stats=False; with
    track_running_stats, train mode updates running_mean/running_var (as BatchNorm2d) and
    eval mode normalises with them.

    >>> InstanceNorm2d(3)(vnp.ones((2, 3, 4, 4))).shape
    (2, 3, 4, 4)
    """
    _buffers = ("running_mean", "running_var")

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = False, track_running_stats: bool = False, *, dtype=dt.float32):
        _norm_state(self, "InstanceNorm2d", num_features, eps, momentum, affine, track_running_stats,
                    dtype)

    def forward(self, x: Any) -> Array:
        x = vnp.asarray(x)
        if x.ndim not in (3, 4) or x.shape[-3] != self.num_features:
            raise ShapeError(f"InstanceNorm2d({self.num_features}): input must be NCHW or CHW with "
                             f"{self.num_features} channels, got shape {x.shape}")
        unbatched = x.ndim == 3
        if unbatched:
            x = vnp.expand_dims(x, 0)
        use_input = self.training or not self.track_running_stats
        y, m, v = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                  use_input, self.momentum, self.eps, return_running=True)
        if self.training and self.track_running_stats:
            _assign(self, "running_mean", m.astype(self.running_mean.dtype))
            _assign(self, "running_var", v.astype(self.running_var.dtype))
        return y[0] if unbatched else y


# --------------------------------------------------------------------------- attention


def _xavier_uniform(key: Array, shape: tuple, dtype) -> Array:
    bound = math.sqrt(6.0 / (shape[0] + shape[1]))
    return vr.uniform(key, shape, dtype, minval=-bound, maxval=bound)


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention: project query/key/value, attend per head, project out.

    Parameters as torch: in_proj_weight (3E, E) and in_proj_bias (3E,) when kdim = vdim =
    embed_dim (else q_proj_weight, k_proj_weight, v_proj_weight), out_proj (a Linear),
    bias_k / bias_v with add_bias_kv. Inputs are (L, N, E) or, with batch_first, (N, L, E);
    unbatched (L, E) too. key_padding_mask (N, S) and attn_mask (L, S) or (N * heads, L, S):
    bool True means *not allowed* (torch's convention here), float is added. Returns
    (output, weights): weights averaged over heads (N, L, S) unless average_attn_weights is
    False ((N, heads, L, S)), None when need_weights is False. Dropout on the weights (train
    mode, dropout > 0) needs `key=`.

    >>> MultiheadAttention(4, 2)(vnp.ones((3, 2, 4)), vnp.ones((5, 2, 4)), vnp.ones((5, 2, 4)))[0].shape
    (3, 2, 4)
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, *, key: Any = None,
                 dtype=dt.float32):
        E = _positive("MultiheadAttention", "embed_dim", embed_dim)
        if not isinstance(num_heads, int) or num_heads < 1 or E % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim {E} must be divisible by num_heads "
                             f"{num_heads}")
        self.embed_dim, self.num_heads, self.head_dim = E, num_heads, E // num_heads
        self.kdim = E if kdim is None else kdim
        self.vdim = E if vdim is None else vdim
        self._qkv_same_embed_dim = self.kdim == E and self.vdim == E
        self.dropout, self.batch_first = float(dropout), bool(batch_first)
        self.add_zero_attn = bool(add_zero_attn)
        ks = vr.split(_key(key), 6)
        if self._qkv_same_embed_dim:
            self.in_proj_weight = _param(_xavier_uniform(ks[0], (3 * E, E), dtype))
        else:
            self.q_proj_weight = _param(_xavier_uniform(ks[0], (E, E), dtype))
            self.k_proj_weight = _param(_xavier_uniform(ks[1], (E, self.kdim), dtype))
            self.v_proj_weight = _param(_xavier_uniform(ks[2], (E, self.vdim), dtype))
        self.in_proj_bias = _param(vnp.zeros((3 * E,), dtype)) if bias else None
        self.out_proj = Linear(E, E, bias=bias, key=ks[3], dtype=dtype)
        if bias:
            self.out_proj.bias = _param(vnp.zeros((E,), dtype))
        if add_bias_kv:   # torch: xavier_normal_ on (1, 1, E)
            std = math.sqrt(2.0 / (1 + E))
            self.bias_k = _param(vr.normal(ks[4], (1, 1, E), dtype) * std)
            self.bias_v = _param(vr.normal(ks[5], (1, 1, E), dtype) * std)
        else:
            self.bias_k = self.bias_v = None

    def _proj(self, x: Array, i: int) -> Array:
        E = self.embed_dim
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight[i * E:(i + 1) * E]
        else:
            w = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)[i]
        b = None if self.in_proj_bias is None else self.in_proj_bias[i * E:(i + 1) * E]
        return F.linear(x, w, b)

    @staticmethod
    def _mask(name: str, m: Any, like: Array) -> Array | None:
        """torch's MHA masks (bool True: masked out; float: added) as an additive float mask."""
        if m is None:
            return None
        m = vnp.asarray(m)
        if m.dtype == dt.bool_:
            return vnp.where(m, -math.inf, 0.0).astype(like.dtype)
        if not dt.is_float(m.dtype):
            raise DTypeError(f"MultiheadAttention: {name} must be bool or float, got {m.dtype}")
        return m.astype(like.dtype)

    def forward(self, query: Any, key: Any, value: Any, key_padding_mask: Any = None,
                need_weights: bool = True, attn_mask: Any = None, average_attn_weights: bool = True,
                is_causal: bool = False, *, dropout_key: Any = None):
        q, k, v = (vnp.asarray(a) for a in (query, key, value))
        unbatched = q.ndim == 2
        if unbatched:
            q, k, v = (vnp.expand_dims(a, 1) for a in (q, k, v))
            if key_padding_mask is not None:
                key_padding_mask = vnp.expand_dims(vnp.asarray(key_padding_mask), 0)
        elif self.batch_first:
            q, k, v = (vnp.swapaxes(a, 0, 1) for a in (q, k, v))
        if q.ndim != 3 or k.ndim != 3 or v.ndim != 3 or q.shape[2] != self.embed_dim:
            raise ShapeError(f"MultiheadAttention: query {q.shape}, key {k.shape}, value {v.shape} "
                             f"must be (L, N, {self.embed_dim}), (S, N, kdim), (S, N, vdim) "
                             f"(batch first with batch_first=True)")
        L, N, E = q.shape
        H, D = self.num_heads, self.head_dim
        q, k, v = self._proj(q, 0), self._proj(k, 1), self._proj(v, 2)     # (T, N, E)
        am = self._mask("attn_mask", attn_mask, q)
        kpm = self._mask("key_padding_mask", key_padding_mask, q)
        if self.bias_k is not None:
            k = vnp.concatenate([k, vnp.broadcast_to(self.bias_k, (1, N, E))], axis=0)
            v = vnp.concatenate([v, vnp.broadcast_to(self.bias_v, (1, N, E))], axis=0)
            am = None if am is None else vnp.pad(am, [(0, 0)] * (am.ndim - 1) + [(0, 1)])
            kpm = None if kpm is None else vnp.pad(kpm, ((0, 0), (0, 1)))
        if self.add_zero_attn:
            k = vnp.concatenate([k, vnp.zeros((1, N, E), k.dtype)], axis=0)
            v = vnp.concatenate([v, vnp.zeros((1, N, E), v.dtype)], axis=0)
            am = None if am is None else vnp.pad(am, [(0, 0)] * (am.ndim - 1) + [(0, 1)])
            kpm = None if kpm is None else vnp.pad(kpm, ((0, 0), (0, 1)))
        S = k.shape[0]
        # (T, N, E) -> (N, H, T, D)
        heads = lambda t: vnp.transpose(vnp.reshape(t, (t.shape[0], N, H, D)), (1, 2, 0, 3))
        q, k, v = heads(q), heads(k), heads(v)
        mask = None
        if am is not None:
            if am.shape == (L, S):
                mask = am
            elif am.shape == (N * H, L, S):
                mask = vnp.reshape(am, (N, H, L, S))
            else:
                raise ShapeError(f"MultiheadAttention: attn_mask must be ({L}, {S}) or "
                                 f"({N * H}, {L}, {S}), got {tuple(am.shape)}")
        if kpm is not None:
            if kpm.shape != (N, S):
                raise ShapeError(f"MultiheadAttention: key_padding_mask must be ({N}, {S}), "
                                 f"got {tuple(kpm.shape)}")
            kp = vnp.reshape(kpm, (N, 1, 1, S))
            mask = kp if mask is None else mask + kp
        w = attention_weights(q, k, mask, is_causal, None, "MultiheadAttention")   # (N, H, L, S)
        wd = w
        if self.training and self.dropout > 0.0:
            if dropout_key is None:
                raise ValueError(f"MultiheadAttention(dropout={self.dropout}) in train mode needs "
                                 f"dropout_key= (a vkml.random key), or call .eval()")
            wd = F.dropout(w, self.dropout, dropout_key)
        o = vnp.matmul(wd, v)                                                # (N, H, L, D)
        o = vnp.reshape(vnp.transpose(o, (2, 0, 1, 3)), (L, N, E))
        o = self.out_proj(o)
        if self.batch_first and not unbatched:
            o = vnp.swapaxes(o, 0, 1)
        if unbatched:
            o = o[:, 0]
        if not need_weights:
            return o, None
        # torch returns the weights after dropout, as they were applied
        w = vnp.mean(wd, axis=1) if average_attn_weights else wd
        return o, (w[0] if unbatched else w)


# --------------------------------------------------------------------------- containers


def _check_name(cls: Module, name: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{type(cls).__name__}: keys must be strings, got {type(name).__name__}")
    if name == "training" or name.startswith("_") or "." in name or name == "" or \
            hasattr(type(cls), name):
        raise KeyError(f"{type(cls).__name__}: key {name!r} is not allowed (it is empty, has a "
                       f"'.', starts with '_', or is an attribute of the class)")
    return name


def _as_module(cls: str, m: Any) -> Module:
    if not isinstance(m, Module):
        raise TypeError(f"{cls}: {type(m).__name__} is not a Module")
    return m


class ModuleList(Module):
    """A list of modules; each is a field named by its index, so state_dict keys are
    torch's ("0.weight", ...). It has no forward: index or iterate it.

    >>> from vkml.nn import Linear
    >>> ml = ModuleList([Linear(2, 2), Linear(2, 3)])
    >>> len(ml), ml[-1].out_features, list(ml.state_dict())[:2]
    (2, 3, ['0.weight', '0.bias'])
    """

    def __init__(self, modules: Iterable[Module] | None = None):
        for m in modules or ():
            self.append(m)

    def _items(self) -> list[Module]:
        n = len(self)
        return [self.__dict__[str(i)] for i in range(n)]

    def __len__(self) -> int:
        return sum(1 for k in self.__dict__ if k.isdigit())

    def __getitem__(self, i: int | slice) -> Any:
        items = self._items()
        return ModuleList(items[i]) if isinstance(i, slice) else items[i]

    def __setitem__(self, i: int, m: Module) -> None:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"ModuleList: index {i} is out of range for length {n}")
        self.__dict__[str(i % n)] = _as_module("ModuleList", m)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._items())

    def append(self, module: Module) -> "ModuleList":
        self.__dict__[str(len(self))] = _as_module("ModuleList", module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleList has no forward(); iterate over its modules")


class ModuleDict(Module):
    """A dict of modules in insertion order; each is a field named by its key, so
    state_dict keys are torch's ("encoder.weight", ...).

    >>> from vkml.nn import Linear
    >>> md = ModuleDict({"enc": Linear(2, 4), "dec": Linear(4, 2)})
    >>> list(md.keys()), md["dec"].in_features
    (['enc', 'dec'], 4)
    """

    def __init__(self, modules: Any = None):
        if modules is not None:
            self.update(modules)

    def _keys(self) -> list[str]:
        return [k for k in self.__dict__ if k != "training" and not k.startswith("_")]

    def __getitem__(self, k: str) -> Module:
        if k not in self._keys():
            raise KeyError(k)
        return self.__dict__[k]

    def __setitem__(self, k: str, m: Module) -> None:
        self.__dict__[_check_name(self, k)] = _as_module("ModuleDict", m)

    def __delitem__(self, k: str) -> None:
        if k not in self._keys():
            raise KeyError(k)
        del self.__dict__[k]

    def __contains__(self, k: str) -> bool:
        return k in self._keys()

    def __len__(self) -> int:
        return len(self._keys())

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def keys(self) -> list[str]:
        return self._keys()

    def values(self) -> list[Module]:
        return [self.__dict__[k] for k in self._keys()]

    def items(self) -> list[tuple[str, Module]]:
        return [(k, self.__dict__[k]) for k in self._keys()]

    def update(self, modules: Any) -> None:
        pairs = modules.items() if hasattr(modules, "items") else modules
        for k, m in pairs:
            self[k] = m

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleDict has no forward(); index it by key")


# --------------------------------------------------------------------------- activation layers


class _Act(Module):
    """A parameter-free layer calling one function of F with its configuration."""
    _fn, _args = "", ()

    def forward(self, x: Any) -> Array:
        return getattr(F, self._fn)(x, *(getattr(self, a) for a in self._args))


class LeakyReLU(_Act):
    """F.leaky_relu.

    >>> LeakyReLU(0.5)(vnp.asarray([-2.0])).numpy().tolist()
    [-1.0]
    """
    _fn, _args = "leaky_relu", ("negative_slope",)

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        self.negative_slope = float(negative_slope)


class ELU(_Act):
    """F.elu."""
    _fn, _args = "elu", ("alpha",)

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        self.alpha = float(alpha)


class CELU(_Act):
    """F.celu."""
    _fn, _args = "celu", ("alpha",)

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        self.alpha = float(alpha)


class SELU(_Act):
    """F.selu."""
    _fn = "selu"

    def __init__(self, inplace: bool = False):
        pass


class Softplus(_Act):
    """F.softplus."""
    _fn, _args = "softplus", ("beta", "threshold")

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        self.beta, self.threshold = float(beta), float(threshold)


class Softsign(_Act):
    """F.softsign."""
    _fn = "softsign"


class Hardsigmoid(_Act):
    """F.hardsigmoid."""
    _fn = "hardsigmoid"

    def __init__(self, inplace: bool = False):
        pass


class Hardswish(_Act):
    """F.hardswish."""
    _fn = "hardswish"

    def __init__(self, inplace: bool = False):
        pass


class Hardtanh(_Act):
    """F.hardtanh."""
    _fn, _args = "hardtanh", ("min_val", "max_val")

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val {min_val} must not exceed max_val {max_val}")
        self.min_val, self.max_val = float(min_val), float(max_val)


class ReLU6(_Act):
    """F.relu6."""
    _fn = "relu6"

    def __init__(self, inplace: bool = False):
        pass


class Mish(_Act):
    """F.mish."""
    _fn = "mish"

    def __init__(self, inplace: bool = False):
        pass


class LogSigmoid(_Act):
    """F.logsigmoid."""
    _fn = "logsigmoid"


class GLU(_Act):
    """F.glu along dim (default -1)."""
    _fn, _args = "glu", ("dim",)

    def __init__(self, dim: int = -1):
        self.dim = int(dim)


class Softmin(_Act):
    """F.softmin along dim."""
    _fn, _args = "softmin", ("dim",)

    def __init__(self, dim: int | None = None):
        self.dim = dim


class Softmax(Module):
    """softmax along dim (torch's implicit choice when None: 0 for 0-, 1-, 3-d input, else 1).

    >>> Softmax(dim=-1)(vnp.zeros((1, 2))).numpy().tolist()
    [[0.5, 0.5]]
    """

    def __init__(self, dim: int | None = None):
        self.dim = dim

    def forward(self, x: Any) -> Array:
        x = vnp.asarray(x)
        d = self.dim if self.dim is not None else (0 if x.ndim in (0, 1, 3) else 1)
        return F.softmax(x, axis=d)


class LogSoftmax(Softmax):
    """log_softmax along dim (the implicit choice as Softmax)."""

    def forward(self, x: Any) -> Array:
        x = vnp.asarray(x)
        d = self.dim if self.dim is not None else (0 if x.ndim in (0, 1, 3) else 1)
        return F.log_softmax(x, axis=d)


# --------------------------------------------------------------------------- resizing layers


class AdaptiveAvgPool2d(Module):
    """F.adaptive_avg_pool2d to output_size (an int, a pair, None keeps a size).

    >>> AdaptiveAvgPool2d(1)(vnp.ones((2, 3, 5, 5))).shape
    (2, 3, 1, 1)
    """

    def __init__(self, output_size: Any):
        self.output_size = output_size if isinstance(output_size, int) or output_size is None \
            else tuple(output_size)

    def forward(self, x: Any) -> Array:
        return F.adaptive_avg_pool2d(x, self.output_size)


class Upsample(Module):
    """F.interpolate with fixed size or scale_factor, mode and align_corners.

    >>> Upsample(scale_factor=2, mode="bilinear")(vnp.ones((1, 1, 2, 3))).shape
    (1, 1, 4, 6)
    """

    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: bool | None = None, recompute_scale_factor: bool | None = None):
        tup = lambda v: v if v is None or isinstance(v, (int, float)) else tuple(v)
        self.size, self.scale_factor = tup(size), tup(scale_factor)
        self.mode, self.align_corners = mode, align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, x: Any) -> Array:
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)
