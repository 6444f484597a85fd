"""The GPU scheme, tiles in the source: the workgroup stages a bk-deep slab of A and B in
shared memory, then each invocation reads tm values of A and tn of B per k from there and
does tm*tn multiply-adds (the classic GPU scheme: shared memory is on-chip).

Used for float64 (whose register tile stays in the source: `spec`) and for a tiling whose
register tile is larger than `spec.SPEC_MAX` or whose rows or columns are contiguous
(`Profile.matmul_contiguous`), or with `Profile.matmul_spec_tiles` off.
"""
from __future__ import annotations

from functools import lru_cache

from ...program import Meta, Program
from . import epilogue
from .epilogue import Epi
from .prologue import mad, meta_fields, prologue
from .tiling import Tiling


@lru_cache(maxsize=1024)
def program(t: Tiling, T: str, rank: int, ta: bool = False, tb: bool = False, epi: Epi | None = None,
            contiguous: tuple = (False, False)) -> Program:
    """Invocation (tx, ty) owns rows m0 + ty + i*TY and columns n0 + tx + j*TX, so
    neighbouring invocations read neighbouring shared-memory words and store
    neighbouring output elements.

    ta / tb: A is stored (K, M) / B is stored (N, K), a transpose read in place (the
    slab loads then walk the other axis, so neighbouring invocations still read
    neighbouring addresses). Loading the next slab into registers during the arithmetic
    measured slower on the H200 (register pressure). contiguous (rows, columns): an
    invocation's register-tile rows (columns) adjacent in shared memory, read as aligned
    runs, instead of a workgroup row apart.

    >>> p = program(Tiling("shared", tm=2, tn=2, bm=8, bn=8, bk=4), "float", 0)
    >>> p.name, p.local_size, p.barriers, p.mergeable
    ('MatMul_shared', 16, True, True)
    """
    TX, TY = t.bn // t.tn, t.bm // t.tm
    threads = TX * TY
    BM, BN, BK = t.bm, t.bn, t.bk
    ca, cb = contiguous
    # padded strides spread the transposed stores over banks; a thread reading its rows
    # (columns) as one run wants 16-byte aligned runs, so there the pad is 4
    SA, SB = BM + (4 if ca else 1), BN + (4 if cb else 1)
    row = (lambda i: f"ty * {t.tm} + {i}") if ca else (lambda i: f"ty + {i * TY}")
    col = (lambda j: f"tx * {t.tn} + {j}") if cb else (lambda j: f"tx + {j * TX}")
    p = Program("MatMul_shared" + ("_epi" if epi is not None else ""), local_size=threads)
    p.meta = Meta(*meta_fields(rank), *epilogue.fields(epi))
    C = p.buffer("C", T)
    A = p.buffer("A", T, readonly=True)
    B = p.buffer("B", T, readonly=True)
    ehoist, estore = epilogue.declare(p, epi)
    As = p.shared("As", T, BK * SA)
    Bs = p.shared("Bs", T, BK * SB)
    L = prologue(p, rank) + ehoist
    L += ["int tid = int(lidx());",
          f"int tx = tid % {TX}; int ty = tid / {TX};",
          f"int m0 = tmi * {BM}; int n0 = tni * {BN};"]
    L += [f"{T} acc_{i}_{j} = {T}(0);" for i in range(t.tm) for j in range(t.tn)]
    ra, rb = -(-BM * BK // threads), -(-BN * BK // threads)
    # (shared index, row/col coordinate, k coordinate, global index) of slab element e
    if ta:
        a_co = (f"e % {BM}", f"e / {BM}", f"{A}[aoff + gk * M + gr]")
    else:
        a_co = (f"e / {BK}", f"e % {BK}", f"{A}[aoff + gr * K + gk]")
    if tb:
        b_co = (f"e / {BK}", f"e % {BK}", f"{B}[boff + gc * K + gk]")
    else:
        b_co = (f"e % {BN}", f"e / {BN}", f"{B}[boff + gk * N + gc]")
    L += [f"for (int k0 = 0; k0 < K; k0 += {BK}) {{"]
    for r in range(ra):
        g = f"if (e < {BM * BK}) " if (BM * BK) % threads else ""
        L += [f"  {{ int e = tid + {r * threads}; {g}{{ int mm = {a_co[0]}; int kk = {a_co[1]};",
              "      int gr = m0 + mm; int gk = k0 + kk;",
              f"      {As}[kk * {SA} + mm] = (gr < M && gk < K) ? {a_co[2]} : {T}(0); }} }}"]
    for r in range(rb):
        g = f"if (e < {BN * BK}) " if (BN * BK) % threads else ""
        L += [f"  {{ int e = tid + {r * threads}; {g}{{ int nn = {b_co[0]}; int kk = {b_co[1]};",
              "      int gc = n0 + nn; int gk = k0 + kk;",
              f"      {Bs}[kk * {SB} + nn] = (gc < N && gk < K) ? {b_co[2]} : {T}(0); }} }}"]
    L += ["  barrier();"]
    L += [f"  for (int kk = 0; kk < {BK}; ++kk) {{"]
    L += [f"    {T} a{i} = {As}[kk * {SA} + {row(i)}];" for i in range(t.tm)]
    L += [f"    {T} b{j} = {Bs}[kk * {SB} + {col(j)}];" for j in range(t.tn)]
    L += ["    " + mad(T, f"acc_{i}_{j}", f"a{i}", f"b{j}") for i in range(t.tm) for j in range(t.tn)]
    L += ["  }", "  barrier();", "}"]
    for i in range(t.tm):
        L += [f"{{ int r = m0 + {row(i)};", "  if (r < M) {"]
        L += [f"    if (n0 + {col(j)} < N) {C}[coff + r * N + n0 + {col(j)}] = "
              f"{estore(f'acc_{i}_{j}', 'r', f'n0 + {col(j)}')};" for j in range(t.tn)]
        L += ["  } }"]
    p.main(*L)
    return p
