"""Tiling policy: which kernel and tile sizes one product runs with, per device.

A `Tiling` is chosen by device type (`Profile.cpu`: the `subgroup` kernel on host cores,
the `shared` one on GPUs), then shrunk to the device's limits and to small operands
(`choose_tiling`); on GPUs `select_tiling` prefers the vec4 tiling tuned for the
operand layout and smaller tiles for a product too small to fill the device. A tiling
forced for tuning or tests is the profile's `matmul_tiling` (`set_tiling`, or
`device.using(matmul_tiling=...)` for a block). The measurements behind the constants
are in bench/RESULTS.md (`python bench/tools/prof_kernels.py sweep|sgsweep|shapes`).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, replace

from ....trace import dtypes as dt


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


# The best measured per device type (bench/RESULTS.md). On CPU devices 8 accumulators
# per row fit AVX2's 16 vector registers (16 spill), and rows of 12 or 10 columns ran
# slower; on GPUs a 16x8 register tile in 128x128x16 workgroup tiles beat 8x8 and 4x4.
CPU_TILING = Tiling("subgroup", tm=64, tn=8, wa=2, wb=8)
GPU_TILING = Tiling("shared", tm=16, tn=8, bm=128, bn=128, bk=16)
# Products of at most SMALL_PRODUCT multiply-adds on a CPU device all take one small tiling
# and one kernel form (`small_product`): their time is the dispatch's, while each
# distinct tiling, store width or k tail of the shape-fitted kernel is a kernel of its own
# that lavapipe compiles in every cold process (~0.5 s each: a graph of many small
# products of different shapes compiled one per shape).
SMALL_PRODUCT = 1 << 17
SMALL_TILING = Tiling("subgroup", tm=16, tn=2, wa=1, wb=1)

# The vec4 kernel's tiling and register prefetch per operand layout (A transposed, B
# transposed), the best measured on the H200 at 4096^3 (`python bench/tools/prof_kernels.py
# sweep NN|AT|BT [prefetch]`); each beat the scalar kernel. Register prefetch helps some
# tilings and layouts and hurts others.
VEC4_TILINGS = {
    (False, False): (Tiling("shared", tm=16, tn=8, bm=128, bn=128, bk=16), True),
    (True, False): (Tiling("shared", tm=8, tn=8, bm=64, bn=128, bk=16), True),
    (False, True): (Tiling("shared", tm=16, tn=8, bm=128, bn=128, bk=16), True),
    (True, True): (Tiling("shared", tm=16, tn=8, bm=128, bn=128, bk=16), True),
}
# ... and where the tuned tiling runs, whether its slab loop is marked [[unroll]] and its
# slabs double-buffered (`spec.vec4_program`): chosen per layout from
# `bench/tools/matmul_sweep.py` on an H100 at 4096^3 (bench/RESULTS.md, issue 23), where
# every layout's fastest scheme had the loop unrolled and none double-buffered slabs
# (they ran 0.6-0.8x as fast in this kernel, unlike the standalone probe).
VEC4_SCHEMES = {
    (False, False): {"unroll": True},
    (True, False): {"unroll": True},
    (False, True): {"unroll": True},
    (True, True): {"unroll": True},
}

# A GPU product whose default tiles make fewer workgroups than this (the H200 has 132
# multiprocessors) takes SKINNY_TILING: a 4096 x 4096 @ 4096 x 10 product in 32
# workgroups of 128 x 128 ran slower than in 32 x 64 tiles, which keep more
# multiprocessors busy (`python bench/tools/prof_kernels.py shapes`).
MIN_WORKGROUPS = 128
SKINNY_TILING = Tiling("shared", tm=4, tn=8, bm=32, bn=64, bk=16)


def small_product(prof, M: int, N: int, K: int, nbatch: int = 1) -> bool:
    """Whether a product takes `SMALL_TILING` (CPU devices, no forced tiling).

    >>> from types import SimpleNamespace as NS
    >>> cpu = NS(cpu=True, matmul_tiling=None)
    >>> small_product(cpu, 20, 17, 18), small_product(cpu, 256, 256, 256)
    (True, False)
    """
    return prof.cpu and prof.matmul_tiling is None and M * N * K * nbatch <= SMALL_PRODUCT


def cpu_tiling(S: int) -> Tiling:
    """The CPU tiling for subgroups of S lanes: CPU_TILING's at 8 lanes; wider subgroups
    (lavapipe with 512-bit vectors, `device.lavapipe_vectors`) take as many fewer rows and
    k per lane, so that a chunk of k keeps its S * wa = 16 values and its tm * 16 * tn
    vector multiply-adds of unrolled code (measured with forced tilings, as
    `python bench/tools/prof_kernels.py sgsweep` does).

    >>> cpu_tiling(16)
    Tiling(strategy='subgroup', tm=32, tn=8, bm=0, bn=0, bk=0, wa=1, wb=8)
    """
    f = max(1, S // 8)
    return replace(CPU_TILING, tm=max(8, CPU_TILING.tm // f), wa=max(1, CPU_TILING.wa // f))


def set_tiling(t: Tiling | None) -> None:
    """Force a tiling for later MatMuls (tuning, and tests of the other device type's
    kernel); None restores the per-device default. The forced tiling is the device
    profile's `matmul_tiling` field, so jitted functions compile their own programs for
    it; `device.using(matmul_tiling=t)` forces one for a block only.

    >>> import vkml.numpy as vnp
    >>> set_tiling(Tiling("shared", tm=4, tn=4, bm=32, bn=32, bk=8))
    >>> vnp.matmul(vnp.ones((3, 5)), vnp.ones((5, 2))).numpy().tolist()
    [[5.0, 5.0], [5.0, 5.0], [5.0, 5.0]]
    >>> set_tiling(None)
    """
    from ... import device
    dev = device.get()
    dev.profile = dataclasses.replace(dev.profile, matmul_tiling=t)


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def width(w: int, extent: int, T: str, dev) -> int:
    """The widest load <= w elements of GLSL type T that divides the row length extent
    (rows stay aligned): at most 4 doubles, 8 32-bit values with int64 (as pairs), else 4.

    >>> from types import SimpleNamespace as NS
    >>> width(8, 12, "float", NS(has_int64=True)), width(8, 12, "double", NS(has_int64=True))
    (4, 4)
    """
    cap = 4 if T == "double" else (8 if dev.has_int64 else 4)
    w = min(w, cap)
    while w > 1 and extent % w:
        w //= 2
    return w


def choose_tiling(dev, dtype, M: int, N: int, K: int, prefer: Tiling | None = None) -> Tiling:
    """The tiling for a device, dtype and problem size, fitted to the device's limits
    (prefer: a tiling to use instead of the device type's default, unless one is forced:
    `Profile.matmul_tiling`).

    >>> from vkml.vulkan import device
    >>> dev = device.get()
    >>> t = choose_tiling(dev, "float32", 1024, 1024, 1024)   # the device type's default
    >>> t.strategy == ("subgroup" if dev.profile.cpu else "shared")
    True
    >>> small = Tiling("shared", tm=4, tn=4, bm=32, bn=32, bk=8)   # fits any Vulkan device
    >>> choose_tiling(dev, "float32", 64, 64, 64, prefer=small)
    Tiling(strategy='shared', tm=4, tn=4, bm=32, bn=32, bk=8, wa=1, wb=1)
    """
    prof = dev.profile
    t = prof.matmul_tiling or prefer or (cpu_tiling(dev.subgroup_size) if prof.cpu else GPU_TILING)
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
    while tm > 16 and -(-M // tm) * -(-N // (S * tn)) < 4 * prof.cores:
        tm //= 2
    # a lane's tn columns are whole loads, and every row of B starts on a load boundary
    wb = width(min(t.wb, tn), math.gcd(N, tn), T, dev)
    return replace(t, tm=tm, tn=tn, wa=width(t.wa, K, T, dev), wb=wb)


def vec4_fits(t: Tiling, T: str, M: int, N: int, K: int, ta: bool, tb: bool) -> bool:
    """Can the vec4 shared kernel (`vec4.program`) run this product: float32, register
    tiles in runs of 4, slabs in whole vec4s, and every vec4 load along an axis whose
    length is a multiple of 4 (so a load is wholly inside the operand or wholly outside).

    >>> vec4_fits(VEC4_TILINGS[(False, False)][0], "float", 64, 64, 64, False, False)
    True
    >>> vec4_fits(VEC4_TILINGS[(False, False)][0], "float", 64, 10, 64, False, False)   # N % 4
    False
    """
    if T != "float" or t.tm % 4 or t.tn % 4 or t.bk % 4:
        return False
    TX, TY = t.bn // t.tn, t.bm // t.tm
    threads = TX * TY
    if (t.bm * t.bk // 4) % threads or (t.bn * t.bk // 4) % threads:
        return False
    return (M if ta else K) % 4 == 0 and (K if tb else N) % 4 == 0


def vec4_scheme(prof, t: Tiling, ta: bool, tb: bool, shared_bytes: int | None = None) -> tuple[bool, bool]:
    """(unroll the slab loop, double-buffer the slabs) for the vec4 kernel running tiling t:
    the profile's choice where it makes one, else the tuned one (`VEC4_SCHEMES`) where t is
    the layout's tuned tiling, else neither. Two slabs are never asked for where they
    would pass shared_bytes (the device's shared memory; `choose_tiling` fits one).

    >>> from vkml.vulkan import device
    >>> p = device.profile_for("nvidia", 2, True, 1 << 20)
    >>> vec4_scheme(p, VEC4_TILINGS[(False, True)][0], False, True)
    (True, False)
    """
    tuned = prof.matmul_tiling is None and t == VEC4_TILINGS[(ta, tb)][0]
    sch = VEC4_SCHEMES.get((ta, tb), {}) if tuned else {}
    unroll = sch.get("unroll", False) if prof.matmul_unroll_k is None else prof.matmul_unroll_k
    double = sch.get("double", False) if prof.matmul_double_buffer is None else prof.matmul_double_buffer
    if double and shared_bytes is not None and 2 * t.bk * (t.bm + t.bn) * 4 > shared_bytes:
        double = False
    return unroll, double


def select_tiling(dev, dtype, M: int, N: int, K: int, nbatch: int = 1, ta: bool = False,
                  tb: bool = False) -> tuple[Tiling, bool]:
    """(tiling, register prefetch) for one product: a forced tiling, else the device
    type's; on GPUs the vec4 tiling tuned for the operand layout where it fits
    (`Profile.matmul_vec4`), and smaller tiles for a product too small to fill the device.
    Register prefetch is `Profile.matmul_prefetch` for a forced tiling.

    >>> from types import SimpleNamespace as NS
    >>> from vkml.vulkan import device
    >>> gpu = NS(profile=device.profile_for("nvidia", 2, True, 1 << 20), subgroup_size=32,
    ...          max_shared_memory=48 << 10, max_workgroup_invocations=1024, has_int64=True, name="gpu")
    >>> select_tiling(gpu, "float32", 4096, 10, 4096)[0].bm
    32
    """
    prof = dev.profile
    T = dt.glsl_type(dtype)
    t = choose_tiling(dev, dtype, M, N, K)
    prefetch = prof.matmul_prefetch
    if t.strategy != "shared" or prof.matmul_tiling is not None:
        return t, prefetch
    if prof.matmul_vec4:
        tuned, pf = VEC4_TILINGS[(ta, tb)]
        t4 = choose_tiling(dev, dtype, M, N, K, prefer=tuned)
        if vec4_fits(t4, T, M, N, K, ta, tb):
            t, prefetch = t4, pf
    if -(-M // t.bm) * -(-N // t.bn) * nbatch < MIN_WORKGROUPS:
        small = choose_tiling(dev, dtype, M, N, K, prefer=SKINNY_TILING)
        if -(-M // small.bm) * -(-N // small.bn) > -(-M // t.bm) * -(-N // t.bn):
            t, prefetch = small, False
    return t, prefetch


def swap_small_n(S: int, M: int, N: int) -> bool:
    """Whether the subgroup kernel computes C^T = B^T A^T instead (where
    `Profile.matmul_swap`): when C has fewer columns than a subgroup has lanes and at
    least four subgroups' worth of rows. Lanes run along C's columns, so at N = 10 of 16
    lanes six idled and each lane's one column made every multiply-add pay a shuffle
    (the small MLP step's 256x256 @ 256x10 products, bench/tools/lvp_mlp_matmuls.py).

    >>> swap_small_n(16, 256, 10), swap_small_n(16, 256, 64)
    (True, False)
    """
    return N < S <= M // 4


def interleave(tb: bool, S: int, tn: int, K: int, itemsize: int) -> bool:
    """Whether a B^T product interleaves its columns over the lanes (where
    `Profile.matmul_interleave`; `subgroup.program`): when one lane's tn rows of B^T put
    the lanes' loads a multiple of 4096 bytes apart, in one cache set
    (bench/tools/lvp_bt_sets.py).

    >>> interleave(True, 8, 8, 256, 4), interleave(True, 8, 8, 264, 4)
    (True, False)
    """
    return tb and S > 1 and tn > 1 and (tn * K * itemsize) % 4096 == 0
