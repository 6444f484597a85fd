"""The shared-memory scheme with 16-byte traffic (float32; `tiling.vec4_fits`), tiles in
the source (the same tiles as specialisation constants: `spec.vec4_program`).

Slabs move from global memory as vec4s (a load along k is spread over four rows of the
slab); an invocation's tm rows are tm/4 runs of four, TY*4 rows apart, and its tn
columns likewise, so each k step reads (tm + tn)/4 vec4s from shared memory for tm*tn
multiply-adds, and the invocations of a subgroup read neighbouring vec4s.
"""
from __future__ import annotations

from functools import lru_cache

from ...program import Meta, Program
from . import epilogue
from .epilogue import Epi
from .prologue import meta_fields, prologue
from .tiling import Tiling


def slab_vec4(own: str, buf: str, along_k: bool, k0: str, k4, q) -> tuple[str, str, str, str]:
    """(coordinate var, extent, GLSL placing slab vec4 e, its vec4 index) for operand buf
    (own axis m for A, n for B): stored with k innermost a vec4 runs along k (k4 of them
    per slab row), else along the own axis (q per slab row).

    >>> slab_vec4("m", "A", True, "k0", 2, 16)[2]
    'int gm = m0 + e / 2; int gk = k0 + (e % 2) * 4;'
    """
    g, ext = f"g{own}", own.upper()
    if along_k:
        return (g, ext, f"int {g} = {own}0 + e / {k4}; int gk = {k0} + (e % {k4}) * 4;",
                f"({buf.lower()}off + {g} * K + gk) >> 2")
    return (g, ext, f"int gk = {k0} + e / {q}; int {g} = {own}0 + (e % {q}) * 4;",
            f"({buf.lower()}off + gk * {ext} + {g}) >> 2")


@lru_cache(maxsize=1024)
def program(t: Tiling, rank: int, ta: bool = False, tb: bool = False, prefetch: bool = False,
            epi: Epi | None = None) -> Program:
    """The vec4 kernel for tiling t; ta / tb: A stored (K, M) / B stored (N, K);
    prefetch: the next slab's loads are in flight during this slab's arithmetic.

    >>> p = program(Tiling("shared", tm=4, tn=4, bm=16, bn=16, bk=8), 0)
    >>> p.name, p.local_size, [b.type for b in p.bindings]
    ('MatMul_shared4', 16, ['float', 'vec4', 'vec4'])
    """
    TX, TY = t.bn // t.tn, t.bm // t.tm
    threads = TX * TY
    BM, BN, BK = t.bm, t.bn, t.bk
    QA, QB = BM // 4, BN // 4              # vec4s per slab row
    ga, gb = t.tm // 4, t.tn // 4
    p = Program("MatMul_shared4" + ("_epi" if epi is not None else ""), local_size=threads)
    p.meta = Meta(*meta_fields(rank), *epilogue.fields(epi))
    C = p.buffer("C", "float")
    p.buffer("A", "vec4", readonly=True)
    p.buffer("B", "vec4", readonly=True)
    ehoist, estore = epilogue.declare(p, epi)
    As = p.shared("As", "vec4", BK * QA)
    Bs = p.shared("Bs", "vec4", BK * QB)
    L = prologue(p, rank) + ehoist
    L += ["int tid = int(lidx());",
          f"int tx = tid % {TX}; int ty = tid / {TX};",
          f"int m0 = tmi * {BM}; int n0 = tni * {BN};"]
    L += [f"float acc_{i}_{j} = 0.0;" for i in range(t.tm) for j in range(t.tn)]
    RA, RB = BM * BK // 4 // threads, BN * BK // 4 // threads

    def load_one(ind: str, k0: str, r: int, reg: str, buf: str, own: str, along_k: bool) -> list[str]:
        """Slab element tid + r*threads of operand buf (own axis m for A, n for B) into
        register reg: stored with k innermost a vec4 runs along k, else along own axis."""
        g, ext, pos, addr = slab_vec4(own, buf, along_k, k0, BK // 4, QA if own == "m" else QB)
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
                out.append(f"{ind}{{ int e = {e}; {As}[(e / {QA}) * {QA} + e % {QA}] = pa{r}; }}")
            else:
                out.append(f"{ind}{{ int e = {e}; int mm = e / {BK // 4}; int kq = e % {BK // 4};")
                out += [f"{ind}  {As}[(kq * 4 + {c}) * {QA} + (mm >> 2)][mm & 3] = pa{r}[{c}];" for c in range(4)]
                out.append(f"{ind}}}")
        for r in range(RB):
            e = f"tid + {r * threads}"
            if tb:
                out.append(f"{ind}{{ int e = {e}; int nn = e / {BK // 4}; int kq = e % {BK // 4};")
                out += [f"{ind}  {Bs}[(kq * 4 + {c}) * {QB} + (nn >> 2)][nn & 3] = pb{r}[{c}];" for c in range(4)]
                out.append(f"{ind}}}")
            else:
                out.append(f"{ind}{{ int e = {e}; {Bs}[(e / {QB}) * {QB} + e % {QB}] = pb{r}; }}")
        return out

    L += [f"vec4 pa{r};" for r in range(RA)] + [f"vec4 pb{r};" for r in range(RB)]
    if prefetch:
        L += load("0", "")
        L += [f"for (int k0 = 0; k0 < K; k0 += {BK}) {{"] + store("  ")
        L += ["  barrier();", f"  if (k0 + {BK} < K) {{"] + load(f"(k0 + {BK})", "    ") + ["  }"]
    else:
        L += [f"for (int k0 = 0; k0 < K; k0 += {BK}) {{"] + load("k0", "  ") + store("  ")
        L += ["  barrier();"]
    L += [f"  for (int kk = 0; kk < {BK}; ++kk) {{"]
    L += [f"    vec4 a{g} = {As}[kk * {QA} + {g * TY} + ty];" for g in range(ga)]
    L += [f"    vec4 b{h} = {Bs}[kk * {QB} + {h * TX} + tx];" for h in range(gb)]
    for i in range(t.tm):
        for j in range(t.tn):
            L.append(f"    acc_{i}_{j} = fma(a{i // 4}[{i % 4}], b{j // 4}[{j % 4}], acc_{i}_{j});")
    L += ["  }", "  barrier();", "}"]
    for i in range(t.tm):
        L += [f"{{ int r = m0 + ({(i // 4) * TY} + ty) * 4 + {i % 4};", "  if (r < M) {"]
        for j in range(t.tn):
            c = f"n0 + ({(j // 4) * TX} + tx) * 4 + {j % 4}"
            L.append(f"    if ({c} < N) {C}[coff + r * N + {c}] = {estore(f'acc_{i}_{j}', 'r', c)};")
        L += ["  } }"]
    p.main(*L)
    return p
