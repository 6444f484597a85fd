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


PRIVATE_GROUP = 64       # invocations per workgroup where each invocation holds one matrix


def _frame(p: Program, store: str, H: int, T: str, LS: int) -> tuple[int, str]:
    """main()'s start: which matrix this invocation or workgroup works on (`mat`) and its
    index within the workgroup (`l`); the loops' stride and the barrier for `store`."""
    # the sizes are read before any invocation returns: lavapipe reads a uniform value
    # as one scalar only while every invocation is active, and a size it reads lane by
    # lane makes every index computed from it a gather
    p.main(f"int n = {p.m('n')};" + (f" int k = {p.m('k')};" if "k" in p.meta._at else ""),
           f"uint batch = uint({p.m('batch')});")
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
def chol_program(T: str, LS: int, H: int, store: str) -> Program:
    """Right-looking Cholesky of one matrix per workgroup (store "shared": in shared
    memory, "global": in the output itself) or per invocation ("private"): step j updates
    the trailing lower triangle by column j (scaled on the fly), then scales column j; a
    pivot <= 0 or nan makes the whole result nan. LS: elements of the working matrix.

    >>> chol_program("double", 1024, 32, "shared").local_size
    32
    """
    glob = store == "global"
    p = Program("Cholesky", local_size=PRIVATE_GROUP if store == "private" else H, alone=True)
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
    p.main("int base = mat * n * n;",
           f"for (int i = l; i < n; i += {H}) for (int j = 0; j <= i; ++j) {W('i', 'j')} = {x}[base + i * n + j];",
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


# --------------------------------------------------------------------------- triangular solve


@lru_cache(maxsize=256)
def trsm_program(T: str, lower: bool, trans: bool, unit: bool) -> Program:
    """One invocation per right-hand side column: substitution with op(A) (A or A^T),
    reading only A's `lower` (else upper) triangle.

    >>> trsm_program("float", True, False, True).meta.size
    3
    """
    p = Program("TriangularSolve", local_size=64, alone=True)
    p.meta = Meta(("n", 1), ("k", 1), ("total", 1))
    o = p.buffer("o", T)
    a = p.buffer("amat", T, readonly=True)
    b = p.buffer("bmat", T, readonly=True)
    A = (lambda i, j: f"{a}[ab + ({j}) * n + ({i})]") if trans else (lambda i, j: f"{a}[ab + ({i}) * n + ({j})]")  # noqa: E731
    X = lambda i: f"{o}[bb + ({i}) * k]"                            # noqa: E731
    div = "" if unit else f" / {A('i', 'i')}"
    p.main("uint g = gidx();",
           f"if (g >= uint({p.m('total')})) return;",
           f"int n = {p.m('n')}; int k = {p.m('k')};",
           "int mat = int(g) / k; int c = int(g) - mat * k;",
           "int ab = mat * n * n; int bb = mat * n * k + c;")
    if lower != trans:      # op(A) is lower triangular: forward substitution
        p.main("for (int i = 0; i < n; ++i) {",
               f"  {T} s = {b}[bb + i * k];",
               f"  for (int j = 0; j < i; ++j) s -= {A('i', 'j')} * {X('j')};",
               f"  {X('i')} = s{div};",
               "}")
    else:
        p.main("for (int i = n - 1; i >= 0; --i) {",
               f"  {T} s = {b}[bb + i * k];",
               f"  for (int j = i + 1; j < n; ++j) s -= {A('i', 'j')} * {X('j')};",
               f"  {X('i')} = s{div};",
               "}")
    return p


# --------------------------------------------------------------------------- Gaussian elimination


@lru_cache(maxsize=256)
def ge_program(T: str, mode: str, LS: int, H: int, store: str, NM: int = 0) -> Program:
    """Gaussian elimination of one matrix per workgroup. mode "solve": [A | B] with
    partial pivoting, then back substitution into o (the solution); "pivots": A with
    partial pivoting, writing the row interchanges; "lu": the rows A[perm] without
    pivoting, writing the packed factors. store "shared": one workgroup per matrix, the
    working matrix (LS elements) and its row maps (NM rows) in shared memory; "global":
    the matrix in the scratch `work`, its maps in `pm` (for "lu" in o itself);
    "private": one invocation per matrix, both in its own arrays.

    >>> ge_program("float", "lu", 1024, 32, "shared").meta.size
    3
    """
    name = {"solve": "Solve", "pivots": "LuPivots", "lu": "Lu"}[mode]
    glob = store == "global"
    p = Program(name, local_size=PRIVATE_GROUP if store == "private" else H, alone=True)
    p.meta = Meta(("n", 1), ("k", 1), ("batch", 1))
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
    if store == "private" and pivoting:
        p.main(f"int pm[{2 * NM}];")
    p.main("int w = n + k;",
           "int ab = mat * n * n; int wb = mat * n * w; int pb = mat * 2 * n;")
    if mode == "lu":
        p.main(f"for (int r = l; r < n; r += {H}) {{",
               f"  int src = ab + {perm}[mat * n + r] * n;",
               f"  for (int c = 0; c < n; ++c) {R('r', 'c')} = {a}[src + c];",
               "}",
               bar,
               "for (int j = 0; j < n; ++j) {",
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
    p.main(f"for (int r = l; r < n; r += {H}) {{",
           f"  for (int c = 0; c < n; ++c) {R('r', 'c')} = {a}[ab + r * n + c];",
           load_b,
           f"  {PM(0, 'r')} = r;",
           "}",
           bar,
           "for (int j = 0; j < n; ++j) {",
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
        X = lambda i: f"{o}[mat * n * k + ({i}) * k + c]"           # noqa: E731
        p.main("int fin = n & 1;",
               f"for (int c = l; c < k; c += {H}) {{",
               "  for (int i = n - 1; i >= 0; --i) {",
               f"    int r = {PM('fin', 'i')};",
               f"    {T} s = {R('r', 'n + c')};",
               f"    for (int q = i + 1; q < n; ++q) s -= {R('r', 'q')} * {X('q')};",
               f"    {X('i')} = s / {R('r', 'i')};",
               "  }",
               "}")
    return p


# --------------------------------------------------------------------------- pivots to permutation


@lru_cache(maxsize=8)
def perm_program() -> Program:
    """One invocation per matrix applies the interchanges to 0..n-1, in its output."""
    p = Program("LuPivotsToPermutation", local_size=64, alone=True)
    p.meta = Meta(("n", 1), ("batch", 1))
    o = p.buffer("o", "int")
    piv = p.buffer("piv", "int", readonly=True)
    p.main("uint g = gidx();",
           f"if (g >= uint({p.m('batch')})) return;",
           f"int n = {p.m('n')}; int base = int(g) * n;",
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
    (8565, 14603)
    """
    if op is OpKind.TriangularSolve:
        return n * n // 2 + n
    rows = -(-n // H)
    if op is OpKind.Cholesky:
        upd = n ** 3 // 6 if H == 1 else rows * n * n // 2
        return upd + 3 * rows * n + n
    w = n + k
    elim = n * n * w // 2 - n ** 3 // 6 if H == 1 else rows * (n * w - n * n // 2)
    scan = 0 if op is OpKind.Lu else n * n // 2
    return elim + scan + 2 * rows * w + -(-k // H) * n * n // 2 + n


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
    """Device memory for eliminations too large for shared memory: the working [A | B]
    and its two row maps per matrix (Lu works in its output).

    >>> from types import SimpleNamespace as NS
    >>> import numpy as np
    >>> x = NS(shape=(2, 100, 100), dtype=np.float32)
    >>> scratch_bytes(NS(op=OpKind.LuPivots, inputs=[x], shape=(2, 100))), \\
    ...     scratch_bytes(NS(op=OpKind.Cholesky, inputs=[x], shape=(2, 100, 100)))
    (81920, 0)
    """
    if node.op not in (OpKind.Solve, OpKind.LuPivots):
        return 0
    T, n, k, mode, LS, glob = _ge_plan(node)
    batch = _batch(node.inputs[0].shape, 2)
    if not glob or batch * n == 0:
        return 0
    fb = batch * n * (n + k) * dt.itemsize(node.inputs[0].dtype)
    return _round(fb, 256) + _round(batch * 2 * n * 4, 256)


def lower(node, ins, out, ctx) -> None:
    """Dispatch node's kernel over its whole batch.

    >>> import numpy as np, vkml.numpy as vnp
    >>> from vkml.array import bind
    >>> a = vnp.asarray([[4.0, 0.0], [2.0, 5.0]])
    >>> bind(OpKind.Cholesky, [a]).numpy().tolist()
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
    if op is OpKind.Cholesky:
        fits = shared_fits(n * n, dt.itemsize(x.dtype))
        store = _store(prof, op, n, 0, fits, dt.itemsize(x.dtype))
        H = workgroup(n)
        _check_limit(prof, op, n, 0, 1 if store == "private" else H)
        k = ctx.kernel(chol_program(T, 0 if store == "global" else _round(n * n), H, store))
        groups = -(-batch // PRIVATE_GROUP) if store == "private" else batch
        ctx.dispatch(k, {"n": n, "batch": batch}, [out, x], groups=groups)
        return
    if op is OpKind.TriangularSolve:
        kk = node.shape[-1]
        a = node.attrs
        _check_limit(prof, op, n, kk, 1)
        k = ctx.kernel(trsm_program(T, bool(a["lower"]), bool(a["trans"]), bool(a["unit"])))
        ctx.dispatch(k, {"n": n, "k": kk, "total": batch * kk}, [out, x, ins[1]], threads=batch * kk)
        return
    T, n, k, mode, LS, glob = _ge_plan(node)
    store = _store(prof, op, n, k, not glob, dt.itemsize(x.dtype))
    H = workgroup(n)
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
    groups = -(-batch // PRIVATE_GROUP) if store == "private" else batch
    ctx.dispatch(ctx.kernel(prog), {"n": n, "k": k, "batch": batch}, views, groups=groups)
