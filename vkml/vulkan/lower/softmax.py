"""Softmax and LogSoftmax along one axis, numerically stable.

The contiguous input is viewed as (A, N, B) rows as in Cumsum: row (a, b) holds N
elements B apart. Per row: m = max (nan propagates), s = sum(exp(x - m)), then
softmax = exp(x - m) / s and log_softmax = (x - m) - log(s), exactly JAX's formulas, so
the edge cases match JAX: a -inf entry gives 0 / -inf, an all -inf row (x - m is nan)
and a row holding nan or +inf give nan.

Three schemes: one thread per row (short rows, or many rows on a device whose profile
`layout` is "cpu", where each lane then streams its own row); one workgroup per row with
interleaved loads and subgroup + shared-memory reductions for the max and the sum; and,
for a few very long rows, a split over chunks: each chunk's max and sum of
exp(x - chunk max) to scratch, then per row the max and the rescaled sum, then the
output, chunk by chunk.

>>> from vkml.trace.ops import OpKind
>>> p = group_program(OpKind.Softmax, "float", 64)
>>> p.local_size, p.barriers, p.subgroups, [b.name for b in p.bindings]
(64, True, True, ['o', 'src'])
"""
from __future__ import annotations

from functools import lru_cache

from ...trace import dtypes as dt
from ...trace.ops import OpKind
from ..program import Meta, Program
from .expressions import math_library
from .scan import row_chunk, rows_of
from .sizing import cdiv, round_up

THREAD_MAX_N = 32        # rows at most this long always get a thread each
SPLIT_MIN_N = 1 << 14    # rows at least this long, when there are few of them, are split
SPLIT_MAX_ROWS = {"cpu": 64, "gpu": 1024}    # by profile layout
SPLIT_CHUNK = 1024       # elements per chunk of a split row (at least)
STREAMS = {"cpu": 1 << 12, "gpu": 1 << 16}   # threads worth splitting rows over, by layout


def _neg_inf(T: str) -> str:
    return "uintBitsToFloat(0xff800000u)" if T == "float" else "packDouble2x32(uvec2(0u, 0xfff00000u))"


def _nan(T: str) -> str:
    return "uintBitsToFloat(0x7fc00000u)" if T == "float" else "packDouble2x32(uvec2(0u, 0x7ff80000u))"


def _result(op: OpKind, T: str) -> str:
    """GLSL for the output element from xv (the input), m (row max) and s (the sum)."""
    if op is OpKind.Softmax:
        return "vk_exp(xv - m) / s"
    return "(xv - m) - vk_log(s)"


def _start(T: str, name: str, local_size: int = 256) -> Program:
    p = Program(name, local_size=local_size)
    math_library(p, T == "double")
    return p


def _row(p: Program, gid: str) -> list[str]:
    """main()'s first lines for one row per thread (gid gidx()) or workgroup (group_id())."""
    return [f"int rows = {p.m('rows')}; int N = {p.m('N')}; int B = {p.m('B')};",
            f"uint g = {gid};",
            "if (g >= uint(rows)) return;",
            "int row = int(g); int a = row / B; int base = a * N * B + (row - a * B);"]


@lru_cache(maxsize=1024)
def thread_program(op: OpKind, T: str) -> Program:
    """One thread per row: three serial sweeps (max, sum of exp, write).

    >>> thread_program(OpKind.LogSoftmax, "float").name
    'LogSoftmax'
    """
    p = _start(T, op.value)
    p.meta = Meta(("rows", 1), ("N", 1), ("B", 1))
    o = p.buffer("o", T)
    x = p.buffer("src", T, readonly=True)
    p.main(*_row(p, "gidx()"),
           f"{T} m = {_neg_inf(T)};",
           f"for (int i = 0; i < N; ++i) {{ {T} v = {x}[base + i * B]; if (v > m || isnan(v)) m = v; }}",
           f"{T} s = {T}(0);",
           "for (int i = 0; i < N; ) {",
           "  // blocks of 32 keep the sum's rounding error small for long rows",
           f"  {T} part = {T}(0); int kend = min(N, i + 32);",
           f"  for (; i < kend; ++i) part += vk_exp({x}[base + i * B] - m);",
           "  s += part;",
           "}",
           f"for (int i = 0; i < N; ++i) {{ {T} xv = {x}[base + i * B]; {o}[base + i * B] = {_result(op, T)}; }}")
    return p


@lru_cache(maxsize=1024)
def group_program(op: OpKind, T: str, lx: int) -> Program:
    """One workgroup of lx per row: threads stride the row; the max and the sum are
    reduced over subgroups, then over the workgroup through shared memory."""
    p = _start(T, op.value + "_wg", lx)
    p.meta = Meta(("rows", 1), ("N", 1), ("B", 1))
    o = p.buffer("o", T)
    x = p.buffer("src", T, readonly=True)
    sh = p.shared("part_sh", T, lx)
    p.subgroups = True
    p.add(f"""{T} wg_max({T} v) {{
  // subgroupMax need not propagate nan: look for one separately
  {T} r = subgroupMax(isnan(v) ? 1 : 0) != 0 ? {_nan(T)} : subgroupMax(v);
  if (subgroupElect()) {sh}[gl_SubgroupID] = r;
  barrier();
  r = {sh}[0];
  for (uint i = 1u; i < gl_NumSubgroups; ++i) {{ {T} w = {sh}[i]; if (w > r || isnan(w)) r = w; }}
  barrier();
  return r;
}}
{T} wg_sum({T} v) {{
  v = subgroupAdd(v);
  if (subgroupElect()) {sh}[gl_SubgroupID] = v;
  barrier();
  {T} r = {T}(0);
  for (uint i = 0u; i < gl_NumSubgroups; ++i) r += {sh}[i];
  barrier();
  return r;
}}
""", names=("wg_max", "wg_sum"))
    p.main(*_row(p, "group_id()"),
           "int t = int(lidx());",
           f"{T} m = {_neg_inf(T)};",
           f"for (int i = t; i < N; i += {lx}) {{ {T} v = {x}[base + i * B]; if (v > m || isnan(v)) m = v; }}",
           "m = wg_max(m);",
           f"{T} s = {T}(0);",
           "for (int i = t; i < N; ) {",
           f"  {T} part = {T}(0); int kend = min(N, i + 32 * {lx});",
           f"  for (; i < kend; i += {lx}) part += vk_exp({x}[base + i * B] - m);",
           "  s += part;",
           "}",
           "s = wg_sum(s);",
           f"for (int i = t; i < N; i += {lx}) {{ {T} xv = {x}[base + i * B]; "
           f"{o}[base + i * B] = {_result(op, T)}; }}")
    return p


_SPLIT_META = (("rows", 1), ("N", 1), ("B", 1), ("S", 1), ("C", 1))


@lru_cache(maxsize=1024)
def split_programs(op: OpKind, T: str) -> tuple[Program, Program, Program]:
    """Long rows cut into S chunks: (chunk max and sum of exp(x - chunk max); row max and
    sum, rescaling each chunk's sum; the output), one thread per chunk or row. The first
    two are Softmax's and LogSoftmax's alike.

    >>> [p.name for p in split_programs(OpKind.LogSoftmax, "float")]
    ['Softmax_part', 'Softmax_rows', 'LogSoftmax_out']
    """
    return (*_split_stats(T), _split_out(op, T))


@lru_cache(maxsize=1024)
def _split_stats(T: str) -> tuple[Program, Program]:
    ninf = _neg_inf(T)
    part = _start(T, "Softmax_part")
    part.meta = Meta(*_SPLIT_META)
    pm, ps = part.buffer("chunk_max", T), part.buffer("chunk_sum", T)
    x = part.buffer("src", T, readonly=True)
    part.main(*row_chunk(part, "c", "i0"),
              f"{T} m = {ninf};",
              f"for (int i = i0; i < iend; ++i) {{ {T} v = {x}[base + i * B]; if (v > m || isnan(v)) m = v; }}",
              f"{T} s = {T}(0);",
              "for (int i = i0; i < iend; ) {",
              f"  {T} part = {T}(0); int kend = min(iend, i + 32);",
              f"  for (; i < kend; ++i) part += vk_exp({x}[base + i * B] - m);",
              "  s += part;",
              "}",
              f"{pm}[row * S + c] = m; {ps}[row * S + c] = s;")

    rowstat = _start(T, "Softmax_rows")
    rowstat.meta = Meta(*_SPLIT_META)
    rm, rs = rowstat.buffer("row_max", T), rowstat.buffer("row_sum", T)
    pm, ps = rowstat.buffer("chunk_max", T, readonly=True), rowstat.buffer("chunk_sum", T, readonly=True)
    rowstat.main(f"int rows = {rowstat.m('rows')}; int S = {rowstat.m('S')};",
                 "uint g = gidx();",
                 "if (g >= uint(rows)) return;",
                 "int row = int(g);",
                 f"{T} m = {ninf};",
                 f"for (int c = 0; c < S; ++c) {{ {T} v = {pm}[row * S + c]; if (v > m || isnan(v)) m = v; }}",
                 "// a chunk of only -inf adds exp(-inf - m) = 0 terms (its own sum is nan: skip it);",
                 "// a row of only -inf keeps m = -inf, and x - m is nan in the output, as in JAX",
                 f"{T} s = {T}(0);",
                 "for (int c = 0; c < S; ++c) {",
                 f"  {T} cm = {pm}[row * S + c];",
                 f"  if (cm != {ninf}) s += {ps}[row * S + c] * vk_exp(cm - m);",
                 "}",
                 f"{rm}[row] = m; {rs}[row] = s;")
    return part, rowstat


@lru_cache(maxsize=1024)
def _split_out(op: OpKind, T: str) -> Program:
    write = _start(T, op.value + "_out")
    write.meta = Meta(*_SPLIT_META)
    o = write.buffer("o", T)
    x = write.buffer("src", T, readonly=True)
    rm, rs = write.buffer("row_max", T, readonly=True), write.buffer("row_sum", T, readonly=True)
    write.main(*row_chunk(write, "c", "i0"),
               f"{T} m = {rm}[row]; {T} s = {rs}[row];",
               f"for (int i = i0; i < iend; ++i) {{ {T} xv = {x}[base + i * B]; "
               f"{o}[base + i * B] = {_result(op, T)}; }}")
    return write


def _sweep_max(limit: int) -> int:
    """The longest row (or chunk) one thread sweeps three times within a driver's loop
    limit (`Profile.loop_limit`, lavapipe's: past it every loop of the invocation ends,
    silently), with room to spare; no bound (0) where there is no limit."""
    return limit // 6 if limit else 0


def _chunks(rows: int, N: int, layout: str, limit: int = 0) -> tuple[int, int]:
    """(S, C): chunks per row and their length, for rows long enough to split."""
    S = min(cdiv(N, SPLIT_CHUNK), max(1, STREAMS[layout] // rows))
    if limit:
        S = max(S, cdiv(N, _sweep_max(limit)))
    C = cdiv(N, S)
    return cdiv(N, C), C


def _use_split(rows: int, N: int, layout: str, limit: int = 0) -> bool:
    """Whether rows are split: a few long ones, or (a loop-limited driver) any row one
    thread could not sweep."""
    return (N >= SPLIT_MIN_N and rows < SPLIT_MAX_ROWS[layout]) or bool(limit and N > _sweep_max(limit))


def scratch_bytes(node, profile=None) -> int:
    """Chunk and row statistics when long rows are split (else 0); profile: the
    device's (`vkml.vulkan.device.get().profile`) by default.

    >>> import numpy as np
    >>> from types import SimpleNamespace as NS
    >>> node = NS(size=100 << 14, shape=(100, 1 << 14), attrs={"axis": 1}, dtype=np.float32)
    >>> scratch_bytes(node, NS(layout="cpu")), scratch_bytes(node, NS(layout="gpu"))   # split on a GPU
    (0, 13824)
    """
    if node.size == 0:
        return 0
    if profile is None:
        from ..device import get
        profile = get().profile
    A, N, B = rows_of(node.shape, node.attrs["axis"])
    limit = getattr(profile, "loop_limit", 0)
    if not _use_split(A * B, N, profile.layout, limit):
        return 0
    S, _ = _chunks(A * B, N, profile.layout, limit)
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
    layout, limit = ctx.profile.layout, ctx.profile.loop_limit
    if _use_split(rows, N, layout, limit):
        S, C = _chunks(rows, N, layout, limit)
        isz = dt.itemsize(x.dtype)
        sizes = [rows * S * isz] * 2 + [rows * isz] * 2
        views, off = [], 0
        for nb in sizes:
            views.append(ctx.scratch.sub(off, nb, (nb // isz,), x.dtype))
            off += round_up(nb)
        pm, ps, rm, rs = views
        part, rowstat, write = split_programs(node.op, T)
        meta = {"rows": rows, "N": N, "B": B, "S": S, "C": C}
        # loop heads (`Dispatch.heads`): a few passes over each invocation's elements
        ctx.dispatch(ctx.kernel(part), meta, [pm, ps, x], threads=rows * S, heads=4 * C + 16)
        ctx.dispatch(ctx.kernel(rowstat), meta, [rm, rs, pm, ps], threads=rows, heads=4 * S + 16)
        ctx.dispatch(ctx.kernel(write), meta, [out, x, rm, rs], threads=rows * S, heads=4 * C + 16)
        return
    meta = {"rows": rows, "N": N, "B": B}
    if N <= THREAD_MAX_N or (layout == "cpu" and rows >= 64) or (B > 1 and rows >= 4096 and N <= 1024):
        ctx.dispatch(ctx.kernel(thread_program(node.op, T)), meta, [out, x], threads=rows, heads=4 * N + 16)
    else:
        lx = 256 if N >= 2048 else 128 if N >= 512 else 64
        ctx.dispatch(ctx.kernel(group_program(node.op, T, lx)), meta, [out, x], groups=rows,
                     heads=4 * (-(-N // lx)) + 2 * lx + 16)
