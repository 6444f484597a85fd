"""ArgSort: the stable sorting permutation of every row along one axis.

The contiguous input is viewed as (A, N, B) with the sorted axis N in the middle, as the
scan kernels view it. Every element is sorted as the pair (key, position): the order
compares keys (NaN after every number, or before in descending order; -0.0 equals 0.0)
and breaks ties by position, so it is a total order. That makes any correct sorting
network stable and deterministic, whatever order it compares in.

  1. `local_program`: a workgroup loads segments of P <= LW elements (a whole short row,
     or one block of a long row) into shared memory and sorts each with a bitonic
     network; positions past the row's end are padding that sorts last.
  2. A row longer than one block leaves sorted blocks of LW pairs in scratch;
     `merge_program` merges runs of width w pairwise into runs of 2w, as ScatterAdd's
     long path does (`index.merge_pass_program`): each element finds its place by binary
     search in the partner run. With a total order no two elements tie, so the count of
     partner elements before it is its displacement. The last pass writes positions only.

>>> [b.name for b in merge_program("float", False, True).bindings]
['perm', 'skey', 'sidx']
"""
from __future__ import annotations

from functools import lru_cache

from ...trace import dtypes as dt
from ..memory import ALIGN
from ..program import Meta, Program
from .scan import rows_of

LW_MAX = 1024           # elements a workgroup sorts in shared memory
PAIRS = {"cpu": 8, "gpu": 1}   # pairs each invocation compares per step, by profile layout


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def before_glsl(T: str, descending: bool) -> str:
    """GLSL `bool before(ka, ia, kb, ib, n)`: the pair (ka, ia) sorts before (kb, ib);
    positions >= n are padding, after everything.

    >>> "isnan" in before_glsl("float", False), "isnan" in before_glsl("int", False)
    (True, False)
    """
    nan = ""
    if T in ("float", "double"):
        first = "an" if descending else "bn"
        nan = (f"  bool an = isnan(ka), bn = isnan(kb);\n"
               f"  if (an || bn) return (an && bn) ? ia < ib : {first};\n")
    cmp = "ka > kb" if descending else "ka < kb"
    return (f"bool before({T} ka, int ia, {T} kb, int ib, int n) {{\n"
            f"  if (ia >= n || ib >= n) return ia < ib;\n"
            f"{nan}"
            f"  if (ka == kb) return ia < ib;\n"
            f"  return {cmp};\n"
            f"}}\n")


@lru_cache(maxsize=1024)
def local_program(T: str, descending: bool, LW: int, final: bool, R: int = 1) -> Program:
    """Sort segments of P elements (meta P, a power of two dividing LW) in shared memory,
    LW / P of them per workgroup; segment s is block s % nblk of row s / nblk. Each of the
    LW / (2R) invocations compares R pairs per step (R > 1 on a CPU device: fewer
    invocations meet at each barrier). final: the row is one segment, write its
    permutation to perm (strided as the input); else write the sorted (key, position)
    pairs to okey/oidx, rows contiguous.

    >>> local_program("float", False, 1024, True).local_size, local_program("float", False, 1024, True, 8).local_size
    (512, 64)
    """
    H = max(LW // (2 * R), 1)
    p = Program("ArgSort_local", local_size=H)
    p.meta = Meta(("rows", 1), ("N", 1), ("B", 1), ("P", 1), ("nblk", 1))
    if final:
        out = p.buffer("perm", "int")
    else:
        okey, oidx = p.buffer("okey", T), p.buffer("oidx", "int")
    x = p.buffer("src", T, readonly=True)
    sk, si = p.shared("sk", T, LW), p.shared("si", "int", LW)
    p.add(before_glsl(T, descending), names=("before",))
    place = ["  int seg = w * G + e / P; int pos = e % P;",
             "  int row = seg / nblk; int i = (seg - row * nblk) * P + pos;"]
    if final:
        put = ["    int a = row / B; int b = row - a * B;",
               f"    {out}[(a * N + i) * B + b] = {si}[e];"]
    else:
        put = [f"    {okey}[row * N + i] = {sk}[e]; {oidx}[row * N + i] = {si}[e];"]
    p.main(f"int rows = {p.m('rows')}; int N = {p.m('N')}; int B = {p.m('B')}; int P = {p.m('P')}; "
           f"int nblk = {p.m('nblk')};",
           f"int G = {LW} / P; int nseg = rows * nblk;",
           "int w = int(group_id()); int l = int(lidx());",
           f"for (int e = l; e < {LW}; e += {H}) {{",
           *place,
           "  int a = row / B; int b = row - a * B;",
           f"  {T} k = {T}(0);",
           f"  if (seg < nseg && i < N) k = {T}({x}[(a * N + i) * B + b]);",
           f"  {sk}[e] = k; {si}[e] = i;",
           "}",
           "for (int k = 2; k <= P; k <<= 1) {",
           "  for (int j = k >> 1; j > 0; j >>= 1) {",
           "    memoryBarrierShared(); barrier();",
           f"    for (int t = l; t < {LW // 2}; t += {H}) {{",
           "      int lo = (t / j) * 2 * j + (t % j); int hi = lo + j;",
           "      // ascending where (lo & k) == 0, except that the last merge of every segment",
           "      // is ascending (segments side by side would alternate)",
           "      bool up = k == P || (lo & k) == 0;",
           f"      {T} ka = {sk}[lo], kb = {sk}[hi]; int ia = {si}[lo], ib = {si}[hi];",
           "      if (up ? before(kb, ib, ka, ia, N) : before(ka, ia, kb, ib, N)) {",
           f"        {sk}[lo] = kb; {sk}[hi] = ka; {si}[lo] = ib; {si}[hi] = ia;",
           "      }",
           "    }",
           "  }",
           "}",
           "memoryBarrierShared(); barrier();",
           f"for (int e = l; e < {LW}; e += {H}) {{",
           *place,
           "  if (seg < nseg && i < N) {",
           *put,
           "  }",
           "}")
    return p


@lru_cache(maxsize=1024)
def merge_program(T: str, descending: bool, final: bool) -> Program:
    """One merge pass over rows of sorted runs of width w (meta w) into runs of 2w.
    final: write each position to out (strided as the input) instead of the pairs.

    >>> merge_program("double", True, False).writes
    (0, 1)
    """
    p = Program("ArgSort_merge")
    p.meta = Meta(("rows", 1), ("N", 1), ("B", 1), ("w", 1))
    if final:
        out = p.buffer("perm", "int")
    else:
        dk, di = p.buffer("dkey", T), p.buffer("didx", "int")
    sk, si = p.buffer("skey", T, readonly=True), p.buffer("sidx", "int", readonly=True)
    p.add(before_glsl(T, descending), names=("before",))
    p.main("uint g = gidx();",
           f"int rows = {p.m('rows')}; int N = {p.m('N')}; int B = {p.m('B')}; int w = {p.m('w')};",
           "if (g >= uint(rows) * uint(N)) return;",
           "int row = int(g / uint(N)); int i = int(g - uint(row) * uint(N));",
           "int r0 = row * N;",
           f"{T} k = {sk}[r0 + i]; int id = {si}[r0 + i];",
           "int run = i / w; int s = run * w; int base = (run & ~1) * w;",
           "int lo, hi;",
           "if ((run & 1) == 0) { lo = s + w; hi = min(s + 2 * w, N); } else { lo = s - w; hi = s; }",
           "int c0 = lo;",
           "while (lo < hi) {",
           "  int mid = (lo + hi) >> 1;",
           f"  if (before({sk}[r0 + mid], {si}[r0 + mid], k, id, N)) lo = mid + 1; else hi = mid;",
           "}",
           "int pos = (c0 >= N) ? i : base + (i - s) + (lo - c0);")
    if final:
        p.main("int a = row / B; int b = row - a * B;",
               f"{out}[(a * N + pos) * B + b] = id;")
    else:
        p.main(f"{dk}[r0 + pos] = k; {di}[r0 + pos] = id;")
    return p


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _layout(total: int, itemsize: int) -> tuple[int, int, int, int]:
    """Byte offsets of the key buffers, the position buffers, and the total."""
    kb, ib = _align(total * itemsize), _align(total * 4)
    return kb, 2 * kb, 2 * kb + ib, 2 * kb + 2 * ib


def scratch_bytes(node, profile=None, **_) -> int:
    """Scratch for rows longer than one workgroup's block: two ping-pong buffers of keys
    and of positions, one element each per input element.

    >>> from types import SimpleNamespace as NS
    >>> import numpy as np
    >>> f32 = [NS(dtype=np.float32)]
    >>> scratch_bytes(NS(shape=(3, 5000), attrs={"axis": 1}, inputs=f32)), \\
    ...     scratch_bytes(NS(shape=(3, 1000), attrs={"axis": 1}, inputs=f32))
    (240640, 0)
    """
    A, N, B = rows_of(node.shape, node.attrs["axis"])
    if N <= LW_MAX or A * B == 0:
        return 0
    return _layout(A * N * B, dt.itemsize(node.inputs[0].dtype))[3]


def lower(node, ins, out, ctx) -> None:
    """The stable sorting permutation of ins[0] along node.attrs['axis'].

    >>> import numpy as np, vkml.numpy as vnp
    >>> from vkml.array import bind
    >>> from vkml.trace.ops import OpKind
    >>> bind(OpKind.ArgSort, [vnp.asarray([3.0, np.nan, -1.0, 3.0])], axis=0, descending=False)
    Array([2, 0, 3, 1], dtype=int32)
    """
    x = ins[0]
    A, N, B = rows_of(x.shape, node.attrs["axis"])
    rows = A * B
    if rows * N == 0:
        return
    T = dt.glsl_type(x.dtype)
    desc = bool(node.attrs["descending"])
    R = PAIRS[ctx.profile.layout]
    if N <= LW_MAX:
        P = _pow2(N)
        LW = min(LW_MAX, max(P, 2, _pow2(rows * P)))
        k = ctx.kernel(local_program(T, desc, LW, True, min(R, max(LW // 2, 1))))
        meta = {"rows": rows, "N": N, "B": B, "P": P, "nblk": 1}
        ctx.dispatch(k, meta, [out, x], groups=-(-rows * P // LW))
        return
    total = rows * N
    isz = dt.itemsize(x.dtype)
    k1, i0, i1, _ = _layout(total, isz)
    sc = ctx.scratch
    keys = [sc.sub(0, total * isz, (total,), x.dtype), sc.sub(k1, total * isz, (total,), x.dtype)]
    idx = [sc.sub(i0, 4 * total, (total,), dt.int32), sc.sub(i1, 4 * total, (total,), dt.int32)]
    nblk = -(-N // LW_MAX)
    k = ctx.kernel(local_program(T, desc, LW_MAX, False, R))
    ctx.dispatch(k, {"rows": rows, "N": N, "B": B, "P": LW_MAX, "nblk": nblk},
                 [keys[0], idx[0], x], groups=rows * nblk)
    cur, w = 0, LW_MAX
    mid, last = ctx.kernel(merge_program(T, desc, False)), ctx.kernel(merge_program(T, desc, True))
    while w < N:
        meta = {"rows": rows, "N": N, "B": B, "w": w}
        if 2 * w >= N:
            ctx.dispatch(last, meta, [out, keys[cur], idx[cur]], threads=total)
        else:
            ctx.dispatch(mid, meta, [keys[1 - cur], idx[1 - cur], keys[cur], idx[cur]], threads=total)
        cur, w = 1 - cur, 2 * w
