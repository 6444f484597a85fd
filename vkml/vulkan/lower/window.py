"""Sliding-window operators on NCHW: Im2Col, Col2Im, MaxPool2d, MaxPool2dBackward.

Every kernel is one thread per OUTPUT element, so the two adjoints (Col2Im and
MaxPool2dBackward) are gathers, not scatters: each output pixel walks the kernel offsets
(ki, kj), solves h = oh*stride - pad + ki*dilation for the window (oh, ow) that would
place it there, and adds that window's contribution in a fixed order. No atomics, so the
results are bitwise reproducible.

Window geometry travels in meta (`GEOMETRY`): the element count, C, H, W, OH, OW, the
kernel, stride, padding and dilation, then the `udiv` constants of each size the index
decoding divides by (`_DIVISORS`).

>>> p = window_max_program("MaxPool2d", "float")
>>> [b.name for b in p.bindings], p.meta.size
(['pooled', 'img'], 37)
"""
from __future__ import annotations

from functools import lru_cache

from ...trace import dtypes as dt
from ...trace.ops import OpKind
from ..kernels import divisor
from ..program import Meta, Program
from .vectors import pack, wide_type

# Divisions by the geometry go through `udiv` (multiply-high by a host-computed magic
# number, `kernels.divisor`): lavapipe runs an integer division lane by lane, and Im2Col
# makes ten per element. _div(x, D) is x / D for 0 <= x < 2^31; callers test signs
# first (a negative x gives a value that is not used).
_DIVISORS = ("L", "CK", "KK", "KW", "OW", "W", "H", "SH", "SW", "OH")
_SIZES = ("C", "H", "W", "OH", "OW", "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW")
# band = the kernel rows [ki0, ki1) one dispatch walks, resume = whether it continues from
# what the dispatches of the rows before it stored (`_bands`)
GEOMETRY = Meta(("total", 1), *((s, 1) for s in _SIZES), *((f"div_{d}", 2) for d in _DIVISORS),
                ("band", 2), ("resume", 1))


def _div(x: str, d: str) -> str:
    return f"int(udiv(uint({x}), m{d}, s{d}))"


# the identity of max: -inf, and INT_MIN for int32 (what a window wholly in the padding gives)
_NEG_INF = {"float": "uintBitsToFloat(0xff800000u)",
            "double": "packDouble2x32(uvec2(0u, 0xfff00000u))", "int": "int(0x80000000u)"}


def _start(name: str, per_thread: int = 1) -> tuple[Program, list[str]]:
    """A window program and main()'s first lines: a thread `gi` past the element count
    (over per_thread) returns, then the geometry as locals C, H, ..., DW and mD, sD (the
    udiv constants) for each divisor D."""
    p = Program(name)
    p.meta = GEOMETRY
    m = p.m
    bound = f"uint({m('total')})" + (f" / {per_thread}u" if per_thread > 1 else "")
    lines = ["uint gi = gidx();", f"if (gi >= {bound}) return;"]
    for group in (_SIZES[:5], _SIZES[5:9], _SIZES[9:]):
        lines.append("int " + ", ".join(f"{s} = {m(s)}" for s in group) + ";")
    divs = [f"m{d} = {m(f'div_{d}', 0)}, s{d} = {m(f'div_{d}', 1)}" for d in _DIVISORS]
    for i in range(0, len(divs), 3):
        lines.append("int " + ", ".join(divs[i:i + 3]) + ";")
    lines.append(f"int KI0 = {m('band', 0)}, KI1 = {m('band', 1)}; bool RESUME = {m('resume')} != 0;")
    return p, lines


@lru_cache(maxsize=1024)
def im2col_program(T: str, W: int = 1) -> Program:
    """Im2Col with W consecutive columns of one (image, row) per thread, stored as one
    wide value (the row length L is a multiple of W): lavapipe pays per stored component
    and lane, so fewer, wider stores are faster; the loads stay one per element (they are
    gathers).

    >>> im2col_program("float", 8).bindings[0].type, im2col_program("float", 8).extensions
    ('u64vec4', ['GL_ARB_gpu_shader_int64'])
    """
    p, head = _start("Im2Col", W)
    if W == 8:
        p.extension("GL_ARB_gpu_shader_int64")
    cols = p.buffer("cols", wide_type(T, W) if W > 1 else T)
    x = p.buffer("img", T, readonly=True)
    D = _div
    p.main(*head, "int L = OH * OW, CK = C * KH * KW;")
    if W == 1:
        p.main("int o = int(gi);",
               f"int t = {D('o', 'L')}; int col = o - t * L;",
               f"int n = {D('t', 'CK')}; int row = t - n * CK;",
               f"int c = {D('row', 'KK')}; int r = row - c * KH * KW;",
               f"int ki = {D('r', 'KW')}; int kj = r - ki * KW;",
               f"int oh = {D('col', 'OW')}; int ow = col - oh * OW;",
               "int h = oh * SH - PH + ki * DH;",
               "int w = ow * SW - PW + kj * DW;",
               f"{T} v = {T}(0);",
               f"if (h >= 0 && h < H && w >= 0 && w < W) v = {x}[((n * C + c) * H + h) * W + w];",
               f"{cols}[o] = v;")
        return p
    p.main(f"int o = int(gi) * {W};",
           f"int t = {D('o', 'L')}; int col0 = o - t * L;",
           f"int n = {D('t', 'CK')}; int row = t - n * CK;",
           f"int c = {D('row', 'KK')}; int r = row - c * KH * KW;",
           f"int ki = {D('r', 'KW')}; int kj = r - ki * KW;",
           "int base = (n * C + c) * H;")
    for j in range(W):
        p.main(f"{T} v{j} = {T}(0);",
               f"{{ int col = col0 + {j}; int oh = {D('col', 'OW')}; int ow = col - oh * OW;",
               "  int h = oh * SH - PH + ki * DH; int w = ow * SW - PW + kj * DW;",
               f"  if (h >= 0 && h < H && w >= 0 && w < W) v{j} = {x}[(base + h) * W + w]; }}")
    p.main(f"{cols}[gi] = {pack(T, W, [f'v{j}' for j in range(W)])};")
    return p


def _windows_of_pixel(body: str) -> list[str]:
    """The loop over the windows that contain input pixel (h, w) of plane nc, in
    increasing (oh, ow) order, for kernel rows in the band [KI0, KI1); body sees ki, kj,
    oh, ow."""
    return ["for (int ki = KI1 - 1; ki >= KI0; --ki) {",
            "  int hh = h + PH - ki * DH;",
            "  if (hh < 0) continue;",
            f"  int oh = {_div('hh', 'SH')};",
            "  if (oh * SH != hh || oh >= OH) continue;",
            "  for (int kj = KW - 1; kj >= 0; --kj) {",
            "    int ww = w + PW - kj * DW;",
            "    if (ww < 0) continue;",
            f"    int ow = {_div('ww', 'SW')};",
            "    if (ow * SW != ww || ow >= OW) continue;",
            f"    {body}",
            "  }",
            "}"]


def _pixel(T: str) -> list[str]:
    """Lines decoding input pixel o = gi into plane nc, row h, column w; acc = 0."""
    return ["int o = int(gi);",
            f"int t = {_div('o', 'W')}; int w = o - t * W;",
            f"int nc = {_div('t', 'H')}; int h = t - nc * H;",
            f"{T} acc = {T}(0);"]


@lru_cache(maxsize=1024)
def col2im_program(T: str) -> Program:
    """Col2Im: each image pixel sums the columns of the windows containing it.

    >>> [(b.name, b.readonly) for b in col2im_program("float").bindings]
    [('img', False), ('cols', True)]
    """
    p, head = _start("Col2Im")
    img = p.buffer("img", T)
    cols = p.buffer("cols", T, readonly=True)
    p.main(*head, "int L = OH * OW;", *_pixel(T), f"if (RESUME) acc = {img}[o];",
           *_windows_of_pixel(f"acc += {cols}[((nc * KH + ki) * KW + kj) * L + oh * OW + ow];"),
           f"{img}[o] = acc;")
    return p


def _window_max(T: str, x: str, resume: list[str]) -> list[str]:
    """The window's maximum m and the offset arg = ki*KW+kj of its first maximum
    (row-major within the window; a NaN is the maximum and the first NaN wins; padding
    is skipped, i.e. -inf) for output o, over the kernel rows of the band; resume: lines
    that set m and arg from the rows before it. arg stays -1 only for a window that lies
    wholly in the padding. No nan test on integers."""
    better = "v > m" if T == "int" else "(!isnan(m) && (v > m || isnan(v)))"
    return [f"int t = {_div('o', 'OW')}; int ow = o - t * OW;",
            f"int nc = {_div('t', 'OH')}; int oh = t - nc * OH;",
            f"{T} m = {_NEG_INF[T]};",
            "int arg = -1;",
            "if (RESUME) {", *("  " + r for r in resume), "}",
            "for (int ki = KI0; ki < KI1; ++ki) {",
            "  int h = oh * SH - PH + ki * DH;",
            "  if (h < 0 || h >= H) continue;",
            "  for (int kj = 0; kj < KW; ++kj) {",
            "    int w = ow * SW - PW + kj * DW;",
            "    if (w < 0 || w >= W) continue;",
            f"    {T} v = {x}[(nc * H + h) * W + w];",
            f"    if (arg < 0 || {better}) {{ m = v; arg = ki * KW + kj; }}",
            "  }",
            "}"]


@lru_cache(maxsize=1024)
def window_max_program(name: str, T: str) -> Program:
    """The window max kernels: "MaxPool2d" stores each window's maximum,
    "MaxPool2dArgmax" the offset of its first maximum (`_window_max`).

    >>> [b.type for b in window_max_program("MaxPool2dArgmax", "double").bindings]
    ['int', 'double']
    """
    p, head = _start(name)
    if name == "MaxPool2d":
        y = p.buffer("pooled", T)
        store = "m"
    elif name == "MaxPool2dArgmax":
        y = p.buffer("argm", "int")
        store = "arg"
    else:
        raise ValueError(f"window: no window-max kernel {name!r}")
    x = p.buffer("img", T, readonly=True)
    if name == "MaxPool2d":
        # any stored value but the identity came from a real pixel, which a later one
        # must beat (a NaN stays); the identity is replaced as at the start
        resume = [f"m = {y}[o];", f"arg = m == {_NEG_INF[T]} ? -1 : 0;"]
    else:
        resume = [f"arg = {y}[o];",
                  f"if (arg >= 0) {{ int ki = {_div('arg', 'KW')}; int kj = arg - ki * KW;",
                  f"  m = {x}[(nc * H + oh * SH - PH + ki * DH) * W + ow * SW - PW + kj * DW]; }}"]
    p.main(*head, "int o = int(gi);", *_window_max(T, x, resume), f"{y}[o] = {store};")
    return p


@lru_cache(maxsize=1024)
def pool_backward_program(T: str) -> Program:
    """MaxPool2dBackward's second pass: each input pixel sums dy over the windows whose
    argmax it is.

    >>> [b.name for b in pool_backward_program("float").bindings]
    ['dx', 'dy', 'argm']
    """
    p, head = _start("MaxPool2dBackward")
    dx = p.buffer("dx", T)
    dy = p.buffer("dy", T, readonly=True)
    argm = p.buffer("argm", "int", readonly=True)
    p.main(*head, *_pixel(T), f"if (RESUME) acc = {dx}[o];",
           *_windows_of_pixel(f"int wi = (nc * OH + oh) * OW + ow; if ({argm}[wi] == ki * KW + kj) "
                              f"acc += {dy}[wi];"),
           f"{dx}[o] = acc;")
    return p


def _meta(total: int, x_shape: tuple, out_hw: tuple, attrs: dict) -> dict:
    """The `GEOMETRY` fields of a dispatch of `total` threads' elements."""
    (kh, kw), (sh, sw) = attrs["kernel"], attrs["stride"]
    (ph, pw), (dh, dw) = attrs["padding"], attrs["dilation"]
    _, c, h, w = x_shape
    oh, ow = out_hw
    sizes = {"L": oh * ow, "CK": c * kh * kw, "KK": kh * kw, "KW": kw, "OW": ow, "W": w, "H": h,
             "SH": sh, "SW": sw, "OH": oh}
    meta = dict(total=total, C=c, H=h, W=w, OH=oh, OW=ow, KH=kh, KW=kw, SH=sh, SW=sw, PH=ph, PW=pw,
                DH=dh, DW=dw)
    for d in _DIVISORS:
        meta[f"div_{d}"] = divisor(max(sizes[d], 1))     # a size of 0 makes no threads
    meta["band"], meta["resume"] = (0, kh), 0
    return meta


def _bands(ctx, k, meta: dict, views: list, threads: int, descending: bool = False) -> None:
    """Dispatch k over the kernel rows in bands that keep every invocation's loop heads
    (about KW + 1 a row) within the driver's loop limit (`Profile.loop_limit`; lavapipe
    ends longer loops silently), each band resuming from the one before; one dispatch
    where there is no limit. descending: the kernel walks rows from the last (Col2Im)."""
    kh, kw = meta["KH"], meta["KW"]
    limit = ctx.profile.loop_limit // 2
    rows = kh if not limit else limit // (kw + 1)
    if rows < 1:
        raise ValueError(f"window: a kernel row of {kw} is longer than this device's loop limit "
                         f"({ctx.profile.loop_limit} iterations) lets one invocation walk; "
                         f"valid: kernel width < {limit - 1}")
    bands = [(a, min(a + rows, kh)) for a in range(0, kh, rows)] or [(0, 0)]
    for q, band in enumerate(reversed(bands) if descending else bands):
        ctx.dispatch(k, {**meta, "band": band, "resume": int(q > 0)}, views, threads=threads,
                     heads=(band[1] - band[0]) * (kw + 1) + 8)


def scratch_bytes(node, profile=None) -> int:
    """MaxPool2dBackward keeps each window's argmax offset (one int32 per window); the
    other window operators need none. profile: unused (the layout is the same everywhere).

    >>> from types import SimpleNamespace as NS
    >>> scratch_bytes(NS(op=OpKind.MaxPool2dBackward, size=64, inputs=[None, NS(shape=(1, 1, 4, 4))]))
    64
    """
    if node.op is not OpKind.MaxPool2dBackward or node.size == 0:
        return 0
    n = 1
    for d in node.inputs[1].shape:
        n *= d
    return 4 * n


def lower(node, ins, out, ctx) -> None:
    """Lower one window operator to gather kernels (one thread per output element).

    >>> import numpy as np, vkml.numpy as vnp
    >>> from vkml.array import bind
    >>> x = vnp.asarray(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    >>> bind(OpKind.MaxPool2d, [x], kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1))
    Array([[[[ 5.,  7.],
             [13., 15.]]]], dtype=float32)
    """
    op, a = node.op, node.attrs
    T = dt.glsl_type(node.dtype)
    if op is OpKind.Im2Col:
        x = ins[0]
        oh, ow = _out_hw(x.shape, a)
        W = im2col_width(T, oh * ow, ctx.profile)
        k = ctx.kernel(im2col_program(T, W))
        ctx.dispatch(k, _meta(out.size, x.shape, (oh, ow), a), [out, x], threads=out.size // W, heads=0)
    elif op is OpKind.Col2Im:
        oh, ow = _out_hw(out.shape, a)
        k = ctx.kernel(col2im_program(T))
        _bands(ctx, k, _meta(out.size, out.shape, (oh, ow), a), [out, ins[0]], out.size, descending=True)
    elif op is OpKind.MaxPool2d:
        x = ins[0]
        k = ctx.kernel(window_max_program("MaxPool2d", T))
        _bands(ctx, k, _meta(out.size, x.shape, out.shape[2:], a), [out, x], out.size)
    elif op is OpKind.MaxPool2dBackward:
        x, g = ins
        argm = ctx.scratch.sub(0, 4 * g.size, (g.size,), dt.int32)
        # pass 1: each window's argmax once, so pass 2 does not redo kh*kw work per visit
        k = ctx.kernel(window_max_program("MaxPool2dArgmax", T))
        _bands(ctx, k, _meta(g.size, x.shape, g.shape[2:], a), [argm, x], g.size)
        # pass 2: each input pixel sums g over the windows whose argmax it is
        k = ctx.kernel(pool_backward_program(T))
        _bands(ctx, k, _meta(out.size, x.shape, g.shape[2:], a), [out, g, argm], out.size, descending=True)
    else:
        raise NotImplementedError(f"window family: no lowering for {op.value}")


def im2col_width(T: str, L: int, profile) -> int:
    """Columns per Im2Col thread: 8 (four 64-bit words) for 32-bit data where the profile
    moves 32-bit data as uint64 pairs (`wide_loads`), 4 elsewhere, 1 where a row of L
    columns does not split evenly or the profile turns wide stores off (`im2col_wide`).

    >>> from vkml.vulkan.device import get
    >>> import dataclasses
    >>> p = dataclasses.replace(get().profile, wide_loads=False)
    >>> im2col_width("float", 36, p), im2col_width("float", 15, p)
    (4, 1)
    """
    if not profile.im2col_wide:
        return 1
    for w in ((8, 4) if profile.wide_loads and T != "double" else (4,)):
        if L % w == 0:
            return w
    return 1


def _out_hw(x_shape: tuple, a: dict) -> tuple[int, int]:
    """(OH, OW) of the windows over an NCHW shape."""
    out = []
    for size, k, s, p, d in zip(x_shape[2:], a["kernel"], a["stride"], a["padding"], a["dilation"]):
        out.append((size + 2 * p - d * (k - 1) - 1) // s + 1)
    return out[0], out[1]
