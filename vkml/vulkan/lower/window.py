"""Sliding-window operators on NCHW: Im2Col, Col2Im, MaxPool2d, MaxPool2dBackward.

Every kernel is one thread per OUTPUT element, so the two adjoints (Col2Im and
MaxPool2dBackward) are gathers, not scatters: each output pixel walks the kernel offsets
(ki, kj), solves h = oh*stride - pad + ki*dilation for the window (oh, ow) that would
place it there, and adds that window's contribution in a fixed order. No atomics, so the
results are bitwise reproducible.

Window geometry travels in meta ints, in this order (the `_GEOM` prelude names them):
    total, C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW
"""
from __future__ import annotations

from ...trace import dtypes as dt
from ...trace.ops import OpKind
from ..kernels import binding, divisor

_GEOM = """
  int C = meta[1], H = meta[2], W = meta[3], OH = meta[4], OW = meta[5];
  int KH = meta[6], KW = meta[7], SH = meta[8], SW = meta[9];
  int PH = meta[10], PW = meta[11], DH = meta[12], DW = meta[13];
  int mL = meta[14], sL = meta[15], mCK = meta[16], sCK = meta[17], mKK = meta[18], sKK = meta[19];
  int mKW = meta[20], sKW = meta[21], mOW = meta[22], sOW = meta[23], mW = meta[24], sW = meta[25];
  int mH = meta[26], sH = meta[27], mSH = meta[28], sSH = meta[29], mSW = meta[30], sSW = meta[31];
  int mOH = meta[32], sOH = meta[33];
"""

# Divisions by the geometry go through `udiv` (multiply-high by a host-computed magic
# number, `kernels.divisor`): lavapipe runs an integer division lane by lane, and Im2Col
# made ten per element (81 of the 180 ms of a conv2d step there). DIV(x, D) is x / D for
# 0 <= x < 2^31; callers test signs first (a negative x gives a value that is not used).
_DIVISORS = ("L", "CK", "KK", "KW", "OW", "W", "H", "SH", "SW", "OH")


def _div(x: str, d: str) -> str:
    return f"int(udiv(uint({x}), m{d}, s{d}))"

# the identity of max: -inf, and INT_MIN for int32 (what a window wholly in the padding gives)
_NEG_INF = {"float": "uintBitsToFloat(0xff800000u)",
            "double": "packDouble2x32(uvec2(0u, 0xfff00000u))", "int": "int(0x80000000u)"}

_IM2COL = """{decl}
void main() {{
  uint gi = gidx();
  if (gi >= uint(meta[0])) return;{geom}
  int L = OH * OW, CK = C * KH * KW;
  int o = int(gi);
  int t = DIV(o, L); int col = o - t * L;
  int n = DIV(t, CK); int row = t - n * CK;
  int c = DIV(row, KK); int r = row - c * KH * KW;
  int ki = DIV(r, KW); int kj = r - ki * KW;
  int oh = DIV(col, OW); int ow = col - oh * OW;
  int h = oh * SH - PH + ki * DH;
  int w = ow * SW - PW + kj * DW;
  {T} v = {T}(0);
  if (h >= 0 && h < H && w >= 0 && w < W) v = x[((n * C + c) * H + h) * W + w];
  cols[o] = v;
}}
"""

# W consecutive columns of one (image, row) per thread, stored as one wide value: the
# row length L is a multiple of W. lavapipe pays per stored component and lane, so this
# halves its Im2Col time; the loads stay one per element (they are gathers).
_IM2COL_WIDE = """{decl}
void main() {{
  uint gi = gidx();
  if (gi >= uint(meta[0]) / {W}u) return;{geom}
  int L = OH * OW, CK = C * KH * KW;
  int o = int(gi) * {W};
  int t = DIV(o, L); int col0 = o - t * L;
  int n = DIV(t, CK); int row = t - n * CK;
  int c = DIV(row, KK); int r = row - c * KH * KW;
  int ki = DIV(r, KW); int kj = r - ki * KW;
  int base = (n * C + c) * H;
{body}
  cols[gi] = {pack};
}}
"""

_IM2COL_ELEMENT = """  {T} v{j} = {T}(0);
  {{ int col = col0 + {j}; int oh = DIV(col, OW); int ow = col - oh * OW;
    int h = oh * SH - PH + ki * DH; int w = ow * SW - PW + kj * DW;
    if (h >= 0 && h < H && w >= 0 && w < W) v{j} = x[(base + h) * W + w]; }}"""


# The loop over windows that contain input pixel (h, w) of plane nc, in increasing
# (oh, ow) order; BODY sees ki, kj, oh, ow.
_WINDOWS_OF_PIXEL = """
  for (int ki = KH - 1; ki >= 0; --ki) {
    int hh = h + PH - ki * DH;
    if (hh < 0) continue;
    int oh = DIV(hh, SH);
    if (oh * SH != hh || oh >= OH) continue;
    for (int kj = KW - 1; kj >= 0; --kj) {
      int ww = w + PW - kj * DW;
      if (ww < 0) continue;
      int ow = DIV(ww, SW);
      if (ow * SW != ww || ow >= OW) continue;
      BODY
    }
  }
"""

_COL2IM = """{decl}
void main() {{
  uint gi = gidx();
  if (gi >= uint(meta[0])) return;{geom}
  int L = OH * OW;
  int o = int(gi);
  int t = DIV(o, W); int w = o - t * W;
  int nc = DIV(t, H); int h = t - nc * H;
  {T} acc = {T}(0);
  {loop}
  img[o] = acc;
}}
"""

# The window's maximum and the offset ki*KW+kj of its first maximum (row-major within the
# window; a NaN is the maximum and the first NaN wins; padding is skipped, i.e. -inf).
# arg stays -1 only for a window that lies wholly in the padding.
_WINDOW_MAX = """
  int t = DIV(o, OW); int ow = o - t * OW;
  int nc = DIV(t, OH); int oh = t - nc * OH;
  {T} m = {neg_inf};
  int arg = -1;
  for (int ki = 0; ki < KH; ++ki) {{
    int h = oh * SH - PH + ki * DH;
    if (h < 0 || h >= H) continue;
    for (int kj = 0; kj < KW; ++kj) {{
      int w = ow * SW - PW + kj * DW;
      if (w < 0 || w >= W) continue;
      {T} v = x[(nc * H + h) * W + w];
      if (arg < 0 || {better}) {{ m = v; arg = ki * KW + kj; }}
    }}
  }}
"""

_POOL = """{decl}
void main() {{
  uint gi = gidx();
  if (gi >= uint(meta[0])) return;{geom}
  int o = int(gi);{wmax}
  y[o] = m;
}}
"""

_ARGMAX = """{decl}
void main() {{
  uint gi = gidx();
  if (gi >= uint(meta[0])) return;{geom}
  int o = int(gi);{wmax}
  argm[o] = arg;
}}
"""

_POOL_BWD = """{decl}
void main() {{
  uint gi = gidx();
  if (gi >= uint(meta[0])) return;{geom}
  int o = int(gi);
  int t = DIV(o, W); int w = o - t * W;
  int nc = DIV(t, H); int h = t - nc * H;
  {T} acc = {T}(0);
  {loop}
  dx[o] = acc;
}}
"""


def _window_max(T: str) -> str:
    """The window-max loop for GLSL type T (no nan test on integers)."""
    better = "v > m" if T == "int" else "(!isnan(m) && (v > m || isnan(v)))"
    return _WINDOW_MAX.format(T=T, neg_inf=_NEG_INF[T], better=better)


def _meta(total: int, x_shape: tuple, out_hw: tuple, attrs: dict) -> list[int]:
    (kh, kw), (sh, sw) = attrs["kernel"], attrs["stride"]
    (ph, pw), (dh, dw) = attrs["padding"], attrs["dilation"]
    _, c, h, w = x_shape
    oh, ow = out_hw
    sizes = {"L": oh * ow, "CK": c * kh * kw, "KK": kh * kw, "KW": kw, "OW": ow, "W": w, "H": h,
             "SH": sh, "SW": sw, "OH": oh}
    magic = []
    for d in _DIVISORS:
        magic += divisor(max(sizes[d], 1))     # a size of 0 makes no threads
    return [total, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, *magic]


def _src(template: str, **kw) -> str:
    """A kernel template with the geometry prelude and DIV(x, D) expanded."""
    import re
    body = template.format(geom=_GEOM, **kw)
    return re.sub(r"DIV\((\w+), (\w+)\)", lambda m: _div(m.group(1), m.group(2)), body)


def scratch_bytes(node) -> int:
    """MaxPool2dBackward keeps each window's argmax offset (one int32 per window)."""
    if node.op is not OpKind.MaxPool2dBackward or node.size == 0:
        return 0
    n = 1
    for d in node.inputs[1].shape:
        n *= d
    return 4 * n


def lower(node, ins, out, ctx) -> None:
    """Lower one window operator to gather kernels (one thread per output element)."""
    op, a = node.op, node.attrs
    T = dt.glsl_type(node.dtype)
    if op is OpKind.Im2Col:
        x = ins[0]
        oh, ow = _out_hw(x.shape, a)
        W = _im2col_width(T, oh * ow, ctx.dev)
        if W > 1:
            from .elementwise import _pack, _wide_type
            ext = "#extension GL_ARB_gpu_shader_int64 : enable\n" if W == 8 else ""
            decl = ext + binding(1, _wide_type(T, W), "cols") + binding(2, T, "x", readonly=True)
            body = "\n".join(_IM2COL_ELEMENT.format(T=T, j=j) for j in range(W))
            src = _src(_IM2COL_WIDE, decl=decl, W=W, body=body, pack=_pack(T, W, [f"v{j}" for j in range(W)]))
            k = ctx.kernel("Im2Col", src, 2)
            ctx.dispatch(k, _meta(out.size, x.shape, (oh, ow), a), [out, x], threads=out.size // W)
        else:
            decl = binding(1, T, "cols") + binding(2, T, "x", readonly=True)
            k = ctx.kernel("Im2Col", _src(_IM2COL, decl=decl, T=T), 2)
            ctx.dispatch(k, _meta(out.size, x.shape, (oh, ow), a), [out, x], threads=out.size)
    elif op is OpKind.Col2Im:
        oh, ow = _out_hw(out.shape, a)
        decl = binding(1, T, "img") + binding(2, T, "cols", readonly=True)
        loop = _WINDOWS_OF_PIXEL.replace(
            "BODY", "acc += cols[((nc * KH + ki) * KW + kj) * L + oh * OW + ow];")
        k = ctx.kernel("Col2Im", _src(_COL2IM, decl=decl, T=T, loop=loop), 2)
        ctx.dispatch(k, _meta(out.size, out.shape, (oh, ow), a), [out, ins[0]], threads=out.size)
    elif op is OpKind.MaxPool2d:
        x = ins[0]
        wmax = _window_max(T)
        decl = binding(1, T, "y") + binding(2, T, "x", readonly=True)
        k = ctx.kernel("MaxPool2d", _src(_POOL, decl=decl, wmax=wmax), 2)
        ctx.dispatch(k, _meta(out.size, x.shape, out.shape[2:], a), [out, x], threads=out.size)
    elif op is OpKind.MaxPool2dBackward:
        x, g = ins
        meta_w = _meta(g.size, x.shape, g.shape[2:], a)
        argm = ctx.scratch.sub(0, 4 * g.size, (g.size,), dt.int32)
        # pass 1: each window's argmax once, so pass 2 does not redo kh*kw work per visit
        wmax = _window_max(T)
        decl = binding(1, "int", "argm") + binding(2, T, "x", readonly=True)
        k = ctx.kernel("MaxPool2dArgmax", _src(_ARGMAX, decl=decl, wmax=wmax), 2)
        ctx.dispatch(k, meta_w, [argm, x], threads=g.size)
        # pass 2: each input pixel sums g over the windows whose argmax it is
        loop = _WINDOWS_OF_PIXEL.replace(
            "BODY", "int wi = (nc * OH + oh) * OW + ow; if (argm[wi] == ki * KW + kj) acc += g[wi];")
        decl = (binding(1, T, "dx") + binding(2, T, "g", readonly=True)
                + binding(3, "int", "argm", readonly=True))
        k = ctx.kernel("MaxPool2dBackward", _src(_POOL_BWD, decl=decl, T=T, loop=loop), 3)
        ctx.dispatch(k, _meta(out.size, x.shape, g.shape[2:], a), [out, g, argm], threads=out.size)
    else:
        raise NotImplementedError(f"window family: no lowering for {op.value}")


IM2COL_WIDE = True    # tests turn it off to compare with one element per thread


def _im2col_width(T: str, L: int, dev) -> int:
    """Columns per Im2Col thread: 8 (four 64-bit words) for 32-bit data on a CPU device,
    4 elsewhere, 1 where a row of L columns does not split evenly."""
    if not IM2COL_WIDE:
        return 1
    for w in ((8, 4) if dev.profile.cpu and dev.has_int64 and T != "double" else (4,)):
        if L % w == 0:
            return w
    return 1


def _out_hw(x_shape: tuple, a: dict) -> tuple[int, int]:
    """(OH, OW) of the windows over an NCHW shape."""
    out = []
    for size, k, s, p, d in zip(x_shape[2:], a["kernel"], a["stride"], a["padding"], a["dilation"]):
        out.append((size + 2 * p - d * (k - 1) - 1) // s + 1)
    return out[0], out[1]
