"""Strided copies and fills moved as 32-bit words, many per invocation: the kernels of the
movement operators (Reshape, Permute, Slice, Flip, Pad, Concat, SliceBackward, ...) and of
Full.

A copy is o[out_layout(i)] = x[src_layout(i)] for every index i of a shape, a layout being
(element offset, strides). It moves bits, not values, so one kernel serves every dtype of
an item size: a float64 element is two words (a trailing axis of 2). After the axes that
are contiguous for both operands merge (`elementwise.collapse`), an invocation moves W
consecutive words of the innermost axis (W = 8, 4, 2 or 1, the largest that divides it),
as one wide load or store where that operand is contiguous and W-aligned ('v') and as W
scalar ones otherwise ('g'), and does so for R groups a workgroup apart. The index is
decoded once per W words, by multiply-high (`kernels.divisor`), every meta value read at
a fixed place: lavapipe reads a value at a computed meta place, or any after the range
check, lane by lane, and loads storage buffers lane by lane, which made the generic
one-element-per-invocation copy (`elementwise.strided`) 10-30 times slower per element
than a fused region. Where the profile reads operands as texels (`texels`: CPU devices),
the source is a uint texel buffer. No loop: nothing here meets lavapipe's loop limiter.

>>> import numpy as np, vkml.numpy as vnp
>>> from vkml.vulkan import fusion
>>> with fusion.disabled():
...     vnp.concatenate([vnp.ones((2, 2)), vnp.zeros((2, 1))], axis=1).numpy().tolist()
[[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]]
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

from ...trace import dtypes as dt
from ..vk import vk
from ..kernels import TEXEL_BYTES, divisor
from ..program import Meta, Program
from .elementwise import MAX_RANK, _local_size, collapse

# the uint texel format holding W words (a W = 8 load is two 4-word texels)
WORD_TEXELS = {1: vk.VK_FORMAT_R32_UINT, 2: vk.VK_FORMAT_R32G32_UINT, 4: vk.VK_FORMAT_R32G32B32A32_UINT,
               8: vk.VK_FORMAT_R32G32B32A32_UINT}
_WIDE = {2: "uvec2", 4: "uvec4", 8: "u64vec4"}


def _widths(dev) -> tuple:
    """The words per invocation to try, widest first (8 as a u64vec4 where the profile
    moves 32-bit data as uint64 pairs)."""
    return (8, 4, 2, 1) if dev.profile.wide_loads else (4, 2, 1)


def _word_texel(dev, v, W: int):
    """The uint texel format reading view v W words at a time, or None (a storage buffer):
    where the profile reads operands as texels and v starts on a texel boundary and holds
    whole texels within the device's limit."""
    if not dev.profile.texels:
        return None
    fmt = WORD_TEXELS[W]
    tb = TEXEL_BYTES[fmt]
    if v.offset % max(dev.texel_alignment, tb) or v.nbytes < tb or v.nbytes // tb > dev.max_texels:
        return None
    return fmt


def _rounds(nv: int) -> int:
    """Groups of W words per invocation: several hide lavapipe's per-invocation cost on
    large copies (as the elementwise regions' rounds do)."""
    for r in (4, 2):
        if nv >= r * (1 << 14):
            return r
    return 1


def _mode(off: int, st: Sequence[int], W: int) -> str:
    """'v' where W consecutive words of the innermost axis are one aligned wide access."""
    return "v" if W > 1 and st[-1] == 1 and off % W == 0 and all(s % W == 0 for s in st[:-1]) else "g"


def _layout_meta(meta: dict, key: str, off: int, st: Sequence[int], mode: str, W: int) -> None:
    if mode == "v":      # in units of W words: the innermost coordinate counts wide words
        meta[f"{key}_off"], meta[f"{key}_st"] = off // W, [*[s // W for s in st[:-1]], 1]
    else:                # the W words of an invocation lie step apart
        meta[f"{key}_off"], meta[f"{key}_st"], meta[f"{key}_step"] = off, [*st[:-1], W * st[-1]], st[-1]


def copy(ctx, name: str, out, out_layout, src, src_layout, shape: Sequence[int]) -> bool:
    """Dispatch o[out_layout(i)] = x[src_layout(i)] for every index i of shape, views out
    and src of one dtype (layouts in elements). False (nothing dispatched) where this
    kernel does not apply: the dtypes differ or are 16-bit (those copies run widened)."""
    if np.dtype(out.dtype) != np.dtype(src.dtype):
        return False
    size = dt.itemsize(out.dtype)
    if size not in (4, 8):
        return False
    n = 1
    for d in shape:
        n *= d
    if n == 0:
        return True
    shape = tuple(shape)
    (ooff, ost), (xoff, xst) = out_layout, src_layout
    if size == 8:        # two words an element
        shape, ooff, xoff = shape + (2,), 2 * ooff, 2 * xoff
        ost, xst = tuple(2 * s for s in ost) + (1,), tuple(2 * s for s in xst) + (1,)
    shp, (ost, xst) = collapse(shape, [ost, xst])
    if not shp:
        shp, ost, xst = (1,), (1,), (1,)
    K = len(shp)
    if K > MAX_RANK:
        raise ValueError(f"{name}: {len(shp)} non-mergeable axes exceed the kernel limit of {MAX_RANK}")
    nw = n * size // 4
    prof = ctx.profile
    W = 1
    if prof.vectorize and nw >= prof.vector_min:
        W = next(w for w in _widths(ctx.dev) if shp[-1] % w == 0)
    om, xm = _mode(ooff, ost, W), _mode(xoff, xst, W)
    vshp = shp[:-1] + (shp[-1] // W,)
    nv = nw // W
    meta = {"nv": nv, "shape": vshp, "div": [x for d in vshp for x in divisor(d)]}
    _layout_meta(meta, "o", ooff, ost, om, W)
    _layout_meta(meta, "x", xoff, xst, xm, W)
    R = _rounds(nv) if W > 1 else 1
    lx = _local_size(ctx.dev, -(-nv // R))
    tex = _word_texel(ctx.dev, src, W if xm == "v" else 1)
    prog = copy_program(name, K, W, om, xm, tex, R, lx)
    ctx.dispatch(ctx.kernel(prog), meta, [out, src], groups=-(-nv // (R * lx)), heads=0)
    return True


@lru_cache(maxsize=512)
def copy_program(name: str, K: int, W: int, om: str, xm: str, tex, R: int, lx: int) -> Program:
    """The copy kernel of rank K moving W words per group, R groups per invocation; om and
    xm the output's and source's access modes ('v' wide, 'g' W scalars step apart); tex
    the source's texel format or None.

    >>> print(copy_program("Copy", 1, 4, "v", "g", None, 1, 256).render().split("if (g0 >= nv) return;")[1])
    <BLANKLINE>
      int c0_0 = int(g0 + 0u);
      int po_0 = v_o_off + c0_0 * v_o_st_0;
      int px_0 = v_x_off + c0_0 * v_x_st_0;
      uint w0_0 = src[px_0 + 0 * v_x_step];
      uint w0_1 = src[px_0 + 1 * v_x_step];
      uint w0_2 = src[px_0 + 2 * v_x_step];
      uint w0_3 = src[px_0 + 3 * v_x_step];
      o[po_0] = uvec4(w0_0, w0_1, w0_2, w0_3);
    }
    <BLANKLINE>
    """
    p = Program(name, local_size=lx)
    fields = [("nv", 1), ("shape", K), ("div", 2 * K)]
    for key, m in (("o", om), ("x", xm)):
        fields += [(f"{key}_off", 1), (f"{key}_st", K)] + ([(f"{key}_step", 1)] if m == "g" else [])
    p.meta = Meta(*fields)
    if W == 8:
        p.extension("GL_ARB_gpu_shader_int64")
    o = p.buffer("o", _WIDE[W] if om == "v" else "uint")
    if tex is not None:
        x = p.buffer("src", "uint", readonly=True, texel=tex)
    else:
        x = p.buffer("src", _WIDE[W] if xm == "v" else "uint", readonly=True)
    # every meta value is read before the range check, where lavapipe reads it once
    head: list[str] = []

    def m(field: str, i: int | None = None) -> str:
        ident = p.m(field, i)
        local = "v" + ident[1:]
        if not any(h.startswith(f"int {local} ") for h in head):
            head.append(f"int {local} = {ident};")
        return local
    L: list[str] = []
    for k in range(R):
        body = []
        if K > 1:
            body.append(f"int r_{k} = int(g0 + {k * lx}u);")
            for d in range(K - 1, 0, -1):
                body.append(f"int q{d}_{k} = int(udiv(uint(r_{k}), {m('div', 2 * d)}, {m('div', 2 * d + 1)}));")
                body.append(f"int c{d}_{k} = r_{k} - q{d}_{k} * {m('shape', d)}; r_{k} = q{d}_{k};")
            body.append(f"int c0_{k} = r_{k};")
        else:
            body.append(f"int c0_{k} = int(g0 + {k * lx}u);")
        for key in ("o", "x"):
            pos = " + ".join([m(f"{key}_off")] + [f"c{d}_{k} * {m(f'{key}_st', d)}" for d in range(K)])
            body.append(f"int p{key}_{k} = {pos};")
        words = _load(body, x, xm, tex, W, f"px_{k}", f"w{k}", m("x_step") if xm == "g" else None)
        if om == "v":
            body.append(f"{o}[po_{k}] = {_pack(W, words)};")
        else:
            body += [f"{o}[po_{k} + {c} * {m('o_step')}] = {w};" for c, w in enumerate(words)]
        if k == 0:
            L += body
        else:
            L.append(f"if (g0 + {k * lx}u < nv) {{")
            L += ["  " + b for b in body]
            L.append("}")
    L = [f"uint g0 = group_id() * {R * lx}u + lidx();", f"uint nv = uint({p.m('nv')});", *head,
         "if (g0 >= nv) return;", *L]
    p.main(*L)
    return p


def _load(body: list, x: str, mode: str, tex, W: int, pos: str, name: str, step: str | None) -> list[str]:
    """Append the loads of W words at pos to body; returns GLSL of the W words in order."""
    if mode == "g":
        for c in range(W):
            ref = f"texelFetch({x}, {pos} + {c} * {step}).x" if tex is not None else f"{x}[{pos} + {c} * {step}]"
            body.append(f"uint {name}_{c} = {ref};")
        return [f"{name}_{c}" for c in range(W)]
    if tex is not None:
        if W == 8:
            body.append(f"uvec4 {name}a = texelFetch({x}, 2 * {pos}); uvec4 {name}b = texelFetch({x}, 2 * {pos} + 1);")
            return [f"{name}{h}.{c}" for h in "ab" for c in "xyzw"]
        body.append(f"uvec4 {name} = texelFetch({x}, {pos});")
        return [f"{name}.{c}" for c in "xyzw"[:W]]
    if W == 8:
        body.append(f"u64vec4 {name} = {x}[{pos}];")
        return [f"unpackUint2x32({name}.{c}).{h}" for c in "xyzw" for h in "xy"]
    body.append(f"{_WIDE[W]} {name} = {x}[{pos}];")
    return [f"{name}.{c}" for c in "xyzw"[:W]]


def _pack(W: int, words: list[str]) -> str:
    """GLSL of the wide value (`_WIDE[W]`) holding the W words in order."""
    if W == 8:
        return "u64vec4(" + ", ".join(f"packUint2x32(uvec2({words[2 * i]}, {words[2 * i + 1]}))"
                                      for i in range(4)) + ")"
    return f"{_WIDE[W]}({', '.join(words)})"
