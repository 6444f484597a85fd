"""Reductions: Sum Mean Max Min Prod ArgMax ArgMin over any set of axes.

The contiguous input is addressed as (kept index, reduced index): adjacent axes of the
same kind are merged and size-1 axes dropped, leaving a few (extent, stride) pairs of
each kind that the kernel reads from meta, so no transposing copy is ever made.

Two kernels, chosen per pass:
  row     one workgroup per (output, split); its threads read interleaved elements, so
          a GPU's loads coalesce; a subgroup + shared-memory tree finishes the job;
  thread  one thread per (output, split) walking its elements in order. Used where the
          reduced elements are strided (neighbouring threads then read neighbouring
          addresses) and, on CPU devices, everywhere: a CPU lane streaming its own
          contiguous run is what keeps the memory system busy there.
When the innermost reduced axis is contiguous with an extent divisible by 4, elements
are loaded four at a time (vec4/dvec4/ivec4) and folded at the end. On CPU devices
float32 inputs are read as texels where the profile says so (`kernels.texel_format`), a
thread pass writes `profile.reduce_unroll` steps out per loop iteration, and a small
reduction is one pass (CPU_SERIAL). Which devices are "CPU devices" is `profile.layout`.
When there are few outputs and many reduced elements, each output is split over many
workgroups/threads; partials go to scratch and the next pass reduces them, until one
split remains. Per-thread runs are combined in blocks before joining the running value,
so float sums keep tree-like accuracy.

Fusion (vulkan/fusion.py) hands a reduction two optional elementwise regions: a
prologue, the producers of its input, evaluated as the first pass loads each element
(every load addressed through its own strides, so the input never exists in memory);
and an epilogue, evaluated on each final value before the store (the reduction's own
value never reaches memory). Axes then merge only where every load allows it.

ArgMax/ArgMin carry (value, index) pairs, ties going to the smaller index, so the first
occurrence wins in any order. A float Prod carries (mantissa, binary exponent) pairs,
renormalised at every step, so no partial product over- or underflows whatever the
magnitudes; only the final value is rounded into range (inf or a signed 0).

An int32 Sum or Prod accumulates in int64 (GL_ARB_gpu_shader_int64; partials in scratch
are int64 too), a product saturating at +-(2^31 + 1) so it cannot wrap int64 either; the
final pass sets a device check (`executor.LowerCtx.check`) where the result does not fit
int32, and the host raises OverflowError naming the op and the shape: never a wrapped
value. A device without shaderInt64 is refused at lowering, with the same advice.

Each pass is one kernel `Program` (`program`, cached per layout key), its meta the named
fields of `schema`, packed by name in `lower`.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...trace import dtypes as dt
from ...trace.ops import OpKind
from ...trace.shapes import contiguous_strides
from ..kernels import texel_format
from ..program import Meta, Program
from . import lowp
from .elementwise import progression, region_heads
from .expressions import math_library
from .fill import fill_view
from .sizing import cdiv, round_up

ROW_MIN = 64          # GPU: inner reductions at least this long get a workgroup per output
ITEMS = 16            # GPU: loads per thread a row split aims for
GROUP_TARGET = 2048   # GPU: workgroups worth splitting a reduction over
CHUNK = 64            # serial loads per thread a thread split aims for (at least)
THREAD_TARGET = 1 << 16       # threads worth splitting a reduction over
CPU_STREAMS = 1 << 12         # CPU, contiguous runs: fewer, longer streams per lane
# CPU: a reduction of at most this many loads in all, and at most BLOCK blocks per
# output (as accurate as a two-level tree), is one pass: a second dispatch costs
# lavapipe tens of microseconds, tens of thousands of loads. Its workgroups are small
# enough to spread over every core.
CPU_SERIAL = 1 << 17
CPU_LX = 64
BLOCK = 32            # serial loads combined before joining the running value
_ARG = (OpKind.ArgMax, OpKind.ArgMin)


def max_run(loop_limit: int) -> int:
    """The loads one thread may walk under a driver that ends any loop after loop_limit
    iterations (`Profile.loop_limit`; lavapipe's gallivm loop limiter): the largest power
    of two within it. 0: no limit.

    >>> max_run(65535), max_run(0)
    (32768, 0)
    """
    return 1 << (loop_limit.bit_length() - 1) if loop_limit > 0 else 0


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



@dataclass(frozen=True)
class Pass:
    """One dispatch: n_out outputs (groups of vec neighbouring outputs where kvec), each
    over R loads split into S runs of C loads.

    kept/red are in units of loads (`vec` elements each).

    >>> p, = reduction_passes(*split_dims((16, 64), (1,)), "cpu")
    >>> p.kind, p.n_out, p.R, p.vec, p.final
    ('thread', 16, 16, 4, True)
    """
    kind: str                 # "row" or "thread"
    kept: tuple
    red: tuple
    n_out: int
    R: int
    S: int
    C: int
    lx: int
    vec: int                  # 1 or 4 elements per load
    first: bool               # indices are positions themselves (else read from the last pass)
    # the vec elements of a load lie along the innermost kept axis (four neighbouring
    # outputs a thread), not along the innermost reduced one
    kvec: bool = False

    @property
    def final(self) -> bool:
        return self.S == 1

    @property
    def outputs(self) -> int:
        """The outputs of the pass (n_out counts loads' worth of them)."""
        return self.n_out * (self.vec if self.kvec else 1)


def _row_lx(R: int) -> int:
    return 256 if R >= 2048 else 128 if R >= 512 else 64


# Code a reduction's loop may repeat a fused prologue's operators to (in `Region.weight`
# units): lavapipe's pipeline creation grows much faster with the code inside a loop than
# a straight-line kernel of the same weight does (bench/RESULTS.md, issue 16: a Sum with
# a long prologue written out 8 x 4 times took seconds to create even from a warm cache),
# and an expensive prologue gains nothing at run time from the unrolled steps.
PROLOGUE_BUDGET = 400


def prologue_unroll(unroll: int, vec: int, weight: int) -> int:
    """Loop steps a thread pass with a fused prologue of `weight` (`Region.weight`) writes
    out per iteration: the prologue's code is repeated per element of a load (vec) and per
    step written out, plus once in the remainder loop, so the steps shrink from `unroll`
    until that stays within PROLOGUE_BUDGET.

    >>> prologue_unroll(8, 4, 10), prologue_unroll(8, 1, 60), prologue_unroll(8, 4, 400)
    (8, 4, 1)
    """
    while unroll > 1 and vec * (unroll + 1) * weight > PROLOGUE_BUDGET:
        unroll //= 2
    return unroll


def prologue_alone(prof, weight: int) -> bool:
    """Whether a reduction's first pass reads its elements one at a time because its
    fused prologue of `weight` is long: on CPU devices, where four copies of it (a vector
    load's elements) would pass PROLOGUE_BUDGET. lavapipe builds every copy again in every
    process (pipeline creation from its disk cache still translates the whole shader) and
    compiles each cold; a load costs little beside a prologue that long.

    >>> from types import SimpleNamespace as NS
    >>> prologue_alone(NS(cpu=True), 60), prologue_alone(NS(cpu=True), 200), prologue_alone(NS(cpu=False), 200)
    (False, True, False)
    """
    return bool(prof.cpu) and 4 * weight > PROLOGUE_BUDGET


def kept_vec(kept, red) -> bool:
    """Whether a thread pass can load four neighbouring outputs' elements at once: the
    innermost kept axis is contiguous with an extent divisible by 4 and every other
    stride a multiple of 4. A fused prologue's loads need not be: those that are not
    read four scalars instead (`_prologue_meta`).

    >>> kept_vec([(384, 1)], [(2048, 384)]), kept_vec([(6, 1)], [(8, 6)])
    (True, False)
    """
    if not kept or not red or kept[-1][1] != 1 or kept[-1][0] % 4:
        return False
    return all(st % 4 == 0 for _, st in kept[:-1]) and all(st % 4 == 0 for _, st in red)


def reduction_passes(kept, red, how: str = "gpu", loop_limit: int = 0, kvec: bool = False,
                     first_vec: bool = True) -> list[Pass]:
    """The passes reducing (kept, red) in layout how ("cpu" or "gpu", `Profile.layout`)
    on a driver ending loops after loop_limit iterations (0: never): each pass's partials
    feed the next. Eight long rows on a GPU: 64 partials per row, then a row over them.
    kvec: a thread pass whose reduced elements are strided may load four neighbouring
    outputs' elements at once (`kept_vec`; the caller says whether the op and its loads
    allow it): on a CPU device that is a quarter of the loads, each a vector.

    >>> [(p.kind, p.S) for p in reduction_passes(*split_dims((8, 1 << 20), (1,)), "gpu")]
    [('row', 64), ('row', 1)]
    >>> [(p.n_out, p.vec, p.kvec) for p in reduction_passes(*split_dims((2048, 384), (0,)), "cpu", kvec=True)]
    [(96, 4, True), (96, 4, True)]
    """
    passes = []
    first = True
    while True:
        kept = [d for d in kept if d[0] != 1]
        red = [d for d in red if d[0] != 1]
        n_out, R = _prod(kept), _prod(red)
        inner = bool(red) and red[-1][1] == 1
        along_kept = not inner and kvec and how == "cpu" and kept_vec(kept, red) and (first_vec or not first)
        vec = 4 if ((inner and red[-1][0] % 4 == 0) or along_kept) and (first_vec or not first) else 1
        if along_kept:
            kv = tuple((n // 4, 1) if j == len(kept) - 1 else (n, st // 4) for j, (n, st) in enumerate(kept))
            rv = tuple((n, st // 4) for n, st in red)
            n_out //= 4
        else:
            kv = tuple((n, st // vec) for n, st in kept)
            rv = tuple((n // vec, 1) if j == len(red) - 1 else (n, st // vec)
                       for j, (n, st) in enumerate(red)) if vec > 1 else tuple(red)
        Rv = R if along_kept else R // vec
        if inner and how == "gpu" and R >= ROW_MIN:
            lx = _row_lx(Rv)
            S = min(cdiv(Rv, lx * ITEMS), max(1, cdiv(GROUP_TARGET, n_out)))
            C = cdiv(cdiv(Rv, S), lx) * lx
            S = cdiv(Rv, C)
            passes.append(Pass("row", kv, rv, n_out, Rv, S, C, lx, vec, first))
            nxt_kept, nxt_red = [(n_out, S)], [(S, 1)]
        else:
            target = CPU_STREAMS if inner and how == "cpu" else THREAD_TARGET
            S = min(cdiv(max(Rv, 1), CHUNK), max(1, target // n_out))
            if how == "cpu" and n_out * Rv <= CPU_SERIAL and Rv <= BLOCK * BLOCK:
                S = 1
            if loop_limit:
                S = max(S, cdiv(Rv, max_run(loop_limit)))
            C = cdiv(max(Rv, 1), S)
            S = cdiv(max(Rv, 1), C)
            passes.append(Pass("thread", kv, rv, n_out, Rv, S, C, CPU_LX if how == "cpu" else 256,
                               vec, first, along_kept))
            outs = n_out * (4 if along_kept else 1)
            nxt_kept, nxt_red = [(outs, 1)], [(S, outs)]
        if S == 1:
            return passes
        kept, red, first = nxt_kept, nxt_red, False



# a fused region's 16-bit float leaves and results: named by these in the program keys
_LOW = {"bf16": dt.bfloat16, "f16": dt.float16}


def _leaf_type(d) -> str:
    """The program key's type of a prologue or epilogue value: its GLSL type, or a 16-bit
    float's name (stored as bits, `lower/lowp.py`)."""
    if dt.is_low(d):
        return "bf16" if np.dtype(d) == dt.bfloat16 else "f16"
    return dt.glsl_type(d)


def _wide_leaves(modes, n: int, vec: int) -> list[bool]:
    """Per prologue leaf: whether every load of it is a vector load."""
    return [vec > 1 and any(l == j for l, _ in modes) and all(m == "v" for l, m in modes if l == j)
            for j in range(n)]


def is_wide(op: OpKind, dtype) -> bool:
    """An int32 Sum or Prod: accumulated in int64 and checked against int32 at the end.

    >>> is_wide(OpKind.Sum, np.int32), is_wide(OpKind.Max, np.int32)
    (True, False)
    """
    return op in (OpKind.Sum, OpKind.Prod) and np.dtype(dtype) == dt.int32


def overflow_error(op: str, shape, axes, dev_name: str | None = None):
    """The OverflowError (or, with dev_name, the refusal) for an int32 accumulation whose
    result does not fit int32.

    >>> type(overflow_error("Sum", (4,), (0,))).__name__
    'OverflowError'
    """
    hint = "cast the input to float64 first (x.astype('float64'))"
    if dev_name is not None:
        return dt.DTypeError(f"{op}: an int32 {op} of shape {tuple(shape)} accumulates in int64 so that "
                             f"it cannot wrap, which needs shaderInt64; {dev_name} does not have it: {hint}")
    return OverflowError(f"{op}: the result over axes {tuple(axes)} of an int32 array of shape "
                         f"{tuple(shape)} does not fit int32, the device's only integer type (it "
                         f"would wrap): {hint}")


def is_pair(op: OpKind, dtype) -> bool:
    """Ops whose running value is a (value, int) pair: ArgMax/ArgMin carry the index,
    a float Prod carries a mantissa and a binary exponent (so no partial product can
    overflow or underflow, whatever the order and the magnitudes).

    >>> is_pair(OpKind.Prod, np.float32), is_pair(OpKind.Prod, np.int32), is_pair(OpKind.ArgMin, np.int32)
    (True, False, True)
    """
    return op in _ARG or (op is OpKind.Prod and dt.is_float(dtype))


def fused_dims(shape, axes, loads) -> tuple[list, list, list]:
    """split_dims for a reduction reading a fused prologue: axes merge only where the
    virtual contiguous input and every load's strides allow it. Returns (kept, red,
    per-load (kept strides, reduced strides)), kept/red as in split_dims. loads are the
    region's (leaf, offset, strides over the input's shape).

    >>> fused_dims((2, 3, 4), (2,), [(0, 0, (12, 4, 1))])      # one contiguous load
    ([(6, 4)], [(4, 1)], [((4,), (1,))])
    >>> fused_dims((2, 3, 4), (2,), [(0, 0, (1, 2, 6))])       # a transposed one
    ([(2, 12), (3, 4)], [(4, 1)], [((1, 2), (6,))])
    """
    vst = contiguous_strides(shape)
    dims = [(n, i in axes, (vst[i],) + tuple(l[2][i] for l in loads))
            for i, n in enumerate(shape) if n != 1]
    merged = []
    for n, kind, st in dims:
        if merged:
            pn, pk, pst = merged[-1]
            if pk == kind and all(a == b * n for a, b in zip(pst, st)):
                merged[-1] = (pn * n, kind, st)
                continue
        merged.append((n, kind, st))
    kept = [(n, st[0]) for n, k, st in merged if not k]
    red = [(n, st[0]) for n, k, st in merged if k]
    per = [(tuple(st[1 + j] for n, k, st in merged if not k), tuple(st[1 + j] for n, k, st in merged if k))
           for j in range(len(loads))]
    return kept, red, per


def _layout(node, prologue, profile):
    """The passes of node and the byte (offset, size) of each non-final pass's partial
    values and ints in scratch."""
    if prologue is None:
        kept, red = split_dims(node.inputs[0].shape, node.attrs["axes"])
    else:
        kept, red, _ = fused_dims(node.inputs[0].shape, node.attrs["axes"], prologue.loads)
    if node.size == 0 or _prod(red) == 0:
        return [], []
    isz = 8 if is_wide(node.op, node.inputs[0].dtype) else dt.itemsize(node.inputs[0].dtype)
    pair = is_pair(node.op, node.inputs[0].dtype)
    kvec = not pair and not is_wide(node.op, node.inputs[0].dtype)
    vec = prologue is None or not prologue_alone(profile, prologue.weight)
    passes = reduction_passes(kept, red, profile.layout, profile.loop_limit, kvec, vec)
    regions, off = [], 0
    for p in passes[:-1]:
        m = p.outputs * p.S
        vals = (off, m * isz)
        off += round_up(m * isz)
        ints = (off, m * 4 if pair else 0)
        off += round_up(m * 4) if pair else 0
        regions.append((vals, ints))
    return passes, regions


def scratch_bytes(node, prologue=None, profile=None) -> int:
    """Scratch for the partials of split reductions (0 when one pass suffices) under
    profile (default: the device's: the executor plans under the profile it lowers with).

    >>> import vkml, vkml.numpy as vnp
    >>> g = vkml.make_graph(lambda x: x.sum(), vnp.ones((1 << 20,)))
    >>> scratch_bytes(g.outputs[0]) > 0
    True
    """
    if profile is None:
        from ..device import get
        profile = get().profile
    _, regions = _layout(node, prologue, profile)
    if not regions:
        return 0
    (vo, vs), (io, is_) = regions[-1]
    return max(vo + round_up(vs), io + round_up(is_) if is_ else 0)


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


def _vtype(T: str) -> str:
    return {"float": "vec4", "double": "dvec4", "int": "ivec4"}[T]


def _functions(op: OpKind, dtype, vec: int, row: bool) -> tuple[str, tuple]:
    """comb (scalar and, when loads are vectors, vector) plus, for a row pass of a
    single-value op, its subgroup reduction sg_red, or prod_final for the
    mantissa/exponent product; and the names they declare."""
    T = dt.glsl_type(dtype)
    V = _vtype(T)
    fl = dt.is_float(dtype)
    up = op in (OpKind.Max, OpKind.ArgMax)
    cmp, vcmp = (">", "greaterThan") if up else ("<", "lessThan")
    out = []
    if is_wide(op, dtype):
        # int64 running values; a product saturates at +-(2^31 + 1): beyond int32 either
        # way (so still reported), and the product of two such fits int64. 0 stays exact.
        if op is OpKind.Sum:
            e = "a + b"
        else:
            e = "clamp(a * b, {0}(-2147483649l), {0}(2147483649l))"
        out.append(f"int64_t comb(int64_t a, int64_t b) {{ return {e.format('int64_t')}; }}\n")
        if vec > 1:
            out.append(f"i64vec4 comb(i64vec4 a, i64vec4 b) {{ return {e.format('i64vec4')}; }}\n")
        return "".join(out), ("comb",)
    if op is OpKind.Prod and fl:
        # (mantissa in [0.5, 1), exponent): each step renormalises; inf/nan/0 stay as is
        emax, emin = (128, -149) if T == "float" else (1024, -1074)
        # a signed zero built from the bits: m * 0 may be folded to +0
        zero = ("uintBitsToFloat(floatBitsToUint(m) & 0x80000000u)" if T == "float" else
                "packDouble2x32(uvec2(0u, unpackDouble2x32(m).y & 0x80000000u))")
        out.append(f"void comb(inout {T} va, inout int ia, {T} vb, int ib) {{\n"
                   f"  {T} p = va * vb;\n"
                   "  if (isinf(p) || isnan(p)) { va = p; ia = 0; return; }\n"
                   "  int e; va = frexp(p, e); ia += ib + e;\n}\n")
        if vec > 1:
            out.append(f"void comb(inout {V} va, inout ivec4 ia, {V} vb, ivec4 ib) {{\n"
                       f"  {V} p = va * vb; ivec4 e; {V} m = frexp(p, e);\n"
                       "  bvec4 sp = bvec4(uvec4(isinf(p)) | uvec4(isnan(p)));\n"
                       "  va = mix(m, p, sp); ia = mix(ia + ib + e, ivec4(0), sp);\n}\n")
        out.append(f"{T} prod_final({T} m, int e) {{\n"
                   f"  if (isinf(m) || isnan(m) || m == {T}(0)) return m;\n"
                   f"  if (e > {emax}) return m * {_lit(T, 'inf')};\n"
                   f"  if (e < {emin}) return {zero};\n"
                   "  return ldexp(ldexp(m, e / 2), e - e / 2);\n}\n")
        return "".join(out), ("comb", "prod_final")
    if op in _ARG:
        if fl:
            better = f"(vb {cmp} va || (isnan(vb) && !isnan(va)))"
            eq = "(vb == va || (isnan(vb) && isnan(va)))"
            vbetter = (f"(uvec4({vcmp}(vb, va)) | (uvec4(isnan(vb)) & uvec4(not(isnan(va)))))")
            veq = "(uvec4(equal(vb, va)) | (uvec4(isnan(vb)) & uvec4(isnan(va))))"
        else:
            better, eq = f"(vb {cmp} va)", "(vb == va)"
            vbetter, veq = f"uvec4({vcmp}(vb, va))", "uvec4(equal(vb, va))"
        # ties go to the smaller index: the first occurrence wins in any combining order
        out.append(f"void comb(inout {T} va, inout int ia, {T} vb, int ib) {{\n"
                   f"  if ({better} || ({eq} && ib < ia)) {{ va = vb; ia = ib; }}\n}}\n")
        if vec > 1:
            out.append(f"void comb(inout {V} va, inout ivec4 ia, {V} vb, ivec4 ib) {{\n"
                       f"  bvec4 take = bvec4({vbetter} | ({veq} & uvec4(lessThan(ib, ia))));\n"
                       f"  va = mix(va, vb, take); ia = mix(ia, ib, take);\n}}\n")
        return "".join(out), ("comb",)
    if op in (OpKind.Sum, OpKind.Mean):
        expr, vexpr, sg = "a + b", "a + b", "subgroupAdd(v)"
    elif op is OpKind.Prod:
        expr, vexpr, sg = "a * b", "a * b", "subgroupMul(v)"
    else:
        f = "max" if up else "min"
        if fl:
            # nan wins: compare so that a nan on either side is kept
            expr = f"((a {cmp} b || isnan(a)) ? a : b)"
            vexpr = f"mix(b, a, bvec4(uvec4({vcmp}(a, b)) | uvec4(isnan(a))))"
            # subgroupMax/Min need not propagate nan; look for one separately
            sg = (f"(subgroupMax(isnan(v) ? 1 : 0) != 0 ? {_lit(T, 'nan')} : "
                  f"subgroup{f.capitalize()}(v))")
        else:
            expr = vexpr = f"{f}(a, b)"
            sg = f"subgroup{f.capitalize()}(v)"
    out.append(f"{T} comb({T} a, {T} b) {{ return {expr}; }}\n")
    if vec > 1:
        out.append(f"{V} comb({V} a, {V} b) {{ return {vexpr}; }}\n")
    if not row:
        return "".join(out), ("comb",)
    out.append(f"{T} sg_red({T} v) {{ return {sg}; }}\n")
    return "".join(out), ("comb", "sg_red")


def _decompose(prog: Program, var: str, prefix: str, extents: str, rank: int) -> list[str]:
    """GLSL splitting int `var` into digits prefix0..prefix{rank-1} over the meta field
    extents (the top digit keeps the whole quotient)."""
    lines = [f"  int rem_{prefix} = {var};"]
    for j in range(rank - 1, 0, -1):
        n = prog.m(extents, j)
        lines.append(f"  int {prefix}{j} = rem_{prefix} % {n}; rem_{prefix} /= {n};")
    if rank:
        lines.append(f"  int {prefix}0 = rem_{prefix};")
    return lines


def _offset(prog: Program, prefix: str, strides: str, rank: int) -> str:
    return " + ".join([f"{prefix}{j} * {prog.m(strides, j)}" for j in range(rank)]) or "0"


def _advance(prog: Program, rank: int, extents: str) -> list[str]:
    """Add the step's digits d* to the coordinates c*, carrying (each digit < extent), so
    the loop needs no division."""
    if rank == 0:
        return []
    lines = ["      int cy = 0;"]
    for j in range(rank - 1, 0, -1):
        n = prog.m(extents, j)
        lines.append(f"      c{j} += d{j} + cy; cy = 0; if (c{j} >= {n}) {{ c{j} -= {n}; cy = 1; }}")
    lines.append("      c0 += d0 + cy;")
    return lines


def schema(K: int, Q: int, modes: tuple = (), n_epi: int = 0) -> Meta:
    """The meta of a pass over K kept and Q reduced dimensions: n_out outputs, each over
    R loads split into S runs of C; count, the whole reduction's element count (Mean
    divides by it); the kept and reduced (extent, stride) pairs in units of loads. A
    first pass with a fused prologue goes on, per load j in `modes` ((leaf, mode), ...),
    with its base offset `lj_base` and its kept and reduced strides (`lj_kst`, `lj_rst`),
    and for a gather (mode 'g') the step between its four elements `lj_q`; a final pass
    with a fused epilogue reading n_epi tensors, with their offsets `epi_off`.

    >>> schema(1, 2, ((0, "g"),), 1).fields[-5:]
    (('l0_base', 1), ('l0_kst', 1), ('l0_rst', 2), ('l0_q', 1), ('epi_off', 1))
    """
    f = [("n_out", 1), ("R", 1), ("S", 1), ("C", 1), ("count", 1),
         ("kept_n", K), ("kept_st", K), ("red_n", Q), ("red_st", Q)]
    for j, (_, m) in enumerate(modes):
        f += [(f"l{j}_base", 1), (f"l{j}_kst", K), (f"l{j}_rst", Q)] + ([(f"l{j}_q", 1)] if m == "g" else [])
    if n_epi:
        f.append(("epi_off", n_epi))
    return Meta(*f)


@lru_cache(maxsize=1024)
def program(op: OpKind, dtype_name: str, kind: str, K: int, Q: int, lx: int, vec: int,
            first: bool, final: bool, pro: tuple | None = None, epi: tuple | None = None,
            tex: tuple = (), unroll: int = 8, kvec: bool = False) -> Program:
    """The kernel of one pass (meta: `schema`).

    A first pass with `pro` = (function, uses math, double, leaf types, ((leaf, mode), ...),
    per leaf its (start, step) progression or None, holds a 16-bit float) reads its elements through the fused
    prologue `pro(...)` of its loads instead of src: mode 'v' is a vector load, 's' one
    scalar for all lanes of a vector, 'g' a gather. A final pass with `epi` = (function,
    uses math, double, out type, leaf types, ((leaf or -1, 'i' or 's'), ...), holds a
    16-bit float) stores
    `epi(...)` of the reduced value (leaf -1) and of its other loads (at the output's
    index, or one scalar). tex: per input (src, or the prologue's leaves) the texel format
    it is read through, or None (`kernels.texel_format`). unroll: loop steps a thread pass
    writes out per iteration (`Profile.reduce_unroll`). kvec: a load's vec elements belong
    to vec neighbouring outputs (`Pass.kvec`), each stored on its own.

    >>> p = program(OpKind.Sum, "float32", "thread", 1, 1, 64, 4, True, True)
    >>> p.name, [b.name for b in p.bindings], p.meta.size
    ('Sum_thread', ['ov', 'src'], 9)
    """
    dtype = np.dtype(dtype_name)
    T = dt.glsl_type(dtype)
    V = _vtype(T) if vec > 1 else T
    IV = "ivec4" if vec > 1 else "int"
    arg = op in _ARG
    pair = is_pair(op, dtype)
    w64 = is_wide(op, dtype)
    # A/AV: the running value's type (int64 for an int32 Sum/Prod), XV: what src holds
    A, AV = ("int64_t", "i64vec4" if vec > 1 else "int64_t") if w64 else (T, V)
    XV = AV if w64 and not first else V
    pro = pro if first else None
    epi = epi if final else None
    row = kind == "row"
    assert not kvec or (vec > 1 and kind == "thread" and not pair and not w64), "kvec: a single-value thread pass"
    prog = Program(f"{op.value}_{kind}" + ("_kv" if kvec else "") + ("_pro" if pro is not None else "")
                   + ("_epi" if epi is not None else ""), local_size=lx)
    prog.meta = schema(K, Q, pro[4] if pro is not None else (),
                       sum(1 for l, _ in epi[5] if l >= 0) if epi is not None else 0)
    m = prog.m
    # bindings: outputs first (values, unless a final arg pass; then the pair's ints
    # where they go on), then the inputs
    if (pro is not None and pro[6]) or (epi is not None and epi[6]):    # a 16-bit float anywhere
        lowp.setup(prog)
    if epi is not None:
        prog.buffer("oe", lowp.buffer_type() if epi[3] in _LOW else epi[3])
    else:
        if not (arg and final):
            prog.buffer("ov", T if final else A)
        if pair and (arg or not final):
            prog.buffer("oi", "int")
    wide = _wide_leaves(pro[4], len(pro[3]), vec) if pro is not None else []

    def fmt(j: int):
        return tex[j] if j < len(tex) else None

    def ld(buf: str, j: int, idx: str, w: int) -> str:
        if fmt(j) is None:
            return f"{buf}[{idx}]"
        return f"texelFetch({buf}, {idx})" + (".x" if w == 1 else "")
    if pro is not None:
        for j, t in enumerate(pro[3]):
            if t in _LOW:     # 16-bit floats: their bits (4 to a uvec2 or an unsigned texel)
                bt = "uint" if fmt(j) is not None else lowp.buffer_type(4 if wide[j] else 1)
            else:
                bt = _vtype(t) if wide[j] else t
            prog.buffer(f"y{j}", bt, readonly=True, texel=fmt(j))
    else:
        prog.buffer("src", XV, readonly=True, texel=fmt(0))
    if pair and not first:
        prog.buffer("xi", IV, readonly=True)
    if epi is not None:
        for j, t in enumerate(epi[4]):
            prog.buffer(f"z{j}", lowp.buffer_type() if t in _LOW else t, readonly=True)
    if w64 and final:
        prog.buffer("err", "int")     # the device check, bound last
    if w64:
        prog.extension("GL_ARB_gpu_shader_int64")
    ident = _identity(op, dtype)
    if w64:
        ident = f"{A}({ident[len(T) + 1:-1]})"
    fused = [f for f in (pro, epi) if f is not None]
    if any(f[1] for f in fused):
        math_library(prog, any(f[2] for f in fused))
    if pro is not None:
        prog.add(pro[0], names=("pro",))
    if epi is not None:
        prog.add(epi[0], names=("epi",))
    prog.add(*_functions(op, dtype, vec, row))
    if row:
        prog.shared("sv", A, lx)
        if pair:
            prog.shared("si", "int", lx)
        # a single-value row pass finishes through subgroup operations (`sg_red`)
        prog.subgroups = not (w64 or pair)
    L = [f"  int n_out = {m('n_out')}; int R = {m('R')}; int S = {m('S')}; int C = {m('C')};"]
    if row:
        L += ["  uint g = group_id();", "  if (g >= uint(n_out) * uint(S)) return;",
              "  int o = int(g) / S; int s = int(g) - o * S;",
              "  int t = int(lidx());",
              f"  int r = s * C + t; int step = {lx};"]
    else:
        L += ["  uint g = gidx();", "  if (g >= uint(n_out) * uint(S)) return;",
              "  int s = int(g) / n_out; int o = int(g) - s * n_out;",
              "  int r = s * C; int step = 1;"]
    L.append("  int rend = min(R, s * C + C);")
    L += _decompose(prog, "o", "k", "kept_n", K)
    L.append(f"  int base = {_offset(prog, 'k', 'kept_st', K)};")
    L += _decompose(prog, "r", "c", "red_n", Q)
    L += _decompose(prog, "step", "d", "red_n", Q)
    at_in = f"base + {_offset(prog, 'c', 'red_st', Q)}"
    load_lines: list[str] = []
    if pro is not None:
        # per load: its base over the kept digits once, its address over the reduced
        # digits per element (no division in the loop)
        args = []
        ar = pro[5]
        for j, (l, md) in enumerate(pro[4]):
            t = pro[3][l]
            L.append(f"  int b{j} = {m(f'l{j}_base')} + {_offset(prog, 'k', f'l{j}_kst', K)};")
            addr = f"b{j} + {_offset(prog, 'c', f'l{j}_rst', Q)}"
            a = ar[l]
            if a is not None:    # an integer progression: computed from the index, not loaded
                if vec == 1 or md == "s":
                    load_lines.append(f"int w{j} = {progression(a, addr)};")
                    args.append([f"w{j}"] * (1 if vec == 1 else 4))
                elif md == "v" and wide[l]:
                    load_lines.append(f"int w{j} = {progression(a, f'4 * ({addr})')};")
                    args.append([f"(w{j} + {a[1] * c})" for c in range(4)])
                else:
                    L.append(f"  int q{j} = {m(f'l{j}_q')};")
                    load_lines.append(f"int w{j} = {progression(a, addr)};")
                    args.append([f"(w{j} + {a[1]} * {c} * q{j})" for c in range(4)])
                continue
            d = _LOW.get(t)

            def one(idx: str) -> str:     # a scalar load (a 16-bit float: converted)
                r = ld(f"y{l}", l, idx, 1)
                return lowp.load(d, r) if d is not None else r
            ct = "float" if d is not None else t
            if vec == 1:
                load_lines.append(f"{ct} w{j} = {one(addr)};")
                args.append([f"w{j}"])
            elif md == "v" and wide[l] and d is not None:
                r = ld(f"y{l}", l, addr, 4) + (".xy" if fmt(l) is not None else "")
                load_lines.append(f"uvec2 w{j} = {r};")
                args.append(lowp.unpack(d, 4, f"w{j}"))
            elif md == "v" and wide[l]:
                load_lines.append(f"{_vtype(t)} w{j} = {ld(f'y{l}', l, addr, 4)};")
                args.append([f"w{j}.{c}" for c in "xyzw"])
            elif md == "s":
                load_lines.append(f"{ct} w{j} = {one(addr)};")
                args.append([f"w{j}"] * 4)
            else:
                L.append(f"  int q{j} = {m(f'l{j}_q')};")
                load_lines.append(f"int a{j} = {addr};")
                load_lines += [f"{ct} w{j}_{c} = {one(f'a{j} + {c} * q{j}')};" for c in range(4)]
                args.append([f"w{j}_{c}" for c in range(4)])
        calls = [f"pro({', '.join(a[c] for a in args)})" for c in range(vec)]
        value = calls[0] if vec == 1 else f"{V}({', '.join(calls)})"
    else:
        value = ld("src", 0, at_in, vec)
    if w64 and first:
        value = f"{AV}({value})"
    # the int carried with a loaded element: its index (arg) or exponent 0 (product)
    if not first:
        idx = f"xi[{at_in}]"
    elif arg:
        idx = "(r * 4 + ivec4(0, 1, 2, 3))" if vec > 1 else "r"
    else:
        idx = f"{IV}(0)"
    iid = "0x7fffffff" if arg else "0"
    L.append(f"  {AV} vacc = {AV}({ident});")
    if pair:
        L.append(f"  {IV} vai = {IV}({iid});")
    step_lines = (["      " + x for x in load_lines]
                  + [f"      comb(blk, bi, {value}, {idx});" if pair else f"      blk = comb(blk, {value});"]
                  + _advance(prog, Q, "red_n"))
    L += ["  while (r < rend) {",
          f"    {AV} blk = {AV}({ident});" + (f" {IV} bi = {IV}({iid});" if pair else ""),
          f"    int kend = min(rend, r + {BLOCK} * step);"]
    if not row and not pair and unroll > 1:
        # whole runs of `unroll` steps without the loop's per-iteration cost (lavapipe
        # manages an execution mask at every iteration of a loop)
        L.append(f"    for (; r + {unroll - 1} * step < kend; ) {{")
        for _ in range(unroll):
            L += ["    {"] + step_lines + ["      r += step;", "    }"]
        L.append("    }")
    L += ["    for (; r < kend; r += step) {"] + step_lines
    L += ["    }", "    " + ("comb(vacc, vai, blk, bi);" if pair else "vacc = comb(vacc, blk);"), "  }"]
    if kvec:
        L.append(f"  {AV} acc = vacc;")
    elif vec > 1:
        if pair:
            L += [f"  {T} acc = vacc.x; int ai = vai.x;",
                  "  comb(acc, ai, vacc.y, vai.y); comb(acc, ai, vacc.z, vai.z); "
                  "comb(acc, ai, vacc.w, vai.w);"]
        else:
            L.append(f"  {A} acc = comb(comb(vacc.x, vacc.y), comb(vacc.z, vacc.w));")
    else:
        L.append(f"  {A} acc = vacc;" + (" int ai = vai;" if pair else ""))

    def emit(v: str, i: str | None, at: str) -> list[str]:
        if final and w64:
            # the int64 result: flag one outside int32, store it narrowed either way
            head = [f"int64_t fin = {v};",
                    "if (fin < -2147483648l || fin > 2147483647l) atomicOr(err[0], 1);"]
            return ["{"] + head + emit_final("int(fin)", i, at) + ["}"]
        return emit_final(v, i, at)

    def emit_final(v: str, i: str | None, at: str) -> list[str]:
        if final:
            if arg:
                val = i
            elif pair:
                val = f"prod_final({v}, {i})"
            elif op is OpKind.Mean:
                val = f"{v} / {T}({m('count')})"
            else:
                val = v
            if epi is not None:
                ea, k = [], 0
                for l, how in epi[5]:
                    if l < 0:
                        ea.append(val)
                    else:
                        z = f"z{l}[{m('epi_off', k)}" + (f" + {at}]" if how == "i" else "]")
                        ea.append(lowp.load(_LOW[epi[4][l]], z) if epi[4][l] in _LOW else z)
                        k += 1
                e = f"epi({', '.join(ea)})"
                return [f"oe[{at}] = {lowp.store(_LOW[epi[3]], e) if epi[3] in _LOW else e};"]
            return [f"oi[{at}] = {i};"] if arg else [f"ov[{at}] = {val};"]
        return [f"ov[{at}] = {v};"] + ([f"oi[{at}] = {i};"] if pair else [])

    at = "o" if final else "int(g)"
    if kvec:
        for c, x in enumerate("xyzw"):
            L += ["  " + s for s in emit(f"acc.{x}", None, f"({vec} * {at} + {c})")]
    elif not row:
        L += ["  " + s for s in emit("acc", "ai", at)]
    elif w64:
        # a shared-memory tree: subgroup operations on int64 need an extra device feature
        L += ["  sv[t] = acc;", "  barrier();",
              f"  for (int h = {lx // 2}; h > 0; h >>= 1) {{",
              "    if (t < h) sv[t] = comb(sv[t], sv[t + h]);",
              "    barrier();", "  }",
              "  if (t == 0) {"] + ["    " + s for s in emit("sv[0]", None, at)] + ["  }"]
    elif pair:
        L += ["  sv[t] = acc; si[t] = ai;", "  barrier();",
              f"  for (int h = {lx // 2}; h > 0; h >>= 1) {{",
              f"    if (t < h) {{ {T} va = sv[t]; int ia = si[t]; comb(va, ia, sv[t + h], si[t + h]); "
              "sv[t] = va; si[t] = ia; }",
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
    assert all(l.startswith("  ") for l in L)
    prog.main(*(l[2:] for l in L))
    return prog


# --------------------------------------------------------------------------- lowering

def _prologue_meta(p: Pass, per, loads, leaves) -> tuple[dict, tuple]:
    """The meta fields (`schema`) and the (leaf, mode) key of a first pass's prologue
    loads (strides in units of the pass's loads: `vec` elements along the innermost
    reduced axis, or along the innermost kept one where `p.kvec`). A load is a vector
    where it is contiguous and aligned along that axis, one scalar where it is constant
    along it, else vec scalars (a gather)."""
    def along(ks, rs):      # the strides along the vector axis, then the others
        return (ks[-1], [*ks[:-1], *rs]) if p.kvec else (rs[-1], [*ks, *rs[:-1]])

    def rebuild(ks, rs, f, last):   # (kept, reduced) with f of the others and last along
        if p.kvec:
            return [*(f(x) for x in ks[:-1]), last], [f(x) for x in rs]
        return [f(x) for x in ks], [*(f(x) for x in rs[:-1]), last]
    modes = []
    for (_, off, _), (ks, rs) in zip(loads, per):
        a, others = along(ks, rs) if p.vec > 1 else (0, [])
        if a == 0:
            modes.append("s")
        elif a == 1 and off % 4 == 0 and all(x % 4 == 0 for x in others):
            modes.append("v")
        else:
            modes.append("g")
    # a vector binding only where every load of that leaf is a vector load
    for j in range(len(leaves)):
        if any(m != "v" for (l, _, _), m in zip(loads, modes) if l == j):
            modes = ["g" if (l == j and m == "v") else m for (l, _, _), m in zip(loads, modes)]
    meta = {}
    for j, ((_, off, _), (ks, rs), m) in enumerate(zip(loads, per, modes)):
        if m == "v":
            f = (off // 4, *rebuild(ks, rs, lambda x: x // 4, 1))
        elif m == "g":
            a = along(ks, rs)[0]
            f = (off, *rebuild(ks, rs, lambda x: x, 4 * a))
            meta[f"l{j}_q"] = a
        else:
            f = (off, list(ks), list(rs))
        meta[f"l{j}_base"], meta[f"l{j}_kst"], meta[f"l{j}_rst"] = f
    return meta, tuple((l, m) for (l, _, _), m in zip(loads, modes))


def lower(node, ins, out, ctx, prologue=None, epilogue=None) -> None:
    """Dispatch the passes of a reduction of ins[0] over node.attrs['axes'].

    prologue = (region, leaf views): the input is not in memory but computed by the
    fused elementwise region from its leaves as the first pass reads it. epilogue =
    (region, leaf views, None for the reduction itself): the final pass stores the
    region's value at each output instead of the reduction (out is then its view).

    >>> import vkml.numpy as vnp
    >>> float(vnp.sum(vnp.ones((4, 5)), axis=(0, 1)))
    20.0
    """
    from .elementwise import arange_leaf, region_function, uses_double, uses_low
    op = node.op
    xn = node.inputs[0]
    axes = node.attrs["axes"]
    if prologue is not None:
        preg, pviews = prologue
        kept, red, per = fused_dims(xn.shape, axes, preg.loads)
    else:
        kept, red = split_dims(xn.shape, axes)
    count = _prod(red)
    if count == 0:
        # an empty reduction (Max/Min/Arg refuse them in the shape rule)
        assert epilogue is None, "fusion keeps epilogues off empty reductions"
        fill_view(ctx, out, {OpKind.Sum: 0, OpKind.Prod: 1, OpKind.Mean: float("nan")}[op])
        return
    pair = is_pair(op, xn.dtype)
    w64 = is_wide(op, xn.dtype)
    if w64 and not ctx.dev.has_int64:
        raise overflow_error(op.value, xn.shape, axes, ctx.dev.name)
    prof = ctx.profile
    passes, regions = _layout(node, None if prologue is None else preg, prof)
    pro_key = epi_key = None
    if prologue is not None:
        fn, math = region_function(preg, "pro", prof.lowp_round_each)
        pro_types = tuple(_leaf_type(l.dtype) for l in preg.leaves)
        pro_fn = (fn, math, uses_double(preg), pro_types)
        pro_ar = tuple(arange_leaf(l) for l in preg.leaves)
    epi_views, epi_meta = [], []
    if epilogue is not None:
        ereg, eviews = epilogue
        fn, math = region_function(ereg, "epi", prof.lowp_round_each)
        zi, ztypes = {}, []
        for j, (l, v) in enumerate(zip(ereg.leaves, eviews)):
            if v is not None:
                zi[j] = len(ztypes)
                ztypes.append(_leaf_type(l.dtype))
                epi_views.append(v)
        eloads = []
        for li, off, st in ereg.loads:
            if eviews[li] is None:
                eloads.append((-1, "i"))
            else:
                eloads.append((zi[li], "s" if all(x == 0 for x in st) else "i"))
                epi_meta.append(off)
        epi_key = (fn, math, uses_double(ereg), _leaf_type(ereg.dtype), tuple(ztypes), tuple(eloads),
                   uses_low(ereg))
    src_v, src_i = (None if prologue is not None else ins[0]), None
    for i, p in enumerate(passes):
        views = []
        if p.final:
            views.append(out)
        else:
            (vo, vs), (io, is_) = regions[i]
            m = p.outputs * p.S
            views.append(ctx.scratch.sub(vo, vs, (m,), np.int64 if w64 else xn.dtype))
            if pair:
                views.append(ctx.scratch.sub(io, is_, (m,), dt.int32))
        nxt = list(views)
        meta = {"n_out": p.n_out, "R": p.R, "S": p.S, "C": p.C, "count": count,
                "kept_n": [n for n, _ in p.kept], "kept_st": [s for _, s in p.kept],
                "red_n": [n for n, _ in p.red], "red_st": [s for _, s in p.red]}
        if p.first and prologue is not None:
            pm, modes = _prologue_meta(p, per, preg.loads, preg.leaves)
            meta.update(pm)
            pro_key = pro_fn + (modes, pro_ar, uses_low(preg))
            views += list(pviews)
        else:
            views.append(src_v)
        if pair and not p.first:
            views.append(src_i)
        if p.final and epilogue is not None:
            if epi_meta:
                meta["epi_off"] = epi_meta
            views += epi_views
        if p.final and w64:
            shape = xn.shape
            views.append(ctx.check(lambda w, o=op.value: overflow_error(o, shape, axes)))
        if p.first and prologue is not None:
            wide = _wide_leaves(modes, len(pviews), p.vec)
            fmts = [texel_format(ctx.dev, v, 4 if w else 1) for v, w in zip(pviews, wide)]
        else:
            fmts = [texel_format(ctx.dev, src_v, p.vec)]
        tex = tuple(fmts) if any(f is not None for f in fmts) else ()
        unroll = (prologue_unroll(prof.reduce_unroll, p.vec, preg.weight)
                  if p.first and prologue is not None else prof.reduce_unroll)
        k = ctx.kernel(program(op, xn.dtype.name, p.kind, len(p.kept), len(p.red), p.lx, p.vec,
                               p.first, p.final, pro_key if p.first else None,
                               epi_key if p.final else None, tex, unroll, p.kvec))
        # its run of C loads (the block and step loops, at most 2C heads), the tree over a
        # row's partials, a fused prologue's library calls per element loaded and an
        # epilogue's per output, of which a kvec thread stores four (`Dispatch.heads`)
        heads = (2 * p.C + 32 + (p.C * p.vec * region_heads(preg) if p.first and prologue is not None else 0)
                 + ((p.vec if p.kvec else 1) * region_heads(epilogue[0]) if p.final and epilogue is not None
                    else 0))
        if p.kind == "row":
            ctx.dispatch(k, meta, views, groups=p.n_out * p.S, heads=heads)
        else:
            ctx.dispatch(k, meta, views, threads=p.n_out * p.S, heads=heads)
        if not p.final:
            src_v, src_i = nxt[0], (nxt[1] if pair else None)
