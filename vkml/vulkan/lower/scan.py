"""Cumsum: inclusive running sum along one axis, as a blocked reduce-then-scan.

The contiguous input is viewed as (A, N, B) with the scanned axis N in the middle; each
of the A*B rows is N elements B apart. Short rows (or many rows) get one thread per row
scanning serially. Long rows are cut into S blocks of C elements:
  1. one thread per block sums it into scratch (totals, [row][block]);
  2. the totals are themselves cumsummed (the same scheme, recursively);
  3. one thread per block scans it from zero and adds the sum of the blocks before it.
Scanning each block from zero and adding the prefix once keeps the rounding error of an
element at about C + log(N) ulps instead of the N of a serial loop. How many blocks a
row is cut into follows the device profile's `layout` ("cpu": fewer, longer streams).

An int32 cumsum runs in int64 (block totals and their scan too), and an output that does
not fit int32 sets a device check: the host raises OverflowError (`reduce.overflow_error`)
instead of returning wrapped values. Without shaderInt64 it is refused at lowering.

>>> [b.name for b in program("scan_prefix", "float").bindings], program("scan", "float").meta.size
(['o', 'src', 'pre'], 5)
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...trace import dtypes as dt
from ..program import Meta, Program
from .sizing import cdiv, round_up

CHUNK = 64            # elements per block (at least)
STREAMS = {"cpu": 1 << 12, "gpu": 1 << 16}   # threads worth splitting rows over, by layout


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


def levels(A: int, N: int, B: int, itemsize: int, layout: str, off: int = 0) -> tuple[Level, int]:
    """The blocked scan of (A, N, B) under a profile layout ("cpu"/"gpu") and the
    scratch bytes it needs from `off` on.

    >>> lv, nbytes = levels(1, 1 << 20, 1, 4, "cpu")
    >>> lv.S, lv.C, lv.below.S, nbytes
    (4096, 256, 64, 33280)
    """
    rows = A * B
    S = min(cdiv(N, CHUNK), max(1, STREAMS[layout] // rows))
    C = cdiv(N, S)
    S = cdiv(N, C)
    if S == 1:
        return Level(A, N, B, 1, C, 0, 0, None), off
    nb = round_up(rows * S * itemsize)
    below, end = levels(rows, S, 1, itemsize, layout, off + 2 * nb)
    return Level(A, N, B, S, C, off, off + nb, below), end


def _wide(dtype) -> bool:
    """int32 scans run in int64 (checked against int32 at the end)."""
    return np.dtype(dtype) == dt.int32


def _acc_size(dtype) -> int:
    return 8 if _wide(dtype) else dt.itemsize(dtype)


def scratch_bytes(node, profile=None) -> int:
    """Scratch for the block totals and their scan (0 when rows are scanned whole);
    profile: the device's (`vkml.vulkan.device.get().profile`) by default.

    >>> from types import SimpleNamespace as NS
    >>> node = NS(size=1 << 20, shape=(1 << 20,), attrs={"axis": 0}, dtype=np.float32)
    >>> scratch_bytes(node, NS(layout="cpu")), scratch_bytes(node, NS(layout="gpu"))
    (33280, 133632)
    """
    if node.size == 0:
        return 0
    if profile is None:
        from ..device import get
        profile = get().profile
    A, N, B = rows_of(node.shape, node.attrs["axis"])
    return levels(A, N, B, _acc_size(node.dtype), profile.layout)[1]


def row_chunk(p: Program, chunk: str = "blk", start: str = "i") -> list[str]:
    """main()'s first lines where each thread takes one chunk of C elements of a row (of
    `rows`, N elements B apart; meta fields rows, N, B, S, C): its chunk `chunk` of row
    `row`, elements [start, iend), row fastest so that neighbouring threads read
    neighbouring addresses when B > 1. Scan and softmax passes share it.

    >>> q = Program("Q"); q.meta = Meta(("rows", 1), ("N", 1), ("B", 1), ("S", 1), ("C", 1))
    >>> row_chunk(q)[-1]
    'int i = blk * C; int iend = min(N, i + C);'
    """
    return [f"int rows = {p.m('rows')}; int N = {p.m('N')}; int S = {p.m('S')}; int C = {p.m('C')}; "
            f"int B = {p.m('B')};",
            "uint g = gidx();",
            "if (g >= uint(rows) * uint(S)) return;",
            f"int {chunk} = int(g) / rows; int row = int(g) - {chunk} * rows;",
            "int a = row / B; int base = a * N * B + (row - a * B);",
            f"int {start} = {chunk} * C; int iend = min(N, {start} + C);"]


@lru_cache(maxsize=1024)
def program(mode: str, T: str, X: str | None = None, A: str | None = None, check: bool = False) -> Program:
    """mode 'totals': block sums; 'scan': block scan; 'scan_prefix': block scan plus the
    prefix of the blocks before it.

    T: the output's type; X: the input's and A: the running sums' (both T by default);
    check: the output is narrowed from A, and one that does not fit sets err[0]."""
    X, A = X or T, A or T
    name = {"totals": "Cumsum_totals", "scan": "Cumsum", "scan_prefix": "Cumsum_scan"}[mode]
    p = Program(name)
    p.meta = Meta(("rows", 1), ("N", 1), ("S", 1), ("C", 1), ("B", 1))
    if "int64_t" in (T, X, A):
        p.extension("GL_ARB_gpu_shader_int64")
    if mode == "totals":
        tot = p.buffer("tot", A)
        src = p.buffer("src", X, readonly=True)
        p.main(*row_chunk(p),
               f"{A} acc = {A}(0);",
               "while (i < iend) {",
               f"  {A} part = {A}(0); int kend = min(iend, i + 32);",
               f"  for (; i < kend; ++i) part += {src}[base + i * B];",
               "  acc += part;",
               "}",
               f"{tot}[row * S + blk] = acc;")
        return p
    o = p.buffer("o", T)
    src = p.buffer("src", X, readonly=True)
    pre = p.buffer("pre", A, readonly=True) if mode == "scan_prefix" else None
    err = p.buffer("err", "int") if check else None
    p.main(*row_chunk(p), f"{A} p = {A}(0);")
    if pre:
        p.main(f"if (blk > 0) p = {pre}[row * S + blk - 1];")
    store = f"{o}[at] = p + run;"
    if check:
        store = (f"{A} v = p + run; if (v < -2147483648l || v > 2147483647l) bad = true; "
                 f"{o}[at] = {T}(v);")
        p.main("bool bad = false;")
    p.main(f"{A} run = {A}(0);",
           f"for (; i < iend; ++i) {{ int at = base + i * B; run += {src}[at]; {store} }}")
    if check:
        p.main(f"if (bad) atomicOr({err}[0], 1);")
    return p


def _emit(ctx, lv: Level, x, out, T: str, check=None) -> None:
    """Scan x into out at level lv; check: the device check of an int32 scan (its
    levels below run on int64 totals)."""
    rows = lv.A * lv.B
    meta = {"rows": rows, "N": lv.N, "S": lv.S, "C": lv.C, "B": lv.B}
    n = rows * lv.S
    A = "int64_t" if check is not None else None
    extra = [check] if check is not None else []
    if lv.S == 1:
        k = ctx.kernel(program("scan", T, None, A, check is not None))
        ctx.dispatch(k, meta, [out, x] + extra, threads=n)
        return
    adt = np.dtype(np.int64) if check is not None else x.dtype
    nbytes = n * adt.itemsize
    tot = ctx.scratch.sub(lv.totals, nbytes, (rows, lv.S), adt)
    pre = ctx.scratch.sub(lv.prefix, nbytes, (rows, lv.S), adt)
    k = ctx.kernel(program("totals", A or T, T))
    ctx.dispatch(k, meta, [tot, x], threads=n)
    _emit(ctx, lv.below, tot, pre, A or T)
    k = ctx.kernel(program("scan_prefix", T, None, A, check is not None))
    ctx.dispatch(k, meta, [out, x, pre] + extra, threads=n)


def lower(node, ins, out, ctx) -> None:
    """Inclusive cumsum of ins[0] along node.attrs['axis'].

    >>> import vkml.numpy as vnp
    >>> vnp.cumsum(vnp.asarray([1, 2, 3]))
    Array([1, 3, 6], dtype=int32)
    """
    from .reduce import overflow_error
    x = ins[0]
    A, N, B = rows_of(x.shape, node.attrs["axis"])
    lv, _ = levels(A, N, B, _acc_size(x.dtype), ctx.profile.layout)
    check = None
    if _wide(x.dtype):
        if not ctx.dev.has_int64:
            raise overflow_error("Cumsum", x.shape, (node.attrs["axis"],), ctx.dev.name)
        shape, axis = x.shape, node.attrs["axis"]
        check = ctx.check(lambda w: overflow_error("Cumsum", shape, (axis,)))
    _emit(ctx, lv, x, out, dt.glsl_type(x.dtype), check)
