"""float16 MatMul on tensor cores: cooperative matrices (VK_NV_cooperative_matrix).

A subgroup (warp) multiplies 16x16 float16 fragments into 16x16 float32 accumulators with
one instruction (`coopMatMulAddNV`); the device says which fragment shapes it has
(`Device.coop_shapes`) and the profile turns the path on (`Profile.matmul_coop`). The
scheme is the shared-memory one (`shared`) with fragments in place of scalars: the
workgroup stages a BK-deep slab of A and B in shared memory (16-byte loads, eight halves
each, through registers so the next slab's loads overlap this one's products), each warp
owns a WM x WN block of the BM x BN tile as (WM/16) x (WN/16) accumulators. The fragment
loops must be unrolled (`[[unroll]]`): rolled, the accumulators live in local memory and
the kernel runs five times slower (`bench/tools/coop_probe.py`).

The accumulators' element order inside a subgroup is the implementation's, so the results
go through shared memory (one 16x16 float32 staging tile per warp) to be rounded to
float16 and stored with bounds checks: any M and N, and K a multiple of 8 (a 16-byte load
never straddles a row's end); operands read in place when transposed. Accumulation is in
float32 and the result is rounded once, as `jax.numpy.matmul` of float16 operands
computes (its `preferred_element_type` float32 on GPUs).

GL_NV_cooperative_matrix rather than VK_KHR_cooperative_matrix: the glslang this project
runs with (12.0) compiles only the former; drivers that have one have both.

>>> p = program(Coop(128, 128, 32, 64, 32), 0)
>>> p.name, p.local_size, p.mergeable
('MatMul_coop', 256, False)
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from ...program import Meta, Program
from .. import lowp
from ....trace import dtypes as dt
from .prologue import meta_fields, prologue

EXTENSIONS = ("GL_NV_cooperative_matrix", "GL_KHR_memory_scope_semantics",
              "GL_EXT_shader_explicit_arithmetic_types_float16", "GL_EXT_control_flow_attributes")


class Coop(NamedTuple):
    """A workgroup tile BM x BN, slab depth BK, warp tile WM x WN (multiples of 16)."""
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int

    @property
    def warps(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn)


# measured best on the H200 at 4096^3 (bench/tools/coop_probe.py); small products get the
# smaller tile so that enough workgroups exist
COOP_TILE = Coop(128, 128, 32, 64, 32)
COOP_SMALL = Coop(64, 64, 32, 32, 32)


def choose(M: int, N: int, nbatch: int, sms: int = 132) -> Coop:
    """The tile for an M x N product (of nbatch): the large one when it still gives each
    of the device's multiprocessors a workgroup."""
    t = COOP_TILE
    if -(-M // t.bm) * -(-N // t.bn) * nbatch < sms:
        return COOP_SMALL
    return t


def eligible(M: int, N: int, K: int, ta: bool, tb: bool) -> bool:
    """Whether the coop kernel takes an (M, K) @ (K, N) product: 16-byte loads run along
    K (A untransposed, B transposed) or along M / N, whose extent must then be a multiple
    of 8 too.

    >>> eligible(100, 64, 64, False, False), eligible(64, 60, 64, False, False)
    (True, False)
    """
    if K % 8:
        return False
    if ta and M % 8:
        return False
    if not tb and N % 8:
        return False
    return True


@lru_cache(maxsize=256)
def program(t: Coop, rank: int, ta: bool = False, tb: bool = False, out=dt.float16) -> Program:
    """The kernel: C (float16 bits, or float32 for out float32) = A @ B, A and B float16
    bits read eight at a time (uvec4). ta: A stored (K, M); tb: B stored (N, K)."""
    BM, BN, BK, WM, WN = t
    assert BM % WM == 0 and BN % WN == 0 and WM % 16 == 0 and WN % 16 == 0 and BK % 16 == 0
    WG = t.warps * 32
    p = Program("MatMul_coop", local_size=WG)
    p.grid = True            # warps and fragments: never merged with other kernels
    p.subgroups = True
    for e in EXTENSIONS:
        p.extension(e)
    lowp.setup(p)
    p.meta = Meta(*meta_fields(rank))
    low_out = out != dt.float32
    C = p.buffer("C", "uint16_t" if low_out else "float")
    A = p.buffer("A", "uvec4", readonly=True)
    B = p.buffer("B", "uvec4", readonly=True)
    # shared slabs, 16-byte words; rows padded by one word against bank conflicts. A slab
    # is kept (BM, BK) row-major, or (BK, BM) for ta, read as column-major fragments
    a_rows, a_cols = (BK, BM) if ta else (BM, BK)
    b_rows, b_cols = (BN, BK) if tb else (BK, BN)
    SA, SB = a_cols // 8 + 1, b_cols // 8 + 1
    As = p.shared("As", "uvec4", a_rows * SA)
    Bs = p.shared("Bs", "uvec4", b_rows * SB)
    Cs = p.shared("Cs", "float", t.warps * 256)
    na, nb = a_rows * a_cols // 8, b_rows * b_cols // 8
    ra, rb = -(-na // WG), -(-nb // WG)
    FA, FB, FC = ("fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>",) * 2 + ("fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>",)
    U = "[[unroll]] "
    L = prologue(p, rank)
    L += ["int tid = int(lidx()); int warp = tid / 32; int lane = tid % 32;",
          f"int wm = warp % {BM // WM}; int wn = warp / {BM // WM};",
          f"int m0 = tmi * {BM}; int n0 = tni * {BN};",
          # 16-byte word offsets of this batch entry's operands
          "int aoff8 = aoff / 8; int boff8 = boff / 8;",
          f"{FC} acc[{WM // 16}][{WN // 16}];",
          f"{U}for (int i = 0; i < {WM // 16}; ++i) {U}for (int j = 0; j < {WN // 16}; ++j) "
          f"acc[i][j] = {FC}(0.0);",
          f"uvec4 ra[{ra}]; uvec4 rb[{rb}];"]

    def fetch(k0: str, checked: bool) -> list[str]:
        # slab word e of A: row e / (cols/8), word e % (cols/8); zero outside the matrix
        if ta:   # A stored (K, M): slab rows are k, words run along m
            ga = (f"int gk = {k0} + e / {a_cols // 8}; int gm = m0 + (e % {a_cols // 8}) * 8;",
                  "gk < K && gm < M", f"{A}[aoff8 + (gk * M + gm) / 8]")
        else:
            ga = (f"int gm = m0 + e / {a_cols // 8}; int gk = {k0} + (e % {a_cols // 8}) * 8;",
                  "gm < M && gk < K", f"{A}[aoff8 + (gm * K + gk) / 8]")
        if tb:   # B stored (N, K): slab rows are n, words run along k
            gb = (f"int gn = n0 + e / {b_cols // 8}; int gk = {k0} + (e % {b_cols // 8}) * 8;",
                  "gn < N && gk < K", f"{B}[boff8 + (gn * K + gk) / 8]")
        else:
            gb = (f"int gk = {k0} + e / {b_cols // 8}; int gn = n0 + (e % {b_cols // 8}) * 8;",
                  "gk < K && gn < N", f"{B}[boff8 + (gk * N + gn) / 8]")
        out = []
        for r, (name, n, g) in enumerate((("ra", na, ga), ("rb", nb, gb))):
            cnt = ra if name == "ra" else rb
            if not checked and n % WG == 0:
                out += [f"{U}for (int r = 0; r < {cnt}; ++r) {{ int e = tid + r * {WG}; {g[0]} {name}[r] = {g[2]}; }}"]
                continue
            inside = g[1] if checked else "true"
            out += [f"{U}for (int r = 0; r < {cnt}; ++r) {{ int e = tid + r * {WG};",
                    f"  {name}[r] = uvec4(0u);",
                    f"  if (e < {n}) {{ {g[0]} if ({inside}) {name}[r] = {g[2]}; }} }}"]
        return out

    def stash() -> list[str]:
        return [f"{U}for (int r = 0; r < {ra}; ++r) {{ int e = tid + r * {WG}; if (e < {na}) "
                f"{As}[(e / {a_cols // 8}) * {SA} + e % {a_cols // 8}] = ra[r]; }}",
                f"{U}for (int r = 0; r < {rb}; ++r) {{ int e = tid + r * {WG}; if (e < {nb}) "
                f"{Bs}[(e / {b_cols // 8}) * {SB} + e % {b_cols // 8}] = rb[r]; }}"]

    # fragment (i) of A: rows wm*WM + 16i.., k kk..; row-major in a (BM, BK) slab, or
    # column-major (element (m, k) at k * SA words + m) in a (BK, BM) one
    if ta:
        a_frag = f"coopMatLoadNV(fa[i], {As}, uint(kk * {SA} + (wm * {WM} + i * 16) / 8), {SA}u, true);"
    else:
        a_frag = f"coopMatLoadNV(fa[i], {As}, uint((wm * {WM} + i * 16) * {SA} + kk / 8), {SA}u, false);"
    if tb:
        b_frag = f"coopMatLoadNV(fb[j], {Bs}, uint((wn * {WN} + j * 16) * {SB} + kk / 8), {SB}u, true);"
    else:
        b_frag = f"coopMatLoadNV(fb[j], {Bs}, uint(kk * {SB} + (wn * {WN} + j * 16) / 8), {SB}u, false);"

    def slabs(checked: bool) -> list[str]:
        return fetch("0", checked) + stash() + ["barrier();",
          f"for (int k0 = 0; k0 < K; k0 += {BK}) {{",
          f"  bool more = k0 + {BK} < K;",
          "  if (more) {"] + ["    " + x for x in fetch(f"k0 + {BK}", checked)] + ["  }",
          f"  {U}for (int kk = 0; kk < {BK}; kk += 16) {{",
          f"    {FA} fa[{WM // 16}]; {FB} fb[{WN // 16}];",
          f"    {U}for (int i = 0; i < {WM // 16}; ++i) {a_frag}",
          f"    {U}for (int j = 0; j < {WN // 16}; ++j) {b_frag}",
          f"    {U}for (int i = 0; i < {WM // 16}; ++i) {U}for (int j = 0; j < {WN // 16}; ++j)",
          "      acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);",
          "  }",
          "  barrier();",
          "  if (more) {"] + ["    " + x for x in stash()] + ["  }",
          "  barrier();",
          "}"]
    # a workgroup whose tile lies inside the matrices (all but the edges) loads unchecked
    L += [f"if (m0 + {BM} <= M && n0 + {BN} <= N && K % {BK} == 0) {{"] + ["  " + x for x in slabs(False)]
    L += ["} else {"] + ["  " + x for x in slabs(True)] + ["}"]
    # through this warp's staging tile: lane l stores elements l, l + 32, ... of 256
    st = (lowp.store(out, lowp.round_value(out, "v")) if low_out else "v")
    L += [f"{U}for (int i = 0; i < {WM // 16}; ++i) {U}for (int j = 0; j < {WN // 16}; ++j) {{",
          f"  coopMatStoreNV(acc[i][j], {Cs}, uint(warp * 256), 16u, false);",
          "  subgroupMemoryBarrierShared(); subgroupBarrier();",
          f"  int r0 = m0 + wm * {WM} + i * 16; int c0 = n0 + wn * {WN} + j * 16;",
          f"  {U}for (int q = 0; q < 8; ++q) {{ int e = lane + q * 32; int r = r0 + e / 16; int c = c0 + e % 16;",
          f"    if (r < M && c < N) {{ float v = {Cs}[warp * 256 + e]; {C}[coff + r * N + c] = {st}; }} }}",
          "  subgroupMemoryBarrierShared(); subgroupBarrier();",
          "}"]
    p.main(*L)
    return p
