"""float16 MatMul on tensor cores: cooperative matrices (VK_NV_cooperative_matrix).

A subgroup (warp) multiplies a 16x16 float16 fragment of A by a 16x8 (or 16x16) one of B
into float32 accumulators with one instruction (`coopMatMulAddNV`); the device says which
fragment shapes it has (`Device.coop_shapes`; 16x8x16 is one mma.m16n8k16 on NVIDIA and
measured a little faster than 16x16x16) and the profile turns the path on
(`Profile.matmul_coop`). The scheme is the shared-memory one (`shared`) with fragments in
place of scalars: the workgroup stages a BK-deep slab of A and B in shared memory (16-byte
loads, eight halves each, through registers so the next slab's loads overlap this one's
products), each warp owns a WM x WN block of the BM x BN tile as (WM/16) x (WN/FN)
accumulators. The fragment loops must be unrolled (`[[unroll]]`): rolled, the
accumulators live in local memory and the kernel runs five times slower. Index arithmetic
is unsigned and each thread's global word indices are set once (a base plus the slab's
k times a step). Large products take 128x256 tiles of eight 64x64 warps (each A fragment
used for four B fragments and back); `bench/tools/coop_probe.py` measured the other
levers (double-buffered slabs, deeper slabs, rasterised tile orders, other shared
layouts): none faster on the H200, whose tensor cores this path reaches through the
warp-level MMA, not Hopper's wgmma (bench/RESULTS.md, issue 23).

The accumulators' element order inside a subgroup is the implementation's, so the results
go through shared memory (one 16 x FN float32 staging tile per warp) to be rounded to
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
from . import epilogue
from .epilogue import Epi
from .prologue import meta_fields, prologue

EXTENSIONS = ("GL_NV_cooperative_matrix", "GL_KHR_memory_scope_semantics",
              "GL_EXT_shader_explicit_arithmetic_types_float16", "GL_EXT_control_flow_attributes")


class Coop(NamedTuple):
    """A workgroup tile BM x BN, slab depth BK, warp tile WM x WN (multiples of 16), and
    the fragments' N: 16 (16x16x16 products) or 8 (16x8x16: one mma.m16n8k16 each)."""
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    fn: int = 16

    @property
    def warps(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn)


# measured best on the H200 at 4096^3 (bench/tools/coop_probe.py); small products get the
# smaller tile so that enough workgroups exist
COOP_TILE = Coop(128, 256, 32, 64, 64)
COOP_MID = Coop(128, 128, 32, 64, 32)
COOP_SMALL = Coop(64, 64, 32, 32, 32)
# (M, N, K, operand type, accumulator type) of the fragments each fn needs
SHAPES = {16: (16, 16, 16, "float16", "float32"), 8: (16, 8, 16, "float16", "float32")}


def choose(M: int, N: int, nbatch: int, sms: int = 132, shapes: tuple = (SHAPES[8],)) -> Coop:
    """The tile for an M x N product (of nbatch): the largest that still gives each of the
    device's multiprocessors a workgroup; 16x8 fragments where the device has them
    (`Device.coop_shapes`).

    >>> choose(4096, 4096, 1), choose(256, 256, 1, shapes=())
    (Coop(bm=128, bn=256, bk=32, wm=64, wn=64, fn=8), Coop(bm=64, bn=64, bk=32, wm=32, wn=32, fn=16))
    """
    fn = 8 if SHAPES[8] in shapes else 16
    for t in (COOP_TILE, COOP_MID):
        if -(-M // t.bm) * -(-N // t.bn) * nbatch >= sms:
            return t._replace(fn=fn)
    return COOP_SMALL._replace(fn=fn)


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


# tile order: neighbouring workgroups walk along n (True) or down m (the SIMT kernels'
# prologue); interior tiles store float16 results straight from converted fragments
# (True) or through the staging tile like the edges
ORDER_N = True
DIRECT_STORE = True
# tiles (BM, BN, BK, WM, WN) with one load path for interior and edge tiles (clamped
# rows, zeros only past K): a smaller kernel in fewer registers, which keeps the 128x128
# tile at two workgroups a multiprocessor (its two-path kernel measured 139 TFLOP/s at
# 4096 on the H200, this one 166)
LEAN = {(128, 128, 32, 64, 32), (64, 64, 32, 32, 32)}


@lru_cache(maxsize=256)
def program(t: Coop, rank: int, ta: bool = False, tb: bool = False, out=dt.float16,
            epi: Epi | None = None, prod=dt.float16) -> Program:
    """The kernel: C (16-bit float bits, or float32 for out float32) = A @ B, A and B
    float16 bits read eight at a time (uvec4). ta: A stored (K, M); tb: B stored (N, K).
    epi: an elementwise epilogue applied at the stores (`epilogue`, as the SIMT kernels
    apply theirs), given the product rounded to prod (the MatMul's dtype) as if stored;
    out is then the epilogue's dtype."""
    BM, BN, BK, WM, WN, FN = t
    assert BM % WM == 0 and BN % WN == 0 and WM % 16 == 0 and WN % FN == 0 and BK % 16 == 0
    WG = t.warps * 32
    I, J = WM // 16, WN // FN
    p = Program("MatMul_coop" + ("_epi" if epi is not None else ""), local_size=WG)
    p.grid = True            # warps and fragments: never merged with other kernels
    p.subgroups = True
    for e in EXTENSIONS:
        p.extension(e)
    lowp.setup(p)
    p.meta = Meta(*meta_fields(rank), *epilogue.fields(epi))
    low_out = dt.is_low(out)
    # an epilogue reads the product element by element: through the staging tile
    direct = DIRECT_STORE and out == dt.float16 and epi is None
    lean = tuple(t[:5]) in LEAN
    # float16 bits as float16_t where fragments are stored straight (a uint16_t matrix
    # store needs the int16 arithmetic the device may lack)
    C = p.buffer("C", "float16_t" if direct else "uint16_t" if low_out else "float")
    A = p.buffer("A", "uvec4", readonly=True)
    B = p.buffer("B", "uvec4", readonly=True)
    ehoist, estore = epilogue.declare(p, epi)
    # shared slabs, 16-byte words; rows padded by one word against bank conflicts (the
    # fragment loads read 16 bytes from each of 8 rows at once). A slab is kept (BM, BK)
    # row-major, or (BK, BM) for ta, read as column-major fragments
    a_rows, a_cols = (BK, BM) if ta else (BM, BK)
    b_rows, b_cols = (BN, BK) if tb else (BK, BN)
    SA, SB = a_cols // 8 + 1, b_cols // 8 + 1
    aw, bw = a_cols // 8, b_cols // 8          # words per slab row
    As = p.shared("As", "uvec4", a_rows * SA)
    Bs = p.shared("Bs", "uvec4", b_rows * SB)
    Cs = p.shared("Cs", "float", t.warps * 16 * FN)
    na, nb = a_rows * a_cols // 8, b_rows * b_cols // 8
    ra, rb = -(-na // WG), -(-nb // WG)
    FA = "fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>"
    FB = f"fcoopmatNV<16, gl_ScopeSubgroup, 16, {FN}>"
    FC = f"fcoopmatNV<32, gl_ScopeSubgroup, 16, {FN}>"
    U = "[[unroll]] "
    L = prologue(p, rank) + ehoist
    if ORDER_N:
        i = L.index("int tmi = g % tiles_m; g /= tiles_m;")
        L[i], L[i + 1] = L[i + 1], L[i]
    # unsigned from here: the index arithmetic of the loads is shifts and masks
    L += ["uint tid = lidx(); uint warp = tid / 32u; uint lane = tid % 32u;",
          f"uint wm = warp % {BM // WM}u; uint wn = warp / {BM // WM}u;",
          f"uint m0 = uint(tmi) * {BM}u; uint n0 = uint(tni) * {BN}u;",
          "uint uM = uint(M), uN = uint(N), uK = uint(K);",
          "uint M8 = uM / 8u, N8 = uN / 8u, K8 = uK / 8u;",
          # 16-byte word offsets of this batch entry's operands
          "uint aoff8 = uint(aoff) / 8u, boff8 = uint(boff) / 8u;",
          f"{FC} acc[{I}][{J}];",
          f"{U}for (int i = 0; i < {I}; ++i) {U}for (int j = 0; j < {J}; ++j) acc[i][j] = {FC}(0.0);",
          f"uvec4 ra[{ra}]; uvec4 rb[{rb}];"]

    # slab word e of an operand: slab row e / words-per-row, word e % words-per-row. Each
    # thread's words sit at fixed places of its slab: their global word index is a base
    # (ia, ib: set once) plus the slab's k0 times a step (A: 1/8 word along K, or M8
    # words a row of k for ta; B: N8 a row of k, or 1/8 word for tb)
    a_row, a_w = "e / %du" % aw, "e %% %du" % aw
    b_row, b_w = "e / %du" % bw, "e %% %du" % bw
    if ta:   # A stored (K, M): slab rows are k, words run along m
        a_base, a_step, a_in = (f"aoff8 + ({a_row}) * M8 + m0 / 8u + {a_w}", "{k} * M8",
                                f"{{k}} + {a_row} < uK && m0 + ({a_w}) * 8u < uM")
    else:
        a_base, a_step, a_in = (f"aoff8 + (m0 + {a_row}) * K8 + {a_w}", "{k} / 8u",
                                f"m0 + {a_row} < uM && {{k}} + ({a_w}) * 8u < uK")
    if tb:   # B stored (N, K): slab rows are n, words run along k
        b_base, b_step, b_in = (f"boff8 + (n0 + {b_row}) * K8 + {b_w}", "{k} / 8u",
                                f"n0 + {b_row} < uN && {{k}} + ({b_w}) * 8u < uK")
    else:
        b_base, b_step, b_in = (f"boff8 + ({b_row}) * N8 + n0 / 8u + {b_w}", "{k} * N8",
                                f"{{k}} + {b_row} < uK && n0 + ({b_w}) * 8u < uN")
    if lean:
        # one path for every tile: rows and columns past the matrix read its last ones
        # (their products land outside C and are never stored), only k past K reads zeros
        if ta:
            a_base = f"aoff8 + ({a_row}) * M8 + min(m0 / 8u + {a_w}, M8 - 1u)"
            a_in = f"{{k}} + {a_row} < uK"
        else:
            a_base = f"aoff8 + min(m0 + {a_row}, uM - 1u) * K8 + {a_w}"
            a_in = f"{{k}} + ({a_w}) * 8u < uK"
        if tb:
            b_base = f"boff8 + min(n0 + {b_row}, uN - 1u) * K8 + {b_w}"
            b_in = f"{{k}} + ({b_w}) * 8u < uK"
        else:
            b_base = f"boff8 + ({b_row}) * N8 + min(n0 / 8u + {b_w}, N8 - 1u)"
            b_in = f"{{k}} + {b_row} < uK"
    # bases beyond the matrix are clamped (an edge tile's rows past M, say): never read
    L += [f"uint ia[{ra}]; uint ib[{rb}];",
          f"{U}for (int r = 0; r < {ra}; ++r) {{ uint e = min(tid + uint(r) * {WG}u, {na - 1}u); ia[r] = {a_base}; }}",
          f"{U}for (int r = 0; r < {rb}; ++r) {{ uint e = min(tid + uint(r) * {WG}u, {nb - 1}u); ib[r] = {b_base}; }}"]

    def fetch(checked: bool, k: str) -> list[str]:
        # the slab at k into registers; zero outside the matrices (checked)
        out = []
        for name, base, step, inside, n, cnt, arr in (("ra", "ia", a_step, a_in, na, ra, A),
                                                     ("rb", "ib", b_step, b_in, nb, rb, B)):
            full = n % WG == 0
            step, inside = step.format(k=k), inside.format(k=k)
            if not checked and full:
                out.append(f"{U}for (int r = 0; r < {cnt}; ++r) {name}[r] = {arr}[{base}[r] + {step}];")
                continue
            cond = [] if full else [f"e < {n}u"]
            cond += [inside] if checked else []
            out.append(f"{U}for (int r = 0; r < {cnt}; ++r) {{ uint e = tid + uint(r) * {WG}u; "
                       f"{name}[r] = uvec4(0u); if ({' && '.join(cond)}) {name}[r] = {arr}[{base}[r] + {step}]; }}")
        return out

    def stash() -> list[str]:
        out = []
        for name, n, cnt, w, S, arr in (("ra", na, ra, aw, SA, As), ("rb", nb, rb, bw, SB, Bs)):
            guard = "" if n % WG == 0 else f"if (e < {n}u) "
            out.append(f"{U}for (int r = 0; r < {cnt}; ++r) {{ uint e = tid + uint(r) * {WG}u; "
                       f"{guard}{arr}[(e / {w}u) * {S}u + e % {w}u] = {name}[r]; }}")
        return out

    # fragment (i) of A: rows wm*WM + 16i.., k kk..; row-major in a (BM, BK) slab, or
    # column-major (element (m, k) at k * SA words + m) in a (BK, BM) one; B's likewise
    if ta:
        a_frag = f"coopMatLoadNV(fa[i], {As}, kk * {SA}u + (wm * {WM}u + uint(i) * 16u) / 8u, {SA}u, true);"
    else:
        a_frag = f"coopMatLoadNV(fa[i], {As}, (wm * {WM}u + uint(i) * 16u) * {SA}u + kk / 8u, {SA}u, false);"
    if tb:
        b_frag = f"coopMatLoadNV(fb[j], {Bs}, (wn * {WN}u + uint(j) * {FN}u) * {SB}u + kk / 8u, {SB}u, true);"
    else:
        b_frag = f"coopMatLoadNV(fb[j], {Bs}, kk * {SB}u + (wn * {WN}u + uint(j) * {FN}u) / 8u, {SB}u, false);"

    def slabs(checked: bool) -> list[str]:
        return (fetch(checked, "0u") + stash() + ["barrier();",
          f"for (uint k0 = 0u; k0 < uK; k0 += {BK}u) {{",
          # the next slab's loads are in flight while the tensor cores work on this one
          f"  uint kn = k0 + {BK}u; bool more = kn < uK;",
          "  if (more) {"] + ["    " + x for x in fetch(checked, "kn")] + ["  }",
          f"  {U}for (uint kk = 0u; kk < {BK}u; kk += 16u) {{",
          f"    {FA} fa[{I}]; {FB} fb[{J}];",
          f"    {U}for (int i = 0; i < {I}; ++i) {a_frag}",
          f"    {U}for (int j = 0; j < {J}; ++j) {b_frag}",
          f"    {U}for (int i = 0; i < {I}; ++i) {U}for (int j = 0; j < {J}; ++j)",
          "      acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);",
          "  }",
          "  barrier();",
          "  if (more) {"] + ["    " + x for x in stash()] + ["  }",
          "  barrier();",
          "}"])
    if lean:
        L += slabs(True)
    else:
        # a workgroup whose tile lies inside the matrices (all but the edges) loads unchecked
        L += [f"if (m0 + {BM}u <= uM && n0 + {BN}u <= uN && uK % {BK}u == 0u) {{"] + ["  " + x for x in slabs(False)]
        L += ["} else {"] + ["  " + x for x in slabs(True)] + ["}"]
    # through this warp's 16 x FN staging tile: lane l stores elements l, l + 32, ...
    v = "v"
    if epi is not None:
        v = estore(lowp.round_value(prod, "v") if dt.is_low(prod) else "v", "int(r)", "int(c)")
    st = lowp.store(out, v) if low_out else v
    if direct:
        st = "unpackFloat2x16(lp_to_f16(v)).x"
    F = 16 * FN
    if direct:
        # the conversion rounds to nearest even (OpFConvert; `test_coop` checks it)
        H = f"fcoopmatNV<16, gl_ScopeSubgroup, 16, {FN}>"
        L += [f"if (m0 + {BM}u <= uM && n0 + {BN}u <= uN) {{",
              f"  {U}for (int i = 0; i < {I}; ++i) {U}for (int j = 0; j < {J}; ++j)",
              f"    coopMatStoreNV({H}(acc[i][j]), {C}, uint(coff) + (m0 + wm * {WM}u + uint(i) * 16u) * uN"
              f" + n0 + wn * {WN}u + uint(j) * {FN}u, uN, false);",
              "  return;",
              "}"]
    L += ["uint cw = warp * %du;" % F,
          f"{U}for (int i = 0; i < {I}; ++i) {U}for (int j = 0; j < {J}; ++j) {{",
          f"  coopMatStoreNV(acc[i][j], {Cs}, cw, {FN}u, false);",
          "  subgroupMemoryBarrierShared(); subgroupBarrier();",
          f"  uint r0 = m0 + wm * {WM}u + uint(i) * 16u; uint c0 = n0 + wn * {WN}u + uint(j) * {FN}u;",
          f"  {U}for (uint q = 0u; q < {F // 32}u; ++q) {{ uint e = lane + q * 32u; "
          f"uint r = r0 + e / {FN}u; uint c = c0 + e % {FN}u;",
          f"    if (r < uM && c < uN) {{ float v = {Cs}[cw + e]; {C}[uint(coff) + r * uN + c] = {st}; }} }}",
          "  subgroupMemoryBarrierShared(); subgroupBarrier();",
          "}"]
    p.main(*L)
    return p
