"""Linear algebra: Cholesky, TriangularSolve, Solve, LuPivots, LuPivotsToPermutation, Lu.

Every operand is a contiguous batch of matrices (..., n, n) (right-hand sides (..., n, k));
one dispatch covers the whole batch. The factorisations run one workgroup per matrix:

* the matrix (for Solve: the matrix beside its right-hand sides, [A | B]) lives in shared
  memory when it fits the 16 KiB every Vulkan device has (a 32x32 float32 system with 32
  right-hand sides takes 8 KiB), else in device memory (`coherent`, a scratch buffer or the
  output) with the same code;
* each step is one barrier: the invocations update rows of the trailing matrix in parallel
  (row i by invocation i mod H), reading only the pivot row and their own rows;
* Gaussian elimination pivots as LAPACK's getrf (the first row of largest magnitude):
  every invocation scans the pivot column itself (the same answer everywhere, so no
  reduction and no barrier), and rows are never moved: a row map, double-buffered in
  shared memory so that step j reads one copy while it writes the next, says which
  physical row holds each logical row.

Solve eliminates [A | B] and back-substitutes each right-hand side in one invocation, in
one kernel: no factor is written. TriangularSolve runs one invocation per right-hand side
column (forward or back substitution, reading A from device memory), which needs no
barriers at all. Every kernel here is `alone` (never merged into other dispatches): they
loop for long, which merging does not speed up.

>>> [b.name for b in ge_program("float", "solve", 1024, 32, "shared", 32).bindings]
['o', 'amat', 'bmat']
"""
from __future__ import annotations

from functools import lru_cache

from ...trace import dtypes as dt
from ...trace.ops import OpKind
from ..kernels import divisor
from ..program import Meta, Program

SHARED_BYTES = 16384      # the shared memory every Vulkan device offers (the spec's minimum)
H_MAX = 256               # invocations of one matrix's workgroup, at most
H_MIN = 8


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def workgroup(n: int) -> int:
    """Invocations per matrix: about one per row, between H_MIN and H_MAX.

    >>> workgroup(3), workgroup(32), workgroup(1000)
    (8, 32, 256)
    """
    return min(max(_pow2(n), H_MIN), H_MAX)


def nan(T: str) -> str:
    """A quiet NaN of GLSL type T (a bit pattern: a compiler may fold 0.0 / 0.0)."""
    return ("uintBitsToFloat(0x7fc00000u)" if T == "float"
            else "packDouble2x32(uvec2(0u, 0x7ff80000u))")


def _bar(glob: bool) -> str:
    return "memoryBarrierBuffer(); barrier();" if glob else "memoryBarrierShared(); barrier();"


def _round(n: int, m: int = 512) -> int:
    return max(m, -(-n // m) * m)


def shared_fits(elements: int, itemsize: int, ints: int = 0) -> bool:
    """Whether a working matrix of `elements` values (and `ints` int32 words) fits
    SHARED_BYTES."""
    return _round(elements) * itemsize + 4 * ints <= SHARED_BYTES


# --------------------------------------------------------------------------- Cholesky


PRIVATE_GROUP = 64       # invocations per workgroup where each invocation holds one matrix (GPUs)


def private_group(dev) -> int:
    """Invocations per workgroup of the kernels where each invocation holds one matrix:
    on a CPU device one SIMD group (lavapipe's subgroup, 8 or 16 lanes), since lavapipe
    runs a workgroup on one thread: a batch of 64 in one workgroup of 64 used one core,
    in four of 16 both; fewer lanes than a SIMD group would only idle the rest.

    >>> from types import SimpleNamespace as NS
    >>> private_group(NS(profile=NS(cpu=True), subgroup_size=16)), private_group(NS(profile=NS(cpu=False), subgroup_size=32))
    (16, 64)
    """
    if not dev.profile.cpu:
        return PRIVATE_GROUP
    return min(max(dev.subgroup_size, 8), PRIVATE_GROUP)


def _frame(p: Program, store: str, H: int, T: str, LS: int) -> tuple[int, str]:
    """main()'s start: which matrix this invocation or workgroup works on (`mat`) and its
    index within the workgroup (`l`); the loops' stride and the barrier for `store`."""
    # the sizes are read before any invocation returns: lavapipe reads a uniform value
    # as one scalar only while every invocation is active, and a size it reads lane by
    # lane makes every index computed from it a gather
    p.main(f"int n = {p.m('n')};" + (f" int k = {p.m('k')};" if "k" in p.meta._at else ""),
           f"uint batch = uint({p.m('batch')});")
    if "j0" in p.meta._at:
        p.main(f"int j0 = {p.m('j0')}; int j1 = {p.m('j1')}; int load = {p.m('load')}; "
               f"int r0 = {p.m('r0')}; int r1 = {p.m('r1')};")
    if store == "private":
        # one matrix per invocation, held in its own registers/stack: every lane of a
        # SIMD group runs the same loops at the same indices, so on a CPU device each
        # access is one vector load of 8 matrices' elements (no gathers, no barriers)
        p.main("uint g = gidx();",
               "if (g >= batch) return;",
               "int mat = int(g); int l = 0;",
               f"{T} sh[{LS}];")
        return 1, ""
    p.main("if (group_id() >= batch) return;   // a grid folded into y has spare groups",
           "int mat = int(group_id()); int l = int(lidx());")
    return H, _bar(store == "global")


@lru_cache(maxsize=256)
def chol_program(T: str, LS: int, H: int, store: str, sym: bool = False) -> Program:
    """Right-looking Cholesky of one matrix per workgroup (store "shared": in shared
    memory, "global": in the output itself) or per invocation ("private", in workgroups of
    H invocations, `private_group`): step j updates
    the trailing lower triangle by column j (scaled on the fly), then scales column j; a
    pivot <= 0 or nan makes the whole result nan. LS: elements of the working matrix.
    sym: factor (x + x^T) / 2, both triangles read as the matrix is loaded (no kernel of
    its own; `Cholesky`'s `symmetrize`).

    >>> chol_program("double", 1024, 32, "shared").local_size
    32
    """
    glob = store == "global"
    p = Program("Cholesky", local_size=H, alone=True)
    p.meta = Meta(("n", 1), ("batch", 1))
    o = p.buffer("o", ("coherent " if glob else "") + T)
    x = p.buffer("src", T, readonly=True)
    if glob:
        W = lambda i, j: f"{o}[base + ({i}) * n + ({j})]"          # noqa: E731
    else:
        if store == "shared":
            p.shared("sh", T, LS)
        W = lambda i, j: f"sh[({i}) * n + ({j})]"                   # noqa: E731
    H, bar = _frame(p, store, H, T, LS)
    ld = (f"{T}(0.5) * ({x}[base + i * n + j] + {x}[base + j * n + i])" if sym else f"{x}[base + i * n + j]")
    p.main("int base = mat * n * n;",
           f"for (int i = l; i < n; i += {H}) for (int j = 0; j <= i; ++j) {W('i', 'j')} = {ld};",
           bar,
           "bool bad = false;",
           "for (int j = 0; j < n; ++j) {",
           f"  {T} d = {W('j', 'j')};",
           f"  bad = bad || !(d > {T}(0));",
           f"  {T} sq = sqrt(d); {T} r = {T}(1) / sq;",
           f"  for (int i = j + 1 + l; i < n; i += {H}) {{",
           f"    {T} lij = {W('i', 'j')} * r;",
           f"    for (int k = j + 1; k <= i; ++k) {W('i', 'k')} -= lij * ({W('k', 'j')} * r);",
           "  }",
           f"  {bar}",
           "  // column j is read by no one after this step: scale it while step j + 1 runs",
           f"  for (int i = j + 1 + l; i < n; i += {H}) {W('i', 'j')} *= r;",
           f"  if (l == 0) {W('j', 'j')} = sq;",
           "}",
           bar,
           f"for (int i = l; i < n; i += {H}) for (int j = 0; j < n; ++j)",
           f"  {o}[base + i * n + j] = bad ? {nan(T)} : (j <= i ? {W('i', 'j')} : {T}(0));")
    return p


# --------------------------------------------------------------------------- blocked Cholesky

NB = 32                   # the panel width of the blocked Cholesky (float64: NB_DOUBLE)
# the diagonal block lives in an invocation's private arrays; NVIDIA's driver failed to build
# the float64 kernel with two 32x32 blocks (16 KiB), so float64 panels are half as wide
NB_DOUBLE = 16


def _nb(isz: int) -> int:
    return NB_DOUBLE if isz == 8 else NB
BLOCKED_MIN = 64          # matrices larger than this are factored blocked


@lru_cache(maxsize=16)
def chol_start_program(T: str, sym: bool = False) -> Program:
    """o = the input (the blocked factorisation works in o; sym: (x + x^T) / 2 of each
    matrix, meta of `_divs(batch, n, n)`), and the failure flags zeroed."""
    p = Program("Cholesky_start", alone=True)
    p.meta = Meta(("total", 1), ("batch", 1), *((("ext", 2), ("div", 4)) if sym else ()))
    o = p.buffer("o", T)
    fl = p.buffer("flags", "int")
    x = p.buffer("src", T, readonly=True)
    p.main("uint e = gidx();",
           f"uint batch = uint({p.m('batch')}); uint total = uint({p.m('total')});",
           f"if (e < batch) {fl}[e] = 0;")
    if not sym:
        p.main(f"if (e < total) {o}[e] = {x}[e];")
        return p
    p.main("if (e >= total) return;",
           *_split(p, "e", ("mat", "i", "j"), "div"),
           f"uint n = uint({p.m('ext', 1)});",
           f"{o}[e] = {T}(0.5) * ({x}[e] + {x}[mat * n * n + j * n + i]);")
    return p


def _split(p: Program, e: str, names: tuple, field: str) -> list[str]:
    """GLSL splitting flat index e into coordinates over the extents whose divisors
    (`kernels.divisor`, two meta ints each) meta field `field` holds: x / d as a
    multiply-high (integer division is a loop over the lanes on lavapipe)."""
    out = [f"uint rem_ = {e};"]
    for q, nm in enumerate(names[:-1]):
        out.append(f"uint {nm} = udiv(rem_, {p.m(field, 2 * q)}, {p.m(field, 2 * q + 1)}); "
                   f"rem_ -= {nm} * uint({p.m('ext', q)});")
    out.append(f"uint {names[-1]} = rem_;")
    return out


def _divs(*extents: int) -> dict:
    """Meta of `_split`: the products of the trailing extents and their divisors."""
    ext = []
    for q in range(len(extents) - 1):
        d = 1
        for x in extents[q + 1:]:
            d *= x
        ext.append(max(d, 1))
    return {"ext": ext, "div": [v for d in ext for v in divisor(d)]}


@lru_cache(maxsize=16)
def chol_diag_program(T: str, G: int = PRIVATE_GROUP) -> Program:
    """One invocation per matrix factors the diagonal block at (k, k) of width b <= NB in
    its own arrays (a pivot <= 0 or nan sets the matrix's flag), writes it back, and
    writes the block's inverse (lower triangular, zeros above) to `inv` for the panel's
    MatMul: L21 = A21 L11^-T. (b <= NB_DOUBLE for float64.) G: invocations a workgroup
    (`private_group`)."""
    p = Program("Cholesky_diag", local_size=G, alone=True)
    p.meta = Meta(("n", 1), ("k", 1), ("b", 1), ("batch", 1))
    o = p.buffer("o", T)
    fl = p.buffer("flags", "int")
    iv = p.buffer("inv", T)
    N = _nb(8 if T == "double" else 4)
    p.main(f"int n = {p.m('n')}; int k = {p.m('k')}; int b = {p.m('b')}; uint batch = uint({p.m('batch')});",
           "uint g = gidx();",
           "if (g >= batch) return;",
           "int mat = int(g); int base = mat * n * n + k * n + k;",
           f"{T} sh[{N * N}]; {T} x[{N * N}];",
           f"for (int i = 0; i < b; ++i) for (int j = 0; j <= i; ++j) sh[i * {N} + j] = {o}[base + i * n + j];",
           "bool bad = false;",
           "for (int j = 0; j < b; ++j) {",
           f"  {T} d = sh[j * {N} + j];",
           f"  bad = bad || !(d > {T}(0));",
           f"  {T} sq = sqrt(d); {T} r = {T}(1) / sq;",
           "  for (int i = j + 1; i < b; ++i) {",
           f"    {T} lij = sh[i * {N} + j] * r;",
           f"    for (int q = j + 1; q <= i; ++q) sh[i * {N} + q] -= lij * (sh[q * {N} + j] * r);",
           "  }",
           f"  for (int i = j + 1; i < b; ++i) sh[i * {N} + j] *= r;",
           f"  sh[j * {N} + j] = sq;",
           "}",
           f"if (bad) {fl}[mat] = 1;",
           f"for (int i = 0; i < b; ++i) for (int j = 0; j <= i; ++j) {o}[base + i * n + j] = sh[i * {N} + j];",
           "// X = L^-1, column by column (forward substitution against the identity)",
           "for (int c = 0; c < b; ++c) {",
           f"  for (int i = c; i < b; ++i) {{",
           f"    {T} s = i == c ? {T}(1) : {T}(0);",
           f"    for (int q = c; q < i; ++q) s -= sh[i * {N} + q] * x[q * {N} + c];",
           f"    x[i * {N} + c] = s / sh[i * {N} + i];",
           "  }",
           "}",
           f"for (int i = 0; i < b; ++i) for (int j = 0; j < b; ++j) {iv}[(mat * b + i) * b + j] = j <= i ? x[i * {N} + j] : {T}(0);")
    return p


@lru_cache(maxsize=32)
def chol_move_program(T: str, gather: bool) -> Program:
    """Copy the panel's block below the diagonal, o[k+b+r, k+t], to a contiguous
    (batch, m, b) buffer (gather) or back (scatter)."""
    p = Program("Cholesky_gather" if gather else "Cholesky_scatter", alone=True)
    p.meta = Meta(("n", 1), ("k", 1), ("b", 1), ("m", 1), ("total", 1), ("ext", 2), ("div", 4))
    o = p.buffer("o", T, readonly=not gather) if gather else p.buffer("o", T)
    c = p.buffer("cont", T) if gather else p.buffer("cont", T, readonly=True)
    if gather:
        p.bindings.reverse()     # the written buffer first (the dispatch's views follow)
    # every meta value is read before an invocation may return (see `_frame`)
    p.main("uint e = gidx();",
           f"int n = {p.m('n')}; int k = {p.m('k')}; int b = {p.m('b')}; int m = {p.m('m')}; "
           f"uint total = uint({p.m('total')});",
           *_split(p, "e", ("mat", "r", "t"), "div"),
           "if (e >= total) return;",
           "// rows past m pad the panel to a size the MatMul kernels share (zeros)",
           "uint at = mat * uint(n * n) + uint(k + b + int(r)) * uint(n) + uint(k) + t;",
           f"{c}[e] = int(r) < m ? {o}[at] : {T}(0);" if gather else f"if (int(r) < m) {o}[at] = {c}[e];")
    return p


@lru_cache(maxsize=16)
def chol_update_program(T: str) -> Program:
    """The trailing lower triangle minus the panel's product: o[off+i, off+j] -= P[i, j]."""
    p = Program("Cholesky_update", alone=True)
    p.meta = Meta(("n", 1), ("off", 1), ("m", 1), ("total", 1), ("ext", 2), ("div", 4))
    o = p.buffer("o", T)
    P = p.buffer("prod", T, readonly=True)
    p.main("uint e = gidx();",
           f"int n = {p.m('n')}; int off = {p.m('off')}; uint m = uint({p.m('m')}); uint total = uint({p.m('total')});",
           *_split(p, "e", ("mat", "i", "j"), "div"),
           "if (e >= total) return;",
           f"if (j <= i && i < m) {o}[mat * uint(n * n) + (uint(off) + i) * uint(n) + uint(off) + j] -= {P}[e];")
    return p


@lru_cache(maxsize=16)
def chol_final_program(T: str) -> Program:
    """Zeros above the diagonal, and a matrix of nan where a pivot failed."""
    p = Program("Cholesky_final", alone=True)
    p.meta = Meta(("total", 1), ("ext", 2), ("div", 4))
    o = p.buffer("o", T)
    fl = p.buffer("flags", "int", readonly=True)
    p.main("uint e = gidx();",
           f"uint total = uint({p.m('total')});",
           *_split(p, "e", ("mat", "i", "j"), "div"),
           "if (e >= total) return;",
           f"if ({fl}[mat] != 0) {o}[e] = {nan(T)}; else if (j > i) {o}[e] = {T}(0);")
    return p


PAD = 64      # the panel's rows are padded to a multiple of this: one MatMul kernel serves all


def _padded(m: int) -> int:
    return -(-m // PAD) * PAD


def _chol_scratch(batch: int, n: int, isz: int) -> tuple[int, int, int, int, int]:
    """Byte offsets of the panel copy A21, L21, the product P, the block inverse and the
    flags, and the total: (a21, l21, prod, inv, flags, total) without the first 0."""
    nb = _nb(isz)
    m = _padded(max(n - nb, 0))
    pan = _round(batch * m * nb * isz, 256)
    prod = _round(batch * m * m * isz, 256)
    inv = _round(batch * nb * nb * isz, 256)
    return pan, 2 * pan, 2 * pan + prod, 2 * pan + prod + inv, 2 * pan + prod + inv + _round(batch * 4, 256)


def _chol_blocked(x, out, ctx, T: str, n: int, batch: int, sym: bool = False) -> None:
    """Right-looking blocked Cholesky: per panel of NB columns, the diagonal block and its
    inverse (one invocation per matrix), L21 = A21 L11^-T and the trailing update
    A22 -= L21 L21^T as MatMuls (the MatMul kernels, batched), the rest elementwise."""
    from types import SimpleNamespace
    from .matmul import lower as matmul_lower
    isz = dt.itemsize(x.dtype)
    l21_at, p_at, inv_at, f_at, _ = _chol_scratch(batch, n, isz)
    sc = ctx.scratch
    flags = sc.sub(f_at, batch * 4, (batch,), dt.int32)
    total = batch * n * n
    ctx.dispatch(ctx.kernel(chol_start_program(T, sym)),
                 {"total": total, "batch": batch, **(_divs(batch, n, n) if sym else {})}, [out, flags, x],
                 threads=max(total, batch))
    G = private_group(ctx.dev)
    diag = ctx.kernel(chol_diag_program(T, G))
    gather, scatter = ctx.kernel(chol_move_program(T, True)), ctx.kernel(chol_move_program(T, False))
    upd = ctx.kernel(chol_update_program(T))
    nb = _nb(isz)
    for k in range(0, n, nb):
        b = min(nb, n - k)
        m = n - k - b
        inv = sc.sub(inv_at, batch * b * b * isz, (batch, b, b), x.dtype)
        ctx.dispatch(diag, {"n": n, "k": k, "b": b, "batch": batch}, [out, flags, inv],
                     groups=-(-batch // G))
        if m == 0:
            break
        mp = _padded(m)
        A21 = sc.sub(0, batch * mp * b * isz, (batch, mp, b), x.dtype)
        L21 = sc.sub(l21_at, batch * mp * b * isz, (batch, mp, b), x.dtype)
        mv = {"n": n, "k": k, "b": b, "m": m, "total": batch * mp * b, **_divs(batch, mp, b)}
        ctx.dispatch(gather, mv, [A21, out], threads=batch * mp * b)
        matmul_lower(SimpleNamespace(shape=(batch, mp, b), dtype=x.dtype), [A21, inv], L21, ctx,
                     transposed=(False, True))
        ctx.dispatch(scatter, mv, [out, L21], threads=batch * mp * b)
        P = sc.sub(p_at, batch * mp * mp * isz, (batch, mp, mp), x.dtype)
        matmul_lower(SimpleNamespace(shape=(batch, mp, mp), dtype=x.dtype), [L21, L21], P, ctx,
                     transposed=(False, True))
        ctx.dispatch(upd, {"n": n, "off": k + b, "m": m, "total": batch * mp * mp, **_divs(batch, mp, mp)},
                     [out, P], threads=batch * mp * mp)
    ctx.dispatch(ctx.kernel(chol_final_program(T)), {"total": total, **_divs(batch, n, n)}, [out, flags],
                 threads=total)


# --------------------------------------------------------------------------- triangular solve


@lru_cache(maxsize=256)
def trsm_program(T: str, lower: bool, trans: bool, unit: bool) -> Program:
    """One invocation per right-hand side column: substitution with op(A) (A or A^T),
    reading only A's `lower` (else upper) triangle, for the rows [r0, r1) of x (a large
    system is solved by several dispatches of row ranges, each within a driver's loop
    limit, the later ones reading the x the earlier ones wrote).

    >>> trsm_program("float", True, False, True).meta.size
    5
    """
    p = Program("TriangularSolve", local_size=64, alone=True)
    p.meta = Meta(("n", 1), ("k", 1), ("total", 1), ("r0", 1), ("r1", 1))
    o = p.buffer("o", T)
    a = p.buffer("amat", T, readonly=True)
    b = p.buffer("bmat", T, readonly=True)
    A = (lambda i, j: f"{a}[ab + ({j}) * n + ({i})]") if trans else (lambda i, j: f"{a}[ab + ({i}) * n + ({j})]")  # noqa: E731
    X = lambda i: f"{o}[bb + ({i}) * k]"                            # noqa: E731
    Bi = lambda i: f"{b}[bb + {i} * k]"                              # noqa: E731
    div = "" if unit else f" / {A('i', 'i')}"
    p.main("uint g = gidx();",
           f"int n = {p.m('n')}; int k = {p.m('k')}; uint total = uint({p.m('total')});",
           f"int r0 = {p.m('r0')}; int r1 = {p.m('r1')};",
           "if (g >= total) return;",
           "int mat = int(g) / k; int c = int(g) - mat * k;",
           "int ab = mat * n * n; int bb = mat * n * k + c;")
    if lower != trans:      # op(A) is lower triangular: forward substitution
        p.main("for (int i = r0; i < r1; ++i) {",
               f"  {T} s = {Bi('i')};",
               f"  for (int j = 0; j < i; ++j) s -= {A('i', 'j')} * {X('j')};",
               f"  {X('i')} = s{div};",
               "}")
    else:
        p.main("for (int i = r1 - 1; i >= r0; --i) {",
               f"  {T} s = {Bi('i')};",
               f"  for (int j = i + 1; j < n; ++j) s -= {A('i', 'j')} * {X('j')};",
               f"  {X('i')} = s{div};",
               "}")
    return p


def row_chunks(profile, n: int, forward: bool) -> list[tuple[int, int]]:
    """Row ranges of a substitution, one dispatch each, so that none passes the profile's
    loop limit (each row costs up to n iterations); a single range without one.

    >>> row_chunks(None, 4, True), len(row_chunks(type("P", (), {"loop_limit": 65535}), 512, False))
    ([(0, 4)], 6)
    """
    limit = getattr(profile, "loop_limit", 0) or 0
    R = n if not limit or n * n // 2 + n <= limit * 3 // 4 else max(1, (limit * 3 // 4) // max(n, 1))
    out = [(r, min(r + R, n)) for r in range(0, n, R)]
    return out if forward else out[::-1]


# --------------------------------------------------------------------------- Gaussian elimination


@lru_cache(maxsize=256)
def ge_program(T: str, mode: str, LS: int, H: int, store: str, NM: int = 0) -> Program:
    """Gaussian elimination of one matrix per workgroup. mode "solve": [A | B] with
    partial pivoting, then back substitution into o (the solution); "pivots": A with
    partial pivoting, writing the row interchanges; "lu": the rows A[perm] without
    pivoting, writing the packed factors. store "shared": one workgroup per matrix, the
    working matrix (LS elements) and its row maps (NM rows) in shared memory; "global":
    the matrix in the scratch `work`, its maps in `pm` (for "lu" in o itself);
    "private": one invocation per matrix, both in its own arrays, H invocations a
    workgroup (`private_group`).

    >>> ge_program("float", "lu", 1024, 32, "shared").meta.size
    8
    """
    name = {"solve": "Solve", "pivots": "LuPivots", "lu": "Lu"}[mode]
    glob = store == "global"
    p = Program(name, local_size=H, alone=True)
    # steps [j0, j1) of the elimination, after loading the matrix where `load`, then the
    # back substitution of rows [r0, r1): a large system in device memory is run as several
    # dispatches of these ranges, each within a driver's loop limit
    p.meta = Meta(("n", 1), ("k", 1), ("batch", 1), ("j0", 1), ("j1", 1), ("load", 1), ("r0", 1), ("r1", 1))
    co = "coherent " if glob else ""
    pivoting = mode != "lu"
    o = p.buffer("o", "int" if mode == "pivots" else (co if mode == "lu" else "") + T)
    a = p.buffer("amat", T, readonly=True)
    if mode == "solve":
        b = p.buffer("bmat", T, readonly=True)
    if mode == "lu":
        perm = p.buffer("perm", "int", readonly=True)
    if glob and mode == "lu":
        R = lambda r, c: f"{o}[wb + ({r}) * w + ({c})]"            # noqa: E731
    elif glob:
        wbuf = p.buffer("work", co + T)
        pmb = p.buffer("pm", "coherent int")
        R = lambda r, c: f"{wbuf}[wb + ({r}) * w + ({c})]"         # noqa: E731
        PM = lambda q, i: f"{pmb}[pb + ({q}) * n + ({i})]"         # noqa: E731
    else:
        if store == "shared":
            p.shared("sh", T, LS)
            if pivoting:
                p.shared("pm", "int", 2 * NM)
        R = lambda r, c: f"sh[({r}) * w + ({c})]"                  # noqa: E731
        PM = lambda q, i: f"pm[({q}) * n + ({i})]"                 # noqa: E731
    H, bar = _frame(p, store, H, T, LS)
    p.main("int w = n + k;",
           "int ab = mat * n * n; int wb = mat * n * w; int pb = mat * 2 * n;")
    if mode == "lu":
        p.main(f"if (load != 0) for (int r = l; r < n; r += {H}) {{",
               f"  int src = ab + {perm}[mat * n + r] * n;",
               f"  for (int c = 0; c < n; ++c) {R('r', 'c')} = {a}[src + c];",
               "}",
               bar,
               "for (int j = j0; j < j1; ++j) {",
               f"  {T} piv = {R('j', 'j')};",
               f"  for (int i = j + 1 + l; i < n; i += {H}) {{",
               f"    {T} f = {R('i', 'j')} / piv;",
               f"    {R('i', 'j')} = f;",
               f"    for (int c = j + 1; c < n; ++c) {R('i', 'c')} -= f * {R('j', 'c')};",
               "  }",
               f"  {bar}",
               "}")
        if not glob:
            p.main(bar, f"for (int r = l; r < n; r += {H}) for (int c = 0; c < n; ++c) {o}[ab + r * n + c] = {R('r', 'c')};")
        return p
    load_b = (f"  for (int c = 0; c < k; ++c) {R('r', 'n + c')} = {b}[mat * n * k + r * k + c];"
              if mode == "solve" else "")
    if store == "private":
        _ge_private(p, mode, T, R, o, a, load_b)
        return p
    p.main(f"if (load != 0) for (int r = l; r < n; r += {H}) {{",
           f"  for (int c = 0; c < n; ++c) {R('r', 'c')} = {a}[ab + r * n + c];",
           load_b,
           f"  {PM(0, 'r')} = r;",
           "}",
           bar,
           "for (int j = j0; j < j1; ++j) {",
           "  int cur = j & 1;",
           "  // every invocation finds the same pivot: the first largest |value| (LAPACK's)",
           f"  int p = j; {T} best = abs({R(PM('cur', 'j'), 'j')});",
           f"  for (int i = j + 1; i < n; ++i) {{ {T} v = abs({R(PM('cur', 'i'), 'j')}); if (v > best) {{ best = v; p = i; }} }}",
           f"  int pr = {PM('cur', 'p')}; int jr = {PM('cur', 'j')};",
           f"  for (int i = l; i < n; i += {H}) {PM('1 - cur', 'i')} = i == j ? pr : (i == p ? jr : {PM('cur', 'i')});",
           *([f"  if (l == 0) {o}[mat * n + j] = p;"] if mode == "pivots" else []),
           f"  {T} piv = {R('pr', 'j')};",
           "  // column j is not written (its multipliers are not kept): the scan above reads it",
           f"  for (int i = j + 1 + l; i < n; i += {H}) {{",
           f"    int r = i == p ? jr : {PM('cur', 'i')};",
           f"    {T} f = {R('r', 'j')} / piv;",
           f"    for (int c = j + 1; c < w; ++c) {R('r', 'c')} -= f * {R('pr', 'c')};",
           "  }",
           f"  {bar}",
           "}")
    if mode == "solve":
        # x_i replaces b_i in the working matrix (column n + c of row r_i), and the
        # substitution reads x from there: an access to the output buffer at a per-matrix
        # offset is a load per lane on a CPU device, the working matrix's often is not
        X = lambda i: R(PM('fin', i), 'n + c')                      # noqa: E731
        p.main("int fin = n & 1;",
               f"for (int c = l; c < k; c += {H}) {{",
               "  for (int i = r1 - 1; i >= r0; --i) {",
               f"    int r = {PM('fin', 'i')};",
               f"    {T} s = {R('r', 'n + c')};",
               f"    for (int q = i + 1; q < n; ++q) s -= {R('r', 'q')} * {X('q')};",
               f"    s /= {R('r', 'i')};",
               f"    {R('r', 'n + c')} = s; {o}[mat * n * k + i * k + c] = s;",
               "  }",
               "}")
    return p


def _ge_private(p: Program, mode: str, T: str, R, o: str, a: str, load_b: str) -> None:
    """The pivoted elimination ("solve", "pivots") of one matrix per invocation, rows
    swapped in place. A row map (the shared-memory kernels' way of not moving rows) makes
    every access to the working matrix an index that differs between the matrices of a
    SIMD group, one scalar load per lane on a CPU device; with the rows swapped, only the
    swap itself is indexed per matrix and the elimination's and the substitution's loops
    read and write at the same index in every lane (vector accesses)."""
    p.main("for (int r = 0; r < n; ++r) {",
           f"  for (int c = 0; c < n; ++c) {R('r', 'c')} = {a}[ab + r * n + c];",
           load_b,
           "}",
           "for (int j = 0; j < n; ++j) {",
           "  // the first largest |value| (LAPACK's pivot)",
           f"  int p = j; {T} best = abs({R('j', 'j')});",
           f"  for (int i = j + 1; i < n; ++i) {{ {T} v = abs({R('i', 'j')}); if (v > best) {{ best = v; p = i; }} }}",
           *([f"  {o}[mat * n + j] = p;"] if mode == "pivots" else []),
           "  // columns left of j are never read again",
           f"  for (int c = j; c < w; ++c) {{ {T} t = {R('j', 'c')}; {R('j', 'c')} = {R('p', 'c')}; {R('p', 'c')} = t; }}",
           f"  {T} piv = {R('j', 'j')};",
           "  for (int i = j + 1; i < n; ++i) {",
           f"    {T} f = {R('i', 'j')} / piv;",
           f"    for (int c = j + 1; c < w; ++c) {R('i', 'c')} -= f * {R('j', 'c')};",
           "  }",
           "}")
    if mode == "solve":
        p.main("for (int c = 0; c < k; ++c) {",
               "  for (int i = n - 1; i >= 0; --i) {",
               f"    {T} s = {R('i', 'n + c')};",
               f"    for (int q = i + 1; q < n; ++q) s -= {R('i', 'q')} * {R('q', 'n + c')};",
               f"    s /= {R('i', 'i')};",
               f"    {R('i', 'n + c')} = s; {o}[mat * n * k + i * k + c] = s;",
               "  }",
               "}")


# --------------------------------------------------------------------------- stepwise elimination

STEP_MIN = 128     # eliminations of larger matrices in device memory run one step per dispatch


@lru_cache(maxsize=16)
def ge_pivot_program(T: str, pivots: bool, H: int) -> Program:
    """Step j's pivot, one workgroup per matrix: the first largest |value| of column j
    among the logical rows j.. (a shared-memory reduction), the next row map, and for
    LuPivots the interchange itself."""
    p = Program("LuPivots_step" if pivots else "Solve_pivot", local_size=H, alone=True)
    p.meta = Meta(("n", 1), ("w", 1), ("j", 1), ("batch", 1))
    if pivots:
        o = p.buffer("o", "int")
    W = p.buffer("work", T, readonly=True)
    pm = p.buffer("pm", "int")
    sv, si = p.shared("sv", T, H), p.shared("si", "int", H)
    bar = "memoryBarrierShared(); barrier();"
    R = lambda r, c: f"{W}[wb + ({r}) * w + ({c})]"                # noqa: E731
    PM = lambda q, i: f"{pm}[pb + ({q}) * n + ({i})]"              # noqa: E731
    p.main(f"int n = {p.m('n')}; int w = {p.m('w')}; int j = {p.m('j')}; uint batch = uint({p.m('batch')});",
           "if (group_id() >= batch) return;",
           "int mat = int(group_id()); int l = int(lidx()); int wb = mat * n * w; int pb = mat * 2 * n;",
           "int cur = j & 1;",
           f"{T} best = {T}(-1); int bi = n;",
           f"for (int i = j + l; i < n; i += {H}) {{ {T} v = abs({R(PM('cur', 'i'), 'j')}); if (v > best) {{ best = v; bi = i; }} }}",
           f"{sv}[l] = best; {si}[l] = bi;",
           bar,
           f"for (int s = {H // 2}; s > 0; s >>= 1) {{",
           f"  if (l < s) {{ {T} v = {sv}[l + s]; int i2 = {si}[l + s];",
           f"    if (v > {sv}[l] || (v == {sv}[l] && i2 < {si}[l])) {{ {sv}[l] = v; {si}[l] = i2; }} }}",
           f"  {bar}",
           "}",
           f"int p = {si}[0]; if (p >= n) p = j;    // a column of nan: no interchange",
           f"int pr = {PM('cur', 'p')}; int jr = {PM('cur', 'j')};",
           f"for (int i = l; i < n; i += {H}) {PM('1 - cur', 'i')} = i == j ? pr : (i == p ? jr : {PM('cur', 'i')});",
           *([f"if (l == 0) {o}[mat * n + j] = p;"] if pivots else []))
    return p


@lru_cache(maxsize=16)
def ge_elim_program(T: str, pivoting: bool) -> Program:
    """Step j's update of the trailing rows and columns, one invocation per element:
    row i -= (its column-j value / the pivot's) * the pivot row; column j is only read
    (Lu's multipliers are stored by `ge_scale_program` after the step)."""
    p = Program("Solve_step" if pivoting else "Lu_step", alone=True)
    p.meta = Meta(("n", 1), ("w", 1), ("j", 1), ("total", 1), ("ext", 2), ("div", 4))
    W = p.buffer("work", T)
    if pivoting:
        pm = p.buffer("pm", "int", readonly=True)
    p.main("uint e = gidx();",
           f"int n = {p.m('n')}; int w = {p.m('w')}; int j = {p.m('j')}; uint total = uint({p.m('total')});",
           *_split(p, "e", ("mat", "ii", "cc"), "div"),
           "if (e >= total) return;",
           "int i = j + 1 + int(ii); int c = j + 1 + int(cc); int wb = int(mat) * n * w;")
    if pivoting:
        p.main("int nxt = 1 - (j & 1); int pb = int(mat) * 2 * n;",
               f"int r = {pm}[pb + nxt * n + i]; int pr = {pm}[pb + nxt * n + j];")
    else:
        p.main("int r = i; int pr = j;")
    p.main(f"{W}[wb + r * w + c] -= {W}[wb + r * w + j] / {W}[wb + pr * w + j] * {W}[wb + pr * w + c];")
    return p


@lru_cache(maxsize=16)
def ge_scale_program(T: str) -> Program:
    """Lu's multipliers of step j: column j below the diagonal over the pivot."""
    p = Program("Lu_scale", alone=True)
    p.meta = Meta(("n", 1), ("j", 1), ("total", 1), ("ext", 1), ("div", 2))
    W = p.buffer("o", T)
    p.main("uint e = gidx();",
           f"int n = {p.m('n')}; int j = {p.m('j')}; uint total = uint({p.m('total')});",
           *_split(p, "e", ("mat", "ii"), "div"),
           "if (e >= total) return;",
           "int base = int(mat) * n * n; int i = j + 1 + int(ii);",
           f"{W}[base + i * n + j] /= {W}[base + j * n + j];")
    return p


def _ge_stepwise(ctx, mode: str, T: str, n: int, k: int, batch: int, views, load) -> None:
    """A large elimination in device memory, one step per dispatch pair: the pivot (one
    workgroup per matrix) and the trailing update (one invocation per element, every core
    busy), then (Solve) the back substitution in row ranges."""
    w = n + k
    H = 256
    work = views[0] if mode == "lu" else views[-2]
    pm = None if mode == "lu" else views[-1]
    ctx.dispatch(load, {"n": n, "k": k, "batch": batch, "j0": 0, "j1": 0, "load": 1, "r0": 0, "r1": 0},
                 views, groups=batch)
    if mode != "lu":
        piv = ctx.kernel(ge_pivot_program(T, mode == "pivots", H))
    elim = ctx.kernel(ge_elim_program(T, mode != "lu"))
    scale = ctx.kernel(ge_scale_program(T)) if mode == "lu" else None
    for j in range(n):
        if mode != "lu":
            ctx.dispatch(piv, {"n": n, "w": w, "j": j, "batch": batch},
                         ([views[0]] if mode == "pivots" else []) + [work, pm], groups=batch)
        rows, cols = n - j - 1, w - j - 1
        if rows and cols:
            tot = batch * rows * cols
            ctx.dispatch(elim, {"n": n, "w": w, "j": j, "total": tot, **_divs(batch, rows, cols)},
                         [work] + ([pm] if mode != "lu" else []), threads=tot)
        if mode == "lu" and rows:
            ctx.dispatch(scale, {"n": n, "j": j, "total": batch * rows, **_divs(batch, rows)}, [work],
                         threads=batch * rows)
    if mode == "solve":
        for rng in ge_chunks(ctx.profile, mode, n, k, H):
            if rng["r1"] > rng["r0"]:
                ctx.dispatch(load, {"n": n, "k": k, "batch": batch, **dict(rng, j0=n, j1=n, load=0)},
                             views, groups=batch)


# --------------------------------------------------------------------------- blocked solve

LU_NB = 32     # the panel width of the blocked elimination


@lru_cache(maxsize=16)
def lu_panel_program(T: str, H: int) -> Program:
    """One workgroup per matrix eliminates the panel's columns [k, k + b) of [A | B] with
    partial pivoting over every row below (a shared-memory reduction per column), keeping
    the multipliers in the panel (L21, L11) and updating the panel's columns only."""
    p = Program("Solve_panel", local_size=H, alone=True)
    p.meta = Meta(("n", 1), ("w", 1), ("k", 1), ("b", 1), ("batch", 1))
    W = p.buffer("work", "coherent " + T)
    pm = p.buffer("pm", "coherent int")
    sv, si = p.shared("sv", T, H), p.shared("si", "int", H)
    sbar = "memoryBarrierShared(); barrier();"
    bar = "memoryBarrier(); barrier();"
    R = lambda r, c: f"{W}[wb + ({r}) * w + ({c})]"                # noqa: E731
    PM = lambda q, i: f"{pm}[pb + ({q}) * n + ({i})]"              # noqa: E731
    p.main(f"int n = {p.m('n')}; int w = {p.m('w')}; int k = {p.m('k')}; int b = {p.m('b')}; "
           f"uint batch = uint({p.m('batch')});",
           "if (group_id() >= batch) return;",
           "int mat = int(group_id()); int l = int(lidx()); int wb = mat * n * w; int pb = mat * 2 * n;",
           "for (int j = k; j < k + b; ++j) {",
           "  int cur = j & 1;",
           f"  {T} best = {T}(-1); int bi = n;",
           f"  for (int i = j + l; i < n; i += {H}) {{ {T} v = abs({R(PM('cur', 'i'), 'j')}); if (v > best) {{ best = v; bi = i; }} }}",
           f"  {sv}[l] = best; {si}[l] = bi;",
           f"  {sbar}",
           f"  for (int s = {H // 2}; s > 0; s >>= 1) {{",
           f"    if (l < s) {{ {T} v = {sv}[l + s]; int i2 = {si}[l + s];",
           f"      if (v > {sv}[l] || (v == {sv}[l] && i2 < {si}[l])) {{ {sv}[l] = v; {si}[l] = i2; }} }}",
           f"    {sbar}",
           "  }",
           f"  int p = {si}[0]; if (p >= n) p = j;",
           f"  int pr = {PM('cur', 'p')}; int jr = {PM('cur', 'j')};",
           f"  for (int i = l; i < n; i += {H}) {PM('1 - cur', 'i')} = i == j ? pr : (i == p ? jr : {PM('cur', 'i')});",
           f"  {bar}",
           f"  {T} piv = {R('pr', 'j')};",
           f"  for (int i = j + 1 + l; i < n; i += {H}) {{",
           f"    int r = {PM('1 - cur', 'i')};",
           f"    {T} f = {R('r', 'j')} / piv;",
           f"    {R('r', 'j')} = f;",
           f"    for (int c = j + 1; c < k + b; ++c) {R('r', 'c')} -= f * {R('pr', 'c')};",
           "  }",
           f"  {bar}",
           "}")
    return p


@lru_cache(maxsize=16)
def lu_rowblock_program(T: str) -> Program:
    """U12 = L11^-1 A12: one invocation per column right of the panel substitutes down the
    panel's b rows (unit lower L11 from the panel's multipliers), in place."""
    p = Program("Solve_rowblock", alone=True)
    p.meta = Meta(("n", 1), ("w", 1), ("k", 1), ("b", 1), ("total", 1))
    W = p.buffer("work", T)
    pm = p.buffer("pm", "int", readonly=True)
    p.main(f"int n = {p.m('n')}; int w = {p.m('w')}; int k = {p.m('k')}; int b = {p.m('b')}; "
           f"uint total = uint({p.m('total')});",
           "uint e = gidx();",
           "if (e >= total) return;",
           "int N = w - k - b; int mat = int(e) / N; int c = k + b + int(e) - mat * N;",
           "int wb = mat * n * w; int pb = mat * 2 * n; int fin = (k + b) & 1;",
           "for (int t = 1; t < b; ++t) {",
           f"  int rt = {pm}[pb + fin * n + k + t];",
           f"  {T} s = {W}[wb + rt * w + c];",
           f"  for (int q = 0; q < t; ++q) s -= {W}[wb + rt * w + k + q] * {W}[wb + {pm}[pb + fin * n + k + q] * w + c];",
           f"  {W}[wb + rt * w + c] = s;",
           "}")
    return p


@lru_cache(maxsize=32)
def lu_move_program(T: str, what: str) -> Program:
    """The blocks of one panel step between [A | B] (rows through the row map) and
    contiguous, padded buffers: "l21" (rows k+b.., the panel's columns) and "u12" (the
    panel's rows, columns k+b..) gathered with zeros past their extent, "update" the
    trailing block minus the MatMul's product."""
    p = Program({"l21": "Solve_gather_l", "u12": "Solve_gather_u", "update": "Solve_update"}[what], alone=True)
    p.meta = Meta(("n", 1), ("w", 1), ("k", 1), ("b", 1), ("rows", 1), ("cols", 1), ("total", 1),
                  ("ext", 2), ("div", 4))
    if what == "update":
        W = p.buffer("work", T)
        c_ = p.buffer("prod", T, readonly=True)
    else:
        c_ = p.buffer("cont", T)
        W = p.buffer("work", T, readonly=True)
    pm = p.buffer("pm", "int", readonly=True)
    p.main(f"int n = {p.m('n')}; int w = {p.m('w')}; int k = {p.m('k')}; int b = {p.m('b')}; "
           f"int rows = {p.m('rows')}; int cols = {p.m('cols')}; uint total = uint({p.m('total')});",
           "uint e = gidx();",
           *_split(p, "e", ("mat", "ri", "ci"), "div"),
           "if (e >= total) return;",
           "int wb = int(mat) * n * w; int pb = int(mat) * 2 * n; int fin = (k + b) & 1;",
           "bool inside = int(ri) < rows && int(ci) < cols;")
    if what == "l21":
        p.main(f"int r = inside ? {pm}[pb + fin * n + k + b + int(ri)] : 0;",
               f"{c_}[e] = inside ? {W}[wb + r * w + k + int(ci)] : {T}(0);")
    elif what == "u12":
        p.main(f"int r = inside ? {pm}[pb + fin * n + k + int(ri)] : 0;",
               f"{c_}[e] = inside ? {W}[wb + r * w + k + b + int(ci)] : {T}(0);")
    else:
        p.main("if (inside) {",
               f"  int r = {pm}[pb + fin * n + k + b + int(ri)];",
               f"  {W}[wb + r * w + k + b + int(ci)] -= {c_}[e];",
               "}")
    return p


def _lu_scratch(batch: int, n: int, k: int, isz: int) -> tuple[int, int, int, int]:
    """Offsets past the elimination's own scratch of the L21 copy, the U12 copy, the
    product, and the total."""
    mp = _padded(max(n - LU_NB, 0))
    np_ = _padded(max(n + k - LU_NB, 0))
    l21 = _round(batch * mp * LU_NB * isz, 256)
    u12 = _round(batch * LU_NB * np_ * isz, 256)
    prod = _round(batch * mp * np_ * isz, 256)
    return 0, l21, l21 + u12, l21 + u12 + prod


def _solve_blocked(ctx, T: str, n: int, k: int, batch: int, views, load, base: int) -> None:
    """Right-looking blocked elimination of [A | B] with partial pivoting: per panel of
    LU_NB columns the panel (one workgroup per matrix), U12 = L11^-1 A12, and the trailing
    update A22 -= L21 U12 as a batched MatMul; then the back substitution."""
    from types import SimpleNamespace
    from .matmul import lower as matmul_lower
    w = n + k
    H = 256
    work, pm = views[-2], views[-1]
    isz = dt.itemsize(work.dtype)
    _, u_at, p_at, _ = _lu_scratch(batch, n, k, isz)
    sc = ctx.scratch
    ctx.dispatch(load, {"n": n, "k": k, "batch": batch, "j0": 0, "j1": 0, "load": 1, "r0": 0, "r1": 0},
                 views, groups=batch)
    panel = ctx.kernel(lu_panel_program(T, H))
    rowblock = ctx.kernel(lu_rowblock_program(T))
    gl, gu, upd = (ctx.kernel(lu_move_program(T, x)) for x in ("l21", "u12", "update"))
    for kk in range(0, n, LU_NB):
        b = min(LU_NB, n - kk)
        m, N = n - kk - b, w - kk - b
        mv = {"n": n, "w": w, "k": kk, "b": b}
        ctx.dispatch(panel, {**mv, "batch": batch}, [work, pm], groups=batch)
        if N == 0:
            break
        ctx.dispatch(rowblock, {**mv, "total": batch * N}, [work, pm], threads=batch * N)
        if m == 0:
            continue
        mp, Np = _padded(m), _padded(N)
        L21 = sc.sub(base, batch * mp * b * isz, (batch, mp, b), work.dtype)
        U12 = sc.sub(base + u_at, batch * b * Np * isz, (batch, b, Np), work.dtype)
        P = sc.sub(base + p_at, batch * mp * Np * isz, (batch, mp, Np), work.dtype)
        ctx.dispatch(gl, {**mv, "rows": m, "cols": b, "total": batch * mp * b, **_divs(batch, mp, b)},
                     [L21, work, pm], threads=batch * mp * b)
        ctx.dispatch(gu, {**mv, "rows": b, "cols": N, "total": batch * b * Np, **_divs(batch, b, Np)},
                     [U12, work, pm], threads=batch * b * Np)
        matmul_lower(SimpleNamespace(shape=(batch, mp, Np), dtype=work.dtype), [L21, U12], P, ctx)
        ctx.dispatch(upd, {**mv, "rows": m, "cols": N, "total": batch * mp * Np, **_divs(batch, mp, Np)},
                     [work, P, pm], threads=batch * mp * Np)
    for rng in ge_chunks(ctx.profile, "solve", n, k, H):
        if rng["r1"] > rng["r0"]:
            ctx.dispatch(load, {"n": n, "k": k, "batch": batch, **dict(rng, j0=n, j1=n, load=0)},
                         views, groups=batch)


# --------------------------------------------------------------------------- pivots to permutation


@lru_cache(maxsize=8)
def perm_program() -> Program:
    """One invocation per matrix applies the interchanges to 0..n-1, in its output."""
    p = Program("LuPivotsToPermutation", local_size=64, alone=True)
    p.meta = Meta(("n", 1), ("batch", 1))
    o = p.buffer("o", "int")
    piv = p.buffer("piv", "int", readonly=True)
    p.main("uint g = gidx();",
           f"int n = {p.m('n')}; uint batch = uint({p.m('batch')});",
           "if (g >= batch) return;",
           "int base = int(g) * n;",
           f"for (int i = 0; i < n; ++i) {o}[base + i] = i;",
           "for (int j = 0; j < n; ++j) {",
           f"  int q = clamp({piv}[base + j], 0, n - 1);",
           f"  int t = {o}[base + j]; {o}[base + j] = {o}[base + q]; {o}[base + q] = t;",
           "}")
    return p


# --------------------------------------------------------------------------- lowering


def _batch(shape, tail: int) -> int:
    n = 1
    for d in shape[:len(shape) - tail]:
        n *= d
    return n


def _ge_plan(node):
    """(T, n, k, mode, shared elements, global?) of a Gaussian-elimination node."""
    x = node.inputs[0]
    n = x.shape[-1]
    k = node.inputs[1].shape[-1] if node.op is OpKind.Solve else 0
    mode = {OpKind.Solve: "solve", OpKind.LuPivots: "pivots", OpKind.Lu: "lu"}[node.op]
    ints = 0 if mode == "lu" else 2 * _pow2(n)
    elems = n * (n + k)
    glob = not shared_fits(elems, dt.itemsize(x.dtype), ints)
    return dt.glsl_type(x.dtype), n, k, mode, _round(elems), glob


PRIVATE_MAX = 2304        # elements of a working matrix an invocation holds itself, at most


def iterations(op: OpKind, n: int, k: int, H: int) -> int:
    """About the loop iterations one invocation runs, every loop counted, with H
    invocations per matrix (1: one invocation per matrix). A driver that ends a kernel's
    loops after `Profile.loop_limit` iterations (lavapipe's limiter counts all loops of an
    invocation together) cannot run a kernel past it.

    >>> iterations(OpKind.Cholesky, 32, 0, 1), iterations(OpKind.Solve, 32, 1, 1)
    (8565, 14113)
    """
    if op is OpKind.TriangularSolve:
        return n * n // 2 + n
    if H == 1 and op in (OpKind.Solve, OpKind.LuPivots):
        return _private_iterations(n, k if op is OpKind.Solve else 0)
    rows = -(-n // H)
    if op is OpKind.Cholesky:
        upd = n ** 3 // 6 if H == 1 else rows * n * n // 2
        return upd + 3 * rows * n + n
    w = n + k
    elim = n * n * w // 2 - n ** 3 // 6 if H == 1 else rows * (n * w - n * n // 2)
    scan = 0 if op is OpKind.Lu else n * n // 2
    return elim + scan + 2 * rows * w + -(-k // H) * n * n // 2 + n


def _private_iterations(n: int, k: int) -> int:
    """The loop iterations of `_ge_private`'s kernel, exactly (its loops, head by head)."""
    w = n + k
    steps = sum(2 * (n - j - 1) + (w - j) + (n - j - 1) * (w - j - 1) for j in range(n))
    return n + n * w + n + steps + (k + k * n + k * n * (n - 1) // 2 if k else 0)


def _store(profile, op, n: int, k: int, fits: bool, itemsize: int) -> str:
    """Where a factorisation's working matrix lives: "private" (one invocation per matrix,
    CPU devices, small matrices), "shared" or "global"."""
    limit = getattr(profile, "loop_limit", 0) or 0
    if (getattr(profile, "layout", "gpu") == "cpu" and n * (n + k) <= PRIVATE_MAX
            and (not limit or iterations(op, n, k, 1) <= limit * 3 // 4)):
        return "private"
    return "shared" if fits else "global"


def _check_limit(profile, op, n: int, k: int, H: int) -> None:
    limit = getattr(profile, "loop_limit", 0) or 0
    if limit and iterations(op, n, k, H) > limit:
        raise NotImplementedError(
            f"{op.value}: a {n}x{n} matrix{f' with {k} right-hand sides' if k else ''} needs about "
            f"{iterations(op, n, k, H):,} loop iterations per invocation, more than this "
            f"driver's limit of {limit:,} (lavapipe ends longer kernels early); the blocked "
            f"algorithm for large matrices is not implemented yet")


def scratch_bytes(node, profile=None, **_) -> int:
    """Device memory for eliminations too large for shared memory (the working [A | B]
    and its two row maps per matrix; Lu works in its output) and for the blocked
    Cholesky (`_chol_scratch`).

    >>> from types import SimpleNamespace as NS
    >>> import numpy as np
    >>> x = NS(shape=(2, 100, 100), dtype=np.float32)
    >>> scratch_bytes(NS(op=OpKind.LuPivots, inputs=[x], shape=(2, 100))), \\
    ...     scratch_bytes(NS(op=OpKind.Cholesky, inputs=[x], shape=(2, 100, 100), dtype=x.dtype))
    (81920, 205056)
    """
    if node.op is OpKind.Cholesky:
        n = node.shape[-1]
        batch = _batch(node.shape, 2)
        return _chol_scratch(batch, n, dt.itemsize(node.dtype))[-1] if n > BLOCKED_MIN and batch else 0
    if node.op not in (OpKind.Solve, OpKind.LuPivots):
        return 0
    T, n, k, mode, LS, glob = _ge_plan(node)
    batch = _batch(node.inputs[0].shape, 2)
    if not glob or batch * n == 0:
        return 0
    isz = dt.itemsize(node.inputs[0].dtype)
    own = _ge_scratch(batch, n, k, isz)
    return own + (_lu_scratch(batch, n, k, isz)[-1] if mode == "solve" and n > STEP_MIN else 0)


def _ge_scratch(batch: int, n: int, k: int, isz: int) -> int:
    """Bytes of an elimination's working [A | B] and row maps in device memory."""
    return _round(batch * n * (n + k) * isz, 256) + _round(batch * 2 * n * 4, 256)


def lower(node, ins, out, ctx) -> None:
    """Dispatch node's kernel over its whole batch.

    >>> import numpy as np, vkml.numpy as vnp
    >>> from vkml.array import bind
    >>> a = vnp.asarray([[4.0, 0.0], [2.0, 5.0]])
    >>> bind(OpKind.Cholesky, [a], symmetrize=False).numpy().tolist()
    [[2.0, 0.0], [1.0, 2.0]]
    """
    op = node.op
    if out.size == 0:
        return
    if op is OpKind.LuPivotsToPermutation:
        n = node.shape[-1]
        batch = _batch(node.shape, 1)
        ctx.dispatch(ctx.kernel(perm_program()), {"n": n, "batch": batch}, [out, ins[0]], threads=batch)
        return
    x = ins[0]
    T = dt.glsl_type(x.dtype)
    n = x.shape[-1]
    batch = _batch(x.shape, 2)
    prof = ctx.profile
    sym = op is OpKind.Cholesky and bool(node.attrs["symmetrize"])
    if op is OpKind.Cholesky and n > BLOCKED_MIN:
        _chol_blocked(x, out, ctx, T, n, batch, sym)
        return
    if op is OpKind.Cholesky:
        fits = shared_fits(n * n, dt.itemsize(x.dtype))
        store = _store(prof, op, n, 0, fits, dt.itemsize(x.dtype))
        H = private_group(ctx.dev) if store == "private" else workgroup(n)
        _check_limit(prof, op, n, 0, 1 if store == "private" else H)
        k = ctx.kernel(chol_program(T, 0 if store == "global" else _round(n * n), H, store, sym))
        groups = -(-batch // H) if store == "private" else batch
        ctx.dispatch(k, {"n": n, "batch": batch}, [out, x], groups=groups)
        return
    if op is OpKind.TriangularSolve:
        kk = node.shape[-1]
        a = node.attrs
        k = ctx.kernel(trsm_program(T, bool(a["lower"]), bool(a["trans"]), bool(a["unit"])))
        for r0, r1 in row_chunks(prof, n, bool(a["lower"]) != bool(a["trans"])):
            ctx.dispatch(k, {"n": n, "k": kk, "total": batch * kk, "r0": r0, "r1": r1}, [out, x, ins[1]],
                         threads=batch * kk)
        return
    T, n, k, mode, LS, glob = _ge_plan(node)
    store = _store(prof, op, n, k, not glob, dt.itemsize(x.dtype))
    # a matrix too large for shared memory may still be held by its own invocation
    glob = store == "global"
    H = private_group(ctx.dev) if store == "private" else workgroup(n)
    if not glob:
        _check_limit(prof, op, n, k, 1 if store == "private" else H)
    views = [out, *ins]
    if glob and mode != "lu":
        isz = dt.itemsize(x.dtype)
        fb = _round(batch * n * (n + k) * isz, 256)
        sc = ctx.scratch
        views += [sc.sub(0, batch * n * (n + k) * isz, (batch * n * (n + k),), x.dtype),
                  sc.sub(fb, batch * 2 * n * 4, (batch * 2 * n,), dt.int32)]
    prog = ge_program(T, mode, 0 if glob else (_round(n * (n + k), 64) if store == "private" else LS), H,
                      store, 0 if glob else _pow2(n))
    groups = -(-batch // H) if store == "private" else batch
    kern = ctx.kernel(prog)
    if glob and n > STEP_MIN and mode == "solve":
        _solve_blocked(ctx, T, n, k, batch, views, kern, _ge_scratch(batch, n, k, dt.itemsize(x.dtype)))
        return
    if glob and n > STEP_MIN:
        _ge_stepwise(ctx, mode, T, n, k, batch, views, kern)
        return
    for rng in ge_chunks(prof, mode, n, k, H) if glob else [dict(j0=0, j1=n, load=1, r0=0, r1=n)]:
        ctx.dispatch(kern, {"n": n, "k": k, "batch": batch, **rng}, views, groups=groups)


def ge_chunks(profile, mode: str, n: int, k: int, H: int) -> list[dict]:
    """The dispatches of an elimination in device memory: ranges of steps, then (solve)
    ranges of back-substitution rows, each within the profile's loop limit (one dispatch
    without one).

    >>> len(ge_chunks(None, "solve", 512, 1, 256)), len(ge_chunks(type("P", (), {"loop_limit": 65535}), "solve", 512, 1, 256)) > 2
    (1, True)
    """
    limit = getattr(profile, "loop_limit", 0) or 0
    if not limit:
        return [dict(j0=0, j1=n, load=1, r0=0, r1=n)]
    budget = limit * 3 // 4
    rows = -(-n // H)
    w = n + k
    per_step = n + rows * w + rows + 2
    J = max(1, (budget - 2 * rows * w) // per_step)
    out = [dict(j0=j, j1=min(j + J, n), load=int(j == 0), r0=0, r1=0) for j in range(0, n, J)]
    if mode == "solve" and k:
        Rr = max(1, budget // (n * -(-k // H) + 1))
        out += [dict(j0=n, j1=n, load=0, r0=max(r - Rr, 0), r1=r) for r in range(n, 0, -Rr)]
    return out
