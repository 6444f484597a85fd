"""Eigh, Svd, Qr: one workgroup per matrix, the whole batch in one dispatch sequence.

The batches these serve (PCA of a few features, orthogonal initialisation, the Hessian of a
small model) are many small matrices, so each matrix gets one workgroup and the batch is the
grid; the matrix lives in shared memory where it fits (64 x 64 float32 is 16 KiB) and in
scratch memory otherwise, its invocations meeting at barriers. The algorithms are those
whose steps are independent, so that a workgroup's invocations share every step:

* Eigh: cyclic Jacobi with round-robin (tournament) ordering. A sweep is NE - 1 rounds (NE
  = n rounded up to even, the padding index idle); in a round the NE / 2 pairs are
  disjoint, so their rotations are computed at once and then applied as 2 x 2 blocks
  (J^T A J's block (k, l) is R_k^T A_kl R_l: each invocation owns whole blocks, in place)
  while V J updates V's pair columns. Jacobi rather than tridiagonalisation + implicit QR:
  the latter is a chain of dependent steps (one reflector, one bulge chase at a time) that
  a workgroup runs serially, while a Jacobi round is all parallel, and Jacobi is accurate to
  the eigenvalues' relative precision. A sweep starts with the off-diagonal norm; below eps
  times the Frobenius norm the matrix is done; MAX_SWEEPS at most.
* Svd: one-sided (Hestenes) Jacobi on the columns of A (of A^T when m < n), the same
  ordering: an invocation owns a pair of columns in a round (their Gram entries, the
  rotation of both columns of A and of V), so a round is one phase. A pair is rotated while
  |a_p . a_q| > tol ||a_p|| ||a_q|| (tol = sqrt(rows) eps, LAPACK's gesvj); a sweep with no
  rotation ends it. Singular values are the final column norms, U the normalised columns
  (zero columns for zero singular values).
* Qr: Householder (LAPACK's geqrf reflectors and signs), one column per invocation: the
  column of step j makes the reflector and publishes it, every later column applies it;
  then each invocation builds one column of Q from the identity, the reflectors backwards.

Factors are sorted in the kernel (eigenvalues ascending, singular values descending, by
rank counting) and written packed as the registry declares.

What lavapipe asks for (bench/RESULTS.md, issue 18, has the measurements): its gallivm
ends any loop once an invocation has passed 65535 loop heads in all (`Profile.loop_limit`),
so a solve is split into dispatches of as many Jacobi rounds (QR steps) as fit (meta `first`
/ `last` / the range; the state and flags kept in scratch between them; the count from
`eigh_edges` / `svd_edges` / `qr_edges`, upper bounds of the loop heads), and loops along a
column are unrolledUNROLL times. Its barriers switch between the coroutines running a workgroup's SIMD rows,
and shared or storage memory indexed per invocation costs a load per lane, so on a CPU
device a workgroup has the fewest invocations (from 8, one SIMD row) whose sweep fits the
limit, and the kernels are arranged for few memory operations per element. The programs
set `grid` (never merged): lavapipe failed merged kernels with these long loops, and one
dispatch per batch has nothing to gain from merging.

>>> p = eigh_program("float", 4, 8, True)
>>> p.local_size, p.barriers, p.mergeable
(8, True, False)
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...trace import dtypes as dt
from ..memory import ALIGN
from ..program import Meta, Program

MAX_SWEEPS = 24
UNROLL = 8            # statements per iteration of the loops along a column
EPS = {"float": float(np.finfo(np.float32).eps), "double": float(np.finfo(np.float64).eps)}
SHARED_SPARE = 2048   # bytes of the device's shared memory left to the small arrays


class TooLarge(ValueError):
    """A matrix whose kernel would pass the driver's loop limit (lavapipe's)."""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _lit(T: str, v: float) -> str:
    return f"{v!r}LF" if T == "double" else f"{float(np.float32(v))!r}"


SYNC = "memoryBarrier(); barrier();"   # scratch and output are shared by the invocations too


def _each(var: str, total: str) -> str:
    """The header of a loop sharing [0, total) among the workgroup's invocations."""
    return f"for (int {var} = l; {var} < {total}; {var} += LS) {{"


def _run(var: str, start: str, stop: str, body: str, exact: bool = False) -> list[str]:
    """A serial loop over [start, stop) with UNROLL copies of body per iteration (fewer
    iterations under lavapipe's limit on the loop iterations of one invocation); each copy
    guarded unless exact (start 0 and stop a multiple of UNROLL)."""
    out = [f"for (int {var}0 = {start}; {var}0 < {stop}; {var}0 += {UNROLL}) {{"]
    for u in range(UNROLL):
        g = "" if exact else f"if ({var} < {stop}) "
        out.append(f"  {{ int {var} = {var}0 + {u}; {g}{{ {body} }} }}")
    out.append("}")
    return out


def _rot_glsl(T: str) -> str:
    """The Jacobi rotation (c, s, t = s / c) zeroing the off-diagonal of [[app, apq], [apq,
    aqq]] (Golub & Van Loan's symSchur2): J = [[c, s], [-s, c]], J^T A J diagonal, with
    diagonal app - t apq and aqq + t apq."""
    return (f"void rot({T} app, {T} aqq, {T} apq, out {T} c, out {T} s, out {T} t) {{\n"
            f"  c = {T}(1); s = {T}(0); t = {T}(0);\n"
            f"  if (apq == {T}(0)) return;\n"
            f"  {T} tau = (aqq - app) / ({T}(2) * apq);\n"
            f"  t = {T}(1) / (abs(tau) + sqrt({T}(1) + tau * tau));\n"
            f"  if (tau < {T}(0)) t = -t;\n"
            f"  c = {T}(1) / sqrt({T}(1) + t * t); s = t * c;\n"
            f"}}\n")


def _before_glsl(T: str) -> str:
    """`before(u, i, w, j)`: (u, i) sorts before (w, j), ascending with ties by position
    and NaN last, a total order, so the ranks it counts are a permutation even for NaN
    input (whose factors are then NaN, as LAPACK's)."""
    return (f"bool before({T} u, int i, {T} w, int j) {{\n"
            "  bool nu = isnan(u), nw = isnan(w);\n"
            "  if (nu || nw) return nu && nw ? i < j : nw;\n"
            "  return u < w || (u == w && i < j);\n"
            "}\n")


def _pair_lines() -> list[str]:
    """GLSL setting p < q, round r's pair k of the round-robin over NM + 1 indices (index
    NM fixed, the others turning on a circle): every pair once in NM rounds."""
    return ["int pa = k == 0 ? NM : (r + k) % NM;",
            "int pb = k == 0 ? r : (r - k + NM) % NM;",
            "int p = min(pa, pb), q = max(pa, pb);"]


def _consts(p: Program, **kw: int) -> None:
    p.add("".join(f"const int {k} = {v};\n" for k, v in kw.items()), names=tuple(kw))


def _work(p: Program, name: str, T: str, size: int, shared: bool, scr: str, base: str):
    """Accessor of one matrix's work array: a shared array, or its range of scratch."""
    if shared:
        p.shared(name, T, max(size, 1))
        return lambda i: f"{name}[{i}]"
    return lambda i: f"{scr}[{base} + {i}]"


def _sum_partials(T: str, red: str, dst: str, off: str = "0") -> list[str]:
    return [f"{T} {dst} = {T}(0);", *_run("k", "0", "LS", f"{dst} += {red}[{off} + k];")]


# --------------------------------------------------------------------------- Eigh

def eigh_sizes(n: int) -> list[int]:
    """Scratch elements of one matrix: A padded to an even order, then the converged flag."""
    NE = n + (n & 1)
    return [NE * NE, 1]


def _lp(trips: int) -> int:
    """What one entry of a loop of `trips` iterations costs against lavapipe's loop
    limiter: it counts each pass of the loop's head, the last (exiting) one too."""
    return trips + 1


def eigh_edges(n: int, L: int, G: int) -> int:
    """Loop heads one invocation passes in one dispatch of G rounds (an upper bound)."""
    NE = n + (n & 1)
    H = NE // 2
    sq = _lp(_cdiv(NE * NE, L))
    blocks = _lp(H) + sum(_lp(_cdiv(H - k, L)) for k in range(H))
    rnd = _lp(_cdiv(H, L)) + blocks + _lp(H) * _lp(_cdiv(n, L))
    check = sq + 2 * _lp(_cdiv(L, UNROLL))
    final = 3 * _lp(_cdiv(n, L)) + _cdiv(n, L) * _lp(_cdiv(n, UNROLL)) + 3 * sq
    return 2 * sq + _lp(G) * rnd + (_cdiv(G, NE - 1) + 1) * check + final


@lru_cache(maxsize=256)
def eigh_program(T: str, n: int, L: int, a_shared: bool) -> Program:
    """Jacobi eigensolver of one n x n symmetric matrix per workgroup of L invocations, a
    dispatch running the rounds [g0, g1) of the sweeps' sequence (meta; `first`: start
    from the input, else from scratch; `last`: write the sorted result, else keep A and
    the converged flag in scratch; a sweep's first round tests convergence). A is kept
    padded to an even order NE (a zero row and column: the round-robin's idle index) in
    shared memory (copied from and to scratch) or in scratch; V lives in the output.

    A round applies its NE / 2 rotations as 2 x 2 blocks: in the pairs' coordinates
    J^T A J's block (k, l) is R_k^T A_kl R_l, so each invocation reads the four entries of
    a block (k <= l) and writes them and their mirror image, in place and alone, and a
    rotated pair's own block is diag(app - t apq, aqq + t apq) (Rutishauser's update).

    >>> [b.name for b in eigh_program("double", 3, 8, False).bindings]
    ['o', 'src', 'scr']
    """
    p = Program(f"Eigh_jacobi_{n}", local_size=L, grid=True)
    p.meta = Meta(("first", 1), ("last", 1), ("g0", 1), ("g1", 1))
    o, x, scr = p.buffer("o", T), p.buffer("src", T, readonly=True), p.buffer("scr", T)
    NE = n + (n & 1)
    _consts(p, NR=n, NE=NE, NH=NE // 2, NM=NE - 1, LS=L)
    p.add(_rot_glsl(T), names=("rot",))
    p.add(_before_glsl(T), names=("before",))
    A = _work(p, "sa", T, NE * NE, a_shared, scr, "wb")
    pc, ps = p.shared("jc", T, NE // 2), p.shared("js", T, NE // 2)
    dp, dq = p.shared("jdp", T, NE // 2), p.shared("jdq", T, NE // 2)
    red, fl = p.shared("red", T, 2 * L), p.shared("fl", "int", 1)
    wv, rk = p.shared("wv", T, max(n, 1)), p.shared("rk", "int", max(n, 1))
    V = lambda i: f"{o}[ob + {i}]"      # noqa: E731
    keep = [f"{_each('e', 'NE * NE')} {scr}[wb + e] = {A('e')}; }}"] if a_shared else []
    fetch = [f"{_each('e', 'NE * NE')} {A('e')} = {scr}[wb + e]; }}"] if a_shared else []
    pair = lambda k, pn, qn: (f"int {pn}, {qn}; {{ int pa = {k} == 0 ? NM : (r + {k}) % NM; "   # noqa: E731
                              f"int pb = {k} == 0 ? r : (r - {k} + NM) % NM; {pn} = min(pa, pb); {qn} = max(pa, pb); }}")
    p.main("int b = int(group_id()); int l = int(lidx());",
           "int xb = b * NR * NR; int ob = b * (NR + 1) * NR; int wb = b * (NE * NE + 1);",
           "int done = 0;",
           f"if ({p.m('first')} != 0) {{",
           f"  {_each('e', 'NE * NE')}",
           "    int i = e / NE; int j = e - i * NE;",
           f"    {A('e')} = (i < NR && j < NR) ? {T}({x}[xb + i * NR + j]) : {T}(0);",
           f"    if (i < NR && j < NR) {V('i * NR + j')} = i == j ? {T}(1) : {T}(0);",
           "  }",
           "} else {",
           *fetch,
           f"  done = int({scr}[wb + NE * NE]);",
           "}",
           SYNC,
           f"if (done == 0) for (int g = {p.m('g0')}; g < {p.m('g1')}; g++) {{",
           "  int r = g % NM;",
           "  if (r == 0) {",
           f"  {T} off = {T}(0), tot = {T}(0);",
           f"  {_each('e', 'NE * NE')}",
           f"    int i = e / NE; {T} v = {A('e')}; v *= v; tot += v; if (e != i * (NE + 1)) off += v;",
           "  }",
           f"  {red}[l] = off; {red}[LS + l] = tot;",
           f"  {SYNC}",
           "  if (l == 0) {",
           *("    " + t for t in _sum_partials(T, red, "so")),
           *("    " + t for t in _sum_partials(T, red, "st", "LS")),
           f"    {fl}[0] = (so <= {_lit(T, EPS[T] ** 2)} * st) ? 1 : 0;",
           "  }",
           f"  {SYNC}",
           f"  if ({fl}[0] != 0) {{ done = 1; break; }}",
           "  }",
           "  {",
           f"    {_each('k', 'NH')}",
           f"      {pair('k', 'p', 'q')}",
           f"      {T} app = {A('p * NE + p')}, aqq = {A('q * NE + q')}, apq = {A('p * NE + q')}, c, s, t;",
           # an entry below eps / n of its diagonal's scale is left alone (threshold
           # Jacobi): the norm test still passes with all of them, and the blocks and V
           # columns of such pairs are skipped, most of them in a solve's last sweeps
           f"      if (abs(apq) <= {_lit(T, EPS[T] / max(n, 1))} * sqrt(abs(app) * abs(aqq))) apq = {T}(0);",
           "      rot(app, aqq, apq, c, s, t);",
           f"      {pc}[k] = c; {ps}[k] = s; {dp}[k] = app - t * apq; {dq}[k] = aqq + t * apq;",
           "    }",
           f"    {SYNC}",
           "    for (int k = 0; k < NH; k++) {",
           f"      {pair('k', 'pk', 'qk')}",
           f"      {T} ck = {pc}[k], sk = {ps}[k];",
           "      for (int m = k + l; m < NH; m += LS) {",
           f"        {pair('m', 'pm', 'qm')}",
           f"        {T} cm = {pc}[m], sm = {ps}[m];",
           f"        if (sk == {T}(0) && sm == {T}(0)) continue;",
           f"        {T} a = {A('pk * NE + pm')}, bb = {A('pk * NE + qm')}, cc = {A('qk * NE + pm')}, d = {A('qk * NE + qm')};",
           f"        {T} a1 = ck * a - sk * cc, b1 = ck * bb - sk * d, c1 = sk * a + ck * cc, d1 = sk * bb + ck * d;",
           f"        {T} a2 = cm * a1 - sm * b1, b2 = sm * a1 + cm * b1, c2 = cm * c1 - sm * d1, d2 = sm * c1 + cm * d1;",
           f"        if (m == k) {{ a2 = {dp}[k]; d2 = {dq}[k]; b2 = {T}(0); c2 = {T}(0); }}",
           f"        {A('pk * NE + pm')} = a2; {A('pk * NE + qm')} = b2; {A('qk * NE + pm')} = c2; {A('qk * NE + qm')} = d2;",
           f"        {A('pm * NE + pk')} = a2; {A('qm * NE + pk')} = b2; {A('pm * NE + qk')} = c2; {A('qm * NE + qk')} = d2;",
           "      }",
           "    }",
           # V J: columns p and q of every pair (the pair uniform, the rows shared)
           "    for (int k = 0; k < NH; k++) {",
           f"      {pair('k', 'p', 'q')}",
           f"      {T} c = {pc}[k], s = {ps}[k];",
           f"      if (q >= NR || s == {T}(0)) continue;",
           f"      {_each('i', 'NR')}",
           f"        {T} u = {V('i * NR + p')}, v = {V('i * NR + q')};",
           f"        {V('i * NR + p')} = c * u - s * v; {V('i * NR + q')} = s * u + c * v;",
           "      }",
           "    }",
           f"    {SYNC}",
           "  }",
           "}",
           f"if ({p.m('last')} == 0) {{",
           *("  " + t for t in keep),
           f"  if (l == 0) {scr}[wb + NE * NE] = {T}(done);",
           "  return;",
           "}",
           f"{_each('j', 'NR')} {wv}[j] = {A('j * (NE + 1)')}; }}",
           SYNC,
           # eigenvalues ascending: each one's place is the count of those before it
           _each("j", "NR"),
           f"  {T} w = {wv}[j]; int c = 0;",
           *("  " + t for t in _run("i", "0", "NR", f"{T} u = {wv}[i]; c += before(u, i, w, j) ? 1 : 0;",
                                    n % UNROLL == 0)),
           f"  {rk}[j] = c;",
           "}",
           SYNC,
           _each("e", "NR * NR"),
           f"  int i = e / NR; int j = e - i * NR; {A(f'i * NR + {rk}[j]')} = {V('e')};",
           "}",
           SYNC,
           f"{_each('e', 'NR * NR')} {V('e')} = {A('e')}; }}",
           f"{_each('j', 'NR')} {o}[ob + NR * NR + {rk}[j]] = {wv}[j]; }}")
    return p


# --------------------------------------------------------------------------- Svd

def svd_sizes(m: int, n: int) -> list[int]:
    """Scratch elements of one matrix: the work matrix, V, the converged flag and the flag
    of a rotation in the current sweep."""
    R, C = max(m, n), min(m, n)
    return [R * C, C * C, 2]


def svd_edges(m: int, n: int, L: int, G: int) -> int:
    R, C = max(m, n), min(m, n)
    CE = C + (C & 1)
    H = CE // 2
    col, row = _lp(_cdiv(R, UNROLL)), _lp(_cdiv(C, UNROLL))
    rnd = _lp(_cdiv(H, L) * (2 * col + row))
    io = 2 * (_lp(_cdiv(R * C, L)) + _lp(_cdiv(C * C, L)))
    final = _lp(_cdiv(C, L)) * (col + row) + _lp(_cdiv(R * C, L)) + _lp(_cdiv(C * C, L)) + _lp(_cdiv(C, L))
    return io + _lp(G) * rnd + final


@lru_cache(maxsize=256)
def svd_program(T: str, m: int, n: int, L: int, g_shared: bool, v_shared: bool) -> Program:
    """One-sided Jacobi SVD of one m x n matrix per workgroup, rounds [g0, g1) per dispatch
    (meta as eigh_program's; a sweep's first round ends the solve when the sweep before it
    rotated nothing): the R x C work matrix (A, or A^T when m < n; R = max(m, n), C =
    min(m, n)) column-major, and the C x C rotations V, each in shared memory or scratch.

    >>> [b.name for b in svd_program("float", 5, 3, 8, False, True).bindings]
    ['o', 'src', 'scr']
    """
    p = Program(f"Svd_jacobi_{m}x{n}", local_size=L, grid=True)
    p.meta = Meta(("first", 1), ("last", 1), ("g0", 1), ("g1", 1))
    o, x, scr = p.buffer("o", T), p.buffer("src", T, readonly=True), p.buffer("scr", T)
    R, C = max(m, n), min(m, n)
    CE = C + (C & 1)
    _consts(p, MR=m, NC=n, RR=R, CC=C, NH=CE // 2, NM=CE - 1, LS=L)
    p.add(_rot_glsl(T), names=("rot",))
    p.add(_before_glsl(T), names=("before",))
    G = _work(p, "sg", T, R * C, g_shared, scr, "wb")
    V = _work(p, "sv", T, C * C, v_shared, scr, "vb")
    wv, rk = p.shared("wv", T, max(C, 1)), p.shared("rk", "int", max(C, 1))
    tol = _lit(T, EPS[T] * max(1.0, float(np.sqrt(R))))
    trans = m < n
    exR, exC = R % UNROLL == 0, C % UNROLL == 0
    # G(j, i): row i of column j of the work matrix
    load = f"{x}[xb + j * NC + i]" if trans else f"{x}[xb + i * NC + j]"
    keep, fetch = [], []
    if g_shared:
        keep.append(f"{_each('e', 'RR * CC')} {scr}[wb + e] = {G('e')}; }}")
        fetch.append(f"{_each('e', 'RR * CC')} {G('e')} = {scr}[wb + e]; }}")
    if v_shared:
        keep.append(f"{_each('e', 'CC * CC')} {scr}[vb + e] = {V('e')}; }}")
        fetch.append(f"{_each('e', 'CC * CC')} {V('e')} = {scr}[vb + e]; }}")
    p.main("int b = int(group_id()); int l = int(lidx());",
           "int xb = b * MR * NC; int ob = b * (MR + NC + 1) * CC;",
           "int wb = b * (RR * CC + CC * CC + 2); int vb = wb + RR * CC; int fb = vb + CC * CC;",
           "int done = 0;",
           f"if ({p.m('first')} != 0) {{",
           f"  {_each('e', 'RR * CC')} int j = e / RR; int i = e - j * RR; {G('e')} = {T}({load}); }}",
           f"  {_each('e', 'CC * CC')} int j = e / CC; int i = e - j * CC; {V('e')} = i == j ? {T}(1) : {T}(0); }}",
           "} else {",
           *fetch,
           f"  done = int({scr}[fb]);",
           "}",
           SYNC,
           f"if (done == 0) for (int g = {p.m('g0')}; g < {p.m('g1')}; g++) {{",
           "  int r = g % NM;",
           "  if (r == 0) {",
           f"    int again = g == 0 ? 1 : int({scr}[fb + 1]);",
           f"    {SYNC}",
           "    if (again == 0) { done = 1; break; }",
           f"    if (l == 0) {scr}[fb + 1] = {T}(0);",
           f"    {SYNC}",
           "  }",
           "  {",
           f"    {_each('k', 'NH')}",
           *("      " + s for s in _pair_lines()),
           "      if (q >= CC) continue;",
           f"      {T} al = {T}(0), be = {T}(0), ga = {T}(0);",
           *("      " + s for s in _run("i", "0", "RR", f"{T} u = {G('p * RR + i')}, v = {G('q * RR + i')}; "
                                      "al += u * u; be += v * v; ga += u * v;", exR)),
           f"      if (!(abs(ga) > {tol} * sqrt(al) * sqrt(be))) continue;",
           f"      {scr}[fb + 1] = {T}(1);",
           f"      {T} c, s, t;",
           "      rot(al, be, ga, c, s, t);",
           *("      " + s for s in _run("i", "0", "RR", f"{T} u = {G('p * RR + i')}, v = {G('q * RR + i')}; "
                                      f"{G('p * RR + i')} = c * u - s * v; {G('q * RR + i')} = s * u + c * v;", exR)),
           *("      " + s for s in _run("i", "0", "CC", f"{T} u = {V('p * CC + i')}, v = {V('q * CC + i')}; "
                                      f"{V('p * CC + i')} = c * u - s * v; {V('q * CC + i')} = s * u + c * v;", exC)),
           "    }",
           f"    {SYNC}",
           "  }",
           "}",
           f"if ({p.m('last')} == 0) {{",
           *("  " + s for s in keep),
           f"  if (l == 0) {scr}[fb] = {T}(done);",
           "  return;",
           "}",
           _each("j", "CC"),
           f"  {T} a = {T}(0);",
           *("  " + s for s in _run("i", "0", "RR", f"{T} u = {G('j * RR + i')}; a += u * u;", exR)),
           f"  {wv}[j] = sqrt(a);",
           "}",
           SYNC,
           # singular values descending: each one's place is the count of those before it
           _each("j", "CC"),
           f"  {T} w = {wv}[j]; int c = 0;",
           *("  " + s for s in _run("i", "0", "CC", f"{T} u = {wv}[i]; c += before(-u, i, -w, j) ? 1 : 0;", exC)),
           f"  {rk}[j] = c;",
           "}",
           SYNC,
           # U rows 0..m-1, V rows m..m+n-1 of the packed output; the work matrix's
           # normalised columns are U (V when transposed), the rotations the other
           f"int uo = ob + {'MR * CC' if trans else '0'}; int vo = ob + {'0' if trans else 'MR * CC'};",
           _each("e", "RR * CC"),
           f"  int j = e / RR; int i = e - j * RR; {T} w = {wv}[j];",
           f"  {o}[uo + i * CC + {rk}[j]] = w > {T}(0) ? {G('e')} / w : {T}(0);",
           "}",
           f"{_each('e', 'CC * CC')} int j = e / CC; int i = e - j * CC; {o}[vo + i * CC + {rk}[j]] = {V('e')}; }}",
           f"{_each('j', 'CC')} {o}[ob + (MR + NC) * CC + {rk}[j]] = {wv}[j]; }}")
    return p


# --------------------------------------------------------------------------- Qr

def qr_sizes(m: int, n: int, kq: int) -> list[int]:
    """Scratch elements of one matrix: the reflectors (when they do not fit shared memory
    or must outlast a dispatch), then the columns and the taus kept between dispatches."""
    K = min(m, n)
    return [m * K, max(n, kq) * m + K]


def qr_edges(m: int, n: int, G: int) -> int:
    """Loop heads of one dispatch of G steps (an upper bound)."""
    col = _lp(_cdiv(m, UNROLL))
    return 8 * col + _lp(G) * 5 * col


@lru_cache(maxsize=256)
def qr_program(T: str, m: int, n: int, complete: bool, L: int, v_shared: bool) -> Program:
    """Householder QR of one m x n matrix per workgroup, one column per invocation held in
    a private array (L >= max(n, kq) invocations). Steps s in [0, 2K), K = min(m, n):
    step j < K makes column j's reflector (published in shared memory, or scratch when
    the m x K of them do not fit or must outlast a dispatch) and applies it to every later
    column; then R is written and each invocation builds one column of Q from the identity,
    step 2K - 1 - j applying reflector j. A dispatch runs steps [s0, s1) (meta; `first`:
    load A, else the columns and taus kept in scratch; `last`: write Q, else keep them).

    >>> qr_program("float", 4, 3, False, 8, True).name
    'Qr_householder_4x3'
    """
    p = Program(f"Qr_householder_{m}x{n}", local_size=L, grid=True)
    p.meta = Meta(("first", 1), ("last", 1), ("s0", 1), ("s1", 1))
    o, x, scr = p.buffer("o", T), p.buffer("src", T, readonly=True), p.buffer("scr", T)
    K = min(m, n)
    kq = m if complete else K
    W = max(n, kq)
    _consts(p, MR=m, NC=n, KR=K, KQ=kq, OW=kq + n, LS=L, CW=W)
    Vs = _work(p, "vv", T, m * K, v_shared, scr, "vb")
    tb = p.shared("tb", T, max(K, 1))
    col = lambda body, start="0": _run("i", start, "MR", body, start == "0" and m % UNROLL == 0)   # noqa: E731
    apply = lambda: [f"{T} tau = {tb}[j], w = a[j];",      # noqa: E731
                     *col(f"w += {Vs('j * MR + i')} * a[i];", "j + 1"),
                     "w *= tau; a[j] -= w;",
                     *col(f"a[i] -= w * {Vs('j * MR + i')};", "j + 1")]
    p.main("int b = int(group_id()); int c = int(lidx());",
           "int xb = b * MR * NC; int ob = b * MR * OW; int vb = b * (MR * KR + CW * MR + KR);",
           "int kb = vb + MR * KR; int tk = kb + CW * MR;",
           f"{T} a[MR];",
           f"if ({p.m('first')} != 0) {{",
           *("  " + t for t in col(f"a[i] = c < NC ? {T}({x}[xb + i * NC + c]) : {T}(0);")),
           "} else {",
           *("  " + t for t in col(f"a[i] = c < CW ? {scr}[kb + c * MR + i] : {T}(0);")),
           f"  for (int j = c; j < KR; j += LS) {tb}[j] = {scr}[tk + j];",
           "}",
           SYNC,
           f"int s0 = {p.m('s0')}, s1 = {p.m('s1')};",
           "for (int j = s0; j < min(s1, KR); j++) {",
           "  if (c == j) {",
           f"    {T} xn = {T}(0);",
           *("    " + t for t in col("xn += a[i] * a[i];", "j + 1")),
           f"    {T} al = a[j], tau = {T}(0), sc = {T}(1);",
           f"    if (xn > {T}(0)) {{",
           # LAPACK's dlarfg: beta = -sign(alpha) ||x||, H = I - tau v v^T with v_j = 1
           f"      {T} be = sqrt(al * al + xn); if (al >= {T}(0)) be = -be;",
           f"      tau = (be - al) / be; sc = {T}(1) / (al - be); a[j] = be;",
           "    }",
           *("    " + t for t in col(f"a[i] *= sc; {Vs('j * MR + i')} = a[i];", "j + 1")),
           f"    {tb}[j] = tau;",
           "  }",
           f"  {SYNC}",
           "  if (c > j && c < NC) {",
           *("    " + t for t in apply()),
           "  }",
           "}",
           # after the last reflector: R (rows :kq of the columns kq: of the packed output,
           # zero below the diagonal), then Q's column c starts as e_c
           "if (s0 <= KR && KR < s1) {",
           "  if (c < NC) {",
           *("    " + t for t in col(f"{o}[ob + i * OW + KQ + c] = (i <= c && i < KQ) ? a[i] : {T}(0);")),
           "  }",
           *("  " + t for t in col(f"a[i] = i == c ? {T}(1) : {T}(0);")),
           "}",
           # Q = H_0 ... H_{K-1} I, step 2K - 1 - j applying H_j; it leaves column c alone
           # while j > c
           "for (int st = max(s0, KR); st < s1; st++) {",
           "  int j = 2 * KR - 1 - st;",
           "  if (c < KQ && j <= c) {",
           *("    " + t for t in apply()),
           "  }",
           "}",
           f"if ({p.m('last')} == 0) {{",
           *("  " + t for t in col(f"if (c < CW) {scr}[kb + c * MR + i] = a[i];")),
           f"  for (int j = c; j < KR; j += LS) {scr}[tk + j] = {tb}[j];",
           "  return;",
           "}",
           "if (c < KQ) {",
           # no reflectors (n = 0): Q is the identity
           *(("  " + t for t in col(f"a[i] = i == c ? {T}(1) : {T}(0);")) if K == 0 else ()),
           *("  " + t for t in col(f"{o}[ob + i * OW + c] = a[i];")),
           "}")
    return p


# --------------------------------------------------------------------------- planning

def _dims(node) -> tuple[int, int, int]:
    """(batch, m, n) of the node's input."""
    s = node.inputs[0].shape
    b = 1
    for d in s[:-2]:
        b *= d
    return b, s[-2], s[-1]


def _sizes(node) -> list[int]:
    _, m, n = _dims(node)
    op = node.op.value
    if op == "Qr":
        return qr_sizes(m, n, m if node.attrs["complete"] else min(m, n))
    return eigh_sizes(n) if op == "Eigh" else svd_sizes(m, n)


def _placement(node, shared_bytes: int) -> list[bool]:
    """Which work arrays (all but the flag) live in shared memory: greedily, while they fit."""
    isz = dt.itemsize(node.inputs[0].dtype)
    left, out = shared_bytes - SHARED_SPARE, []
    for k in _sizes(node)[:2 if node.op.value == "Svd" else 1]:
        fits = k * isz <= left
        out.append(fits)
        left -= k * isz if fits else 0
    return out


def scratch_bytes(node, profile=None, **_) -> int:
    """Scratch for the state of every matrix between dispatches (and for work arrays that
    do not fit the device's shared memory, which this plan cannot see).

    >>> from types import SimpleNamespace as NS
    >>> from vkml.trace.ops import OpKind
    >>> x = NS(shape=(16, 64, 64), dtype=np.float32)
    >>> scratch_bytes(NS(op=OpKind.Svd, inputs=[x]))
    524544
    """
    b, _, _ = _dims(node)
    total = b * sum(_sizes(node)) * dt.itemsize(node.inputs[0].dtype)
    return max(ALIGN, _cdiv(total, ALIGN) * ALIGN)


def _local(profile, units: int, edges=None) -> int:
    """Invocations per matrix, a power of two. On a CPU device the fewest from 8 (one
    SIMD row of lavapipe) whose sweep stays under the loop limit: lavapipe runs a
    workgroup's SIMD rows as coroutines switched at every barrier, a cost that outweighs
    the lanes saved; on a GPU enough for each to have a few units of a phase."""
    L = 8
    if profile.layout == "cpu" and edges is not None:
        while L < 1024 and profile.loop_limit and edges(L, 1) > profile.loop_limit * 0.8:   # one round
            L *= 2
        return L
    while L < units and L < 256:
        L *= 2
    return L


def _rounds(edges, total: int, limit: int, what: str) -> int:
    """Jacobi rounds per dispatch under the driver's loop limit (all of them without one)."""
    if not limit:
        return total
    budget = int(limit * 0.8)
    if edges(1) > budget:
        raise TooLarge(f"{what}: one Jacobi round of this matrix passes the driver's loop limit "
                       f"({limit} iterations per invocation); use smaller matrices on this device")
    lo, hi = 1, total
    while lo < hi:          # the most rounds that fit
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if edges(mid) <= budget else (lo, mid - 1)
    return lo


def lower(node, ins, out, ctx) -> None:
    """Eigh, Svd or Qr of every matrix of ins[0], one workgroup each.

    >>> import numpy as np, vkml.numpy as vnp
    >>> from vkml.array import bind
    >>> from vkml.trace.ops import OpKind
    >>> bind(OpKind.Eigh, [vnp.asarray([[2.0, 1.0], [1.0, 2.0]])]).numpy()[2].round(6).tolist()
    [1.0, 3.0]
    """
    x = ins[0]
    b, m, n = _dims(node)
    if out.size == 0:
        return
    T = dt.glsl_type(x.dtype)
    limit = ctx.profile.loop_limit
    place = _placement(node, ctx.dev.max_shared_memory)
    nb = scratch_bytes(node)
    scr = ctx.scratch.sub(0, nb, (nb // dt.itemsize(x.dtype),), x.dtype)
    op = node.op.value
    if op == "Qr":
        complete = bool(node.attrs["complete"])
        kq = m if complete else min(m, n)
        L = -(-max(n, kq) // 8) * 8        # one column per invocation
        if L > ctx.dev.max_workgroup_invocations:
            raise TooLarge(f"Qr: {max(n, kq)} columns exceed the device's workgroup size "
                           f"({ctx.dev.max_workgroup_invocations} invocations, one per column)")
        K = min(m, n)
        total = 2 * K
        G = _rounds(lambda g: qr_edges(m, n, g), total, limit, op) if total else 1
        D = max(_cdiv(total, G), 1)
        # reflectors kept in shared memory only when one dispatch does it all
        k = ctx.kernel(qr_program(T, m, n, complete, L, place[0] and D == 1))
        for d in range(D):
            ctx.dispatch(k, {"first": int(d == 0), "last": int(d == D - 1), "s0": d * G,
                             "s1": min((d + 1) * G, total)}, [out, x, scr], groups=b)
        return
    if op == "Eigh":
        edges = lambda L_, g_: eigh_edges(n, L_, g_)      # noqa: E731
        L = _local(ctx.profile, n * n // 32, edges)
        prog, order = eigh_program(T, n, L, place[0]), n + (n & 1)
    else:
        C = min(m, n)
        edges = lambda L_, g_: svd_edges(m, n, L_, g_)    # noqa: E731
        L = _local(ctx.profile, (C + 1) // 2, edges)
        prog, order = svd_program(T, m, n, L, place[0], place[1]), C + (C & 1)
    total = MAX_SWEEPS * max(order - 1, 1)
    G = _rounds(lambda g: edges(L, g), total, limit, op)
    k = ctx.kernel(prog)
    D = _cdiv(total, G)
    for d in range(D):
        ctx.dispatch(k, {"first": int(d == 0), "last": int(d == D - 1), "g0": d * G,
                         "g1": min((d + 1) * G, total)}, [out, x, scr], groups=b)
