"""MatMul: (..., m, k) @ (..., k, n) with broadcast batch dims, as tiled compute kernels.

Each workgroup computes one (tile_m x tile_n) block of one batch entry's output; each
invocation keeps a small register tile of accumulators, so every value it reads is used
several times. Tile sizes are baked into the generated GLSL (specialisation by source),
and a `Tiling` is chosen per device type:

* ``shared`` (GPUs): the workgroup stages a BK-deep slab of A and B in shared memory,
  then each invocation reads TM values of A and TN of B per k from there and does TM*TN
  multiply-adds. This is the classic GPU scheme; shared memory is on-chip there.
* ``subgroup`` (CPU devices such as lavapipe): there every invocation is one lane of a
  SIMD vector and every buffer or shared-memory read with a per-lane address costs a
  scalar load per lane, so staging through shared memory only adds copies. Instead each
  subgroup (one SIMD vector) reads a row segment of A once, one element per lane, and
  hands each element to all lanes with ``subgroupBroadcast`` (a register shuffle); only
  B is read per lane, as vec4 where the layout allows. Per k a lane does TM*TN
  multiply-adds for TN/4 vector reads and TM/S scalar reads.

Edges: rows and columns outside the output are clamped on load (always valid memory) and
masked on store; k runs over whole blocks and then a guarded remainder, so m, n, k need
not be multiples of anything and k = 0 gives zeros.

Batch: the batch dims are collapsed (adjacent dims merged where both operands allow it)
and the flat batch index is folded into the workgroup index, decoded with per-dim
strides from meta; a broadcast (size-1) batch dim of an operand has stride 0 there.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np

from ...trace import dtypes as dt
from ..kernels import binding
from .elementwise import collapse

MAX_BATCH_RANK = 6


@dataclass(frozen=True)
class Tiling:
    """One kernel configuration.

    shared:   workgroup tile bm x bn, k slab bk, register tile tm x tn per invocation
              (invocations = (bm/tm) * (bn/tn)).
    subgroup: each subgroup of S lanes computes tm rows x (S*tn) columns, `groups`
              subgroups per workgroup stacked along m; k advances S per block.
    """
    strategy: str
    tm: int
    tn: int
    bm: int = 0
    bn: int = 0
    bk: int = 0
    groups: int = 1
    m_fastest: bool = True   # neighbouring workgroups walk down m (share a B panel)


# Measured best on each device type (see bench/ and the tuning notes in tests/vulkan).
CPU_TILING = Tiling("subgroup", tm=8, tn=8, groups=1)
GPU_TILING = Tiling("shared", tm=8, tn=8, bm=128, bn=128, bk=16)

_override: Tiling | None = None


def set_tiling(t: Tiling | None) -> None:
    """Force a tiling for every later MatMul (tuning and tests); None restores the default.

    >>> set_tiling(Tiling("shared", tm=4, tn=4, bm=64, bn=64, bk=8))  # doctest: +SKIP
    """
    global _override
    _override = t


def choose_tiling(dev, dtype) -> Tiling:
    """The tiling for a device and dtype, shrunk to fit the device's limits."""
    if _override is not None:
        t = _override
    elif dev.is_cpu:
        t = CPU_TILING
    else:
        t = GPU_TILING
    if t.strategy == "shared":
        isz = dt.itemsize(dtype)
        # shrink until shared memory and the invocation count fit
        while True:
            threads = (t.bm // t.tm) * (t.bn // t.tn)
            smem = t.bk * (t.bm + t.bn + 2) * isz
            if threads <= dev.max_workgroup_invocations and smem <= dev.max_shared_memory:
                break
            if t.bk > 4:
                t = replace(t, bk=t.bk // 2)
            elif t.bm >= t.bn and t.bm > t.tm:
                t = replace(t, bm=t.bm // 2)
            elif t.bn > t.tn:
                t = replace(t, bn=t.bn // 2)
            else:
                raise ValueError(f"MatMul: no tiling fits {dev.name}")
    else:
        s = dev.subgroup_size
        while s * t.groups > dev.max_workgroup_invocations and t.groups > 1:
            t = replace(t, groups=t.groups // 2)
    return t


# --------------------------------------------------------------------------- GLSL


def _prologue(t: Tiling, rank: int, local: int, tiles_expr: tuple[str, str]) -> list[str]:
    """main()'s common part: sizes, this workgroup's tile and batch offsets."""
    tm_n, tn_n = tiles_expr
    L = ["void main() {",
         "  int M = meta[0]; int N = meta[1]; int K = meta[2];",
         "  int tiles_m = meta[3]; int tiles_n = meta[4]; int nbatch = meta[5];",
         "  int g = int(group_id());"]
    if t.m_fastest:
        L += ["  int tmi = g % tiles_m; g /= tiles_m;", "  int tni = g % tiles_n; g /= tiles_n;"]
    else:
        L += ["  int tni = g % tiles_n; g /= tiles_n;", "  int tmi = g % tiles_m; g /= tiles_m;"]
    # the grid may be rounded up when folded into y; whole workgroups leave together
    L += ["  if (g >= nbatch) return;", "  int aoff = meta[6]; int boff = meta[7];",
          "  int coff = g * M * N;"]
    if rank:
        L += [f"  for (int d = {rank - 1}; d >= 0; --d) {{",
              f"    int sz = meta[8 + d]; int c = g % sz; g /= sz;",
              f"    aoff += c * meta[{8 + rank} + d]; boff += c * meta[{8 + 2 * rank} + d];",
              "  }"]
    return L


def _mad(T: str, acc: str, a: str, b: str) -> str:
    if T == "int" or T.startswith("ivec"):
        return f"{acc} += {a} * {b};"
    return f"{acc} = fma({a}, {b}, {acc});"


def _shared_source(t: Tiling, T: str, rank: int) -> tuple[str, int]:
    TX, TY = t.bn // t.tn, t.bm // t.tm
    threads = TX * TY
    BM, BN, BK = t.bm, t.bn, t.bk
    la = -(-BM * BK // threads)
    lb = -(-BN * BK // threads)
    src = [binding(1, T, "C"), binding(2, T, "A", readonly=True), binding(3, T, "B", readonly=True),
           f"shared {T} As[{BK * (BM + 1)}];\nshared {T} Bs[{BK * (BN + 1)}];\n"]
    L = _prologue(t, rank, threads, ("", ""))
    L += ["  int tid = int(gl_LocalInvocationID.x);",
          f"  int tx = tid % {TX}; int ty = tid / {TX};",
          f"  int m0 = tmi * {BM}; int n0 = tni * {BN};"]
    L += [f"  {T} acc_{i}_{j} = {T}(0);" for i in range(t.tm) for j in range(t.tn)]
    L += [f"  for (int k0 = 0; k0 < K; k0 += {BK}) {{"]
    for r in range(la):
        L += [f"    {{ int e = tid + {r * threads};",
              f"      if (e < {BM * BK}) {{ int kk = e % {BK}; int mm = e / {BK};",
              f"        int gr = m0 + mm; int gk = k0 + kk; {T} v = {T}(0);",
              "        if (gr < M && gk < K) v = A[aoff + gr * K + gk];",
              f"        As[kk * {BM + 1} + mm] = v; }} }}"]
    for r in range(lb):
        L += [f"    {{ int e = tid + {r * threads};",
              f"      if (e < {BN * BK}) {{ int nn = e % {BN}; int kk = e / {BN};",
              f"        int gc = n0 + nn; int gk = k0 + kk; {T} v = {T}(0);",
              "        if (gc < N && gk < K) v = B[boff + gk * N + gc];",
              f"        Bs[kk * {BN + 1} + nn] = v; }} }}"]
    L += ["    barrier();",
          f"    for (int kk = 0; kk < {BK}; ++kk) {{"]
    L += [f"      {T} a{i} = As[kk * {BM + 1} + ty + {i * TY}];" for i in range(t.tm)]
    L += [f"      {T} b{j} = Bs[kk * {BN + 1} + tx + {j * TX}];" for j in range(t.tn)]
    L += ["      " + _mad(T, f"acc_{i}_{j}", f"a{i}", f"b{j}") for i in range(t.tm) for j in range(t.tn)]
    L += ["    }", "    barrier();", "  }"]
    for i in range(t.tm):
        L += [f"  {{ int r = m0 + ty + {i * TY};", "    if (r < M) {"]
        L += [f"      if (n0 + tx + {j * TX} < N) C[coff + r * N + n0 + tx + {j * TX}] = acc_{i}_{j};"
              for j in range(t.tn)]
        L += ["    } }"]
    L.append("}")
    return "".join(src) + "\n".join(L) + "\n", threads


def _subgroup_source(t: Tiling, T: str, rank: int, S: int, vec: bool) -> tuple[str, int]:
    """Lane l of subgroup sg owns rows m0 + sg*tm + i and columns n0 + l*tn + j."""
    TM, TN = t.tm, t.tn
    V = f"{'d' if T == 'double' else 'i' if T == 'int' else ''}vec4"
    src = ["#extension GL_KHR_shader_subgroup_ballot : enable\n",
           binding(1, T, "C"), binding(2, T, "A", readonly=True), binding(3, T, "B", readonly=True)]
    if vec:
        # the same buffer as B, read four columns at a time (N % 4 == 0 guaranteed)
        src.append(binding(4, V, "B4", readonly=True))
    local = S * t.groups
    L = _prologue(t, rank, local, ("", ""))
    L += ["  int lane = int(gl_SubgroupInvocationID);",
          f"  int sg = int(gl_LocalInvocationID.x) / {S};",
          f"  int row0 = tmi * {TM * t.groups} + sg * {TM};",
          f"  int col0 = tni * {S * TN} + lane * {TN};"]
    # clamped addresses: loads never leave the operands, stores are masked instead
    L += [f"  int ar{i} = aoff + min(row0 + {i}, M - 1) * K + lane;" for i in range(TM)]
    if vec:
        L += [f"  int bc{q} = (boff + min(col0 + {4 * q}, N - 4)) >> 2;" for q in range(TN // 4)]
        L += ["  int N4 = N >> 2;"]
        L += [f"  {V} acc_{i}_{q} = {V}(0);" for i in range(TM) for q in range(TN // 4)]
    else:
        L += [f"  int bc{j} = boff + min(col0 + {j}, N - 1);" for j in range(TN)]
        L += [f"  {T} acc_{i}_{j} = {T}(0);" for i in range(TM) for j in range(TN)]

    def step(kk: str, lane_of: int, indent: str) -> list[str]:
        out = []
        if vec:
            out += [f"{indent}{V} b{q} = B4[bc{q} + ({kk}) * N4];" for q in range(TN // 4)]
        else:
            out += [f"{indent}{T} b{j} = B[bc{j} + ({kk}) * N];" for j in range(TN)]
        out += [f"{indent}{T} x{i} = subgroupBroadcast(a{i}, {lane_of});" for i in range(TM)]
        if vec:
            out += [indent + _mad(V, f"acc_{i}_{q}", f"{V}(x{i})", f"b{q}")
                    for i in range(TM) for q in range(TN // 4)]
        else:
            out += [indent + _mad(T, f"acc_{i}_{j}", f"x{i}", f"b{j}") for i in range(TM) for j in range(TN)]
        return out

    L += ["  int k0 = 0;", f"  for (; k0 + {S} <= K; k0 += {S}) {{"]
    L += [f"    {T} a{i} = A[ar{i} + k0];" for i in range(TM)]
    for kk in range(S):
        L += ["    {"] + step(f"k0 + {kk}", kk, "      ") + ["    }"]
    L += ["  }", "  if (k0 < K) {",
          "    int kl = min(k0 + lane, K - 1) - lane;"]
    L += [f"    {T} a{i} = A[ar{i} + kl];" for i in range(TM)]
    for kk in range(S - 1):
        L += [f"    if (k0 + {kk} < K) {{"] + step(f"k0 + {kk}", kk, "      ") + ["    }"]
    L += ["  }"]
    for i in range(TM):
        L += [f"  if (row0 + {i} < M) {{", f"    int cr = coff + (row0 + {i}) * N + col0;"]
        for j in range(TN):
            val = f"acc_{i}_{j // 4}[{j % 4}]" if vec else f"acc_{i}_{j}"
            L += [f"    if (col0 + {j} < N) C[cr + {j}] = {val};"]
        L += ["  }"]
    L.append("}")
    return "".join(src) + "\n".join(L) + "\n", local


# --------------------------------------------------------------------------- lowering


def _batch_layout(a_shape, b_shape, out_batch):
    """Collapsed batch dims with A's and B's batch strides (0 where broadcast)."""
    def strides(shape, mat):
        lead = shape[:-2]
        pad = len(out_batch) - len(lead)
        full = (1,) * pad + tuple(lead)
        st, acc = [0] * len(full), mat
        for i in range(len(full) - 1, -1, -1):
            st[i] = 0 if full[i] == 1 else acc
            acc *= full[i]
        return tuple(st)
    sa = strides(a_shape, a_shape[-2] * a_shape[-1])
    sb = strides(b_shape, b_shape[-2] * b_shape[-1])
    cst = []
    acc = 1
    for d in reversed(out_batch):
        cst.insert(0, acc)
        acc *= d
    shp, (_, sa, sb) = collapse(out_batch, [tuple(cst), sa, sb])
    return shp, sa, sb


def lower(node, ins, out, ctx) -> None:
    a, b = ins
    M, K = a.shape[-2], a.shape[-1]
    N = b.shape[-1]
    batch_shape = tuple(node.shape[:-2])
    nbatch = int(np.prod(batch_shape, dtype=np.int64)) if batch_shape else 1
    if M == 0 or N == 0 or nbatch == 0:
        return
    shp, sa, sb = _batch_layout(a.shape, b.shape, batch_shape)
    if len(shp) > MAX_BATCH_RANK:
        raise ValueError(f"MatMul: {len(shp)} non-mergeable batch dims exceed the kernel limit of "
                         f"{MAX_BATCH_RANK} (shapes {a.shape} @ {b.shape})")
    T = dt.glsl_type(node.dtype)
    t = choose_tiling(ctx.dev, node.dtype)
    rank = len(shp)
    views = [out, a, b]
    if t.strategy == "shared":
        body, local = _shared_source(t, T, rank)
        tile_m, tile_n = t.bm, t.bn
    else:
        S = ctx.dev.subgroup_size
        vec = t.tn % 4 == 0 and N % 4 == 0
        body, local = _subgroup_source(t, T, rank, S, vec)
        tile_m, tile_n = t.tm * t.groups, S * t.tn
        if vec:
            views.append(b)
    tiles_m, tiles_n = -(-M // tile_m), -(-N // tile_n)
    meta = [M, N, K, tiles_m, tiles_n, nbatch, 0, 0, *shp, *sa, *sb]
    k = ctx.kernel(f"MatMul_{t.strategy}", body, len(views), local_size=local)
    ctx.dispatch(k, meta, views, writes=(0,), groups=tiles_m * tiles_n * nbatch)
