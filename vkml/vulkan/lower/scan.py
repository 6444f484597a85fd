"""Cumsum: inclusive running sum along one axis, as a blocked reduce-then-scan.

The contiguous input is viewed as (A, N, B) with the scanned axis N in the middle; each
of the A*B rows is N elements B apart. Short rows (or many rows) get one thread per row
scanning serially. Long rows are cut into S blocks of C elements:
  1. one thread per block sums it into scratch (totals, [row][block]);
  2. the totals are themselves cumsummed (the same scheme, recursively);
  3. one thread per block scans it from zero and adds the sum of the blocks before it.
Scanning each block from zero and adding the prefix once keeps the rounding error of an
element at about C + log(N) ulps instead of the N of a serial loop.

An int32 cumsum runs in int64 (block totals and their scan too), and an output that does
not fit int32 sets a device check: the host raises OverflowError (`reduce.overflow_error`)
instead of returning wrapped values. Without shaderInt64 it is refused at lowering.
"""
from __future__ import annotations

from .sizing import cdiv, device_kind, round_up

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

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


def _wide(dtype) -> bool:
    """int32 scans run in int64 (checked against int32 at the end)."""
    return np.dtype(dtype) == dt.int32


def _acc_size(dtype) -> int:
    return 8 if _wide(dtype) else dt.itemsize(dtype)


def scratch_bytes(node) -> int:
    """Scratch for the block totals and their scan (0 when rows are scanned whole)."""
    if node.size == 0:
        return 0
    A, N, B = rows_of(node.shape, node.attrs["axis"])
    return plan(A, N, B, _acc_size(node.dtype), strategy())[1]


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


_I64 = "#extension GL_ARB_gpu_shader_int64 : enable\n"


@lru_cache(maxsize=None)
def source(T: str, mode: str, X: str | None = None, A: str | None = None, check: bool = False) -> str:
    """mode 'totals': block sums; 'scan': block scan (+ prefix when 'scan_prefix').

    T: the output's type; X: the input's and A: the running sums' (both T by default);
    check: the output is narrowed from A, and one that does not fit sets err[0]."""
    X, A = X or T, A or T
    ext = _I64 if "int64_t" in (T, X, A) else ""
    if mode == "totals":
        return (ext + binding(1, A, "tot") + binding(2, X, "x", readonly=True) + _HEAD +
                f"  {A} acc = {A}(0);\n"
                "  while (i < iend) {\n"
                f"    {A} part = {A}(0); int kend = min(iend, i + 32);\n"
                "    for (; i < kend; ++i) part += x[base + i * B];\n"
                "    acc += part;\n"
                "  }\n"
                "  tot[row * S + blk] = acc;\n}\n")
    pre = mode == "scan_prefix"
    src = ext + binding(1, T, "o") + binding(2, X, "x", readonly=True)
    if pre:
        src += binding(3, A, "pre", readonly=True)
    if check:
        src += binding(4 if pre else 3, "int", "err")
    src += _HEAD
    src += f"  {A} p = {A}(0);\n"
    if pre:
        src += "  if (blk > 0) p = pre[row * S + blk - 1];\n"
    store = "o[at] = p + run;"
    if check:
        store = ("A v = p + run; if (v < -2147483648l || v > 2147483647l) bad = true; o[at] = T(v);"
                 .replace("A v", f"{A} v").replace("T(v)", f"{T}(v)"))
        src += "  bool bad = false;\n"
    src += (f"  {A} run = {A}(0);\n"
            f"  for (; i < iend; ++i) {{ int at = base + i * B; run += x[at]; {store} }}\n")
    if check:
        src += "  if (bad) atomicOr(err[0], 1);\n"
    return src + "}\n"


def _emit(ctx, lv: Level, x, out, T: str, check=None) -> None:
    """Scan x into out at level lv; check: the device check of an int32 scan (its
    levels below run on int64 totals)."""
    rows = lv.A * lv.B
    meta = [rows, lv.N, lv.S, lv.C, lv.B]
    n = rows * lv.S
    A = "int64_t" if check is not None else None
    extra = [check] if check is not None else []
    if lv.S == 1:
        k = ctx.kernel("Cumsum", source(T, "scan", None, A, check is not None), 2 + len(extra))
        ctx.dispatch(k, meta, [out, x] + extra, writes=tuple(range(0, 1 + 2 * len(extra), 2)), threads=n)
        return
    adt = np.dtype(np.int64) if check is not None else x.dtype
    nbytes = n * adt.itemsize
    tot = ctx.scratch.sub(lv.totals, nbytes, (rows, lv.S), adt)
    pre = ctx.scratch.sub(lv.prefix, nbytes, (rows, lv.S), adt)
    k = ctx.kernel("Cumsum_totals", source(A or T, "totals", T), 2)
    ctx.dispatch(k, meta, [tot, x], threads=n)
    _emit(ctx, lv.below, tot, pre, A or T)
    k = ctx.kernel("Cumsum_scan", source(T, "scan_prefix", None, A, check is not None), 3 + len(extra))
    ctx.dispatch(k, meta, [out, x, pre] + extra, writes=(0, 3) if extra else (0,), threads=n)


def lower(node, ins, out, ctx) -> None:
    """Inclusive cumsum of ins[0] along node.attrs['axis'].

    >>> import vkml.numpy as vnp
    >>> vnp.cumsum(vnp.asarray([1, 2, 3]))
    Array([1, 3, 6], dtype=int32)
    """
    from .reduce import overflow_error
    x = ins[0]
    A, N, B = rows_of(x.shape, node.attrs["axis"])
    lv, _ = plan(A, N, B, _acc_size(x.dtype), strategy())
    check = None
    if _wide(x.dtype):
        if not ctx.dev.has_int64:
            raise overflow_error("Cumsum", x.shape, (node.attrs["axis"],), ctx.dev.name)
        shape, axis = x.shape, node.attrs["axis"]
        check = ctx.check(lambda w: overflow_error("Cumsum", shape, (axis,)))
    _emit(ctx, lv, x, out, dt.glsl_type(x.dtype), check)
