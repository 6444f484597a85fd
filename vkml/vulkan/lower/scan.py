"""Cumsum: inclusive running sum along one axis, as a blocked reduce-then-scan.

The contiguous input is viewed as (A, N, B) with the scanned axis N in the middle; each
of the A*B rows is N elements B apart. Short rows (or many rows) get one thread per row
scanning serially. Long rows are cut into S blocks of C elements:
  1. one thread per block sums it into scratch (totals, [row][block]);
  2. the totals are themselves cumsummed (the same scheme, recursively);
  3. one thread per block scans it from zero and adds the sum of the blocks before it.
Scanning each block from zero and adding the prefix once keeps the rounding error of an
element at about C + log(N) ulps instead of the N of a serial loop.
"""
from __future__ import annotations

from .sizing import cdiv, device_kind, round_up

from dataclasses import dataclass
from functools import lru_cache

from ...trace import dtypes as dt
from ..kernels import binding

CHUNK = 64            # elements per block (at least)
STREAMS = {"cpu": 1 << 12, "gpu": 1 << 16}   # threads worth splitting rows over
STRATEGY: str | None = None   # "cpu" or "gpu" forces the sizing (tests); None: by device


def strategy() -> str:
    return device_kind(STRATEGY)




def rows_of(shape, axis) -> tuple[int, int, int]:
    """(A, N, B): outer extent, scanned extent, inner extent.

    >>> rows_of((2, 3, 4), 1)
    (2, 3, 4)
    """
    A = B = 1
    for d in shape[:axis]:
        A *= d
    for d in shape[axis + 1:]:
        B *= d
    return A, shape[axis], B


@dataclass(frozen=True)
class Level:
    """One scan of (A, N, B) rows in S blocks of C; the totals level below when S > 1."""
    A: int
    N: int
    B: int
    S: int
    C: int
    totals: int           # scratch byte offset of the [row][block] totals
    prefix: int           # scratch byte offset of their inclusive scan
    below: "Level | None"


def plan(A: int, N: int, B: int, itemsize: int, how: str, off: int = 0) -> tuple[Level, int]:
    """The blocked scan of (A, N, B) and the scratch bytes it needs from `off` on."""
    rows = A * B
    S = min(cdiv(N, CHUNK), max(1, STREAMS[how] // rows))
    C = cdiv(N, S)
    S = cdiv(N, C)
    if S == 1:
        return Level(A, N, B, 1, C, 0, 0, None), off
    nb = round_up(rows * S * itemsize)
    below, end = plan(rows, S, 1, itemsize, how, off + 2 * nb)
    return Level(A, N, B, S, C, off, off + nb, below), end


def scratch_bytes(node) -> int:
    """Scratch for the block totals and their scan (0 when rows are scanned whole)."""
    if node.size == 0:
        return 0
    A, N, B = rows_of(node.shape, node.attrs["axis"])
    return plan(A, N, B, dt.itemsize(node.dtype), strategy())[1]


_HEAD = """
void main() {
  int rows = meta[0]; int N = meta[1]; int S = meta[2]; int C = meta[3]; int B = meta[4];
  uint g = gidx();
  if (g >= uint(rows) * uint(S)) return;
  // row fastest: neighbouring threads read neighbouring addresses when B > 1
  int blk = int(g) / rows; int row = int(g) - blk * rows;
  int a = row / B; int base = a * N * B + (row - a * B);
  int i = blk * C; int iend = min(N, i + C);
"""


@lru_cache(maxsize=None)
def source(T: str, mode: str) -> str:
    """mode 'totals': block sums; 'scan': block scan (+ prefix when 'scan_prefix')."""
    if mode == "totals":
        return (binding(1, T, "tot") + binding(2, T, "x", readonly=True) + _HEAD +
                f"  {T} acc = {T}(0);\n"
                "  while (i < iend) {\n"
                f"    {T} part = {T}(0); int kend = min(iend, i + 32);\n"
                "    for (; i < kend; ++i) part += x[base + i * B];\n"
                "    acc += part;\n"
                "  }\n"
                "  tot[row * S + blk] = acc;\n}\n")
    pre = mode == "scan_prefix"
    src = binding(1, T, "o") + binding(2, T, "x", readonly=True)
    if pre:
        src += binding(3, T, "pre", readonly=True)
    src += _HEAD
    src += f"  {T} p = {T}(0);\n"
    if pre:
        src += "  if (blk > 0) p = pre[row * S + blk - 1];\n"
    src += (f"  {T} run = {T}(0);\n"
            "  for (; i < iend; ++i) { int at = base + i * B; run += x[at]; o[at] = p + run; }\n}\n")
    return src


def _emit(ctx, lv: Level, x, out, T: str) -> None:
    rows = lv.A * lv.B
    meta = [rows, lv.N, lv.S, lv.C, lv.B]
    n = rows * lv.S
    if lv.S == 1:
        k = ctx.kernel("Cumsum", source(T, "scan"), 2)
        ctx.dispatch(k, meta, [out, x], threads=n)
        return
    nbytes = n * dt.itemsize(x.dtype)
    tot = ctx.scratch.sub(lv.totals, nbytes, (rows, lv.S), x.dtype)
    pre = ctx.scratch.sub(lv.prefix, nbytes, (rows, lv.S), x.dtype)
    k = ctx.kernel("Cumsum_totals", source(T, "totals"), 2)
    ctx.dispatch(k, meta, [tot, x], threads=n)
    _emit(ctx, lv.below, tot, pre, T)
    k = ctx.kernel("Cumsum_scan", source(T, "scan_prefix"), 3)
    ctx.dispatch(k, meta, [out, x, pre], threads=n)


def lower(node, ins, out, ctx) -> None:
    """Inclusive cumsum of ins[0] along node.attrs['axis'].

    >>> import vkml.numpy as vnp
    >>> vnp.cumsum(vnp.asarray([1, 2, 3]))  # doctest: +SKIP
    Array([1, 3, 6], dtype=int32)
    """
    x = ins[0]
    A, N, B = rows_of(x.shape, node.attrs["axis"])
    lv, _ = plan(A, N, B, dt.itemsize(x.dtype), strategy())
    _emit(ctx, lv, x, out, dt.glsl_type(x.dtype))
