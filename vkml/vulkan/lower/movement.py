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

from functools import lru_cache

from ...trace import dtypes as dt
from ...trace.ops import OpKind
from ...trace.shapes import contiguous_strides, size_of
from ..kernels import divisor, texel_format
from ..program import Meta, Program
from .copies import copy
from .elementwise import _local_size, bcast_layout, strided
from .fill import fill_view
from .vectors import VEC4


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
        if _concat(ctx, node, ins, out, ax):
            return
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


# inputs one Concat kernel reads (its bindings); more are split into column ranges
CONCAT_PIECES = 8


@lru_cache(maxsize=256)
def concat_program(T: str, W: int, texels: tuple, lx: int) -> Program:
    """o[r, c0 + c] = x_j[r, c - e_{j-1}] for c in [e_{j-1}, e_j): one piece of each
    input row per output row, pieces side by side. Rows and columns count W-element
    groups (a thread moves one, as a vec4 where W = 4); texels[j] a texel format for
    x_j or None (a storage buffer)."""
    n = len(texels)
    p = Program("Concat", local_size=lx)
    p.meta = Meta(("nv", 1), ("cols", 1), ("div", 2), ("ocols", 1), ("c0", 1), ("ends", n), ("widths", n))
    VT = VEC4[T] if W == 4 else T
    o = p.buffer("o", VT)
    xs = [p.buffer(f"x{j}", T if t is not None else VT, readonly=True, texel=t) for j, t in enumerate(texels)]
    lines = ["uint gi = gidx();", f"if (gi >= uint({p.m('nv')})) return;",
             f"int r = int(udiv(gi, {p.m('div', 0)}, {p.m('div', 1)}));",
             f"int c = int(gi) - r * {p.m('cols')};", f"{VT} v;"]
    for j, (x, t) in enumerate(zip(xs, texels)):
        lo = "0" if j == 0 else p.m("ends", j - 1)
        idx = f"r * {p.m('widths', j)} + c - {lo}"
        load = f"texelFetch({x}, {idx}){'' if W == 4 else '.x'}" if t is not None else f"{x}[{idx}]"
        cond = f"if (c < {p.m('ends', j)}) " if j < n - 1 else ""
        lines.append(("" if j == 0 else "else ") + cond + f"v = {VT}({load});")
    lines.append(f"{o}[r * {p.m('ocols')} + {p.m('c0')} + c] = v;")
    p.main(*lines)
    return p


def _concat(ctx, node, ins, out, ax: int) -> bool:
    """A Concat of 32-bit (or float64) operands as kernels of up to CONCAT_PIECES inputs
    each (one for most), instead of one strided copy per input: on lavapipe a dispatch
    costs more than the copy it runs, and the strided copy decodes every element's index
    by division. False where it does not apply (the per-input copies then run)."""
    T = dt.glsl_type(node.dtype) if not dt.is_low(node.dtype) else None
    if T not in ("float", "int", "double") or any(v.dtype != node.dtype for v in ins):
        return False
    inner, rows = size_of(node.shape[ax + 1:]), size_of(node.shape[:ax])
    widths = [v.shape[ax] * inner for v in ins]
    total = sum(widths)
    if not rows or not total:
        return True
    isz = dt.itemsize(node.dtype)
    W = 4 if T != "double" and all(w % 4 == 0 for w in widths) and all(
        v.offset % (4 * isz) == 0 for v in (out, *ins)) else 1
    start = 0
    for k in range(0, len(ins), CONCAT_PIECES):
        chunk = [(v, w) for v, w in zip(ins[k:k + CONCAT_PIECES], widths[k:k + CONCAT_PIECES]) if w]
        cw = sum(w for _, w in chunk)
        if chunk:
            ends, e = [], 0
            for _, w in chunk:
                e += w // W
                ends.append(e)
            texels = tuple(texel_format(ctx.dev, v, W) if T == "float" else None for v, _ in chunk)
            nv = rows * (cw // W)
            prog = concat_program(T, W, texels, _local_size(ctx.dev, nv))
            meta = {"nv": nv, "cols": cw // W, "div": list(divisor(cw // W)), "ocols": total // W,
                    "c0": start // W, "ends": ends, "widths": [w // W for _, w in chunk]}
            ctx.dispatch(ctx.kernel(prog), meta, [out, *[v for v, _ in chunk]], threads=nv, heads=0)
        start += cw
    return True
