"""Softmax and LogSoftmax along one axis, numerically stable.

The contiguous input is viewed as (A, N, B) rows as in Cumsum: row (a, b) holds N
elements B apart. Per row: m = max (nan propagates), s = sum(exp(x - m)), then
softmax = exp(x - m) / s and log_softmax = (x - m) - log(s), exactly JAX's formulas, so
the edge cases match JAX: a -inf entry gives 0 / -inf, an all -inf row (x - m is nan)
and a row holding nan or +inf give nan.

Three schemes: one thread per row (short rows, or many rows on a CPU device where each
lane then streams its own row); one workgroup per row with interleaved loads and
subgroup + shared-memory reductions for the max and the sum; and, for a few very long
rows, a split over chunks: each chunk's max and sum of exp(x - chunk max) to scratch,
then per row the max and the rescaled sum, then the output, chunk by chunk.
"""
from __future__ import annotations

from .sizing import cdiv, device_kind, round_up

from functools import lru_cache

from ...trace import dtypes as dt
from ...trace.ops import OpKind
from ..kernels import binding
from .elementwise import math_lib
from .scan import rows_of

THREAD_MAX_N = 32        # rows at most this long always get a thread each
SPLIT_MIN_N = 1 << 14    # rows at least this long, when there are few of them, are split
SPLIT_MAX_ROWS = {"cpu": 64, "gpu": 1024}
SPLIT_CHUNK = 1024       # elements per chunk of a split row (at least)
STREAMS = {"cpu": 1 << 12, "gpu": 1 << 16}   # threads worth splitting rows over
STRATEGY: str | None = None   # "cpu" / "gpu" forces the kernel choice (tests)


def strategy() -> str:
    return device_kind(STRATEGY)




def _neg_inf(T: str) -> str:
    return "uintBitsToFloat(0xff800000u)" if T == "float" else "packDouble2x32(uvec2(0u, 0xfff00000u))"


def _nan(T: str) -> str:
    return "uintBitsToFloat(0x7fc00000u)" if T == "float" else "packDouble2x32(uvec2(0u, 0x7ff80000u))"


def _result(op: OpKind, T: str) -> str:
    """GLSL for the output element from xv (the input), m (row max) and s (the sum)."""
    if op is OpKind.Softmax:
        return "vk_exp(xv - m) / s"
    return "(xv - m) - vk_log(s)"


_ROW = """
void main() {{
  int rows = meta[0]; int N = meta[1]; int B = meta[2];
  uint g = {gid};
  if (g >= uint(rows)) return;
  int row = int(g); int a = row / B; int base = a * N * B + (row - a * B);
"""


@lru_cache(maxsize=None)
def thread_source(op: OpKind, T: str) -> str:
    """One thread per row: three serial sweeps (max, sum of exp, write)."""
    return (binding(1, T, "o") + binding(2, T, "x", readonly=True) + math_lib(T)
            + _ROW.format(gid="gidx()") +
            f"""  {T} m = {_neg_inf(T)};
  for (int i = 0; i < N; ++i) {{ {T} v = x[base + i * B]; if (v > m || isnan(v)) m = v; }}
  {T} s = {T}(0);
  for (int i = 0; i < N; ) {{
    // blocks of 32 keep the sum's rounding error small for long rows
    {T} part = {T}(0); int kend = min(N, i + 32);
    for (; i < kend; ++i) part += vk_exp(x[base + i * B] - m);
    s += part;
  }}
  for (int i = 0; i < N; ++i) {{ {T} xv = x[base + i * B]; o[base + i * B] = {_result(op, T)}; }}
}}
""")


@lru_cache(maxsize=None)
def group_source(op: OpKind, T: str, lx: int) -> str:
    """One workgroup per row: threads stride the row; the max and the sum are reduced
    over subgroups, then over the workgroup through shared memory."""
    return (binding(1, T, "o") + binding(2, T, "x", readonly=True) + math_lib(T) +
            f"""shared {T} part_sh[{lx}];
{T} wg_max({T} v) {{
  // subgroupMax need not propagate nan: look for one separately
  {T} r = subgroupMax(isnan(v) ? 1 : 0) != 0 ? {_nan(T)} : subgroupMax(v);
  if (subgroupElect()) part_sh[gl_SubgroupID] = r;
  barrier();
  r = part_sh[0];
  for (uint i = 1u; i < gl_NumSubgroups; ++i) {{ {T} w = part_sh[i]; if (w > r || isnan(w)) r = w; }}
  barrier();
  return r;
}}
{T} wg_sum({T} v) {{
  v = subgroupAdd(v);
  if (subgroupElect()) part_sh[gl_SubgroupID] = v;
  barrier();
  {T} r = {T}(0);
  for (uint i = 0u; i < gl_NumSubgroups; ++i) r += part_sh[i];
  barrier();
  return r;
}}
""" + _ROW.format(gid="group_id()") + f"""  int t = int(gl_LocalInvocationID.x);
  {T} m = {_neg_inf(T)};
  for (int i = t; i < N; i += {lx}) {{ {T} v = x[base + i * B]; if (v > m || isnan(v)) m = v; }}
  m = wg_max(m);
  {T} s = {T}(0);
  for (int i = t; i < N; ) {{
    {T} part = {T}(0); int kend = min(N, i + 32 * {lx});
    for (; i < kend; i += {lx}) part += vk_exp(x[base + i * B] - m);
    s += part;
  }}
  s = wg_sum(s);
  for (int i = t; i < N; i += {lx}) {{ {T} xv = x[base + i * B]; o[base + i * B] = {_result(op, T)}; }}
}}
""")


_SPLIT_HEAD = """
void main() {{
  int rows = meta[0]; int N = meta[1]; int B = meta[2]; int S = meta[3]; int C = meta[4];
  uint g = gidx();
  if (g >= uint(rows) * uint(S)) return;
  int c = int(g) / rows; int row = int(g) - c * rows;
  int a = row / B; int base = a * N * B + (row - a * B);
  int i0 = c * C; int iend = min(N, i0 + C);
"""


@lru_cache(maxsize=None)
def split_sources(op: OpKind, T: str) -> tuple[str, str, str]:
    """Long rows cut into S chunks: (chunk max and sum of exp(x - chunk max); row max and
    sum, rescaling each chunk's sum; the output), one thread per chunk or row."""
    ninf = _neg_inf(T)
    part = (binding(1, T, "pm") + binding(2, T, "ps") + binding(3, T, "x", readonly=True)
            + math_lib(T) + _SPLIT_HEAD.format() + f"""  {T} m = {ninf};
  for (int i = i0; i < iend; ++i) {{ {T} v = x[base + i * B]; if (v > m || isnan(v)) m = v; }}
  {T} s = {T}(0);
  for (int i = i0; i < iend; ) {{
    {T} part = {T}(0); int kend = min(iend, i + 32);
    for (; i < kend; ++i) part += vk_exp(x[base + i * B] - m);
    s += part;
  }}
  pm[row * S + c] = m; ps[row * S + c] = s;
}}
""")
    rowstat = (binding(1, T, "rm") + binding(2, T, "rs") + binding(3, T, "pm", readonly=True)
               + binding(4, T, "ps", readonly=True) + math_lib(T) + f"""
void main() {{
  int rows = meta[0]; int S = meta[3];
  uint g = gidx();
  if (g >= uint(rows)) return;
  int row = int(g);
  {T} m = {ninf};
  for (int c = 0; c < S; ++c) {{ {T} v = pm[row * S + c]; if (v > m || isnan(v)) m = v; }}
  // a chunk of only -inf adds exp(-inf - m) = 0 terms (its own sum is nan: skip it);
  // a row of only -inf keeps m = -inf, and x - m is nan in the output, as in JAX
  {T} s = {T}(0);
  for (int c = 0; c < S; ++c) {{
    {T} cm = pm[row * S + c];
    if (cm != {ninf}) s += ps[row * S + c] * vk_exp(cm - m);
  }}
  rm[row] = m; rs[row] = s;
}}
""")
    write = (binding(1, T, "o") + binding(2, T, "x", readonly=True)
             + binding(3, T, "rm", readonly=True) + binding(4, T, "rs", readonly=True)
             + math_lib(T) + _SPLIT_HEAD.format() + f"""  {T} m = rm[row]; {T} s = rs[row];
  for (int i = i0; i < iend; ++i) {{ {T} xv = x[base + i * B]; o[base + i * B] = {_result(op, T)}; }}
}}
""")
    return part, rowstat, write


def _split(rows: int, N: int, how: str) -> tuple[int, int]:
    """(S, C): chunks per row and their length, for rows long enough to split."""
    S = min(cdiv(N, SPLIT_CHUNK), max(1, STREAMS[how] // rows))
    C = cdiv(N, S)
    return cdiv(N, C), C


def _use_split(rows: int, N: int, how: str) -> bool:
    return N >= SPLIT_MIN_N and rows < SPLIT_MAX_ROWS[how]


def scratch_bytes(node) -> int:
    """Chunk and row statistics when long rows are split (else 0)."""
    if node.size == 0:
        return 0
    A, N, B = rows_of(node.shape, node.attrs["axis"])
    how = strategy()
    if not _use_split(A * B, N, how):
        return 0
    S, _ = _split(A * B, N, how)
    isz = dt.itemsize(node.dtype)
    return 2 * round_up(A * B * S * isz) + 2 * round_up(A * B * isz)


def lower(node, ins, out, ctx) -> None:
    """Softmax / LogSoftmax of ins[0] along node.attrs['axis'].

    >>> import vkml
    >>> from vkml.trace.ops import OpKind
    >>> vkml.array.bind(OpKind.Softmax, [vkml.numpy.zeros((2, 4))], axis=1)
    Array([[0.25, 0.25, 0.25, 0.25],
           [0.25, 0.25, 0.25, 0.25]], dtype=float32)
    """
    x = ins[0]
    A, N, B = rows_of(x.shape, node.attrs["axis"])
    rows = A * B
    T = dt.glsl_type(x.dtype)
    how = strategy()
    if _use_split(rows, N, how):
        S, C = _split(rows, N, how)
        isz = dt.itemsize(x.dtype)
        sizes = [rows * S * isz] * 2 + [rows * isz] * 2
        views, off = [], 0
        for nb in sizes:
            views.append(ctx.scratch.sub(off, nb, (nb // isz,), x.dtype))
            off += round_up(nb)
        pm, ps, rm, rs = views
        part, rowstat, write = split_sources(node.op, T)
        meta = [rows, N, B, S, C]
        name = node.op.value
        ctx.dispatch(ctx.kernel(name + "_part", part, 3), meta, [pm, ps, x], writes=(0, 1),
                     threads=rows * S)
        ctx.dispatch(ctx.kernel(name + "_rows", rowstat, 4), meta, [rm, rs, pm, ps], writes=(0, 1),
                     threads=rows)
        ctx.dispatch(ctx.kernel(name + "_out", write, 4), meta, [out, x, rm, rs], threads=rows * S)
        return
    meta = [rows, N, B]
    if N <= THREAD_MAX_N or (how == "cpu" and rows >= 64) or (B > 1 and rows >= 4096 and N <= 1024):
        k = ctx.kernel(node.op.value, thread_source(node.op, T), 2)
        ctx.dispatch(k, meta, [out, x], threads=rows)
    else:
        lx = 256 if N >= 2048 else 128 if N >= 512 else 64
        k = ctx.kernel(node.op.value + "_wg", group_source(node.op, T, lx), 2, local_size=lx)
        ctx.dispatch(k, meta, [out, x], groups=rows)
