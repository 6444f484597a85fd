"""conv1d and the transposed convolutions (torch.nn.functional's conv1d,
conv_transpose1d, conv_transpose2d).

conv1d is conv2d over a height-1 image. A transposed convolution is the adjoint of a
convolution: one batched matmul of the input with the weight (columns of kernel patches),
then Col2Im sums the patches into the output, so it costs what conv2d's backward does.

>>> import vkml.numpy as vnp
>>> conv_transpose2d(vnp.ones((1, 2, 3, 3)), vnp.ones((2, 4, 3, 3)), stride=2).shape
(1, 4, 7, 7)
"""
from __future__ import annotations

from typing import Any

from .. import numpy as vnp
from ..array import Array, bind
from ..trace.ops import OpKind
from ..trace.shapes import ShapeError

__all__ = ["conv1d", "conv_transpose1d", "conv_transpose2d"]


def _one(name: str, what: str, v: Any, lo: int) -> int:
    t = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if len(t) != 1 or not isinstance(t[0], int) or isinstance(t[0], bool) or t[0] < lo:
        raise ValueError(f"{name}: {what} {v!r} must be an int >= {lo} (or a 1-tuple)")
    return t[0]


def conv1d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Array:
    """1-d convolution of (N, C, L) or (C, L) input with weight (O, C // groups, k);
    padding an int, "valid" or "same".

    >>> conv1d(vnp.ones((2, 3, 10)), vnp.ones((4, 3, 3)), padding=1).shape
    (2, 4, 10)
    """
    from .functional import _common_float, conv2d
    x, w, b = _common_float("conv1d", input, weight, bias)
    if x.ndim not in (2, 3):
        raise ShapeError(f"conv1d: input must be (N, C, L) or (C, L), got shape {x.shape}")
    if w.ndim != 3:
        raise ShapeError(f"conv1d: weight must be (out_channels, in_channels // groups, k), got {w.shape}")
    s = _one("conv1d", "stride", stride, 1)
    d = _one("conv1d", "dilation", dilation, 1)
    p = padding if isinstance(padding, str) else (0, _one("conv1d", "padding", padding, 0))
    y = conv2d(vnp.expand_dims(x, -2), vnp.expand_dims(w, -2), b, (1, s), p, (1, d), groups)
    return vnp.squeeze(y, -2)


def conv_transpose2d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Array:
    """Transposed 2-d convolution of (N, C_in, H, W) or (C_in, H, W) with weight
    (C_in, C_out // groups, kh, kw) (torch's layout): the output is
    (H - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1 high (and so wide).

    >>> conv_transpose2d(vnp.ones((1, 1, 2, 2)), vnp.ones((1, 1, 2, 2))).numpy()[0, 0].tolist()
    [[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]
    """
    from .functional import _batched4, _common_float, _pair
    name = "conv_transpose2d"
    x, w, b = _common_float(name, input, weight, bias)
    x, unbatched = _batched4(name, x)
    if w.ndim != 4:
        raise ShapeError(f"{name}: weight must be (in_channels, out_channels // groups, kh, kw), "
                         f"got shape {w.shape}")
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"{name}: groups {groups!r} must be a positive int")
    N, C, H, W = x.shape
    Ci, Og, kh, kw = w.shape
    if Ci != C or C % groups:
        raise ShapeError(f"{name}: input {x.shape} with weight {w.shape} and groups={groups}: "
                         f"weight.shape[0] must equal the input's channels and divide by groups")
    st = _pair(name, "stride", stride, 1)
    pad = _pair(name, "padding", padding, 0)
    dil = _pair(name, "dilation", dilation, 1)
    op = _pair(name, "output_padding", output_padding, 0)
    if op[0] >= max(st[0], dil[0]) or op[1] >= max(st[1], dil[1]):
        raise ValueError(f"{name}: output_padding {op} must be smaller than either stride {st} "
                         f"or dilation {dil}")
    out = tuple((n - 1) * s - 2 * p + d * (k - 1) + o + 1
                for n, s, p, d, k, o in zip((H, W), st, pad, dil, (kh, kw), op))
    if min(out) < 1:
        raise ShapeError(f"{name}: input {x.shape} with kernel {(kh, kw)}, stride {st} and padding "
                         f"{pad} gives an empty output {out}")
    O, K, L = Og * groups, Og * kh * kw, H * W
    if groups == 1:
        cols = vnp.matmul(vnp.transpose(vnp.reshape(w, (C, K))), vnp.reshape(x, (N, C, L)))
    else:
        wg = vnp.swapaxes(vnp.reshape(w, (groups, C // groups, K)), 1, 2)     # (G, K, C/G)
        cols = vnp.matmul(wg, vnp.reshape(x, (N, groups, C // groups, L)))     # (N, G, K, L)
        cols = vnp.reshape(cols, (N, groups * K, L))
    y = bind(OpKind.Col2Im, [cols], output_size=out, kernel=(kh, kw), stride=st, padding=pad,
             dilation=dil)
    if b is not None:
        if b.shape != (O,):
            raise ShapeError(f"{name}: bias must have shape ({O},), got {b.shape}")
        y = y + vnp.reshape(b, (1, O, 1, 1))
    return y[0] if unbatched else y


def conv_transpose1d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Array:
    """Transposed 1-d convolution of (N, C_in, L) or (C_in, L) with weight
    (C_in, C_out // groups, k).

    >>> conv_transpose1d(vnp.ones((1, 2, 5)), vnp.ones((2, 3, 3)), stride=2).shape
    (1, 3, 11)
    """
    name = "conv_transpose1d"
    x, w = vnp.asarray(input), vnp.asarray(weight)
    if x.ndim not in (2, 3):
        raise ShapeError(f"{name}: input must be (N, C, L) or (C, L), got shape {x.shape}")
    if w.ndim != 3:
        raise ShapeError(f"{name}: weight must be (in_channels, out_channels // groups, k), got {w.shape}")
    y = conv_transpose2d(vnp.expand_dims(x, -2), vnp.expand_dims(w, -2), bias,
                         (1, _one(name, "stride", stride, 1)), (0, _one(name, "padding", padding, 0)),
                         (0, _one(name, "output_padding", output_padding, 0)), groups,
                         (1, _one(name, "dilation", dilation, 1)))
    return vnp.squeeze(y, -2)
