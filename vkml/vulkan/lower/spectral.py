"""Eigh, Svd, Qr: one workgroup per matrix, a whole decomposition in one dispatch.

The batches these serve (PCA of a few features, orthogonal initialisation, the Hessian of a
small model) are many small matrices, so each matrix gets one workgroup and the batch is the
grid: one dispatch sequence of one dispatch for the whole batch, the matrix kept in shared
memory where it fits (64 x 64 float32 is 16 KiB) and in scratch memory otherwise, its
invocations meeting at barriers. The algorithms are the ones whose inner steps are
independent, so that a workgroup's invocations share every step:

* Eigh: cyclic Jacobi with round-robin (tournament) ordering. A sweep is n - 1 rounds; in a
  round the n / 2 pairs (p, q) are disjoint, so their rotations are computed at once, then
  applied to all rows (J^T A) and then all columns (A J, and V J), each element of a phase
  touched by one invocation. Jacobi is chosen over tridiagonalisation + implicit QR because
  the latter is a chain of dependent steps (one reflector, one bulge chase at a time) that a
  workgroup can only run serially, while Jacobi's O(n^2) work per round is all parallel; it
  is also accurate to the eigenvalues' relative precision. Sweeps stop when the
  off-diagonal norm is below eps times the Frobenius norm (checked once per sweep), or
  after MAX_SWEEPS; rotated (p, q) entries are set to zero exactly.
* Svd: one-sided (Hestenes) Jacobi on the columns of A (of A^T when m < n), same ordering:
  each invocation owns a pair of columns in a round (their Gram entries, then the rotation
  of both columns of A and of V), so a round has no phases, one barrier. A pair is rotated
  while |a_p . a_q| > tol ||a_p|| ||a_q|| (tol = sqrt(rows) eps, LAPACK's gesvj); a sweep
  with no rotation ends it. Singular values are the final column norms, U the normalised
  columns (zero columns for zero singular values).
* Qr: Householder (LAPACK's geqrf reflectors and signs), the reflector's norm as a
  workgroup reduction, then applied to every trailing column at once (one invocation per
  column); Q accumulated backwards from the identity, again a column per invocation.

Factors are sorted in the kernel (eigenvalues ascending, singular values descending, by
rank counting) and written packed as the registry declares. The programs set `grid` (never
merged): lavapipe failed merged kernels with these long loops, and one dispatch per batch
has nothing to gain from merging.

>>> p = eigh_program("float", 4, 8, True)
>>> p.local_size, p.barriers, p.mergeable
(8, True, False)
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...trace import dtypes as dt
from ..memory import ALIGN
from ..program import Program

MAX_SWEEPS = 30
LOCAL = {"cpu": 8, "gpu": 64}     # invocations per matrix: lavapipe's 8 lanes are one SIMD row
EPS = {"float": float(np.finfo(np.float32).eps), "double": float(np.finfo(np.float64).eps)}


def _lit(T: str, v: float) -> str:
    return f"{v!r}LF" if T == "double" else f"{float(np.float32(v))!r}"


def _sync() -> str:
    return "memoryBarrier(); barrier();"


def _rot_glsl(T: str) -> str:
    """The Jacobi rotation (c, s) zeroing the off-diagonal of [[app, apq], [apq, aqq]]
    (Golub & Van Loan's symSchur2): J = [[c, s], [-s, c]], J^T A J diagonal."""
    return (f"void rot({T} app, {T} aqq, {T} apq, out {T} c, out {T} s) {{\n"
            f"  c = {T}(1); s = {T}(0);\n"
            f"  if (apq == {T}(0)) return;\n"
            f"  {T} tau = (aqq - app) / ({T}(2) * apq);\n"
            f"  {T} t = {T}(1) / (abs(tau) + sqrt({T}(1) + tau * tau));\n"
            f"  if (tau < {T}(0)) t = -t;\n"
            f"  c = {T}(1) / sqrt({T}(1) + t * t); s = t * c;\n"
            f"}}\n")


def _pair_lines(M: str, r: str, k: str) -> list[str]:
    """GLSL setting p < q, round r's pair k of the round-robin over M + 1 indices (index M
    fixed, the others on a circle)."""
    return [f"int pa = {k} == 0 ? {M} : ({r} + {k}) % {M};",
            f"int pb = {k} == 0 ? {r} : ({r} - {k} + {M}) % {M};",
            "int p = min(pa, pb), q = max(pa, pb);"]


def _work(p: Program, name: str, T: str, size: int, shared: bool, scr: str | None, base: str):
    """Accessor of one matrix's work array: a shared array, or its range of scratch."""
    if shared:
        p.shared(name, T, max(size, 1))
        return lambda i: f"{name}[{i}]"
    return lambda i: f"{scr}[{base} + {i}]"


def _consts(p: Program, **kw: int) -> None:
    p.add("".join(f"const int {k} = {v};\n" for k, v in kw.items()), names=tuple(kw))


@lru_cache(maxsize=256)
def eigh_program(T: str, n: int, L: int, a_shared: bool) -> Program:
    """Jacobi eigensolver of one n x n symmetric matrix per workgroup of L invocations;
    A in shared memory or in scratch (binding `scr`), V in the output.

    >>> [b.name for b in eigh_program("double", 3, 8, False).bindings]
    ['o', 'src', 'scr']
    """
    p = Program(f"Eigh_jacobi_{n}", local_size=L, grid=True)
    o = p.buffer("o", T)
    x = p.buffer("src", T, readonly=True)
    scr = None if a_shared else p.buffer("scr", T)
    NE = n + (n & 1)
    _consts(p, NR=n, NH=NE // 2, NM=NE - 1, LS=L, SWEEPS=MAX_SWEEPS)
    p.add(_rot_glsl(T), names=("rot",))
    A = _work(p, "sa", T, n * n, a_shared, scr, "wb")
    pc, ps = p.shared("jc", T, NE // 2), p.shared("js", T, NE // 2)
    pp, pq = p.shared("jp", "int", NE // 2), p.shared("jq", "int", NE // 2)
    red, fl = p.shared("red", T, 2 * L), p.shared("fl", "int", 1)
    wv, rk = p.shared("wv", T, max(n, 1)), p.shared("rk", "int", max(n, 1))
    V = lambda i: f"{o}[ob + {i}]"      # noqa: E731
    tol2 = _lit(T, EPS[T] ** 2)
    p.main("int b = int(group_id()); int l = int(lidx());",
           "int xb = b * NR * NR; int ob = b * (NR + 1) * NR; int wb = xb;",
           "for (int e = l; e < NR * NR; e += LS) {",
           "  int i = e / NR; int j = e - i * NR;",
           f"  {A('e')} = {T}({x}[xb + e]); {V('e')} = i == j ? {T}(1) : {T}(0);",
           "}",
           _sync(),
           "for (int sw = 0; sw < SWEEPS; sw++) {",
           f"  {T} off = {T}(0), tot = {T}(0);",
           "  for (int e = l; e < NR * NR; e += LS) {",
           f"    int i = e / NR; {T} v = {A('e')}; v *= v; tot += v; if (e != i * (NR + 1)) off += v;",
           "  }",
           f"  {red}[l] = off; {red}[LS + l] = tot;",
           f"  {_sync()}",
           "  if (l == 0) {",
           f"    {T} so = {T}(0), st = {T}(0);",
           f"    for (int k = 0; k < LS; k++) {{ so += {red}[k]; st += {red}[LS + k]; }}",
           f"    {fl}[0] = (so <= {tol2} * st) ? 1 : 0;",
           "  }",
           f"  {_sync()}",
           f"  if ({fl}[0] != 0) break;",
           "  for (int r = 0; r < NM; r++) {",
           "    for (int k = l; k < NH; k += LS) {",
           *("      " + s for s in _pair_lines("NM", "r", "k")),
           f"      {T} c = {T}(1), s = {T}(0);",
           f"      if (q < NR) rot({A('p * NR + p')}, {A('q * NR + q')}, {A('p * NR + q')}, c, s);",
           f"      {pp}[k] = p; {pq}[k] = q; {pc}[k] = c; {ps}[k] = s;",
           "    }",
           f"    {_sync()}",
           "    for (int e = l; e < NH * NR; e += LS) {",
           f"      int k = e / NR; int j = e - k * NR; int p = {pp}[k], q = {pq}[k];",
           "      if (q < NR) {",
           f"        {T} c = {pc}[k], s = {ps}[k];",
           f"        {T} u = {A('p * NR + j')}, v = {A('q * NR + j')};",
           f"        {A('p * NR + j')} = c * u - s * v; {A('q * NR + j')} = s * u + c * v;",
           "      }",
           "    }",
           f"    {_sync()}",
           "    for (int e = l; e < NH * NR; e += LS) {",
           f"      int i = e / NH; int k = e - i * NH; int p = {pp}[k], q = {pq}[k];",
           "      if (q < NR) {",
           f"        {T} c = {pc}[k], s = {ps}[k];",
           f"        {T} u = {A('i * NR + p')}, v = {A('i * NR + q')};",
           f"        {T} nu = c * u - s * v, nv = s * u + c * v;",
           # the rotated pair's off-diagonal entries are zero in exact arithmetic
           f"        if (i == p) nv = {T}(0);",
           f"        if (i == q) nu = {T}(0);",
           f"        {A('i * NR + p')} = nu; {A('i * NR + q')} = nv;",
           f"        u = {V('i * NR + p')}; v = {V('i * NR + q')};",
           f"        {V('i * NR + p')} = c * u - s * v; {V('i * NR + q')} = s * u + c * v;",
           "      }",
           "    }",
           f"    {_sync()}",
           "  }",
           "}",
           f"for (int j = l; j < NR; j += LS) {wv}[j] = {A('j * (NR + 1)')};",
           _sync(),
           "for (int j = l; j < NR; j += LS) {",
           f"  {T} w = {wv}[j]; int c = 0;",
           f"  for (int i = 0; i < NR; i++) {{ {T} u = {wv}[i]; c += (u < w || (u == w && i < j)) ? 1 : 0; }}",
           f"  {rk}[j] = c;",
           "}",
           _sync(),
           "for (int e = l; e < NR * NR; e += LS) {",
           f"  int i = e / NR; int j = e - i * NR; {A(f'i * NR + {rk}[j]')} = {V('e')};",
           "}",
           _sync(),
           f"for (int e = l; e < NR * NR; e += LS) {V('e')} = {A('e')};",
           f"for (int j = l; j < NR; j += LS) {o}[ob + NR * NR + {rk}[j]] = {wv}[j];")
    return p


@lru_cache(maxsize=256)
def svd_program(T: str, m: int, n: int, L: int, g_shared: bool, v_shared: bool) -> Program:
    """One-sided Jacobi SVD of one m x n matrix per workgroup: the R x C work matrix
    (A, or A^T when m < n; R = max(m, n), C = min(m, n)) column-major, and the C x C
    rotations V, each in shared memory or scratch (`scr`: the work matrix, then V).

    >>> [b.name for b in svd_program("float", 5, 3, 8, False, True).bindings]
    ['o', 'src', 'scr']
    """
    p = Program(f"Svd_jacobi_{m}x{n}", local_size=L, grid=True)
    o = p.buffer("o", T)
    x = p.buffer("src", T, readonly=True)
    R, C = max(m, n), min(m, n)
    scr = None if g_shared and v_shared else p.buffer("scr", T)
    CE = C + (C & 1)
    _consts(p, MR=m, NC=n, RR=R, CC=C, NH=CE // 2, NM=CE - 1, LS=L, SWEEPS=MAX_SWEEPS)
    p.add(_rot_glsl(T), names=("rot",))
    gsz = R * C
    G = _work(p, "sg", T, gsz, g_shared, scr, "wb")
    V = _work(p, "sv", T, C * C, v_shared, scr, "vb")
    fl = p.shared("fl", "int", 1)
    wv, rk = p.shared("wv", T, max(C, 1)), p.shared("rk", "int", max(C, 1))
    tol = _lit(T, EPS[T] * max(1.0, float(np.sqrt(R))))
    trans = m < n
    # G(j, i): row i of column j of the work matrix
    load = (f"{G('e')} = {T}({x}[xb + j * NC + i]);" if trans else f"{G('e')} = {T}({x}[xb + i * NC + j]);")
    per = (0 if g_shared else gsz) + (0 if v_shared else C * C)
    vb0 = 0 if v_shared else (0 if g_shared else gsz)
    p.main("int b = int(group_id()); int l = int(lidx());",
           f"int xb = b * MR * NC; int ob = b * (MR + NC + 1) * CC; int wb = b * {per}; int vb = wb + {vb0};",
           "for (int e = l; e < RR * CC; e += LS) {",
           "  int j = e / RR; int i = e - j * RR;",
           f"  {load}",
           "}",
           "for (int e = l; e < CC * CC; e += LS) {",
           f"  int j = e / CC; int i = e - j * CC; {V('e')} = i == j ? {T}(1) : {T}(0);",
           "}",
           "for (int sw = 0; sw < SWEEPS; sw++) {",
           f"  if (l == 0) {fl}[0] = 0;",
           f"  {_sync()}",
           "  for (int r = 0; r < NM; r++) {",
           "    for (int k = l; k < NH; k += LS) {",
           *("      " + s for s in _pair_lines("NM", "r", "k")),
           "      if (q >= CC) continue;",
           f"      {T} al = {T}(0), be = {T}(0), ga = {T}(0);",
           "      for (int i = 0; i < RR; i++) {",
           f"        {T} u = {G('p * RR + i')}, v = {G('q * RR + i')};",
           "        al += u * u; be += v * v; ga += u * v;",
           "      }",
           f"      if (!(abs(ga) > {tol} * sqrt(al) * sqrt(be))) continue;",
           f"      {fl}[0] = 1;",
           f"      {T} c, s;",
           "      rot(al, be, ga, c, s);",
           "      for (int i = 0; i < RR; i++) {",
           f"        {T} u = {G('p * RR + i')}, v = {G('q * RR + i')};",
           f"        {G('p * RR + i')} = c * u - s * v; {G('q * RR + i')} = s * u + c * v;",
           "      }",
           "      for (int i = 0; i < CC; i++) {",
           f"        {T} u = {V('p * CC + i')}, v = {V('q * CC + i')};",
           f"        {V('p * CC + i')} = c * u - s * v; {V('q * CC + i')} = s * u + c * v;",
           "      }",
           "    }",
           f"    {_sync()}",
           "  }",
           f"  int again = {fl}[0];",
           f"  {_sync()}",
           "  if (again == 0) break;",
           "}",
           "for (int j = l; j < CC; j += LS) {",
           f"  {T} a = {T}(0);",
           f"  for (int i = 0; i < RR; i++) {{ {T} u = {G('j * RR + i')}; a += u * u; }}",
           f"  {wv}[j] = sqrt(a);",
           "}",
           _sync(),
           "for (int j = l; j < CC; j += LS) {",
           f"  {T} w = {wv}[j]; int c = 0;",
           f"  for (int i = 0; i < CC; i++) {{ {T} u = {wv}[i]; c += (u > w || (u == w && i < j)) ? 1 : 0; }}",
           f"  {rk}[j] = c;",
           "}",
           _sync(),
           # U rows 0..m-1, V rows m..m+n-1 of the packed output; the work matrix's
           # normalised columns are U (V when transposed), the rotations the other
           f"int uo = ob + ({'MR' if trans else '0'}) * CC; int vo = ob + ({'0' if trans else 'MR'}) * CC;",
           "for (int e = l; e < RR * CC; e += LS) {",
           "  int j = e / RR; int i = e - j * RR;",
           f"  {T} w = {wv}[j];",
           f"  {o}[uo + i * CC + {rk}[j]] = w > {T}(0) ? {G('e')} / w : {T}(0);",
           "}",
           "for (int e = l; e < CC * CC; e += LS) {",
           f"  int j = e / CC; int i = e - j * CC; {o}[vo + i * CC + {rk}[j]] = {V('e')};",
           "}",
           f"for (int j = l; j < CC; j += LS) {o}[ob + (MR + NC) * CC + {rk}[j]] = {wv}[j];")
    return p


@lru_cache(maxsize=256)
def qr_program(T: str, m: int, n: int, complete: bool, L: int, a_shared: bool) -> Program:
    """Householder QR of one m x n matrix per workgroup: A column-major in shared memory
    or scratch, the reflectors left below its diagonal (LAPACK's geqrf form), Q built in
    the output.

    >>> qr_program("float", 4, 3, False, 8, True).name
    'Qr_householder_4x3'
    """
    p = Program(f"Qr_householder_{m}x{n}", local_size=L, grid=True)
    o = p.buffer("o", T)
    x = p.buffer("src", T, readonly=True)
    scr = None if a_shared else p.buffer("scr", T)
    K = min(m, n)
    kq = m if complete else K
    _consts(p, MR=m, NC=n, KR=K, KQ=kq, OW=kq + n, LS=L)
    W = _work(p, "sa", T, m * n, a_shared, scr, "wb")
    red, tb, sc = p.shared("red", T, L), p.shared("tb", T, max(K, 1)), p.shared("sc", T, 1)
    Q = lambda i, c: f"{o}[ob + ({i}) * OW + {c}]"      # noqa: E731
    p.main("int b = int(group_id()); int l = int(lidx());",
           "int xb = b * MR * NC; int ob = b * MR * OW; int wb = xb;",
           "for (int e = l; e < MR * NC; e += LS) {",
           f"  int c = e / MR; int i = e - c * MR; {W('e')} = {T}({x}[xb + i * NC + c]);",
           "}",
           _sync(),
           "for (int j = 0; j < KR; j++) {",
           f"  {T} part = {T}(0);",
           f"  for (int i = j + 1 + l; i < MR; i += LS) {{ {T} u = {W('j * MR + i')}; part += u * u; }}",
           f"  {red}[l] = part;",
           f"  {_sync()}",
           "  if (l == 0) {",
           f"    {T} xn = {T}(0);",
           f"    for (int k = 0; k < LS; k++) xn += {red}[k];",
           f"    {T} al = {W('j * MR + j')};",
           f"    {tb}[j] = {T}(0); {sc}[0] = {T}(1);",
           f"    if (xn > {T}(0)) {{",
           f"      {T} be = sqrt(al * al + xn); if (al >= {T}(0)) be = -be;",
           f"      {tb}[j] = (be - al) / be; {sc}[0] = {T}(1) / (al - be); {W('j * MR + j')} = be;",
           "    }",
           "  }",
           f"  {_sync()}",
           f"  {T} s = {sc}[0];",
           f"  for (int i = j + 1 + l; i < MR; i += LS) {W('j * MR + i')} *= s;",
           f"  {_sync()}",
           f"  {T} tau = {tb}[j];",
           "  for (int c = j + 1 + l; c < NC; c += LS) {",
           f"    {T} w = {W('c * MR + j')};",
           f"    for (int i = j + 1; i < MR; i++) w += {W('j * MR + i')} * {W('c * MR + i')};",
           "    w *= tau;",
           f"    {W('c * MR + j')} -= w;",
           f"    for (int i = j + 1; i < MR; i++) {W('c * MR + i')} -= w * {W('j * MR + i')};",
           "  }",
           f"  {_sync()}",
           "}",
           "for (int e = l; e < MR * OW; e += LS) {",
           "  int i = e / OW; int c = e - i * OW;",
           f"  if (c < KQ) {o}[ob + e] = i == c ? {T}(1) : {T}(0);",
           f"  else {{ int cc = c - KQ; {o}[ob + e] = (i <= cc && i < KQ) ? {W('cc * MR + i')} : {T}(0); }}",
           "}",
           _sync(),
           "for (int j = KR - 1; j >= 0; j--) {",
           f"  {T} tau = {tb}[j];",
           "  for (int c = j + l; c < KQ; c += LS) {",
           f"    {T} w = {Q('j', 'c')};",
           f"    for (int i = j + 1; i < MR; i++) w += {W('j * MR + i')} * {Q('i', 'c')};",
           "    w *= tau;",
           f"    {Q('j', 'c')} -= w;",
           f"    for (int i = j + 1; i < MR; i++) {Q('i', 'c')} -= w * {W('j * MR + i')};",
           "  }",
           f"  {_sync()}",
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


def _work_sizes(node) -> list[int]:
    """Elements of each work array of one matrix, in scratch order."""
    _, m, n = _dims(node)
    op = node.op.value
    if op == "Eigh":
        return [n * n]
    if op == "Svd":
        R, C = max(m, n), min(m, n)
        return [R * C, C * C]
    return [m * n]


SHARED_SPARE = 2048   # bytes of the device's shared memory left to the small arrays


def _placement(node, shared_bytes: int) -> list[bool]:
    """Which work arrays live in shared memory: greedily in order, while they fit."""
    isz = dt.itemsize(node.inputs[0].dtype)
    left, out = shared_bytes - SHARED_SPARE, []
    for k in _work_sizes(node):
        fits = k * isz <= left
        out.append(fits)
        left -= k * isz if fits else 0
    return out


def scratch_bytes(node, profile=None, **_) -> int:
    """Scratch for every work array of every matrix (used only where one does not fit the
    device's shared memory, which this plan cannot see).

    >>> from types import SimpleNamespace as NS
    >>> from vkml.trace.ops import OpKind
    >>> x = NS(shape=(16, 64, 64), dtype=np.float32)
    >>> scratch_bytes(NS(op=OpKind.Svd, inputs=[x]))
    524288
    """
    b, _, _ = _dims(node)
    isz = dt.itemsize(node.inputs[0].dtype)
    total = b * sum(_work_sizes(node)) * isz
    return -(-total // ALIGN) * ALIGN if total else 0


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
    L = LOCAL[ctx.profile.layout]
    place = _placement(node, ctx.dev.max_shared_memory)
    op = node.op.value
    if op == "Eigh":
        prog = eigh_program(T, n, L, place[0])
    elif op == "Svd":
        prog = svd_program(T, m, n, L, place[0], place[1])
    else:
        prog = qr_program(T, m, n, bool(node.attrs["complete"]), L, place[0])
    views = [out, x]
    if "scr" in [bd.name for bd in prog.bindings]:
        nb = scratch_bytes(node)
        views.append(ctx.scratch.sub(0, nb, (nb // dt.itemsize(x.dtype),), x.dtype))
    ctx.dispatch(ctx.kernel(prog), {}, views, groups=b)
