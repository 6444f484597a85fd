"""The GPU kernels with their tiles as specialisation constants (`Profile.matmul_spec_tiles`).

One SPIR-V module per operand layout, dtype and epilogue serves every tiling, and the
driver sizes the register tile and unrolls its loops ([[unroll]]) when it builds the
pipeline for the tiling's values (ids 1-5: tm, tn, bm, bn, bk; id 0 the workgroup size).
The register tile is SPEC_MAX x SPEC_MAX named slots used under conditions on the
constants (`_slot`), not an array: as an array the H200's compiler kept a 16x8 tile in
memory once an epilogue's store loop indexed it. The k loop inside a slab is left to
the driver: unrolled by hand, a 16x8 tile took the H200's compiler minutes. Against the
tiling baked into the source (`bench/tools/spec_tiles.py`) the H200 runs them about
alike, lavapipe alike. float64 keeps its tile in the source (`shared.program`): as an
array of 128 doubles the H200's compiler left it in memory.

The CPU `subgroup` kernel is specialised by source: its load widths change the types it
loads (64-bit pairs, vec4s, texel pairs), which a constant cannot, and a tile as
constants over slots for the CPU tiling's 64 x 8 made lavapipe compile every kernel at
full size before dropping the dead slots (a much slower first call and test suite).

The shared arrays' lengths are constant expressions of the spec constants, so they are
declared in the helper code after the constants (`Program.shared` takes a length in
elements); programs with spec constants are never merged.
"""
from __future__ import annotations

from functools import lru_cache

from ...program import Meta, Program
from . import epilogue
from .epilogue import Epi
from .prologue import mad, meta_fields, prologue
from .tiling import Tiling
from .vec4 import slab_vec4

SPEC_MAX = 16      # register tiles up to SPEC_MAX x SPEC_MAX; larger ones specialise by source
_SPEC_DECL = """layout(constant_id = 1) const int TM = 4;
layout(constant_id = 2) const int TN = 4;
layout(constant_id = 3) const int BM = 64;
layout(constant_id = 4) const int BN = 64;
layout(constant_id = 5) const int BK = 8;
const int TX = BN / TN;
const int TY = BM / TM;
const int THREADS = TX * TY;
"""
_SPEC_NAMES = ("TM", "TN", "BM", "BN", "BK", "TX", "TY", "THREADS")


def threads(t: Tiling) -> int:
    """The invocations of a shared-memory tiling's workgroup.

    >>> threads(Tiling("shared", tm=4, tn=2, bm=32, bn=16, bk=8))
    64
    """
    return (t.bm // t.tm) * (t.bn // t.tn)


def spec_values(t: Tiling) -> tuple:
    """The specialisation constants (ids 1-5) of a shared-memory tiling.

    >>> spec_values(Tiling("shared", tm=4, tn=2, bm=32, bn=16, bk=8))
    (4, 2, 32, 16, 8)
    """
    return (t.tm, t.tn, t.bm, t.bn, t.bk)


def _start(name: str, t: Tiling, rank: int, epi: Epi | None) -> Program:
    p = Program(name + ("_epi" if epi is not None else ""), local_size=threads(t), spec=spec_values(t))
    p.meta = Meta(*meta_fields(rank), *epilogue.fields(epi))
    p.extension("GL_EXT_control_flow_attributes")
    p.add(_SPEC_DECL, names=_SPEC_NAMES)
    return p


def _slot(i: int, j: int) -> str:
    return f"{i} < TM && {j} < TN"


def _slot_stores(C: str, row, col, estore) -> list[str]:
    """The live slots' stores (row(i), col(j): GLSL of slot (i, j)'s output position),
    through the epilogue, masked at the edges."""
    L = []
    for i in range(SPEC_MAX):
        L += [f"if ({i} < TM) {{ int r = {row(i)};", "  if (r < M) {"]
        L += [f"    if ({j} < TN) {{ int c = {col(j)}; if (c < N) {C}[coff + r * N + c] = "
              f"{estore(f'acc_{i}_{j}', 'r', 'c')}; }}" for j in range(SPEC_MAX)]
        L += ["  } }"]
    return L


@lru_cache(maxsize=1024)
def shared_program(t: Tiling, T: str, rank: int, ta: bool = False, tb: bool = False,
                   epi: Epi | None = None) -> Program:
    """`shared.program`'s scheme with the tiling t as specialisation constants:
    invocation (tx, ty) owns rows m0 + ty + i*TY and columns n0 + tx + j*TX. Every
    tiling's program renders the same source.

    >>> p = shared_program(Tiling("shared", tm=2, tn=4, bm=16, bn=32, bk=4), "float", 0)
    >>> p.spec, p.local_size, p.mergeable
    ((2, 4, 16, 32, 4), 64, False)
    """
    S = SPEC_MAX
    p = _start("MatMul_shared", t, rank, epi)
    p.add("const int SA = BM + 1;\nconst int SB = BN + 1;\n"
          "const int RA = (BM * BK + THREADS - 1) / THREADS;\nconst int RB = (BN * BK + THREADS - 1) / THREADS;\n",
          names=("SA", "SB", "RA", "RB"))
    C = p.buffer("C", T)
    A = p.buffer("A", T, readonly=True)
    B = p.buffer("B", T, readonly=True)
    ehoist, estore = epilogue.declare(p, epi)
    p.add(f"shared {T} As[BK * SA];\nshared {T} Bs[BK * SB];\n", names=("As", "Bs"))
    p.barriers = True
    L = prologue(p, rank) + ehoist
    L += ["int tid = int(lidx());",
          "int tx = tid % TX; int ty = tid / TX;",
          "int m0 = tmi * BM; int n0 = tni * BN;"]
    L += [f"{T} acc_{i}_{j} = {T}(0);" for i in range(S) for j in range(S)]
    a_co = (("e % BM", "e / BM", f"{A}[aoff + gk * M + gr]") if ta
            else ("e / BK", "e % BK", f"{A}[aoff + gr * K + gk]"))
    b_co = (("e / BK", "e % BK", f"{B}[boff + gc * K + gk]") if tb
            else ("e % BN", "e / BN", f"{B}[boff + gk * N + gc]"))
    L += ["for (int k0 = 0; k0 < K; k0 += BK) {",
          "  [[unroll]] for (int r = 0; r < RA; ++r) {",
          f"    int e = tid + r * THREADS; if (e < BM * BK) {{ int mm = {a_co[0]}; int kk = {a_co[1]};",
          "      int gr = m0 + mm; int gk = k0 + kk;",
          f"      As[kk * SA + mm] = (gr < M && gk < K) ? {a_co[2]} : {T}(0); }} }}",
          "  [[unroll]] for (int r = 0; r < RB; ++r) {",
          f"    int e = tid + r * THREADS; if (e < BN * BK) {{ int nn = {b_co[0]}; int kk = {b_co[1]};",
          "      int gc = n0 + nn; int gk = k0 + kk;",
          f"      Bs[kk * SB + nn] = (gc < N && gk < K) ? {b_co[2]} : {T}(0); }} }}",
          "  barrier();",
          "  for (int kk = 0; kk < BK; ++kk) {"]
    L += [f"    {T} a{i} = {T}(0); if ({i} < TM) a{i} = As[kk * SA + ty + {i} * TY];" for i in range(S)]
    L += [f"    {T} b{j} = {T}(0); if ({j} < TN) b{j} = Bs[kk * SB + tx + {j} * TX];" for j in range(S)]
    L += [f"    if ({_slot(i, j)}) " + mad(T, f"acc_{i}_{j}", f"a{i}", f"b{j}") for i in range(S) for j in range(S)]
    L += ["  }", "  barrier();", "}"]
    L += _slot_stores(C, lambda i: f"m0 + ty + {i} * TY", lambda j: f"n0 + tx + {j} * TX", estore)
    p.main(*L)
    return p


@lru_cache(maxsize=1024)
def vec4_program(t: Tiling, rank: int, ta: bool = False, tb: bool = False, prefetch: bool = False,
                 epi: Epi | None = None, unroll_k: bool = False, double: bool = False) -> Program:
    """`vec4.program`'s scheme with the tiling t as specialisation constants; unroll_k:
    the slab's k loop marked `[[unroll]]`; double: two slabs in shared memory, the next
    one's global loads in flight during this one's arithmetic and stored into the other
    buffer after it, so a slab costs one barrier instead of two (`prefetch` is then
    implied). Both per operand layout (`tiling.VEC4_SCHEMES`, `Profile.matmul_unroll_k`,
    `Profile.matmul_double_buffer`).

    >>> p = vec4_program(Tiling("shared", tm=4, tn=8, bm=16, bn=32, bk=8), 0)
    >>> p.name, p.spec
    ('MatMul_shared4', (4, 8, 16, 32, 8))
    """
    p = _start("MatMul_shared4", t, rank, epi)
    p.add("const int QA = BM / 4;\nconst int QB = BN / 4;\nconst int GA = TM / 4;\n"
          "const int GB = TN / 4;\nconst int K4 = BK / 4;\n"
          "const int RA = BM * BK / 4 / THREADS;\nconst int RB = BN * BK / 4 / THREADS;\n",
          names=("QA", "QB", "GA", "GB", "K4", "RA", "RB"))
    C = p.buffer("C", "float")
    p.buffer("A", "vec4", readonly=True)
    p.buffer("B", "vec4", readonly=True)
    ehoist, estore = epilogue.declare(p, epi)
    NB = 2 if double else 1
    p.add(f"shared vec4 As[{NB} * BK * QA];\nshared vec4 Bs[{NB} * BK * QB];\n", names=("As", "Bs"))
    p.barriers = True
    L = prologue(p, rank) + ehoist
    L += ["int tid = int(lidx());",
          "int tx = tid % TX; int ty = tid / TX;",
          "int m0 = tmi * BM; int n0 = tni * BN;"]
    L += [f"float acc_{i}_{j} = 0.0;" for i in range(SPEC_MAX) for j in range(SPEC_MAX)]
    L += ["vec4 pa[RA]; vec4 pb[RB];"]

    def load_one(k0: str, buf: str, own: str, along_k: bool) -> list[str]:
        """Slab vec4 e = tid + r*THREADS of buf (own axis m for A, n for B) into p{a,b}[r]:
        stored with k innermost a vec4 runs along k, else along the own axis."""
        g, ext, pos, addr = slab_vec4(own, buf, along_k, k0, "K4", "QA" if own == "m" else "QB")
        reg = f"p{buf.lower()}[r]"
        return [f"[[unroll]] for (int r = 0; r < R{buf}; ++r) {{ int e = tid + r * THREADS; {pos}",
                f"  {reg} = ({g} < {ext} && gk < K) ? {buf}[{addr}] : vec4(0.0); }}"]

    def load(k0: str, ind: str) -> list[str]:
        return [ind + x for x in load_one(k0, "A", "m", not ta) + load_one(k0, "B", "n", tb)]

    def store(ind: str, buf: str = "") -> list[str]:
        oa, ob = (f"{buf} * (BK * QA) + ", f"{buf} * (BK * QB) + ") if buf else ("", "")
        out = ["[[unroll]] for (int r = 0; r < RA; ++r) { int e = tid + r * THREADS;"]
        out += ([f"  As[{oa}e] = pa[r]; }}"] if ta else
                ["  int mm = e / K4; int kq = e % K4;",
                 "  " + " ".join(f"As[{oa}(kq * 4 + {c}) * QA + (mm >> 2)][mm & 3] = pa[r].{x};"
                                 for c, x in enumerate("xyzw")) + " }"])
        out += ["[[unroll]] for (int r = 0; r < RB; ++r) { int e = tid + r * THREADS;"]
        out += (["  int nn = e / K4; int kq = e % K4;",
                 "  " + " ".join(f"Bs[{ob}(kq * 4 + {c}) * QB + (nn >> 2)][nn & 3] = pb[r].{x};"
                                 for c, x in enumerate("xyzw")) + " }"]
                if tb else [f"  Bs[{ob}e] = pb[r]; }}"])
        return [ind + x for x in out]

    S = SPEC_MAX
    oa, ob = ("cur * (BK * QA) + ", "cur * (BK * QB) + ") if double else ("", "")
    slab = (["  " + ("[[unroll]] " if unroll_k else "") + "for (int kk = 0; kk < BK; ++kk) {"]
            + [f"    vec4 a{g} = vec4(0.0); if ({g} < GA) a{g} = As[{oa}kk * QA + {g} * TY + ty];"
               for g in range(S // 4)]
            + [f"    vec4 b{h} = vec4(0.0); if ({h} < GB) b{h} = Bs[{ob}kk * QB + {h} * TX + tx];"
               for h in range(S // 4)]
            + [f"    if ({_slot(i, j)}) acc_{i}_{j} = fma(a{i // 4}[{i % 4}], b{j // 4}[{j % 4}], acc_{i}_{j});"
               for i in range(S) for j in range(S)]
            + ["  }"])
    if double:
        # slab i is read from buffer cur while slab i + 1 is stored into the other one,
        # which every invocation finished reading before the barrier ending slab i - 1
        L += load("0", "") + store("", "0") + ["barrier();", "int cur = 0;",
                                               "for (int k0 = 0; k0 < K; k0 += BK) {",
                                               "  bool more = k0 + BK < K;",
                                               "  if (more) {"] + load("(k0 + BK)", "    ") + ["  }"]
        L += slab + ["  if (more) {"] + store("    ", "(cur ^ 1)") + ["  }", "  barrier();", "  cur ^= 1;", "}"]
    else:
        if prefetch:
            L += load("0", "")
            L += ["for (int k0 = 0; k0 < K; k0 += BK) {"] + store("  ")
            L += ["  barrier();", "  if (k0 + BK < K) {"] + load("(k0 + BK)", "    ") + ["  }"]
        else:
            L += ["for (int k0 = 0; k0 < K; k0 += BK) {"] + load("k0", "  ") + store("  ")
            L += ["  barrier();"]
        L += slab + ["  barrier();", "}"]
    L += _slot_stores(C, lambda i: f"m0 + ({i // 4} * TY + ty) * 4 + {i % 4}",
                      lambda j: f"n0 + ({j // 4} * TX + tx) * 4 + {j % 4}", estore)
    p.main(*L)
    return p
