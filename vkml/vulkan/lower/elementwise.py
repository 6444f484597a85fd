"""Elementwise kernels: one `Program` per (expression, dtypes, rank, arity).

Every operand, the output included, is addressed as offset + sum(index * stride) with
shapes and strides read from the dispatch's meta, so broadcasting (stride 0), slicing,
permuting and flipping (negative strides) are all the same kernel. Movement operators
lower onto `strided`, the generic form used here.

Fused regions (`vulkan/regions.py`, scheduled by `vulkan/fusion.py`) lower through
`lower_region`: the region's SSA becomes one GLSL function of its loaded values
(`region_function`), called once per element (or W times per thread where every operand
can be read W elements at a time); a single elementwise node is a region of one
operator. The operators' GLSL is the table in `lower/expressions.py`.

>>> import vkml.numpy as vnp
>>> p = strided_program("Copy", "a", ("float",), "float", 1)
>>> [name for name, _ in p.meta.fields]
['n', 'shape', 'o_offset', 'o_strides', 'x0_offset', 'x0_strides', 'div']
>>> vnp.asarray([1.0, 2.0, 3.0])[::-1].numpy().tolist()
[3.0, 2.0, 1.0]
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

from ...trace import dtypes as dt
from ...trace.ops import OpKind
from ...trace.shapes import contiguous_strides
from ..kernels import divisor, texel_format
from ..program import Meta, Program
from ..regions import build_region
from . import lowp, ranges
from .vectors import pack, unpack, wide_type
from .expressions import (LIB_HEADS, SHADERS, SMALL_ARG_EXPR, expression, integer_pow_lines, literal, math_library,
                          op_expr, op_heads, op_weight)

__all__ = ["MAX_RANK", "SHADERS", "bcast_layout", "collapse", "expression", "integer_pow_lines", "literal",
           "lower", "lower_region", "math_library", "op_weight", "progression", "arange_leaf",
           "region_function", "strided", "strided_program", "texel_format", "uses_double"]

MAX_RANK = 8


def _precise(T: str) -> str:
    """`precise ` for a float value of a fused region: no multiply and add of one region
    may be contracted into an fma (NVIDIA's compiler does, lavapipe does not), so a fused
    chain gives bit for bit what the same operators give one kernel each (eager, lazy and
    jitted programs whose fusion differs agree, and a resumed optimizer matches)."""
    return "precise " if T in ("float", "double") else ""


def collapse(shape: Sequence[int], layouts: Sequence[Sequence[int]]):
    """Merge adjacent axes that are contiguous for every operand; drop size-1 axes.

    layouts are per-operand stride tuples; returns (shape, [strides...]).

    >>> collapse((2, 3, 4), [(12, 4, 1), (0, 4, 1)])
    ((2, 12), [(12, 1), (0, 1)])
    """
    dims = [(d, [s[i] for s in layouts]) for i, d in enumerate(shape) if d != 1]
    if not dims:
        return (), [() for _ in layouts]
    out = [dims[0]]
    for d, st in dims[1:]:
        pd, pst = out[-1]
        if all(ps == s * d for ps, s in zip(pst, st)):
            out[-1] = (pd * d, st)
        else:
            out.append((d, st))
    return tuple(d for d, _ in out), [tuple(st[k] for _, st in out) for k in range(len(layouts))]


@lru_cache(maxsize=1024)
def strided_program(name: str, expr: str, in_types: tuple, out_type: str, rank: int,
                    math: bool = False) -> Program:
    """o[po] = expr over the operands a, b, c (x0[p0], x1[p1], ...) for every index of a
    rank-`rank` shape; po and the p_j from each operand's offset and strides in meta.
    math: expr calls the math library."""
    R, nin = rank, len(in_types)
    p = Program(name)
    fields = [("n", 1), ("shape", R), ("o_offset", 1), ("o_strides", R)]
    for j in range(nin):
        fields += [(f"x{j}_offset", 1), (f"x{j}_strides", R)]
    p.meta = Meta(*fields, ("div", 2 * R))      # (m, s) of `kernels.divisor` per axis
    o = p.buffer("o", out_type)
    xs = [p.buffer(f"x{j}", t, readonly=True) for j, t in enumerate(in_types)]
    if math:
        math_library(p, "double" in in_types or out_type == "double")
    lines = ["uint gi = gidx();", f"if (gi >= uint({p.m('n')})) return;",
             "int rem = int(gi);", f"int po = {p.m('o_offset')};"]
    lines += [f"int p{j} = {p.m(f'x{j}_offset')};" for j in range(nin)]
    if R == 1:   # the common contiguous/broadcast-scalar case: no division at all
        lines.append(f"po += rem * {p.m('o_strides', 0)};")
        lines += [f"p{j} += rem * {p.m(f'x{j}_strides', 0)};" for j in range(nin)]
    elif R:
        lines.append(f"for (int d = {R - 1}; d >= 0; --d) {{")
        lines.append(f"  int q = int(udiv(uint(rem), {p.m('div', '2 * d')}, {p.m('div', '2 * d + 1')}));")
        lines.append(f"  int c = rem - q * {p.m('shape', 'd')}; rem = q;")
        lines.append(f"  po += c * {p.m('o_strides', 'd')};")
        lines += [f"  p{j} += c * {p.m(f'x{j}_strides', 'd')};" for j in range(nin)]
        lines.append("}")
    lines += [f"{t} {'abc'[j]} = {x}[p{j}];" for j, (t, x) in enumerate(zip(in_types, xs))]
    lines.append(f"{o}[po] = {out_type}({expr});")
    p.main(*lines)
    return p


def strided(ctx, name: str, expr: str, out, out_layout, ins, in_layouts, shape, math: bool = False) -> None:
    """Dispatch o[out_layout(i)] = expr(x_j[in_layout_j(i)]) for every index i of shape.

    A layout is (element offset, strides); views give the buffers and dtypes; expr is
    GLSL over the operands a, b, c (math: it calls the math library).
    """
    n = 1
    for d in shape:
        n *= d
    if n == 0:
        return
    shp, strides = collapse(shape, [out_layout[1]] + [l[1] for l in in_layouts])
    if len(shp) > MAX_RANK:
        raise ValueError(f"{name}: {len(shp)} non-mergeable axes exceed the kernel limit of {MAX_RANK}")
    meta = {"n": n, "shape": shp, "o_offset": out_layout[0], "o_strides": strides[0],
            "div": [x for d in shp for x in divisor(d)]}
    for j, ((off, _), st) in enumerate(zip(in_layouts, strides[1:])):
        meta[f"x{j}_offset"], meta[f"x{j}_strides"] = off, st
    in_types = tuple(dt.glsl_type(v.dtype) for v in ins)
    k = ctx.kernel(strided_program(name, expr, in_types, dt.glsl_type(out.dtype), len(shp), math))
    # its loop over the axes; a math call's loops at most the library's longest (`LIB_HEADS`)
    ctx.dispatch(k, meta, [out, *ins], threads=n, heads=len(shp) + (max(LIB_HEADS.values()) if math else 0))


def bcast_layout(in_shape: Sequence[int], out_shape: Sequence[int]):
    """(0, strides) reading a contiguous in_shape broadcast against out_shape.

    >>> bcast_layout((3, 1), (2, 3, 4))
    (0, (0, 1, 0))
    """
    st = contiguous_strides(in_shape)
    pad = len(out_shape) - len(in_shape)
    return (0, tuple([0] * pad + [0 if d == 1 else s for d, s in zip(in_shape, st)]))


# --------------------------------------------------------------------------- regions



def region_function(reg, name: str, round_each: bool = False) -> tuple[str, bool]:
    """GLSL `T name(T0 a0, ...)` computing the region's root from its loaded values (one
    parameter per load, in load order); and whether it calls the math library.

    16-bit floats are float32 values here; an explicit Cast to or from one rounds to it,
    and with round_each (`profile.lowp_round_each`) so does every operator with a 16-bit
    result (else the store rounds the root once).

    >>> import vkml, vkml.numpy as vnp
    >>> from vkml.vulkan.regions import build_region
    >>> g = vkml.make_graph(lambda x: vnp.exp(x) * 2.0, vnp.ones(4))
    >>> src, math = region_function(build_region(g.outputs[0], lambda n: n.op is not OpKind.Input), "f")
    >>> print(src, math)
    float f(float a0) {
      precise float v1 = float(vk_exp(a0));
      precise float v3 = float((v1 * 2.0));
      return float(v3);
    }
     True
    """
    params = [""] * len(reg.loads)
    names: dict[int, str] = {}
    lines = []
    math = False
    exact: set[int] = set()    # values already of their (16-bit) dtype: no rounding needed
    # bounds only where a float32 sin or cos could use them (most regions have none)
    bound = ranges.bounds(reg) if any(
        ins[0] == "op" and ins[1] in SMALL_ARG_EXPR and dt.compute_type(ins[2]) == "float"
        for ins in reg.code) else None
    for i, ins in enumerate(reg.code):
        if ins[0] == "load":
            params[ins[1]] = f"{dt.compute_type(reg.types[i])} a{ins[1]}"
            names[i] = f"a{ins[1]}"
            exact.add(i)
        elif ins[0] == "const":
            names[i] = literal(ins[1], ins[2])
            exact.add(i)
        else:
            _, op, in_dt, out_dt, attrs, args = ins
            T = dt.compute_type(out_dt)
            if op is OpKind.IntegerPow:     # a multiplication chain: temporaries
                pre, e = integer_pow_lines(names[args[0]], attrs["exponent"], T, f"v{i}")
                lines += pre
                if dt.is_low(out_dt) and round_each:
                    e = lowp.round_value(out_dt, e)
                    exact.add(i)
                lines.append(f"  {_precise(T)}{T} v{i} = {e};")
                names[i] = f"v{i}"
                continue
            ex = op_expr(op, in_dt, out_dt, attrs)
            if bound and op in SMALL_ARG_EXPR and dt.compute_type(in_dt) == "float" and ranges.small(bound[args[0]]):
                ex = SMALL_ARG_EXPR[op]
            math = math or ex.math
            ops_ = [names[a] for a in args]
            if op is OpKind.Cast and dt.is_low(in_dt) and not dt.is_low(out_dt) and args[0] not in exact:
                # leaving a 16-bit dtype: the value is one of that dtype (as if stored) first
                ops_ = [lowp.round_value(in_dt, ops_[0])]
            e = ex.glsl(dt.compute_type(in_dt), *ops_)
            if op is OpKind.Cast or (op in EXACT and all(a in exact for a in args)):
                exact.add(i)
            elif dt.is_low(out_dt) and round_each:
                e = lowp.round_value(out_dt, e)     # float32 result rounded once
                exact.add(i)
            lines.append(f"  {_precise(T)}{T} v{i} = {T}({e});")
            names[i] = f"v{i}"
    T = dt.compute_type(reg.dtype)
    src = (f"{T} {name}({', '.join(params)}) {{\n" + "".join(l + "\n" for l in lines)
           + f"  return {T}({names[reg.out]});\n}}\n")
    return src, math


# operators whose result on 16-bit values is again one (no rounding needed); Cast rounds itself
EXACT = frozenset({OpKind.Neg, OpKind.Abs, OpKind.Copy, OpKind.StopGradient, OpKind.Maximum, OpKind.Minimum,
                   OpKind.Where, OpKind.Relu, OpKind.Floor, OpKind.Ceil, OpKind.Trunc, OpKind.Rint,
                   OpKind.Sign, OpKind.Cast})


def uses_low(reg, leaf_views=()) -> bool:
    """Whether the region holds a 16-bit float anywhere (its kernel needs `lowp`)."""
    return any(dt.is_low(t) for t in reg.types) or dt.is_low(reg.dtype) or any(
        dt.is_low(v.dtype) for v in leaf_views)


def uses_double(reg) -> bool:
    """Whether any value of the region is float64 (its kernel needs the float64 math)."""
    return any(np.dtype(t) == dt.float64 for t in reg.types)


def _vec_modes(shp, loads, W: int) -> list[str] | None:
    """Per load, how a thread handling W consecutive elements reads it: 'v' one wide load
    (contiguous and W-aligned), 's' one scalar for all W (broadcast along the innermost
    axis), 'g' W scalar loads; None when the innermost axis does not split in W."""
    if not shp or shp[-1] % W:
        return None
    modes = []
    for off, st in loads:
        if st[-1] == 0:
            modes.append("s")
        elif st[-1] == 1 and off % W == 0 and all(s % W == 0 for s in st[:-1]):
            modes.append("v")
        else:
            modes.append("g")
    return modes


CODE_BUDGET = 1000    # a region's weight times the elements a thread computes


def _width(dtypes, dev, weight: int) -> int:
    """Elements per thread in the vector path (1: none). Where the profile moves 32-bit
    data as uint64 pairs (`wide_loads`: lavapipe pays per loaded component and lane),
    eight per u64vec4; the region's code is repeated per element, within the
    compile-time budget."""
    wide = dev.profile.wide_loads and all(dt.itemsize(d) in (2, 4) for d in dtypes)
    for w in ((8, 4) if wide else (4,)):
        if w * weight <= CODE_BUDGET:
            return w
    return 1


def lower_region(reg, leaf_views: Sequence, out, ctx) -> None:
    """Dispatch one kernel computing the region into the contiguous view out.

    leaf_views are the views of reg.leaves (one binding each). Shapes, strides and
    offsets travel in meta, so one kernel serves every shape of the same computation.
    On large arrays (`profile.vectorize`, from `profile.vector_min` elements) whose
    innermost axis splits in W, a thread computes W consecutive elements: one wide load
    per contiguous aligned operand, one scalar per operand broadcast along that axis, W
    scalars (a gather) otherwise, and one wide store; and it does so for R such groups a
    workgroup apart. Index decoding (integer division, which lavapipe cannot vectorise)
    happens only when the axes every operand agrees on do not merge into one, and then
    once per W elements. Where the profile says so (`texels`: CPU devices) float32 leaves
    are read as texels (`texel_format`), the same loads without lavapipe's per-lane loop.

    >>> import vkml, vkml.numpy as vnp
    >>> vkml.jit(lambda x: vnp.exp(x.T) + 1.0)(vnp.zeros((2, 3))).shape
    (3, 2)
    """
    n = 1
    for d in reg.shape:
        n *= d
    if n == 0:
        return
    if reg.code[reg.out][0] == "const":
        raise AssertionError("a region of one constant is lowered as a fill (executor._lower_group)")
    prof = ctx.profile
    shp, st = collapse(reg.shape, [contiguous_strides(reg.shape)] + [l[2] for l in reg.loads])
    loads = [(l[1], s) for l, s in zip(reg.loads, st[1:])]
    K = len(shp)
    W = _width([v.dtype for v in leaf_views] + [out.dtype], ctx.dev, reg.weight)
    # small kernels keep the one generic program per computation and rank (fewer compiles)
    modes = _vec_modes(shp, loads, W) if prof.vectorize and W > 1 and n >= prof.vector_min else None
    if modes is None:
        W, modes = 1, ["s"] * len(loads)
    else:
        shp = shp[:-1] + (shp[-1] // W,)
    # a wide binding only where every load of that leaf is a wide load
    wide_leaf = [all(m == "v" for (li, _, _), m in zip(reg.loads, modes) if li == j)
                 and any(li == j for li, _, _ in reg.loads) for j in range(len(reg.leaves))]
    modes = [("g" if not wide_leaf[li] else m) if m == "v" else m
             for (li, _, _), m in zip(reg.loads, modes)]
    meta = {"nv": n // W, "shape": shp, "div": [x for d in shp for x in divisor(d)]}
    for j, ((off, s), m) in enumerate(zip(loads, modes)):
        if m == "v":
            meta[f"off{j}"], meta[f"st{j}"] = off // W, [*[x // W for x in s[:-1]], 1]
        elif m == "g":
            meta[f"off{j}"], meta[f"st{j}"], meta[f"step{j}"] = off, [*s[:-1], W * s[-1]], s[-1]
        else:
            meta[f"off{j}"], meta[f"st{j}"] = off, s
    nv = n // W
    R = _rounds(nv, W, reg.weight)
    lx = _local_size(ctx.dev, -(-nv // R))
    texels = tuple(texel_format(ctx.dev, v, W if wide else 1) for v, wide in zip(leaf_views, wide_leaf))
    name = reg.root.op.value if reg.n_ops <= 1 else f"Fused{reg.n_ops}"
    each = prof.lowp_round_each and uses_low(reg, leaf_views)
    key = (_signature(reg), tuple(str(v.dtype) for v in leaf_views), tuple(modes), tuple(wide_leaf),
           K, W, R, lx, texels, name, each)
    prog = _PROGRAMS.get(key)
    if prog is None:
        prog = _region_program(reg, leaf_views, modes, wide_leaf, K, W, R, lx, texels, name, each)
        if len(_PROGRAMS) > 4096:
            _PROGRAMS.clear()
        _PROGRAMS[key] = prog
    ctx.dispatch(ctx.kernel(prog), meta, [out, *leaf_views], groups=-(-nv // (R * lx)),
                 heads=R * W * region_heads(reg))


_PROGRAMS: dict = {}      # region signature and layout -> its Program (eager ops repeat)


def region_heads(reg) -> int:
    """Loop heads one element of a region may run, at most: its operators' library calls
    (the region's own code is straight-line)."""
    return sum(op_heads(ins[1], ins[2], ins[3], ins[4]) for ins in reg.code
               if ins[0] not in ("load", "const"))


def arange_leaf(node) -> tuple | None:
    """(start, step) of an integer Const that holds start + step * i (an Arange that
    simplify computed at compile time), else None. A region reads such a leaf as that
    expression of the element's index, not as a load: on lavapipe an integer load is a
    per-lane loop (the cross-entropy's one-hot gradient read the class indices ten times
    per element)."""
    a = node.attrs.get("arange") if node.op is OpKind.Const else None
    return tuple(a) if a is not None else None


def progression(a: tuple, idx: str) -> str:
    """GLSL of the value at element index idx of the progression a = (start, step).

    >>> progression((3, -2), "i")
    '(3 + -2 * (i))'
    """
    return f"({a[0]} + {a[1]} * ({idx}))"


def _signature(reg) -> tuple:
    """What the generated program depends on: the SSA with its types and attributes (the
    shapes, strides and offsets travel in meta)."""
    sig = [tuple(arange_leaf(n) for n in reg.leaves)]
    for ins in reg.code:
        if ins[0] == "load":
            sig.append(("load", ins[1], reg.loads[ins[1]][0]))
        elif ins[0] == "const":
            sig.append(("const", np.dtype(ins[1]).str, literal(ins[1], ins[2])))
        else:
            _, op, i, o, attrs, args = ins
            sig.append((op, np.dtype(i).str, np.dtype(o).str,
                        tuple(sorted((k, str(v)) for k, v in attrs.items())), args))
    return tuple(sig), reg.out


def _region_program(reg, leaf_views, modes, wide_leaf, K: int, W: int, R: int, lx: int,
                    texels: tuple, name: str, round_each: bool = False) -> Program:
    """The kernel of a region: per load, its offset and K strides in meta (a gather 'g'
    also the step between its W elements); R rounds of W elements per thread."""
    fn, math = region_function(reg, "fused", round_each)
    OT = dt.compute_type(reg.dtype)
    olow = dt.is_low(reg.dtype)
    p = Program(name, local_size=lx)
    fields = [("nv", 1), ("shape", K), ("div", 2 * K)]   # nv: threads' groups of W elements
    for j, m in enumerate(modes):
        fields += [(f"off{j}", 1), (f"st{j}", K)] + ([(f"step{j}", 1)] if m == "g" else [])
    p.meta = Meta(*fields)
    tex = [j < len(texels) and texels[j] is not None for j in range(len(leaf_views))]
    if W == 8:
        p.extension("GL_ARB_gpu_shader_int64")
    if uses_low(reg, leaf_views):
        lowp.setup(p)

    def btype(d, wide: bool) -> str:       # a binding's element type
        if dt.is_low(d):
            return lowp.buffer_type(W if wide and W > 1 else 1)
        T = dt.glsl_type(d)
        return wide_type(T, W) if wide and W > 1 else T
    o = p.buffer("o", btype(reg.dtype, True))
    xs = []
    for j, v in enumerate(leaf_views):
        if tex[j]:
            T = "uint" if dt.is_low(v.dtype) else dt.glsl_type(v.dtype)
            xs.append(p.buffer(f"x{j}", T, readonly=True, texel=texels[j]))
        else:
            xs.append(p.buffer(f"x{j}", btype(v.dtype, wide_leaf[j]), readonly=True))
    if math:
        math_library(p, uses_double(reg))
    p.add(fn, names=("fused",))

    ar = [arange_leaf(n) for n in reg.leaves]

    def fetch(li: int, idx: str) -> str:
        if ar[li] is not None:
            return progression(ar[li], idx)
        if dt.is_low(reg.leaves[li].dtype):
            ref = f"texelFetch({xs[li]}, {idx}).x" if tex[li] else f"{xs[li]}[{idx}]"
            return lowp.load(reg.leaves[li].dtype, ref)
        return f"texelFetch({xs[li]}, {idx}).x" if tex[li] else f"{xs[li]}[{idx}]"
    # R rounds per thread, a workgroup's width apart (neighbouring lanes read neighbouring
    # memory); every round's loads are issued before any round's arithmetic
    L = [f"uint g0 = group_id() * {R * lx}u + lidx();", f"uint nv = uint({p.m('nv')});",
         "if (g0 >= nv) return;"]
    Ws = max(W, 1)
    outs = []
    for k in range(R):
        gi = f"(g0 + {k * lx}u)"
        body = []
        if K > 1:
            body.append(f"int r_{k} = int{gi};")
            for d in range(K - 1, 0, -1):
                body.append(f"int dq{d}_{k} = int(udiv(uint(r_{k}), {p.m('div', 2 * d)}, "
                            f"{p.m('div', 2 * d + 1)}));")
                body.append(f"int c{d}_{k} = r_{k} - dq{d}_{k} * {p.m('shape', d)}; r_{k} = dq{d}_{k};")
            body.append(f"int c0_{k} = r_{k};")
        elif K == 1:
            body.append(f"int c0_{k} = int{gi};")
        args = []
        decl = []
        for j, ((li, _, _), m) in enumerate(zip(reg.loads, modes)):
            T = dt.compute_type(reg.leaves[li].dtype)
            pos = " + ".join([p.m(f"off{j}")] + [f"c{d}_{k} * {p.m(f'st{j}', d)}" for d in range(K)])
            body.append(f"int p{j}_{k} = {pos};")
            if m == "v" and ar[li] is not None:   # W consecutive values of the progression
                # computed inside the round's bounds check, into values declared outside it
                # (p{j}_{k} is local to that block in every round after the first)
                decl += [f"{T} l{j}_{k}_{c} = {T}(0);" for c in range(W)]
                body += [f"l{j}_{k}_{c} = {fetch(li, f'p{j}_{k} * {W} + {c}')};" for c in range(W)]
                args.append([f"l{j}_{k}_{c}" for c in range(W)])
            elif m == "v" and tex[li] and dt.is_low(reg.leaves[li].dtype):   # W 16-bit values: one texel
                ld = reg.leaves[li].dtype
                WT = lowp.buffer_type(W)
                decl.append(f"{WT} l{j}_{k} = {WT}(0);")
                body.append(f"l{j}_{k} = texelFetch({xs[li]}, p{j}_{k}){'.xy' if W == 4 else ''};")
                args.append(lowp.unpack(ld, W, f"l{j}_{k}"))
            elif m == "v" and tex[li]:     # W elements in one (W <= 4) or two 4-wide texels
                halves = ["a", "b"] if W == 8 else [""]
                decl += [f"vec4 l{j}_{k}{h} = vec4(0);" for h in halves]
                body += [f"l{j}_{k}{h} = texelFetch({xs[li]}, {len(halves)} * p{j}_{k} + {q});"
                         for q, h in enumerate(halves)]
                args.append([f"l{j}_{k}{h}.{c}" for h in halves for c in "xyzw"][:W])
            elif m == "v":
                ld = reg.leaves[li].dtype
                WT = btype(ld, True)
                decl.append(f"{WT} l{j}_{k} = {WT}(0);")
                body.append(f"l{j}_{k} = {xs[li]}[p{j}_{k}];")
                args.append(lowp.unpack(ld, W, f"l{j}_{k}") if dt.is_low(ld) else unpack(T, W, f"l{j}_{k}"))
            elif m == "g":
                body.append(f"int q{j}_{k} = {p.m(f'step{j}')};")
                decl += [f"{T} l{j}_{k}_{c} = {T}(0);" for c in range(W)]
                body += [f"l{j}_{k}_{c} = {fetch(li, f'p{j}_{k} + {c} * q{j}_{k}')};" for c in range(W)]
                args.append([f"l{j}_{k}_{c}" for c in range(W)])
            else:
                decl.append(f"{T} l{j}_{k} = {T}(0);")
                body.append(f"l{j}_{k} = {fetch(li, f'p{j}_{k}')};")
                args.append([f"l{j}_{k}"] * Ws)
        L += decl
        if k == 0:
            L += body
        else:
            L.append(f"if ({gi} < nv) {{")
            L += ["  " + x for x in body]
            L.append("}")
        outs.append((gi, args))
    for k, (gi, args) in enumerate(outs):
        L += [f"{OT} r{k}_{c} = fused({', '.join(a[c] for a in args)});" for c in range(Ws)]
        rs = [f"r{k}_{c}" for c in range(Ws)]
        if olow:
            val = lowp.pack(reg.dtype, W, rs) if W > 1 else lowp.store(reg.dtype, rs[0])
        else:
            val = pack(OT, W, rs) if W > 1 else rs[0]
        L.append(f"{o}[{gi}] = {val};" if k == 0 else f"if ({gi} < nv) {o}[{gi}] = {val};")
    p.main(*L)
    return p


def _rounds(nv: int, W: int, weight: int) -> int:
    """Wide loads per thread: several per thread hide lavapipe's per-invocation cost on
    large kernels, within the code budget (each round repeats the region's code W times)."""
    for r in (4, 2):
        if nv >= r * (1 << 14) and r * max(W, 1) * weight <= CODE_BUDGET:
            return r
    return 1


def _local_size(dev, threads: int) -> int:
    """Invocations per workgroup. lavapipe pays for every workgroup, so where the profile
    says so (`large_groups`) a kernel gets large groups once there are enough threads to
    keep every core busy."""
    if dev.profile.large_groups and threads >= 1 << 16:
        return min(1024, dev.max_workgroup_invocations)
    if dev.profile.cpu and threads < 256:
        # a CPU driver runs every invocation of a group, in range or not
        return max(dev.subgroup_size, 1 << (threads - 1).bit_length())
    return 256


def lower(node, ins, out, ctx) -> None:
    """One elementwise node: a region of one operator over its operands."""
    reg = build_region(node, lambda x: False, profile=ctx.profile)
    at = {i.id: v for i, v in zip(node.inputs, ins)}
    lower_region(reg, [at[l.id] for l in reg.leaves], out, ctx)
