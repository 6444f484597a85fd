"""Movement operators as strided copies: the input (or output) is addressed through
offset and strides, so none of them needs a kernel of its own beyond the word copy
(`copies.copy`, many words per invocation; the generic `elementwise.strided` where it
does not apply). Under fusion most of them are
not kernels at all but layouts of a region's loads (`vulkan/regions.py`).

>>> import vkml.numpy as vnp
>>> from vkml.vulkan import fusion
>>> with fusion.disabled():
...     vnp.flip(vnp.reshape(vnp.arange(6.0), (2, 3)), axis=1).numpy().tolist()
[[2.0, 1.0, 0.0], [5.0, 4.0, 3.0]]
"""
from __future__ import annotations

from ...trace.ops import OpKind
from ...trace.shapes import contiguous_strides
from .copies import copy
from .elementwise import bcast_layout, strided
from .fill import fill_view


def _copy(ctx, name, out, out_layout, src, src_layout, shape):
    if not copy(ctx, name, out, out_layout, src, src_layout, shape):
        strided(ctx, name, "a", out, out_layout, [src], [src_layout], shape)


def _slice_layout(shape, starts, steps):
    st = contiguous_strides(shape)
    return sum(b * s for b, s in zip(starts, st)), tuple(s * k for s, k in zip(st, steps))


def lower(node, ins, out, ctx) -> None:
    """Lower one movement operator (Reshape, Permute, Expand, Slice, Flip, Pad, Concat,
    SliceBackward) into strided copies (and a fill for the padding of Pad and
    SliceBackward)."""
    op, a = node.op, node.attrs
    x = ins[0]
    dense = (0, contiguous_strides(node.shape))
    if op is OpKind.Reshape:
        _copy(ctx, "Reshape", out, (0, (1,)), x, (0, (1,)), (node.size,))
    elif op is OpKind.Permute:
        st = contiguous_strides(x.shape)
        _copy(ctx, "Permute", out, dense, x, (0, tuple(st[p] for p in a["perm"])), node.shape)
    elif op is OpKind.Expand:
        _copy(ctx, "Expand", out, dense, x, bcast_layout(x.shape, node.shape), node.shape)
    elif op is OpKind.Slice:
        _copy(ctx, "Slice", out, dense, x, _slice_layout(x.shape, a["starts"], a["steps"]), node.shape)
    elif op is OpKind.Flip:
        st = contiguous_strides(x.shape)
        off = sum((x.shape[i] - 1) * st[i] for i in a["axes"])
        _copy(ctx, "Flip", out, dense, x,
              (off, tuple(-s if i in a["axes"] else s for i, s in enumerate(st))), node.shape)
    elif op is OpKind.Pad:
        fill_view(ctx, out, a["value"])
        ost = contiguous_strides(node.shape)
        off = sum(lo * s for (lo, _), s in zip(a["pads"], ost))
        _copy(ctx, "Pad", out, (off, ost), x, (0, contiguous_strides(x.shape)), x.shape)
    elif op is OpKind.Concat:
        ax = a["axis"]
        ost = contiguous_strides(node.shape)
        pos = 0
        for v in ins:
            _copy(ctx, "Concat", out, (pos * ost[ax], ost), v, (0, contiguous_strides(v.shape)), v.shape)
            pos += v.shape[ax]
    elif op is OpKind.SliceBackward:
        fill_view(ctx, out, 0)
        _copy(ctx, "SliceBackward", out, _slice_layout(node.shape, a["starts"], a["steps"]), x,
              (0, contiguous_strides(x.shape)), x.shape)
    else:
        raise NotImplementedError(op)
