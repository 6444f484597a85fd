"""MatMul: (..., m, k) @ (..., k, n) with broadcast batch dims, as tiled compute kernels.

Each workgroup computes one tile of one batch entry's output and each invocation keeps a
register tile of accumulators, so every value it reads is used many times. A `Tiling` is
chosen per device type, then shrunk to the device's limits and to small operands. The
GPU kernels (`shared`, its vec4 variant) take it as specialisation constants: one
SPIR-V module per dtype, operand layout and epilogue, one pipeline per tiling, the
driver unrolling the register tile's loops for the values (SPEC_TILES; float64, and
the same tiling baked into the source for comparison, specialise by source:
`bench/tools/spec_tiles.py`). The CPU `subgroup` kernel is specialised by source: its
load widths change the types it loads (64-bit pairs, vec4s, texel pairs), which a
constant cannot, and a tile as constants over slots for the CPU tiling's 64 x 8 made
lavapipe compile every kernel at full size before dropping the dead slots (first call
of an 8x8 product 81 -> 576 ms, the MatMul tests 7 -> 72 s): measured, not kept.

* ``shared`` (GPUs): the workgroup stages a bk-deep slab of A and B in shared memory,
  then each invocation reads tm values of A and tn of B per k from there and does tm*tn
  multiply-adds (the classic GPU scheme: shared memory is on-chip).
* ``subgroup`` (CPU devices, lavapipe): there one subgroup is one SIMD register and any
  per-invocation buffer or shared-memory address costs a scalar load per lane, so
  staging through shared memory only adds copies. Instead a subgroup reads a chunk of
  A's rows once, spread over its lanes, and hands every element to all lanes with
  ``subgroupShuffle`` at a constant index (one register permute there, where
  ``subgroupBroadcast`` first scans for active lanes, ~20x dearer); only B is read per
  lane, as wide as the row length allows (two 32-bit elements per 64-bit component),
  and each B value feeds tm multiply-adds. Within a chunk the B rows are loaded first
  and the arithmetic runs row by row, so one row's accumulators stay in registers.

Edges: rows and columns outside the output are clamped on load (always valid memory)
and masked on store; k runs over whole chunks, then a remainder loop, so m, n, k need
not be multiples of anything and k = 0 gives zeros.

Batch: the batch dims are collapsed (adjacent dims merged where both operands allow)
and the flat batch index is folded into the workgroup index, decoded with per-dim
strides from meta; an operand's broadcast (size-1) batch dim has stride 0 there.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from functools import lru_cache

from ...trace import dtypes as dt
from ..kernels import binding, texel_binding
from .elementwise import collapse

MAX_BATCH_RANK = 6


@dataclass(frozen=True)
class Tiling:
    """One kernel configuration.

    shared:   workgroup tile bm x bn, k slab bk, register tile tm x tn per invocation
              ((bm/tm) * (bn/tn) invocations).
    subgroup: each subgroup computes tm rows x (S*tn) columns (S = subgroup size);
              A is read wa elements per lane per load (chunks of S*wa k), B wb.

    >>> Tiling("shared", tm=4, tn=4, bm=64, bn=64, bk=8)
    Tiling(strategy='shared', tm=4, tn=4, bm=64, bn=64, bk=8, wa=1, wb=1)
    """
    strategy: str
    tm: int
    tn: int
    bm: int = 0
    bn: int = 0
    bk: int = 0
    wa: int = 1
    wb: int = 1


# The best measured per device type (1024^3 float32 unless said; `python -m bench`):
# lavapipe on a 2-core AMD EPYC VM, one thread: 8x8 tiles with subgroupBroadcast 17
# GFLOP/s, 16x8 with subgroupShuffle 27, 32x8 with 64-bit loads 30, 32x16 and 64x8
# 31-32 (about 60 on both cores, 25% of NumPy's OpenBLAS there); the shared kernel at
# best 10. On both cores (`python bench/tools/prof_kernels.py sgsweep`): 64x8 with 2-wide A and 8-wide
# B 80 GFLOP/s against 65 for 32x16 (8 accumulators per row fit AVX2's 16 registers,
# where 16 spill), 56 against 46 at 256^3; 12- or 10-wide rows are half as fast. NVIDIA H200, 4096^3: shared 16x8 in 128x128x16 tiles 24.5 TFLOP/s (cuBLAS FP32
# without TF32: 50.7), 8x8 in 128x128x8 19.4, 4x4 in 64x64x16 8.7.
CPU_TILING = Tiling("subgroup", tm=64, tn=8, wa=2, wb=8)
CPU_CORES = os.cpu_count() or 1
GPU_TILING = Tiling("shared", tm=16, tn=8, bm=128, bn=128, bk=16)

_override: Tiling | None = None


def cpu_tiling(S: int) -> Tiling:
    """The CPU tiling for subgroups of S lanes: CPU_TILING's at 8 lanes; wider subgroups
    (lavapipe with 512-bit vectors, `device.lavapipe_vectors`) take as many fewer rows and
    k per lane, so that a chunk of k keeps its S * wa = 16 values and its tm * 16 * tn
    vector multiply-adds of unrolled code. At 16 lanes on the Zen 5 VM (forced tilings, as
    `python bench/tools/prof_kernels.py sgsweep` does):
    1024^3 32x8 wa=1 140 GFLOP/s, wa=2 143, 64x8 112; 256x64x256 32x8 wa=1 247 us, wa=2 302.

    >>> cpu_tiling(16)
    Tiling(strategy='subgroup', tm=32, tn=8, bm=0, bn=0, bk=0, wa=1, wb=8)
    """
    f = max(1, S // 8)
    return replace(CPU_TILING, tm=max(8, CPU_TILING.tm // f), wa=max(1, CPU_TILING.wa // f))


def set_tiling(t: Tiling | None) -> None:
    """Force a tiling for later MatMuls (tuning, and tests of the other device type's
    kernel); None restores the per-device default.

    >>> import vkml.numpy as vnp
    >>> set_tiling(Tiling("shared", tm=4, tn=4, bm=32, bn=32, bk=8))
    >>> vnp.matmul(vnp.ones((3, 5)), vnp.ones((5, 2))).numpy().tolist()
    [[5.0, 5.0], [5.0, 5.0], [5.0, 5.0]]
    >>> set_tiling(None)
    """
    global _override
    _override = t


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _width(w: int, extent: int, T: str, dev) -> int:
    """The widest load <= w elements that divides the row length (rows stay aligned)."""
    cap = 4 if T == "double" else (8 if dev.has_int64 else 4)
    w = min(w, cap)
    while w > 1 and extent % w:
        w //= 2
    return w


def choose_tiling(dev, dtype, M: int, N: int, K: int, prefer: Tiling | None = None) -> Tiling:
    """The tiling for a device, dtype and problem size, fitted to the device's limits
    (prefer: a tiling to use instead of the device type's default, unless overridden).

    >>> from vkml.vulkan import device
    >>> dev = device.get()
    >>> t = choose_tiling(dev, "float32", 1024, 1024, 1024)   # the device type's default
    >>> t.strategy == ("subgroup" if dev.profile.cpu else "shared")
    True
    >>> small = Tiling("shared", tm=4, tn=4, bm=32, bn=32, bk=8)   # fits any Vulkan device
    >>> choose_tiling(dev, "float32", 64, 64, 64, prefer=small)
    Tiling(strategy='shared', tm=4, tn=4, bm=32, bn=32, bk=8, wa=1, wb=1)
    """
    t = _override or prefer or (cpu_tiling(dev.subgroup_size) if dev.profile.cpu else GPU_TILING)
    T = dt.glsl_type(dtype)
    if t.strategy == "shared":
        if min(t.tm, t.tn, t.bk) < 1 or t.bm % t.tm or t.bn % t.tn or t.bm < t.tm or t.bn < t.tn:
            raise ValueError(f"MatMul: {t} needs bm a multiple of tm and bn a multiple of tn")
        isz = dt.itemsize(dtype)

        def fits(t):
            threads = (t.bm // t.tm) * (t.bn // t.tn)
            smem = t.bk * (t.bm + t.bn + 2) * isz
            return threads <= dev.max_workgroup_invocations and smem <= dev.max_shared_memory
        # a thinner k slab first (same invocations), then a smaller workgroup tile
        while not fits(t) and t.bk > 4 and t.bk * (t.bm + t.bn + 2) * isz > dev.max_shared_memory:
            t = replace(t, bk=t.bk // 2)
        while not fits(t):
            if t.bm >= t.bn and t.bm > t.tm:
                t = replace(t, bm=t.bm // 2)
            elif t.bn > t.tn:
                t = replace(t, bn=t.bn // 2)
            else:
                raise ValueError(f"MatMul: no shared-memory tiling fits {dev.name} "
                                 f"({dev.max_shared_memory} bytes, {dev.max_workgroup_invocations} "
                                 f"invocations) for {dtype}")
        return t
    if t.strategy != "subgroup":
        raise ValueError(f"MatMul: unknown tiling strategy {t.strategy!r}; use 'shared' or 'subgroup'")
    S = dev.subgroup_size
    # small operands: do not compute (and load) rows and columns that are not there
    tm = min(t.tm, _pow2_at_least(M))
    tn = min(t.tn, _pow2_at_least(-(-N // S)))
    # and enough subgroups that every core of the device has a few (lavapipe runs one
    # workgroup per thread, a thread per core)
    while tm > 16 and -(-M // tm) * -(-N // (S * tn)) < 4 * CPU_CORES:
        tm //= 2
    # a lane's tn columns are whole loads, and every row of B starts on a load boundary
    wb = _width(min(t.wb, tn), math.gcd(N, tn), T, dev)
    return replace(t, tm=tm, tn=tn, wa=_width(t.wa, K, T, dev), wb=wb)


# --------------------------------------------------------------------------- GLSL


def _prologue(rank: int) -> list[str]:
    """main()'s common part: sizes, this workgroup's tile (tmi, tni) and batch offsets.

    Neighbouring workgroups walk down m, so they share one panel of B in cache."""
    L = ["void main() {",
         "  int M = meta[0]; int N = meta[1]; int K = meta[2];",
         "  int tiles_m = meta[3]; int tiles_n = meta[4];",
         "  int g = int(group_id());",
         "  int tmi = g % tiles_m; g /= tiles_m;",
         "  int tni = g % tiles_n; g /= tiles_n;",
         # a grid folded into y may be rounded up: whole workgroups leave together
         "  if (g >= meta[5]) return;",
         "  int coff = g * M * N; int aoff = 0; int boff = 0;"]
    if rank:
        L += [f"  for (int d = {rank - 1}; d >= 0; --d) {{",
              "    int sz = meta[6 + d]; int c = g % sz; g /= sz;",
              f"    aoff += c * meta[{6 + rank} + d]; boff += c * meta[{6 + 2 * rank} + d];",
              "  }"]
    return L


def _mad(T: str, acc: str, a: str, b: str) -> str:
    if T == "int":
        return f"{acc} += {a} * {b};"
    return f"{acc} = fma({a}, {b}, {acc});"


def _epilogue(epi, rank: int, row_len: str = "N"):
    """(declarations, lines for main's start, store(value, row, col) -> expression) for an
    elementwise epilogue.

    epi = (function source, uses math, double math, leaf GLSL types, loads): loads are
    per region load (-1: the product itself, else (leaf, 'i' | 'm')): 'i' reads the leaf
    in the product's own order (off + batch offset + row * N + col), 'm' through row and
    column strides with no batch stride (off + row * sM + col * sN; a bias is sM = 0).
    Offsets and strides travel in meta after the batch layout and are read once into
    locals: re-read at every store (the compiler cannot tell meta from C) they tripled a
    lavapipe kernel's time. row_len: the GLSL expression of the output's row length (the
    kernel's N, or its M where it computes the transposed product, `_subgroup_source`)."""
    if epi is None:
        return "", [], lambda v, r, c, j=None: v
    fn, math, dbl, types, loads = epi
    from .elementwise import math_lib
    src = "".join(texel_binding(4 + j, f"z{j}") if t == "tex" else binding(4 + j, t, f"z{j}", readonly=True)
                  for j, t in enumerate(types))

    def z(j: int, idx: str) -> str:
        return f"texelFetch(z{j}, {idx}).x" if types[j] == "tex" else f"z{j}[{idx}]"
    if math:
        src += math_lib("double" if dbl else "float")
    src += fn
    hoist, k = [], 6 + 3 * rank
    for q, ld in enumerate(loads):
        if ld == -1:
            continue
        if ld[1] == "i":
            hoist.append(f"  int eo{q} = meta[{k}] + coff;")
            k += 1
        elif ld[1] == "c":
            hoist.append(f"  int eo{q} = meta[{k}]; int ec{q} = meta[{k + 1}];")
            k += 2
        else:
            hoist.append(f"  int eo{q} = meta[{k}]; int er{q} = meta[{k + 1}]; int ec{q} = meta[{k + 2}];")
            k += 3

    def store(v: str, r: str, c: str, j: int | None = None) -> str:
        """The epilogue at (r, c); j: c's column within the lane, whose column-vector
        loads `column_loads` made once for every row."""
        args = []
        for q, ld in enumerate(loads):
            if ld == -1:
                args.append(v)
            elif ld[1] == "i":
                args.append(z(ld[0], f"eo{q} + ({r}) * {row_len} + {c}"))
            elif ld[1] == "c":
                args.append(f"ez{q}_{j}" if j is not None else z(ld[0], f"eo{q} + ({c}) * ec{q}"))
            else:
                args.append(z(ld[0], f"eo{q} + ({r}) * er{q} + ({c}) * ec{q}"))
        return f"epi({', '.join(args)})"

    def column_loads(cols: list) -> list[str]:
        """Each column-vector (bias) load once per column, for `store(..., j)`."""
        return [f"  {'float' if types[ld[0]] == 'tex' else types[ld[0]]} ez{q}_{j} = "
                f"{z(ld[0], f'eo{q} + ({c}) * ec{q}')};"
                for q, ld in enumerate(loads) if ld != -1 and ld[1] == "c" for j, c in enumerate(cols)]
    store.column_loads = column_loads
    return src, hoist, store


@lru_cache(maxsize=None)
def _shared_source(t: Tiling, T: str, rank: int, ta: bool = False, tb: bool = False,
                   epi=None) -> tuple[str, int]:
    """Invocation (tx, ty) owns rows m0 + ty + i*TY and columns n0 + tx + j*TX, so
    neighbouring invocations read neighbouring shared-memory words and store
    neighbouring output elements.

    ta / tb: A is stored (K, M) / B is stored (N, K), a transpose read in place (the
    slab loads then walk the other axis, so neighbouring invocations still read
    neighbouring addresses). (Loading the next slab into registers during the
    arithmetic measured slower on the H200: 22 against 33 TFLOP/s, register pressure.)"""
    TX, TY = t.bn // t.tn, t.bm // t.tm
    threads = TX * TY
    BM, BN, BK = t.bm, t.bn, t.bk
    ca, cb = CONTIGUOUS
    # padded strides spread the transposed stores over banks; a thread reading its rows
    # (columns) as one run wants 16-byte aligned runs, so there the pad is 4
    SA, SB = BM + (4 if ca else 1), BN + (4 if cb else 1)
    row = (lambda i: f"ty * {t.tm} + {i}") if ca else (lambda i: f"ty + {i * TY}")
    col = (lambda j: f"tx * {t.tn} + {j}") if cb else (lambda j: f"tx + {j * TX}")
    edecl, ehoist, estore = _epilogue(epi, rank)
    src = [binding(1, T, "C"), binding(2, T, "A", readonly=True), binding(3, T, "B", readonly=True),
           edecl, f"shared {T} As[{BK * SA}];\nshared {T} Bs[{BK * SB}];\n"]
    L = _prologue(rank) + ehoist
    L += ["  int tid = int(gl_LocalInvocationID.x);",
          f"  int tx = tid % {TX}; int ty = tid / {TX};",
          f"  int m0 = tmi * {BM}; int n0 = tni * {BN};"]
    L += [f"  {T} acc_{i}_{j} = {T}(0);" for i in range(t.tm) for j in range(t.tn)]
    ra, rb = -(-BM * BK // threads), -(-BN * BK // threads)
    # (shared index, row/col coordinate, k coordinate, global index) of slab element e
    if ta:
        a_co = (f"e % {BM}", f"e / {BM}", "A[aoff + gk * M + gr]")
    else:
        a_co = (f"e / {BK}", f"e % {BK}", "A[aoff + gr * K + gk]")
    if tb:
        b_co = (f"e / {BK}", f"e % {BK}", "B[boff + gc * K + gk]")
    else:
        b_co = (f"e % {BN}", f"e / {BN}", "B[boff + gk * N + gc]")
    L += [f"  for (int k0 = 0; k0 < K; k0 += {BK}) {{"]
    for r in range(ra):
        g = f"if (e < {BM * BK}) " if (BM * BK) % threads else ""
        L += [f"    {{ int e = tid + {r * threads}; {g}{{ int mm = {a_co[0]}; int kk = {a_co[1]};",
              "        int gr = m0 + mm; int gk = k0 + kk;",
              f"        As[kk * {SA} + mm] = (gr < M && gk < K) ? {a_co[2]} : {T}(0); }} }}"]
    for r in range(rb):
        g = f"if (e < {BN * BK}) " if (BN * BK) % threads else ""
        L += [f"    {{ int e = tid + {r * threads}; {g}{{ int nn = {b_co[0]}; int kk = {b_co[1]};",
              "        int gc = n0 + nn; int gk = k0 + kk;",
              f"        Bs[kk * {SB} + nn] = (gc < N && gk < K) ? {b_co[2]} : {T}(0); }} }}"]
    L += ["    barrier();"]
    L += [f"    for (int kk = 0; kk < {BK}; ++kk) {{"]
    L += [f"      {T} a{i} = As[kk * {SA} + {row(i)}];" for i in range(t.tm)]
    L += [f"      {T} b{j} = Bs[kk * {SB} + {col(j)}];" for j in range(t.tn)]
    L += ["      " + _mad(T, f"acc_{i}_{j}", f"a{i}", f"b{j}") for i in range(t.tm) for j in range(t.tn)]
    L += ["    }", "    barrier();", "  }"]
    for i in range(t.tm):
        L += [f"  {{ int r = m0 + {row(i)};", "    if (r < M) {"]
        L += [f"      if (n0 + {col(j)} < N) C[coff + r * N + n0 + {col(j)}] = "
              f"{estore(f'acc_{i}_{j}', 'r', f'n0 + {col(j)}')};" for j in range(t.tn)]
        L += ["    } }"]
    L.append("}")
    return "".join(src) + "\n".join(L) + "\n", threads


def _slab_vec4(own: str, buf: str, along_k: bool, k0: str, k4, q) -> tuple[str, str, str, str]:
    """(coordinate var, extent, GLSL placing slab vec4 e, its vec4 index) for operand buf
    (own axis m for A, n for B): stored with k innermost a vec4 runs along k (k4 of them
    per slab row), else along the own axis (q per slab row)."""
    g, ext = f"g{own}", own.upper()
    if along_k:
        return (g, ext, f"int {g} = {own}0 + e / {k4}; int gk = {k0} + (e % {k4}) * 4;",
                f"({buf.lower()}off + {g} * K + gk) >> 2")
    return (g, ext, f"int gk = {k0} + e / {q}; int {g} = {own}0 + (e % {q}) * 4;",
            f"({buf.lower()}off + gk * {ext} + {g}) >> 2")


def vec4_fits(t: Tiling, T: str, M: int, N: int, K: int, ta: bool, tb: bool) -> bool:
    """Can `_vec4_source` run this product: float32, register tiles in runs of 4, slabs
    in whole vec4s, and every vec4 load along an axis whose length is a multiple of 4
    (so a load is wholly inside the operand or wholly outside)."""
    if T != "float" or t.tm % 4 or t.tn % 4 or t.bk % 4:
        return False
    TX, TY = t.bn // t.tn, t.bm // t.tm
    threads = TX * TY
    if (t.bm * t.bk // 4) % threads or (t.bn * t.bk // 4) % threads:
        return False
    return (M if ta else K) % 4 == 0 and (K if tb else N) % 4 == 0


@lru_cache(maxsize=None)
def _vec4_source(t: Tiling, rank: int, ta: bool = False, tb: bool = False,
                 prefetch: bool = False, epi=None) -> tuple[str, int]:
    """The shared-memory scheme with 16-byte traffic (float32; see `vec4_fits`).

    Slabs move from global memory as vec4s (a load along k is spread over four rows of
    the slab); an invocation's tm rows are tm/4 runs of four, TY*4 rows apart, and its
    tn columns likewise, so each k step reads (tm + tn)/4 vec4s from shared memory for
    tm*tn multiply-adds, and the invocations of a subgroup read neighbouring vec4s."""
    TX, TY = t.bn // t.tn, t.bm // t.tm
    threads = TX * TY
    BM, BN, BK = t.bm, t.bn, t.bk
    QA, QB = BM // 4, BN // 4              # vec4s per slab row
    ga, gb = t.tm // 4, t.tn // 4
    edecl, ehoist, estore = _epilogue(epi, rank)
    src = [binding(1, "float", "C"), binding(2, "vec4", "A", readonly=True),
           binding(3, "vec4", "B", readonly=True), edecl,
           f"shared vec4 As[{BK * QA}];\nshared vec4 Bs[{BK * QB}];\n"]
    L = _prologue(rank) + ehoist
    L += ["  int tid = int(gl_LocalInvocationID.x);",
          f"  int tx = tid % {TX}; int ty = tid / {TX};",
          f"  int m0 = tmi * {BM}; int n0 = tni * {BN};"]
    L += [f"  float acc_{i}_{j} = 0.0;" for i in range(t.tm) for j in range(t.tn)]
    RA, RB = BM * BK // 4 // threads, BN * BK // 4 // threads

    def load_one(ind: str, k0: str, r: int, reg: str, buf: str, own: str, along_k: bool) -> list[str]:
        """Slab element tid + r*threads of operand buf (own axis m for A, n for B) into
        register reg: stored with k innermost a vec4 runs along k, else along own axis."""
        g, ext, pos, addr = _slab_vec4(own, buf, along_k, k0, BK // 4, QA if own == "m" else QB)
        return [f"{ind}{{ int e = tid + {r * threads}; {pos}",
                f"{ind}  {reg} = ({g} < {ext} && gk < K) ? {buf}[{addr}] : vec4(0.0); }}"]

    def load(k0: str, ind: str) -> list[str]:
        """This invocation's vec4s of the slab at k0 into registers pa*, pb*: A is stored
        (M, K) unless ta, B (N, K) if tb, else (K, N)."""
        return ([line for r in range(RA) for line in load_one(ind, k0, r, f"pa{r}", "A", "m", not ta)]
                + [line for r in range(RB) for line in load_one(ind, k0, r, f"pb{r}", "B", "n", tb)])

    def store(ind: str) -> list[str]:
        """The registers into the shared slab (a vec4 along k spreads over four rows)."""
        out = []
        for r in range(RA):
            e = f"tid + {r * threads}"
            if ta:
                out.append(f"{ind}{{ int e = {e}; As[(e / {QA}) * {QA} + e % {QA}] = pa{r}; }}")
            else:
                out.append(f"{ind}{{ int e = {e}; int mm = e / {BK // 4}; int kq = e % {BK // 4};")
                out += [f"{ind}  As[(kq * 4 + {c}) * {QA} + (mm >> 2)][mm & 3] = pa{r}[{c}];" for c in range(4)]
                out.append(f"{ind}}}")
        for r in range(RB):
            e = f"tid + {r * threads}"
            if tb:
                out.append(f"{ind}{{ int e = {e}; int nn = e / {BK // 4}; int kq = e % {BK // 4};")
                out += [f"{ind}  Bs[(kq * 4 + {c}) * {QB} + (nn >> 2)][nn & 3] = pb{r}[{c}];" for c in range(4)]
                out.append(f"{ind}}}")
            else:
                out.append(f"{ind}{{ int e = {e}; Bs[(e / {QB}) * {QB} + e % {QB}] = pb{r}; }}")
        return out

    L += [f"  vec4 pa{r};" for r in range(RA)] + [f"  vec4 pb{r};" for r in range(RB)]
    if prefetch:    # the next slab's loads are in flight during this slab's arithmetic
        L += load("0", "  ")
        L += [f"  for (int k0 = 0; k0 < K; k0 += {BK}) {{"] + store("    ")
        L += ["    barrier();", f"    if (k0 + {BK} < K) {{"] + load(f"(k0 + {BK})", "      ") + ["    }"]
    else:
        L += [f"  for (int k0 = 0; k0 < K; k0 += {BK}) {{"] + load("k0", "    ") + store("    ")
        L += ["    barrier();"]
    L += [f"    for (int kk = 0; kk < {BK}; ++kk) {{"]
    L += [f"      vec4 a{g} = As[kk * {QA} + {g * TY} + ty];" for g in range(ga)]
    L += [f"      vec4 b{h} = Bs[kk * {QB} + {h * TX} + tx];" for h in range(gb)]
    for i in range(t.tm):
        for j in range(t.tn):
            L.append(f"      acc_{i}_{j} = fma(a{i // 4}[{i % 4}], b{j // 4}[{j % 4}], acc_{i}_{j});")
    L += ["    }", "    barrier();", "  }"]
    for i in range(t.tm):
        L += [f"  {{ int r = m0 + ({(i // 4) * TY} + ty) * 4 + {i % 4};", "    if (r < M) {"]
        for j in range(t.tn):
            c = f"n0 + ({(j // 4) * TX} + tx) * 4 + {j % 4}"
            L.append(f"      if ({c} < N) C[coff + r * N + {c}] = {estore(f'acc_{i}_{j}', 'r', c)};")
        L += ["    } }"]
    L.append("}")
    return "".join(src) + "\n".join(L) + "\n", threads


VEC4 = True     # tests compare against the scalar shared kernel
PREFETCH = False  # for a forced tiling (set_tiling)
# CPU devices read float32 operands through texel buffers (tests turn it off to compare)
TEXELS = True


def _texel_operands(dev, T: str, t: Tiling, a, b) -> tuple | None:
    """The (A, B) texel formats the subgroup kernel reads its operands through, where
    `elementwise.texel_format` reads both (CPU devices, float32 views on a texel boundary
    holding whole texels); else None (storage buffers)."""
    from .elementwise import texel_format
    if not (TEXELS and T == "float"):
        return None
    fa, fb = texel_format(dev, a, t.wa), texel_format(dev, b, t.wb)
    return (fa, fb) if fa is not None and fb is not None else None


WIDE_STORES = True  # tests turn it off to compare
INTERLEAVE = True   # and this (`interleave`)

# The vec4 kernel's tiling and register prefetch per operand layout (A transposed, B
# transposed), the best measured on the H200 at 4096^3 (`python bench/tools/prof_kernels.py
# sweep NN|AT|BT [prefetch]`): NN 36.6 TFLOP/s, A^T 42.8, B^T 38.8 (the scalar kernel:
# 33.1, 33, 31). Register prefetch helps some tilings and layouts and hurts others.
VEC4_TILINGS = {
    (False, False): (Tiling("shared", tm=8, tn=4, bm=64, bn=64, bk=8), False),
    (True, False): (Tiling("shared", tm=8, tn=4, bm=64, bn=64, bk=8), True),
    (False, True): (Tiling("shared", tm=16, tn=8, bm=128, bn=128, bk=16), True),
    (True, True): (Tiling("shared", tm=16, tn=8, bm=128, bn=128, bk=16), False),
}


# Whether an invocation's register-tile rows (columns) are adjacent in shared memory
# (read as aligned runs) or a workgroup-row apart (one word per invocation per read).
# Measured on the H200 at 4096^3, 16x8 in 128x128x16: apart 33.1 TFLOP/s, adjacent rows
# 30.4, adjacent columns 31.6, both 30.8 (bench/tools/prof_kernels.py sweep).
CONTIGUOUS = (False, False)


def _wide(T: str, w: int):
    """(GLSL type of one w-element load of T, unpack(var) -> [w element expressions]).

    A CPU device pays per loaded component and lane, so 32-bit data is read two
    elements per 64-bit component (uint64 bit patterns, never converted as floats)."""
    if w == 1:
        return T, lambda v: [v]
    if T == "double":
        return f"dvec{w}", lambda v: [f"{v}[{c}]" for c in range(w)]
    conv = "uintBitsToFloat" if T == "float" else "int"
    if w == 2:
        return "uint64_t", lambda v: [f"{conv}(unpackUint2x32({v})[{c}])" for c in range(2)]
    if w == 4:
        return ("vec4" if T == "float" else "ivec4"), lambda v: [f"{v}[{c}]" for c in range(4)]
    if w == 8:
        return "u64vec4", lambda v: [f"{conv}(unpackUint2x32({v}[{c // 2}])[{c % 2}])" for c in range(8)]
    raise ValueError(f"MatMul: no {w}-wide load of {T}")


def _pack_wide(T: str, w: int, vals: list) -> str:
    """One w-element value of `_wide(T, w)`'s type holding vals (bit patterns kept)."""
    if w == 1:
        return vals[0]
    if T == "double":
        return f"dvec{w}({', '.join(vals)})"
    if w == 4:
        return f"{'vec4' if T == 'float' else 'ivec4'}({', '.join(vals)})"
    conv = "floatBitsToUint" if T == "float" else "uvec2"
    pairs = [f"packUint2x32({conv}({'' if T == 'float' else 'i'}vec2({vals[2 * p]}, {vals[2 * p + 1]})))"
             for p in range(w // 2)]
    return pairs[0] if w == 2 else f"u64vec4({', '.join(pairs)})"


class _loader:
    """One w-element load of operand buf at a wide index: lines declaring var, and
    unpack(var) -> its w element expressions. A texel operand is a float32 texel buffer
    of w-element texels (`kernels.TEXEL_FORMATS`); w = 8 reads two 4-element texels."""

    def __init__(self, T: str, w: int, buf: str, tex: bool):
        self.T, self.w, self.buf, self.tex = T, w, buf, tex

    def __call__(self, var: str, idx: str) -> list[str]:
        if not self.tex:
            return [f"{_wide(self.T, self.w)[0]} {var} = {self.buf}[{idx}];"]
        if self.w == 8:
            return [f"vec4 {var}a = texelFetch({self.buf}, 2 * ({idx}));",
                    f"vec4 {var}b = texelFetch({self.buf}, 2 * ({idx}) + 1);"]
        return [f"vec4 {var} = texelFetch({self.buf}, {idx});"]

    def unpack(self, var: str) -> list[str]:
        if not self.tex:
            return _wide(self.T, self.w)[1](var)
        if self.w == 8:
            return [f"{var}{h}.{c}" for h in "ab" for c in "xyzw"]
        return [f"{var}.{c}" for c in "xyzw"[:self.w]]


def _unweave(T: str, TM: int, TN: int, S: int) -> list[str]:
    """Lines moving interleaved accumulators (lane l, slot j: column l + S*j of the tile)
    to consecutive ones (lane L, slot J: column TN*L + J), row by row: slot J of lane L
    comes from lane (TN*L + J) % S, slot (TN*L + J) / S; TN shuffles per slot, kept by a
    select on the source slot. All lanes are active here (no branch yet)."""
    L = [f"  int uw_l{J} = (lane * {TN} + {J}) % {S}; int uw_s{J} = (lane * {TN} + {J}) / {S};"
         for J in range(TN)]
    for i in range(TM):
        for J in range(TN):
            # every shuffle by every lane, then the pick: a shuffle inside ?: runs only
            # where its side is taken, and a lane cannot read one that did not run it
            L += [f"  {T} uw_{i}_{J}_{sl} = subgroupShuffle(acc_{i}_{sl}, uw_l{J});" for sl in range(TN)]
            x = f"uw_{i}_{J}_{TN - 1}"
            for sl in range(TN - 2, -1, -1):
                x = f"(uw_s{J} == {sl} ? uw_{i}_{J}_{sl} : {x})"
            L.append(f"  {T} uw_{i}_{J} = {x};")
        L += [f"  acc_{i}_{J} = uw_{i}_{J};" for J in range(TN)]
    return L


SWAP = True   # tests turn it off to compare
TAIL_CHUNK = True   # and this: k past the last whole chunk as one masked chunk


def swap_small_n(S: int, M: int, N: int) -> bool:
    """Whether the subgroup kernel computes C^T = B^T A^T instead: when C has fewer
    columns than a subgroup has lanes and at least four subgroups' worth of rows. Lanes
    run along C's columns, so at N = 10 of 16 lanes six idled and each lane's one column
    made every multiply-add pay a shuffle. The small MLP step's 256x256 @ 256x10 products,
    jitted alone (bench/tools/lvp_mlp_matmuls.py, about 37 us of it a call's fixed cost):
    h @ W 120 -> 84 us, h^T @ g 117 -> 77 us."""
    return SWAP and N < S <= M // 4


def interleave(tb: bool, S: int, tn: int, K: int, itemsize: int) -> bool:
    """Whether a B^T product interleaves its columns over the lanes (`_subgroup_source`):
    when one lane's tn rows of B^T put the lanes' loads a multiple of 4096 bytes apart.
    lavapipe, 256x256x256 with B^T on one core (bench/tools/lvp_bt_sets.py): 0.617 -> 0.535
    ns per multiply-add vector, against 0.515 for B untransposed (K = 264, no conflict:
    both 0.572)."""
    return tb and S > 1 and tn > 1 and (tn * K * itemsize) % 4096 == 0


@lru_cache(maxsize=None)
def _subgroup_source(t: Tiling, T: str, rank: int, S: int, ta: bool = False,
                     tb: bool = False, epi=None, ws: int = 1, tex: bool = False,
                     ilv: bool = False, swap: bool = False, tail: bool = False) -> tuple[str, int]:
    """Lane l owns rows m0 + i (i < tm) and columns n0 + l*tn + j (j < tn).

    A chunk of k values is handed out per lane and shared by shuffles: A's rows are read
    wa elements of k per lane (chunks of S*wa k); a transposed A (K x M in memory) is
    read one k per lane instead, wa rows at a time (chunks of S k). B is read per lane,
    wb columns at a time; a transposed B (N x K) wb values of k at a time per column.
    Both layouts keep every load contiguous, so no operand needs a transposed copy.
    tex: A and B are read through uniform texel buffers (float32; `_texel_operands`), C is
    stored ws elements at a time (ws > 1: N is a multiple of tn).
    ilv (with tb): lane l multiplies columns n0 + l + S*j instead, and the accumulators are
    moved back to its tn consecutive columns by shuffles before the epilogue (`_unweave`).
    B^T's rows for one lane's columns then lie K apart, not tn*K: with tn*K*4 bytes a
    multiple of 4096 every lane's load fell in one cache set (`interleave`).
    swap: the kernel computes C^T = B^T A^T (its M, N are C's N, M; `swap_small_n`) and
    stores element (i, j) at C's (j, i), one at a time; the epilogue sees C's indices."""
    TM, TN, wa, wb = t.tm, t.tn, t.wa, t.wb
    chunk = S if ta else S * wa
    TA, unA = _wide(T, wa)
    TB, unB = _wide(T, wb)
    ldA, ldB = _loader(T, wa, "A", tex), _loader(T, wb, "B", tex)
    if tex:
        TA = TB = ""
    src = ["#extension GL_KHR_shader_subgroup_shuffle : enable\n"]
    if "64" in TA + TB:
        src.append("#extension GL_ARB_gpu_shader_int64 : enable\n")
    edecl, ehoist, estore = _epilogue(epi, rank, "M" if swap else "N")
    TC = _wide(T, ws)[0]
    if "64" in TC and "64" not in TA + TB:
        src.append("#extension GL_ARB_gpu_shader_int64 : enable\n")
    if tex:
        src += [binding(1, TC, "C"), texel_binding(2, "A"), texel_binding(3, "B"), edecl]
    else:
        src += [binding(1, TC, "C"), binding(2, TA, "A", readonly=True),
                binding(3, TB, "B", readonly=True), edecl]
    L = _prologue(rank) + ehoist
    L += ["  int lane = int(gl_SubgroupInvocationID);",
          f"  int row0 = tmi * {TM}; int col0 = tni * {S * TN} + lane * {TN};",
          f"  int Nw = N / {wb};"]
    # clamped addresses (in units of one wide load): loads never leave the operands
    if ta:   # A^T[k, m]: a wide load holds rows row0 + q*wa .. + wa - 1 (wa divides M)
        L += [f"  int ar{q} = (aoff + min(row0 + {q * wa}, M - {wa})) / {wa};" for q in range(TM // wa)]
        L.append(f"  int Mw = M / {wa};")
    else:
        L += [f"  int ar{i} = (aoff + min(row0 + {i}, M - 1) * K) / {wa};" for i in range(TM)]
    if tb and ilv:   # lane l's columns one lane apart: tni*S*TN + l + S*j
        L += [f"  int bc{j} = (boff + min(tni * {S * TN} + lane + {S * j}, N - 1) * K) / {wb};"
              for j in range(TN)]
    elif tb:   # B^T[n, k]: one row of B^T per column, read wb values of k at a time
        L += [f"  int bc{j} = (boff + min(col0 + {j}, N - 1) * K) / {wb};" for j in range(TN)]
    else:
        L += [f"  int bc{q} = (boff + min(col0 + {q * wb}, N - {wb})) / {wb};" for q in range(TN // wb)]
    L += [f"  {T} acc_{i}_{j} = {T}(0);" for i in range(TM) for j in range(TN)]

    def load_b(krow: str, tag: str, indent: str) -> list[str]:
        out = []
        for q in range(TN // wb):
            out += [indent + x for x in ldB(f"bw{tag}_{q}", f"bc{q} + ({krow}) * Nw")]
            out += [f"{indent}{T} b{tag}_{q * wb + c} = {e};" for c, e in enumerate(ldB.unpack(f"bw{tag}_{q}"))]
        return out

    def load_bt_chunk(indent: str, kmax: str | None = None) -> list[str]:
        out = []
        for j in range(TN):
            for kq in range(chunk // wb):
                at = f"k0 / {wb} + {kq}" if kmax is None else f"min(k0 / {wb} + {kq}, {kmax} / {wb} - 1)"
                out += [indent + x for x in ldB(f"bt{j}_{kq}", f"bc{j} + {at}")]
                out += [f"{indent}{T} b{kq * wb + c}_{j} = {e};" for c, e in enumerate(ldB.unpack(f"bt{j}_{kq}"))]
        return out

    def pick(parts: list[str], sel: str) -> str:
        x = parts[-1]
        for c in range(len(parts) - 2, -1, -1):
            x = f"(({sel}) == {c} ? {parts[c]} : {x})"
        return x

    def chunk_body(tail: bool) -> list[str]:
        """One chunk of k at k0; tail: the last, shorter one: loads clamped into the
        operands and every product with k >= K made 0 * 0 (a clamped load may hold an
        inf, and inf * 0 is nan)."""
        out = []
        if ta:
            for q in range(TM // wa):
                kr = "k0 + lane" if not tail else "min(k0 + lane, K - 1)"
                out += ["    " + x for x in ldA(f"aw{q}", f"ar{q} + ({kr}) * Mw")]
                out += [f"    {T} a{q * wa + c}_0 = {e};" for c, e in enumerate(ldA.unpack(f"aw{q}"))]
        else:
            for i in range(TM):
                kw = f"k0 / {wa} + lane" if not tail else f"min(k0 / {wa} + lane, K / {wa} - 1)"
                out += ["    " + x for x in ldA(f"aw{i}", f"ar{i} + {kw}")]
                out += [f"    {T} a{i}_{c} = {e};" for c, e in enumerate(ldA.unpack(f"aw{i}"))]
        if tb:
            out += load_bt_chunk("    ", "K" if tail else None)
        else:
            for kk in range(chunk):
                out += load_b(f"k0 + {kk}" if not tail else f"min(k0 + {kk}, K - 1)", str(kk), "    ")
        if tail:
            out += [f"    bool in{kk} = k0 + {kk} < K;" for kk in range(chunk)]
            out += [f"    b{kk}_{j} = in{kk} ? b{kk}_{j} : {T}(0);" for kk in range(chunk) for j in range(TN)]
        for i in range(TM):
            for kk in range(chunk):
                a_src = f"a{i}_0, {kk}" if ta else f"a{i}_{kk % wa}, {kk // wa}"
                x = f"subgroupShuffle({a_src})"
                if tail:
                    x = f"(in{kk} ? {x} : {T}(0))"
                out.append(f"    {{ {T} x = {x};")
                out += ["      " + _mad(T, f"acc_{i}_{j}", "x", f"b{kk}_{j}") for j in range(TN)]
                out.append("    }")
        return out

    # main loop: whole chunks of k; lane l holds A's values for its share of the chunk
    L += ["  int k0 = 0;", f"  for (; k0 + {chunk} <= K; k0 += {chunk}) {{"]
    L += chunk_body(False)
    L.append("  }")
    if tail:
        # the rest of k as one more chunk: a tm-row tile loaded A at every remaining k,
        # every lane at one address, tm gathers per k (256x10 @ 10x256, one core, a jitted
        # call: 146-153 -> 117-127 us, bench/tools/lvp_small_k.py)
        L += ["  if (k0 < K) {"] + chunk_body(True) + ["  }"]
    # remainder: one k at a time; every lane reads the same A element
    if not tail:
        L += ["  for (; k0 < K; ++k0) {"]
        if tb:
            for j in range(TN):
                L += ["    " + x for x in ldB(f"btr{j}", f"bc{j} + k0 / {wb}")]
                L.append(f"    {T} br_{j} = {pick(ldB.unpack(f'btr{j}'), f'k0 % {wb}')};")
        else:
            L += load_b("k0", "r", "    ")
        if ta:
            for q in range(TM // wa):
                L += ["    " + x for x in ldA(f"awr{q}", f"ar{q} + k0 * Mw")]
        for i in range(TM):
            if ta:
                x = ldA.unpack(f"awr{i // wa}")[i % wa]
            else:
                L += ["    " + x for x in ldA(f"aw{i}", f"ar{i} + k0 / {wa}")]
                x = pick(ldA.unpack(f"aw{i}"), f"k0 % {wa}")
            L.append(f"    {{ {T} x = {x};")
            L += ["      " + _mad(T, f"acc_{i}_{j}", "x", f"br_{j}") for j in range(TN)]
            L.append("    }")
        L.append("  }")
    if tb and ilv:
        L += _unweave(T, TM, TN, S)
    # column-vector (bias) loads once per column, clamped into the row like B's loads
    L += estore.column_loads([f"min(col0 + {j}, N - 1)" for j in range(TN)]) if epi and not swap else []
    if swap:     # C^T's (row0 + i, col0 + j) is C's (col0 + j, row0 + i)
        for i in range(TM):
            L += [f"  if (row0 + {i} < M) {{"]
            L += [f"    if (col0 + {j} < N) C[coff + (col0 + {j}) * M + row0 + {i}] = "
                  f"{estore(f'acc_{i}_{j}', f'col0 + {j}', f'row0 + {i}')};" for j in range(TN)]
            L += ["  }"]
    elif ws > 1:   # ws divides N and TN: each run of ws columns is all in or all out
        for i in range(TM):
            L += [f"  if (row0 + {i} < M) {{", f"    int cr = (coff + (row0 + {i}) * N + col0) / {ws};"]
            vals = [estore(f'acc_{i}_{j}', f'row0 + {i}', f'col0 + {j}', j) for j in range(TN)]
            L += [f"    if (col0 + {q * ws} < N) C[cr + {q}] = {_pack_wide(T, ws, vals[q * ws:(q + 1) * ws])};"
                  for q in range(TN // ws)]
            L += ["  }"]
    else:
        for i in range(TM):
            L += [f"  if (row0 + {i} < M) {{", f"    int cr = coff + (row0 + {i}) * N + col0;"]
            L += [f"    if (col0 + {j} < N) C[cr + {j}] = "
                  f"{estore(f'acc_{i}_{j}', f'row0 + {i}', f'col0 + {j}', j)};" for j in range(TN)]
            L += ["  }"]
    L.append("}")
    return "".join(src) + "\n".join(L) + "\n", S


# --------------------------------------------------------------------------- specialised tiles

# The GPU kernels' tiles are specialisation constants: one SPIR-V module per operand
# layout, dtype and epilogue serves every tiling, and the driver sizes the register tile
# and unrolls its loops ([[unroll]]) when it builds the pipeline for the tiling's values.
# The register tile is SPEC_MAX x SPEC_MAX named slots used under conditions on the
# constants, not an array: as an array the H200's compiler kept a 16x8 tile in memory
# once an epilogue's store loop indexed it (4096^3 with a mask: 58.7 against 3.5 ms).
# The k loop inside a slab is left to the driver: unrolled by hand, a 16x8 tile took the
# H200's compiler minutes. Against the tiling baked into the source (H200, bench/tools/
# spec_tiles.py, ratios spec / source): 4096^3 NN 1.02-1.07, TN 1.00-1.02, NT 1.02-1.07,
# TT 1.06; 1024^3, 4096x4096x10, 1001x1003x1005 0.95-1.01; lavapipe runs both alike.
# float64 keeps its tile in the source: as an array of 128 doubles the H200's compiler
# left it in memory (1024^3: 2.02 against 0.19 ms).
SPEC_TILES = True
SPEC_MAX = 16      # register tiles up to SPEC_MAX x SPEC_MAX; larger ones specialise by source
_SPEC_DECL = """#extension GL_EXT_control_flow_attributes : enable
layout(constant_id = 1) const int TM = 4;
layout(constant_id = 2) const int TN = 4;
layout(constant_id = 3) const int BM = 64;
layout(constant_id = 4) const int BN = 64;
layout(constant_id = 5) const int BK = 8;
const int TX = BN / TN;
const int TY = BM / TM;
const int THREADS = TX * TY;
"""


def _threads(t: Tiling) -> int:
    return (t.bm // t.tm) * (t.bn // t.tn)


def spec_values(t: Tiling) -> tuple:
    """The specialisation constants (ids 1-5) of a shared-memory tiling."""
    return (t.tm, t.tn, t.bm, t.bn, t.bk)


@lru_cache(maxsize=None)
def _shared_spec_source(T: str, rank: int, ta: bool = False, tb: bool = False, epi=None) -> str:
    """`_shared_source`'s scheme with the tiling as specialisation constants: invocation
    (tx, ty) owns rows m0 + ty + i*TY and columns n0 + tx + j*TX.

    The register tile is SPEC_MAX x SPEC_MAX named slots, each used under a condition on
    the constants (`_slot`), so the driver keeps the live ones in registers: as an array
    indexed in loops, an epilogue's store loop left a 16x8 tile in memory on the H200
    (58.7 against 3.5 ms for a 4096^3 product with a mask)."""
    edecl, ehoist, estore = _epilogue(epi, rank)
    S = SPEC_MAX
    src = [_SPEC_DECL, "const int SA = BM + 1;\nconst int SB = BN + 1;\n",
           "const int RA = (BM * BK + THREADS - 1) / THREADS;\nconst int RB = (BN * BK + THREADS - 1) / THREADS;\n",
           binding(1, T, "C"), binding(2, T, "A", readonly=True), binding(3, T, "B", readonly=True),
           edecl, f"shared {T} As[BK * SA];\nshared {T} Bs[BK * SB];\n"]
    L = _prologue(rank) + ehoist
    L += ["  int tid = int(gl_LocalInvocationID.x);",
          "  int tx = tid % TX; int ty = tid / TX;",
          "  int m0 = tmi * BM; int n0 = tni * BN;"]
    L += [f"  {T} acc_{i}_{j} = {T}(0);" for i in range(S) for j in range(S)]
    a_co = ("e % BM", "e / BM", "A[aoff + gk * M + gr]") if ta else ("e / BK", "e % BK", "A[aoff + gr * K + gk]")
    b_co = ("e / BK", "e % BK", "B[boff + gc * K + gk]") if tb else ("e % BN", "e / BN", "B[boff + gk * N + gc]")
    L += ["  for (int k0 = 0; k0 < K; k0 += BK) {",
          "    [[unroll]] for (int r = 0; r < RA; ++r) {",
          f"      int e = tid + r * THREADS; if (e < BM * BK) {{ int mm = {a_co[0]}; int kk = {a_co[1]};",
          "        int gr = m0 + mm; int gk = k0 + kk;",
          f"        As[kk * SA + mm] = (gr < M && gk < K) ? {a_co[2]} : {T}(0); }} }}",
          "    [[unroll]] for (int r = 0; r < RB; ++r) {",
          f"      int e = tid + r * THREADS; if (e < BN * BK) {{ int nn = {b_co[0]}; int kk = {b_co[1]};",
          "        int gc = n0 + nn; int gk = k0 + kk;",
          f"        Bs[kk * SB + nn] = (gc < N && gk < K) ? {b_co[2]} : {T}(0); }} }}",
          "    barrier();",
          "    for (int kk = 0; kk < BK; ++kk) {"]
    L += [f"      {T} a{i} = {T}(0); if ({i} < TM) a{i} = As[kk * SA + ty + {i} * TY];" for i in range(S)]
    L += [f"      {T} b{j} = {T}(0); if ({j} < TN) b{j} = Bs[kk * SB + tx + {j} * TX];" for j in range(S)]
    L += [f"      if ({_slot(i, j)}) " + _mad(T, f"acc_{i}_{j}", f"a{i}", f"b{j}") for i in range(S) for j in range(S)]
    L += ["    }", "    barrier();", "  }"]
    L += _slot_stores(lambda i: f"m0 + ty + {i} * TY", lambda j: f"n0 + tx + {j} * TX", estore)
    return "".join(src) + "\n".join(L) + "\n"


def _slot(i: int, j: int) -> str:
    return f"{i} < TM && {j} < TN"


def _slot_stores(row, col, estore) -> list[str]:
    """The live slots' stores (row(i), col(j): GLSL of slot (i, j)'s output position),
    through the epilogue, masked at the edges; the end of main."""
    L = []
    for i in range(SPEC_MAX):
        L += [f"  if ({i} < TM) {{ int r = {row(i)};", "    if (r < M) {"]
        L += [f"      if ({j} < TN) {{ int c = {col(j)}; if (c < N) C[coff + r * N + c] = "
              f"{estore(f'acc_{i}_{j}', 'r', 'c')}; }}" for j in range(SPEC_MAX)]
        L += ["    } }"]
    return L + ["}"]


@lru_cache(maxsize=None)
def _vec4_spec_source(rank: int, ta: bool = False, tb: bool = False, prefetch: bool = False,
                      epi=None) -> str:
    """`_vec4_source`'s scheme with the tiling as specialisation constants."""
    edecl, ehoist, estore = _epilogue(epi, rank)
    src = [_SPEC_DECL, "const int QA = BM / 4;\nconst int QB = BN / 4;\nconst int GA = TM / 4;\n"
           "const int GB = TN / 4;\nconst int K4 = BK / 4;\n"
           "const int RA = BM * BK / 4 / THREADS;\nconst int RB = BN * BK / 4 / THREADS;\n",
           binding(1, "float", "C"), binding(2, "vec4", "A", readonly=True),
           binding(3, "vec4", "B", readonly=True), edecl,
           "shared vec4 As[BK * QA];\nshared vec4 Bs[BK * QB];\n"]
    L = _prologue(rank) + ehoist
    L += ["  int tid = int(gl_LocalInvocationID.x);",
          "  int tx = tid % TX; int ty = tid / TX;",
          "  int m0 = tmi * BM; int n0 = tni * BN;"]
    L += [f"  float acc_{i}_{j} = 0.0;" for i in range(SPEC_MAX) for j in range(SPEC_MAX)]
    L += ["  vec4 pa[RA]; vec4 pb[RB];"]

    def load_one(k0: str, buf: str, own: str, along_k: bool) -> list[str]:
        """Slab vec4 e = tid + r*THREADS of buf (own axis m for A, n for B) into p{a,b}[r]:
        stored with k innermost a vec4 runs along k, else along the own axis."""
        g, ext, pos, addr = _slab_vec4(own, buf, along_k, k0, "K4", "QA" if own == "m" else "QB")
        reg = f"p{buf.lower()}[r]"
        return [f"[[unroll]] for (int r = 0; r < R{buf}; ++r) {{ int e = tid + r * THREADS; {pos}",
                f"  {reg} = ({g} < {ext} && gk < K) ? {buf}[{addr}] : vec4(0.0); }}"]

    def load(k0: str, ind: str) -> list[str]:
        return [ind + x for x in load_one(k0, "A", "m", not ta) + load_one(k0, "B", "n", tb)]

    def store(ind: str) -> list[str]:
        out = ["[[unroll]] for (int r = 0; r < RA; ++r) { int e = tid + r * THREADS;"]
        out += (["  As[e] = pa[r]; }"] if ta else
                ["  int mm = e / K4; int kq = e % K4;",
                 "  " + " ".join(f"As[(kq * 4 + {c}) * QA + (mm >> 2)][mm & 3] = pa[r].{x};"
                                 for c, x in enumerate("xyzw")) + " }"])
        out += ["[[unroll]] for (int r = 0; r < RB; ++r) { int e = tid + r * THREADS;"]
        out += (["  int nn = e / K4; int kq = e % K4;",
                 "  " + " ".join(f"Bs[(kq * 4 + {c}) * QB + (nn >> 2)][nn & 3] = pb[r].{x};"
                                 for c, x in enumerate("xyzw")) + " }"]
                if tb else ["  Bs[e] = pb[r]; }"])
        return [ind + x for x in out]

    if prefetch:
        L += load("0", "  ")
        L += ["  for (int k0 = 0; k0 < K; k0 += BK) {"] + store("    ")
        L += ["    barrier();", "    if (k0 + BK < K) {"] + load("(k0 + BK)", "      ") + ["    }"]
    else:
        L += ["  for (int k0 = 0; k0 < K; k0 += BK) {"] + load("k0", "    ") + store("    ")
        L += ["    barrier();"]
    S = SPEC_MAX
    L += ["    for (int kk = 0; kk < BK; ++kk) {"]
    L += [f"      vec4 a{g} = vec4(0.0); if ({g} < GA) a{g} = As[kk * QA + {g} * TY + ty];" for g in range(S // 4)]
    L += [f"      vec4 b{h} = vec4(0.0); if ({h} < GB) b{h} = Bs[kk * QB + {h} * TX + tx];" for h in range(S // 4)]
    L += [f"      if ({_slot(i, j)}) acc_{i}_{j} = fma(a{i // 4}[{i % 4}], b{j // 4}[{j % 4}], acc_{i}_{j});"
          for i in range(S) for j in range(S)]
    L += ["    }", "    barrier();", "  }"]
    L += _slot_stores(lambda i: f"m0 + ({i // 4} * TY + ty) * 4 + {i % 4}",
                      lambda j: f"n0 + ({j // 4} * TX + tx) * 4 + {j % 4}", estore)
    return "".join(src) + "\n".join(L) + "\n"


# --------------------------------------------------------------------------- lowering


def _batch_layout(a_shape, b_shape, out_batch):
    """Collapsed batch dims and A's and B's element strides over them (0: broadcast)."""
    def strides(shape):
        lead = (1,) * (len(out_batch) + 2 - len(shape)) + tuple(shape[:-2])
        st, acc = [0] * len(lead), shape[-2] * shape[-1]
        for i in range(len(lead) - 1, -1, -1):
            st[i] = 0 if lead[i] == 1 else acc
            acc *= lead[i]
        return tuple(st)
    out_st, acc = [0] * len(out_batch), 1
    for i in range(len(out_batch) - 1, -1, -1):
        out_st[i] = acc
        acc *= out_batch[i]
    shp, (_, sa, sb) = collapse(out_batch, [tuple(out_st), strides(a_shape), strides(b_shape)])
    return shp, sa, sb


def _swap(shape: tuple) -> tuple:
    return tuple(shape[:-2]) + (shape[-1], shape[-2])


# A product whose default tiles make fewer workgroups than this (the H200 has 132
# multiprocessors) takes SKINNY_TILING: 4096 x 4096 @ 4096 x 10, 32 workgroups of 128 x
# 128, ran 714 us; in 32 x 64 tiles 356 (`python bench/tools/prof_kernels.py shapes`).
MIN_WORKGROUPS = 128
SKINNY_TILING = Tiling("shared", tm=4, tn=8, bm=32, bn=64, bk=16)


def select_tiling(dev, dtype, M: int, N: int, K: int, nbatch: int = 1, ta: bool = False,
                  tb: bool = False) -> tuple[Tiling, bool]:
    """(tiling, register prefetch) for one product: a forced tiling, else the device
    type's; on GPUs the vec4 tiling tuned for the operand layout where it fits, and
    smaller tiles for a product too small to fill the device.

    >>> from types import SimpleNamespace as NS
    >>> gpu = NS(is_cpu=False, subgroup_size=32, max_shared_memory=48 << 10,
    ...          max_workgroup_invocations=1024, has_int64=True, name="gpu")
    >>> select_tiling(gpu, "float32", 4096, 10, 4096)[0].bm
    32
    """
    T = dt.glsl_type(dtype)
    t = choose_tiling(dev, dtype, M, N, K)
    prefetch = PREFETCH
    if t.strategy != "shared" or _override is not None:
        return t, prefetch
    if VEC4:
        tuned, pf = VEC4_TILINGS[(ta, tb)]
        t4 = choose_tiling(dev, dtype, M, N, K, prefer=tuned)
        if vec4_fits(t4, T, M, N, K, ta, tb):
            t, prefetch = t4, pf
    if -(-M // t.bm) * -(-N // t.bn) * nbatch < MIN_WORKGROUPS:
        small = choose_tiling(dev, dtype, M, N, K, prefer=SKINNY_TILING)
        if -(-M // small.bm) * -(-N // small.bn) > -(-M // t.bm) * -(-N // t.bn):
            t, prefetch = small, False
    return t, prefetch


def _epilogue_key(epilogue, node, dev=None):
    """(kernel key, meta, views, texel formats) of an elementwise epilogue (region, views
    per leaf; None for the product itself), in `_epilogue`'s terms. dev (the subgroup
    kernel's device): float32 leaves may be texels there, and a load whose row stride
    is 0 (a bias) is a column vector, loaded once per column ('c')."""
    if epilogue is None:
        return None, [], [], []
    from .elementwise import region_function, texel_format, uses_double
    reg, eviews = epilogue
    fn, math = region_function(reg, "epi")
    zi, types, views, fmts = {}, [], [], []
    for j, (l, v) in enumerate(zip(reg.leaves, eviews)):
        if v is not None:
            zi[j] = len(types)
            f = texel_format(dev, v, 1) if dev is not None else None
            types.append("tex" if f is not None else dt.glsl_type(l.dtype))
            fmts.append(f)
            views.append(v)
    loads, meta = [], []
    N = node.shape[-1]
    for li, off, st in reg.loads:
        if eviews[li] is None:
            loads.append(-1)
        elif tuple(st) == tuple(_contiguous(reg.shape)) or _is_identity(st, reg.shape):
            loads.append((zi[li], "i"))
            meta.append(off)
        else:
            if any(x and d > 1 for x, d in zip(st[:-2], reg.shape[:-2])):
                raise AssertionError(f"MatMul: epilogue load {st} over {reg.shape} strides a batch dim")
            sM, sN = st[-2] if reg.shape[-2] > 1 else 0, st[-1] if N > 1 else 0
            if dev is not None and sM == 0:
                loads.append((zi[li], "c"))
                meta += [off, sN]
            else:
                loads.append((zi[li], "m"))
                meta += [off, sM, sN]
    return (fn, math, uses_double(reg), tuple(types), tuple(loads)), meta, views, fmts


def _contiguous(shape) -> list:
    st, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        st[i] = acc
        acc *= shape[i]
    return st


def _is_identity(st, shape) -> bool:
    return all(d == 1 or s == c for d, s, c in zip(shape, st, _contiguous(shape)))


INT_UNROLL = 32          # int32 products: k steps per loop iteration (K up to INT_MAX_K)
INT_MAX_K = INT_UNROLL * 65000


@lru_cache(maxsize=None)
def _int_source(rank: int, ta: bool, tb: bool) -> str:
    """One thread per output of an int32 product, exact: each a*b (|.| < 2^62) is split
    into its high and low 32-bit halves, summed apart in int64 (no sum of 2^31 terms can
    overflow), and the result is int32 only where high:low fits; else err[0] is set.
    The k loop does INT_UNROLL steps an iteration: lavapipe ends a loop at 65535.
    meta = [M, N, K, rows, batch extents, A's batch strides, B's]."""
    L = ["#extension GL_ARB_gpu_shader_int64 : enable\n",
         binding(1, "int", "C"), binding(2, "int", "A", readonly=True),
         binding(3, "int", "B", readonly=True), binding(4, "int", "err"),
         "void main() {",
         "  uint gi = gidx();",
         "  int M = meta[0], N = meta[1], K = meta[2];",
         "  if (gi >= uint(meta[3]) * uint(N)) return;",
         "  int o = int(gi); int n = o % N; int m = (o / N) % M; int bt = o / (N * M);",
         "  int ao = 0, bo = 0, rem = bt;"]
    for j in range(rank - 1, -1, -1):
        L.append(f"  {{ int d = rem % meta[4 + {j}]; rem /= meta[4 + {j}]; "
                 f"ao += d * meta[{4 + rank + j}]; bo += d * meta[{4 + 2 * rank + j}]; }}")
    a_at = "ao + k * M + m" if ta else "ao + m * K + k"
    b_at = "bo + n * K + k" if tb else "bo + k * N + n"
    step = f"{{ int64_t p = int64_t(A[{a_at}]) * int64_t(B[{b_at}]); hi += p >> 32; lo += p & 0xffffffffl; }}"
    L += ["  int64_t hi = 0l, lo = 0l;", "  int k = 0;",
          f"  for (; k + {INT_UNROLL} <= K; ) {{"]
    L += ["    " + step + " ++k;"] * INT_UNROLL
    L += ["  }", "  for (; k < K; ++k) " + step,
          "  hi += lo >> 32; lo &= 0xffffffffl;",
          "  if (!((hi == 0l && lo < 0x80000000l) || (hi == -1l && lo >= 0x80000000l))) atomicOr(err[0], 1);",
          "  C[o] = int(uint(lo));",
          "}"]
    return "\n".join(L) + "\n"


def _int_matmul(node, a, b, ta, tb, out, ctx, M, N, K, nbatch, shp, sa, sb) -> None:
    """An int32 product, exact or an OverflowError (`_int_source`); never wrapped."""
    from .reduce import overflow_error
    shapes = (tuple(node.inputs[0].shape), tuple(node.inputs[1].shape))
    if not ctx.dev.has_int64:
        raise overflow_error("MatMul", shapes[0], (), ctx.dev.name)

    def error(w):
        return OverflowError(f"MatMul: an element of the int32 product of {shapes[0]} @ {shapes[1]} "
                             f"does not fit int32, the device's only integer type (it would wrap): "
                             f"cast the operands to float64 first (x.astype('float64'))")
    if K > INT_MAX_K:
        raise ValueError(f"MatMul: an int32 product of {shapes[0]} @ {shapes[1]} sums K = {K} terms, "
                         f"more than the {INT_MAX_K} its exact kernel takes; cast to float64")
    err = ctx.check(error)
    k = ctx.kernel("MatMul_int", _int_source(len(shp), ta, tb), 4)
    ctx.dispatch(k, [M, N, K, M * nbatch, *shp, *sa, *sb], [out, a, b, err], writes=(0, 3),
                 threads=M * N * nbatch)


def lower(node, ins, out, ctx, transposed: tuple = (False, False), epilogue=None) -> None:
    """Queue the dispatch computing node (MatMul) from views ins = (A, B) into out.

    transposed: ins[0] holds A's transpose (..., K, M) / ins[1] B's (..., N, K), which the
    kernels read in place (`fusion` folds a transpose into the MatMul). epilogue:
    (region, views per region leaf, None for the product) of a same-shape elementwise
    region applied before the store (a bias, an activation, a mask), so the product
    itself is never written (`fusion` checks that its loads are ones `_epilogue` reads).

    >>> import vkml.numpy as vnp
    >>> (vnp.ones((2, 1, 1, 3)) @ vnp.ones((4, 3, 5))).shape
    (2, 4, 1, 5)
    """
    a, b = ins
    ta, tb = transposed
    a_shape = _swap(a.shape) if ta else a.shape
    b_shape = _swap(b.shape) if tb else b.shape
    M, K, N = a_shape[-2], a_shape[-1], b_shape[-1]
    batch = tuple(node.shape[:-2])
    nbatch = 1
    for d in batch:
        nbatch *= d
    if M == 0 or N == 0 or nbatch == 0:
        return
    shp, sa, sb = _batch_layout(a_shape, b_shape, batch)
    if len(shp) > MAX_BATCH_RANK:
        raise ValueError(f"MatMul: {len(shp)} non-mergeable batch dims exceed the kernel limit of "
                         f"{MAX_BATCH_RANK} (shapes {a.shape} @ {b.shape})")
    if node.dtype == dt.int32:
        assert epilogue is None, "fusion gives int32 products no epilogue"
        _int_matmul(node, a, b, ta, tb, out, ctx, M, N, K, nbatch, shp, sa, sb)
        return
    T = dt.glsl_type(node.dtype)
    t, prefetch = select_tiling(ctx.dev, node.dtype, M, N, K, nbatch, ta, tb)
    # the subgroup kernel's CPU-tuned variants (swap, interleave, tail) on CPU devices
    # only: on a GPU it runs only for a forced tiling, and a swapped A^T chunk of S * wa
    # k unrolled past what the H200's compiler builds
    cpu = ctx.dev.profile.cpu
    swap = cpu and t.strategy == "subgroup" and swap_small_n(ctx.dev.subgroup_size, M, N)
    if swap:     # C^T = B^T A^T: the operands trade places and transposition flags
        a, b, ta, tb, M, N, sa, sb = b, a, not tb, not ta, N, M, sb, sa
        t, prefetch = select_tiling(ctx.dev, node.dtype, M, N, K, nbatch, ta, tb)
    epi, epi_meta, epi_views, epi_fmts = _epilogue_key(
        epilogue, node, ctx.dev if t.strategy == "subgroup" else None)
    name, texels = None, ()
    spec = ()
    if t.strategy == "shared" and VEC4 and vec4_fits(t, T, M, N, K, ta, tb):
        if SPEC_TILES and max(t.tm, t.tn) <= SPEC_MAX:
            body, local, spec = _vec4_spec_source(len(shp), ta, tb, prefetch, epi), _threads(t), spec_values(t)
        else:
            body, local = _vec4_source(t, len(shp), ta, tb, prefetch, epi)
        tile_m, tile_n = t.bm, t.bn
        name = "MatMul_shared4"
    elif t.strategy == "shared":
        if SPEC_TILES and not any(CONTIGUOUS) and T != "double" and max(t.tm, t.tn) <= SPEC_MAX:
            body, local, spec = _shared_spec_source(T, len(shp), ta, tb, epi), _threads(t), spec_values(t)
        else:
            body, local = _shared_source(t, T, len(shp), ta, tb, epi)
        tile_m, tile_n = t.bm, t.bn
    else:
        if ta:   # wa runs along m: a width dividing both m and the row tile
            t = replace(t, wa=_width(min(8, t.tm), math.gcd(M, t.tm), T, ctx.dev))
        if tb:   # wb runs along k, within one chunk
            t = replace(t, wb=_width(8, math.gcd(K, ctx.dev.subgroup_size), T, ctx.dev))
        ws = _width(t.tn, math.gcd(N, t.tn), T, ctx.dev) if WIDE_STORES and not swap else 1
        tex = _texel_operands(ctx.dev, T, t, a, b)
        ilv = cpu and interleave(tb, ctx.dev.subgroup_size, t.tn, K, dt.itemsize(node.dtype)) and INTERLEAVE
        chunk = ctx.dev.subgroup_size * (1 if ta else t.wa)
        body, local = _subgroup_source(t, T, len(shp), ctx.dev.subgroup_size, ta, tb, epi, ws,
                                       tex is not None, ilv, swap, cpu and TAIL_CHUNK and K % chunk != 0)
        texels = (None, *(tex or (None, None)), *epi_fmts)
        tile_m, tile_n = t.tm, ctx.dev.subgroup_size * t.tn
    tiles_m, tiles_n = -(-M // tile_m), -(-N // tile_n)
    meta = [M, N, K, tiles_m, tiles_n, nbatch, *shp, *sa, *sb, *epi_meta]
    name = (name or f"MatMul_{t.strategy}") + ("_epi" if epi is not None else "")
    k = ctx.kernel(name, body, 3 + len(epi_views), local_size=local, texels=texels, spec=spec)
    ctx.dispatch(k, meta, [out, a, b, *epi_views], writes=(0,), groups=tiles_m * tiles_n * nbatch)
