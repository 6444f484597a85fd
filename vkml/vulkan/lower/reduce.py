"""Reductions: Sum Mean Max Min Prod ArgMax ArgMin over any set of axes.

The contiguous input is addressed as (kept index, reduced index): adjacent axes of the
same kind are merged and size-1 axes dropped, giving a few (extent, stride) pairs of
each kind, read from meta, so no transposing copy is ever made.

Two kernels, chosen per pass:
  row     the reduced index is innermost (stride 1): one workgroup per (output, split)
          reads consecutive elements, then a subgroup + shared-memory tree;
  thread  otherwise (or short reductions): one thread per (output, split) walks its
          elements serially, so neighbouring threads read neighbouring addresses.
When there are few outputs and many reduced elements, each output is split over many
workgroups/threads; the partials (and, for ArgMax/ArgMin, their indices) go to scratch
and the next pass reduces them, until one split remains. Per-thread runs are summed in
blocks of 32 before being combined, so float sums keep tree-like accuracy.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...trace import dtypes as dt
from ...trace.ops import OpKind
from ...trace.shapes import contiguous_strides
from ..kernels import binding
from .fill import fill_view

ROW_MIN = 64          # inner reductions at least this long get a workgroup per output
ITEMS = 16            # elements per thread a row split aims for
GROUP_TARGET = 2048   # workgroups worth splitting a reduction over
CHUNK = 64            # serial elements per thread a thread split aims for
THREAD_TARGET = 1 << 16
BLOCK = 32            # serial elements summed before joining the running total
ALIGN = 256           # byte alignment of scratch regions (any storage offset alignment)
_ARG = (OpKind.ArgMax, OpKind.ArgMin)


# --------------------------------------------------------------------------- planning

def split_dims(shape, axes) -> tuple[list, list]:
    """(kept, reduced) lists of (extent, stride), outer to inner, for a contiguous shape.

    Adjacent axes of one kind merge (C order inside each kind is kept, so a flat index
    over the reduced axes is unchanged) and size-1 axes vanish.

    >>> split_dims((2, 3, 4, 5), (1, 2))
    ([(2, 60), (5, 1)], [(12, 5)])
    """
    kept, red = [], []
    last = None
    for i, (n, st) in enumerate(zip(shape, contiguous_strides(shape))):
        if n == 1:
            continue
        kind = i in axes
        lst = red if kind else kept
        if last == kind:
            lst[-1] = (lst[-1][0] * n, st)
        else:
            lst.append((n, st))
        last = kind
    return kept, red


def _prod(dims) -> int:
    p = 1
    for n, _ in dims:
        p *= n
    return p


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Pass:
    """One dispatch: n_out outputs, each over R elements split into S runs of C."""
    kind: str                 # "row" or "thread"
    kept: tuple
    red: tuple
    n_out: int
    R: int
    S: int
    C: int
    lx: int
    first: bool               # indices are r itself (else read from the previous pass)

    @property
    def final(self) -> bool:
        return self.S == 1


def _row_lx(R: int) -> int:
    return 256 if R >= 2048 else 128 if R >= 512 else 64


def plan(kept, red) -> list[Pass]:
    """The passes reducing (kept, red): each pass's partials feed the next."""
    passes = []
    first = True
    while True:
        kept = [d for d in kept if d[0] != 1]
        red = [d for d in red if d[0] != 1]
        n_out, R = _prod(kept), _prod(red)
        inner = bool(red) and red[-1][1] == 1
        if inner and R >= ROW_MIN:
            lx = _row_lx(R)
            S = min(_cdiv(R, lx * ITEMS), max(1, _cdiv(GROUP_TARGET, n_out)))
            C = _cdiv(_cdiv(R, S), lx) * lx
            S = _cdiv(R, C)
            passes.append(Pass("row", tuple(kept), tuple(red), n_out, R, S, C, lx, first))
            nxt_kept, nxt_red = [(n_out, S)], [(S, 1)]
        else:
            S = min(_cdiv(max(R, 1), CHUNK), max(1, THREAD_TARGET // n_out))
            C = _cdiv(max(R, 1), S)
            S = _cdiv(max(R, 1), C)
            passes.append(Pass("thread", tuple(kept), tuple(red), n_out, R, S, C, 256, first))
            nxt_kept, nxt_red = [(n_out, 1)], [(S, n_out)]
        if S == 1:
            return passes
        kept, red, first = nxt_kept, nxt_red, False


def _round(n: int) -> int:
    return _cdiv(max(n, 1), ALIGN) * ALIGN


def _regions(node) -> list[tuple[int, int]]:
    """Byte (offset, size) of each non-final pass's partial values and indices."""
    if node.size == 0:
        return []
    kept, red = split_dims(node.inputs[0].shape, node.attrs["axes"])
    if _prod(red) == 0:
        return []
    isz = dt.itemsize(node.inputs[0].dtype)
    out, off = [], 0
    for p in plan(kept, red)[:-1]:
        m = p.n_out * p.S
        vals = (off, m * isz)
        off += _round(m * isz)
        idx = (off, m * 4) if node.op in _ARG else (off, 0)
        off += _round(m * 4) if node.op in _ARG else 0
        out.append((vals, idx))
    return out


def scratch_bytes(node) -> int:
    """Scratch for the partials of split reductions (0 when one pass suffices)."""
    regs = _regions(node)
    if not regs:
        return 0
    (vo, vs), (io, is_) = regs[-1]
    return max(vo + _round(vs), io + _round(is_) if is_ else 0)


# --------------------------------------------------------------------------- GLSL

def _lit(T: str, what: str) -> str:
    """GLSL for a special value of type T: inf, -inf, nan, or an int bound."""
    if T == "float":
        return {"inf": "uintBitsToFloat(0x7f800000u)", "-inf": "uintBitsToFloat(0xff800000u)",
                "nan": "uintBitsToFloat(0x7fc00000u)"}[what]
    if T == "double":
        hi = {"inf": "0x7ff00000u", "-inf": "0xfff00000u", "nan": "0x7ff80000u"}[what]
        return f"packDouble2x32(uvec2(0u, {hi}))"
    return {"inf": "0x7fffffff", "-inf": "int(0x80000000u)"}[what]


def _identity(op: OpKind, dtype) -> str:
    T = dt.glsl_type(dtype)
    if op in (OpKind.Sum, OpKind.Mean):
        return f"{T}(0)"
    if op is OpKind.Prod:
        return f"{T}(1)"
    if np.dtype(dtype) == dt.bool_:
        return "0" if op is OpKind.Max else "1"
    up = op in (OpKind.Max, OpKind.ArgMax)
    return _lit(T, "-inf" if up else "inf")


def _functions(op: OpKind, dtype) -> str:
    """comb (and sg_red for non-arg ops): the reduction's binary step in GLSL."""
    T = dt.glsl_type(dtype)
    fl = dt.is_float(dtype)
    if op in _ARG:
        cmp = ">" if op is OpKind.ArgMax else "<"
        if fl:
            better = f"(vb {cmp} va || (isnan(vb) && !isnan(va)))"
            eq = "(vb == va || (isnan(vb) && isnan(va)))"
        else:
            better, eq = f"(vb {cmp} va)", "(vb == va)"
        return (f"void comb(inout {T} va, inout int ia, {T} vb, int ib) {{\n"
                f"  if ({better} || ({eq} && ib < ia)) {{ va = vb; ia = ib; }}\n}}\n")
    if op in (OpKind.Sum, OpKind.Mean):
        expr, sg = "a + b", "subgroupAdd(v)"
    elif op is OpKind.Prod:
        expr, sg = "a * b", "subgroupMul(v)"
    else:
        mx = op is OpKind.Max
        if fl:
            expr = f"((a {'>' if mx else '<'} b || isnan(a)) ? a : b)"
            # subgroupMax/Min need not propagate nan; count nans separately
            sg = (f"(subgroupMax(isnan(v) ? 1 : 0) != 0 ? {_lit(T, 'nan')} : "
                  f"subgroup{'Max' if mx else 'Min'}(v))")
        else:
            expr = f"{'max' if mx else 'min'}(a, b)"
            sg = f"subgroup{'Max' if mx else 'Min'}(v)"
    return (f"{T} comb({T} a, {T} b) {{ return {expr}; }}\n"
            f"{T} sg_red({T} v) {{ return {sg}; }}\n")


def _decompose(var: str, prefix: str, dims_base: int, rank: int) -> list[str]:
    """GLSL splitting int `var` into digits prefix0..prefix{rank-1} over meta extents.

    The top digit is not reduced modulo its extent (the quotient is kept whole)."""
    lines = [f"  int rem_{prefix} = {var};"]
    for j in range(rank - 1, 0, -1):
        lines.append(f"  int {prefix}{j} = rem_{prefix} % meta[{dims_base + j}]; "
                     f"rem_{prefix} /= meta[{dims_base + j}];")
    if rank:
        lines.append(f"  int {prefix}0 = rem_{prefix};")
    return lines


def _offset(prefix: str, strides_base: int, rank: int) -> str:
    return " + ".join([f"{prefix}{j} * meta[{strides_base + j}]" for j in range(rank)]) or "0"


def _advance(rank: int, dims_base: int) -> list[str]:
    """Add the step digits d* to the coordinates c* with carries (each digit < extent)."""
    if rank == 0:
        return []
    lines = ["      int cy = 0;"]
    for j in range(rank - 1, 0, -1):
        lines.append(f"      c{j} += d{j} + cy; cy = 0; "
                     f"if (c{j} >= meta[{dims_base + j}]) {{ c{j} -= meta[{dims_base + j}]; cy = 1; }}")
    lines.append("      c0 += d0 + cy;")
    return lines


@lru_cache(maxsize=None)
def source(op: OpKind, dtype_name: str, kind: str, K: int, Q: int, lx: int,
           first: bool, final: bool) -> str:
    """GLSL for one pass; meta = [n_out, R, S, C, count, kept extents, kept strides,
    reduced extents, reduced strides]."""
    dtype = np.dtype(dtype_name)
    T = dt.glsl_type(dtype)
    arg = op in _ARG
    KN, KS = 5, 5 + K
    QN, QS = 5 + 2 * K, 5 + 2 * K + Q
    # bindings: outputs first (values unless a final arg pass, then indices), inputs after
    b = []
    if arg:
        if not final:
            b.append(binding(len(b) + 1, T, "ov"))
        b.append(binding(len(b) + 1, "int", "oi"))
    else:
        b.append(binding(len(b) + 1, T, "ov"))
    b.append(binding(len(b) + 1, T, "x", readonly=True))
    if arg and not first:
        b.append(binding(len(b) + 1, "int", "xi", readonly=True))
    ident = _identity(op, dtype)
    L = ["".join(b), _functions(op, dtype)]
    row = kind == "row"
    if row:
        L.append(f"shared {T} sv[{lx}];\n")
        if arg:
            L.append(f"shared int si[{lx}];\n")
    L.append("void main() {")
    L.append("  int n_out = meta[0]; int R = meta[1]; int S = meta[2]; int C = meta[3];")
    if row:
        L += ["  uint g = group_id();", "  if (g >= uint(n_out) * uint(S)) return;",
              "  int o = int(g) / S; int s = int(g) - o * S;",
              "  int t = int(gl_LocalInvocationID.x);",
              f"  int r = s * C + t; int step = {lx};"]
    else:
        L += ["  uint g = gidx();", "  if (g >= uint(n_out) * uint(S)) return;",
              "  int s = int(g) / n_out; int o = int(g) - s * n_out;",
              "  int r = s * C; int step = 1;"]
    L += ["  int rend = min(R, s * C + C);"]
    L += _decompose("o", "k", KN, K)
    L.append(f"  int base = {_offset('k', KS, K)};")
    L += _decompose("r", "c", QN, Q)
    L += _decompose("step", "d", QN, Q)
    load = f"x[base + {_offset('c', QS, Q)}]"
    idx = "r" if first else f"xi[base + {_offset('c', QS, Q)}]"
    L.append(f"  {T} acc = {ident};")
    if arg:
        L.append("  int ai = 0x7fffffff;")
    # blocks of BLOCK loads are combined before joining acc: keeps float sums accurate
    L += ["  while (r < rend) {",
          f"    {T} blk = {ident};" + (" int bi = 0x7fffffff;" if arg else ""),
          f"    int kend = min(rend, r + {BLOCK} * step);",
          "    for (; r < kend; r += step) {"]
    L.append(f"      comb(blk, bi, {load}, {idx});" if arg else f"      blk = comb(blk, {load});")
    L += _advance(Q, QN)
    L += ["    }", "    " + ("comb(acc, ai, blk, bi);" if arg else "acc = comb(acc, blk);"), "  }"]

    def emit(v: str, i: str | None, at: str) -> list[str]:
        if final:
            if arg:
                return [f"oi[{at}] = {i};"]
            if op is OpKind.Mean:
                return [f"ov[{at}] = {v} / {T}(meta[4]);"]
            return [f"ov[{at}] = {v};"]
        return [f"ov[{at}] = {v};"] + ([f"oi[{at}] = {i};"] if arg else [])

    at = "o" if final else "int(g)"
    if not row:
        L += ["  " + s for s in emit("acc", "ai", at)]
    elif arg:
        L += ["  sv[t] = acc; si[t] = ai;", "  barrier();",
              f"  for (int h = {lx // 2}; h > 0; h >>= 1) {{",
              "    if (t < h) { T_ va = sv[t]; int ia = si[t]; comb(va, ia, sv[t + h], si[t + h]); "
              "sv[t] = va; si[t] = ia; }".replace("T_", T),
              "    barrier();", "  }",
              "  if (t == 0) {"] + ["    " + s for s in emit("sv[0]", "si[0]", at)] + ["  }"]
    else:
        L += ["  acc = sg_red(acc);",
              "  if (subgroupElect()) sv[gl_SubgroupID] = acc;",
              "  barrier();",
              "  if (gl_SubgroupID == 0u) {",
              f"    {T} v = {ident};",
              "    for (uint i = gl_SubgroupInvocationID; i < gl_NumSubgroups; i += gl_SubgroupSize) "
              "v = comb(v, sv[i]);",
              "    v = sg_red(v);",
              "    if (subgroupElect()) {"] + ["      " + s for s in emit("v", None, at)] + ["    }", "  }"]
    L.append("}")
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------- lowering

def lower(node, ins, out, ctx) -> None:
    """Dispatch the passes of a reduction of ins[0] over node.attrs['axes'].

    >>> import vkml.numpy as vnp
    >>> float(vnp.sum(vnp.ones((4, 5)), axis=(0, 1)))  # doctest: +SKIP
    20.0
    """
    op = node.op
    x = ins[0]
    kept, red = split_dims(x.shape, node.attrs["axes"])
    count = _prod(red)
    if count == 0:
        # an empty reduction (Max/Min/Arg refuse them in the shape rule)
        fill_view(ctx, out, {OpKind.Sum: 0, OpKind.Prod: 1, OpKind.Mean: float("nan")}[op])
        return
    arg = op in _ARG
    passes = plan(kept, red)
    regions = _regions(node)
    src_v, src_i = x, None
    for i, p in enumerate(passes):
        views = []
        if p.final:
            views.append(out)
        else:
            (vo, vs), (io, is_) = regions[i]
            m = p.n_out * p.S
            dst_v = ctx.scratch.sub(vo, vs, (m,), x.dtype)
            dst_i = ctx.scratch.sub(io, is_, (m,), dt.int32) if arg else None
            views += [dst_v] + ([dst_i] if arg else [])
        writes = tuple(range(len(views)))
        views.append(src_v)
        if arg and not p.first:
            views.append(src_i)
        body = source(op, x.dtype.name, p.kind, len(p.kept), len(p.red), p.lx, p.first, p.final)
        k = ctx.kernel(f"{op.value}_{p.kind}", body, len(views), local_size=p.lx)
        meta = [p.n_out, p.R, p.S, p.C, count]
        meta += [n for n, _ in p.kept] + [s for _, s in p.kept]
        meta += [n for n, _ in p.red] + [s for _, s in p.red]
        if p.kind == "row":
            ctx.dispatch(k, meta, views, writes=writes, groups=p.n_out * p.S)
        else:
            ctx.dispatch(k, meta, views, writes=writes, threads=p.n_out * p.S)
        if not p.final:
            src_v, src_i = views[0], (views[1] if arg else None)
