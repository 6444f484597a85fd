"""Elementwise kernels: one generated GLSL source per (expression, dtypes, rank, arity).

Every operand, the output included, is addressed as offset + sum(index * stride) with
shapes and strides read from the dispatch's meta ints, so broadcasting (stride 0),
slicing, permuting and flipping (negative strides) are all the same kernel. Movement
operators and the scatters lower onto `strided`, the generic form used here.

Fused regions (`vulkan/fusion.py`) lower through `lower_region`: the region's SSA becomes
one GLSL function of its loaded values, called once per element (or four times per
thread where every operand can be read four elements at a time); a single elementwise
node is a region of one operator.
"""
from __future__ import annotations

import re
import struct
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from ...trace import dtypes as dt
from ...trace.ops import OpKind
from ...trace.shapes import contiguous_strides
from ..kernels import TEXEL_BYTES, TEXEL_FORMATS, binding, divisor, texel_binding, texel_format

SHADERS = Path(__file__).resolve().parent.parent / "shaders"
MAX_RANK = 8


@lru_cache(maxsize=None)
def math_lib(glsl_t: str) -> str:
    """The float32 (and, for double kernels, float64) math functions as GLSL source."""
    src = (SHADERS / "math32.glsl").read_text()
    if glsl_t == "double":
        src += (SHADERS / "math64.glsl").read_text()
    return src


# op -> GLSL expression over operands a, b, c of GLSL type T (the operand type)
_FLOAT_EXPR = {
    OpKind.Neg: "-a",
    OpKind.Reciprocal: "T(1) / a",
    OpKind.Exp: "vk_exp(a)",
    OpKind.Log: "vk_log(a)",
    OpKind.Log1p: "vk_log1p(a)",
    OpKind.Expm1: "vk_expm1(a)",
    OpKind.Sqrt: "sqrt(a)",
    OpKind.Rsqrt: "T(1) / sqrt(a)",
    OpKind.Sin: "vk_sin(a)",
    OpKind.Cos: "vk_cos(a)",
    OpKind.Tanh: "vk_tanh(a)",
    OpKind.Sigmoid: "vk_sigmoid(a)",
    OpKind.Abs: "abs(a)",
    OpKind.Sign: "(isnan(a) ? a : sign(a))",
    OpKind.Erf: "vk_erf(a)",
    OpKind.Erfc: "vk_erfc(a)",
    OpKind.Relu: "((a > T(0) || isnan(a)) ? a : T(0))",
    OpKind.Silu: "(a * vk_sigmoid(a))",
    OpKind.Floor: "floor(a)",
    OpKind.Ceil: "ceil(a)",
    # from floor and ceil, which keep -0: lavapipe's trunc and roundEven lose the sign of a
    # zero result (and its double roundEven rounds 1.5 to 1); halves go to the even
    # neighbour, and a zero result takes its sign from the truncation
    OpKind.Trunc: "((a < T(0)) ? ceil(a) : floor(a))",
    OpKind.Rint: ("(((a - floor(a) > T(0.5)) || (a - floor(a) == T(0.5) && "
                  "floor(a) - T(2) * floor(floor(a) * T(0.5)) != T(0))) ? "
                  "((floor(a) == T(-1)) ? ceil(a) : floor(a) + T(1)) : floor(a))"),
    OpKind.Copy: "a",
    OpKind.StopGradient: "a",
    OpKind.Add: "(a + b)",
    OpKind.Sub: "(a - b)",
    OpKind.Mul: "(a * b)",
    # Vulkan guarantees division only for |b| in [2^-126, 2^126]: vk_div scales the rest
    OpKind.Div: "vk_div(a, b)",
    OpKind.Pow: "vk_pow(a, b)",
    OpKind.FloorDivide: "vk_floordiv(a, b)",
    OpKind.Remainder: "vk_remainder(a, b)",
    OpKind.Maximum: "((a > b || isnan(a)) ? a : b)",
    OpKind.Minimum: "((a < b || isnan(a)) ? a : b)",
}
_INT_EXPR = {
    OpKind.Neg: "-a", OpKind.Abs: "abs(a)", OpKind.Sign: "sign(a)", OpKind.Relu: "max(a, 0)",
    OpKind.Copy: "a", OpKind.StopGradient: "a", OpKind.Add: "(a + b)", OpKind.Sub: "(a - b)", OpKind.Mul: "(a * b)",
    OpKind.Maximum: "max(a, b)", OpKind.Minimum: "min(a, b)", OpKind.Pow: "vk_ipow(a, b)",
    # bool is a 0/1 word: and, or and xor of two bools stay 0/1 (BitwiseNot is below)
    OpKind.BitwiseAnd: "(a & b)", OpKind.BitwiseOr: "(a | b)", OpKind.BitwiseXor: "(a ^ b)",
    # GLSL leaves counts outside [0, 32) undefined: NumPy's answers are 0 for a left
    # shift and the sign (a >> 31: 0 or -1) for the arithmetic right shift
    OpKind.ShiftLeft: "((uint(b) < 32u) ? (a << b) : 0)",
    OpKind.ShiftRight: "((uint(b) < 32u) ? (a >> b) : (a >> 31))",
    # NumPy's floor division from the truncating one: one less where the truncated
    # remainder is non-zero with the sign opposite to b's; b == 0 gives 0 and b == -1 is
    # -a (INT_MIN / -1 is undefined in SPIR-V, NumPy wraps it)
    OpKind.FloorDivide: ("((b == 0) ? 0 : ((b == -1) ? -a : ((a / b) - "
                         "((((a - (a / b) * b) ^ b) < 0 && (a - (a / b) * b) != 0) ? 1 : 0))))"),
    OpKind.Remainder: ("((b == 0 || b == -1) ? 0 : ((a - (a / b) * b) + "
                       "((((a - (a / b) * b) ^ b) < 0 && (a - (a / b) * b) != 0) ? b : 0)))"),
}
_CMP = {OpKind.Equal: "==", OpKind.NotEqual: "!=", OpKind.Less: "<", OpKind.LessEqual: "<=",
        OpKind.Greater: ">", OpKind.GreaterEqual: ">="}


def expression(op: OpKind, in_dtype: np.dtype, out_dtype: np.dtype, attrs: dict) -> str:
    """The GLSL expression computing op on operands a, b, c."""
    T = dt.glsl_type(in_dtype)
    fl = dt.is_float(in_dtype)
    if op in _CMP:
        return f"((a {_CMP[op]} b) ? 1 : 0)"
    if op is OpKind.Where:
        return "((a != 0) ? b : c)"
    if op is OpKind.Cast:
        dst = np.dtype(out_dtype)
        if dst == dt.bool_:
            return "((a != " + (f"{T}(0)" if fl else "0") + ") ? 1 : 0)"
        return f"{dt.glsl_type(dst)}(a)"
    if op is OpKind.BitwiseNot:
        return "(a ^ 1)" if np.dtype(in_dtype) == dt.bool_ else "(~a)"
    if op is OpKind.IntegerPow:
        lines, e = integer_pow_lines("a", attrs["exponent"], T, "t")
        if lines:
            raise NotImplementedError("IntegerPow needs statements: use integer_pow_lines")
        return e
    if op is OpKind.Gelu:
        if attrs.get("approximate"):
            e = "(T(0.5) * a * (T(1) + vk_tanh(T(0.7978845608028654) * (a + T(0.044715) * a * a * a))))"
        else:
            e = "(T(0.5) * a * vk_erfc(-a * T(0.7071067811865476)))"
        return e.replace("T(", f"{T}(")
    table = _FLOAT_EXPR if fl else _INT_EXPR
    if op not in table:
        raise NotImplementedError(f"{op.value}: no elementwise expression for dtype {in_dtype}")
    return table[op].replace("T(", f"{T}(")


def integer_pow_lines(x: str, e, T: str, v: str) -> tuple[list[str], str]:
    """GLSL statements (temporaries v_0, v_1, ...) and the final expression of x ** e for
    IntegerPow: binary exponentiation of |e|'s integer part k (x ** 1 is x itself, no
    multiplication by 1), times sqrt for a half, then the reciprocal for e < 0.

    The halves other than 0.5 work on |x| and give nan for finite x < 0: that is C's pow
    at -0 and -inf (NumPy's answer there); x ** 0.5 is sqrt(x), which NumPy's power is.

    >>> integer_pow_lines("a", 5, "float", "t")
    (['  float t_0 = a * a;', '  float t_1 = t_0 * t_0;', '  float t_2 = a * t_1;'], 't_2')
    """
    lines: list[str] = []

    def new(expr: str) -> str:
        name = f"{v}_{len(lines)}"
        lines.append(f"  {T} {name} = {expr};")
        return name
    if e == 0.5 and isinstance(e, float):
        return lines, f"sqrt({x})"
    half = isinstance(e, float)
    k = int(abs(e))
    base = new(f"abs({x})") if half else x
    r, b = None, base
    while k:
        if k & 1:
            r = b if r is None else new(f"{r} * {b}")
        k >>= 1
        if k:
            b = new(f"{b} * {b}")
    if half:
        s = new(f"sqrt({base})")
        r = s if r is None else new(f"{r} * {s}")
    if r is None:
        r = f"{T}(1)"
    if e < 0:
        r = new(f"{T}(1) / {r}")
    if half:
        r = f"(({x} >= {T}(0) || isinf({x})) ? {r} : sqrt({x}))"
    return lines, r


def collapse(shape: Sequence[int], layouts: Sequence[Sequence[int]]):
    """Merge adjacent axes that are contiguous for every operand; drop size-1 axes.

    layouts are per-operand stride tuples; returns (shape, [strides...]).
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


@lru_cache(maxsize=None)
def _source(expr: str, in_types: tuple, out_type: str, rank: int) -> str:
    nin = len(in_types)
    uses_double = "double" in in_types or out_type == "double"
    src = [binding(1, out_type, "o")]
    for j, t in enumerate(in_types):
        src.append(binding(2 + j, t, "x%d" % j, readonly=True))
    if "vk_" in expr:   # the math library only where the expression calls into it
        src.append(math_lib("double" if uses_double else "float"))
    R = rank
    base = [2 + 2 * R + j * (R + 1) for j in range(nin)]
    lines = ["void main() {", "  uint gi = gidx();", "  if (gi >= uint(meta[0])) return;",
             "  int rem = int(gi);", f"  int po = meta[{1 + R}];"]
    lines += [f"  int p{j} = meta[{base[j]}];" for j in range(nin)]
    if R == 1:   # the common contiguous/broadcast-scalar case: no division at all
        lines.append(f"  po += rem * meta[{2 + R}];")
        lines += [f"  p{j} += rem * meta[{base[j] + 1}];" for j in range(nin)]
    elif R:
        dv = 2 + 2 * R + nin * (R + 1)      # (m, s) per axis after the operands' layouts
        lines.append(f"  for (int d = {R - 1}; d >= 0; --d) {{")
        lines.append(f"    int q = int(udiv(uint(rem), meta[{dv} + 2 * d], meta[{dv + 1} + 2 * d]));")
        lines.append("    int c = rem - q * meta[1 + d]; rem = q;")
        lines.append(f"    po += c * meta[{2 + R} + d];")
        lines += [f"    p{j} += c * meta[{base[j] + 1} + d];" for j in range(nin)]
        lines.append("  }")
    names = "abc"
    lines += [f"  {t} {names[j]} = x{j}[p{j}];" for j, t in enumerate(in_types)]
    lines.append(f"  o[po] = {out_type}({expr});")
    lines.append("}")
    return "".join(src) + "\n".join(lines) + "\n"


def strided(ctx, name: str, expr: str, out, out_layout, ins, in_layouts, shape) -> None:
    """Dispatch o[out_layout(i)] = expr(x_j[in_layout_j(i)]) for every index i of shape.

    A layout is (element offset, strides); views give the buffers and dtypes.
    """
    n = 1
    for d in shape:
        n *= d
    if n == 0:
        return
    shp, strides = collapse(shape, [out_layout[1]] + [l[1] for l in in_layouts])
    if len(shp) > MAX_RANK:
        raise ValueError(f"{name}: {len(shp)} non-mergeable axes exceed the kernel limit of {MAX_RANK}")
    R = len(shp)
    meta = [n, *shp, out_layout[0], *strides[0]]
    for (off, _), st in zip(in_layouts, strides[1:]):
        meta += [off, *st]
    for d in shp:
        meta += divisor(d)
    in_types = tuple(dt.glsl_type(v.dtype) for v in ins)
    body = _source(expr, in_types, dt.glsl_type(out.dtype), R)
    k = ctx.kernel(name, body, 1 + len(ins))
    ctx.dispatch(k, meta, [out, *ins], writes=(0,), threads=n)


def bcast_layout(in_shape: Sequence[int], out_shape: Sequence[int]):
    """(0, strides) reading a contiguous in_shape broadcast against out_shape."""
    st = contiguous_strides(in_shape)
    pad = len(out_shape) - len(in_shape)
    return (0, tuple([0] * pad + [0 if d == 1 else s for d, s in zip(in_shape, st)]))



# --------------------------------------------------------------------------- regions

_OPERAND = re.compile(r"\b([abc])\b")
_VEC = {"float": "vec4", "double": "dvec4", "int": "ivec4"}


def literal(dtype, value) -> str:
    """An exact GLSL literal of dtype (a Full constant folded into a kernel).

    >>> literal(np.float32, 2), literal(np.float32, 0.1), literal(np.int32, -3)
    ('2.0', 'uintBitsToFloat(0x3dcccccdu)', '(-3)')
    """
    d = np.dtype(dtype)
    if d == dt.float32:
        f = np.float32(value)
        if np.isfinite(f) and f == np.trunc(f) and abs(f) < 2 ** 24:
            return f"({float(f)!r})" if f < 0 else repr(float(f))
        (bits,) = struct.unpack("<I", struct.pack("<f", f))
        return f"uintBitsToFloat(0x{bits:08x}u)"
    if d == dt.float64:
        v = float(value)
        if np.isfinite(v) and v == int(v) and abs(v) < 2 ** 53:
            return f"({v!r}lf)" if v < 0 else f"{v!r}lf"
        lo, hi = struct.unpack("<II", struct.pack("<d", v))
        return f"packDouble2x32(uvec2(0x{lo:08x}u, 0x{hi:08x}u))"
    if d == dt.bool_:
        return "1" if value else "0"
    v = int(value)
    if v == -2 ** 31:
        return "int(0x80000000u)"
    return str(v) if v >= 0 else f"({v})"


def region_function(reg, name: str) -> tuple[str, bool]:
    """GLSL `T name(T0 a0, ...)` computing the region's root from its loaded values (one
    parameter per load, in load order); and whether it calls the math library."""
    params = [""] * len(reg.loads)
    names: dict[int, str] = {}
    lines = []
    math = False
    for i, ins in enumerate(reg.code):
        if ins[0] == "load":
            params[ins[1]] = f"{dt.glsl_type(reg.types[i])} a{ins[1]}"
            names[i] = f"a{ins[1]}"
        elif ins[0] == "const":
            names[i] = literal(ins[1], ins[2])
        else:
            _, op, in_dt, out_dt, attrs, args = ins
            T = dt.glsl_type(out_dt)
            if op is OpKind.IntegerPow:     # a multiplication chain: temporaries
                pre, e = integer_pow_lines(names[args[0]], attrs["exponent"], T, f"v{i}")
                lines += pre
                lines.append(f"  {T} v{i} = {e};")
                names[i] = f"v{i}"
                continue
            e = expression(op, in_dt, out_dt, attrs)
            math = math or "vk_" in e
            e = _OPERAND.sub(lambda m: names[args["abc".index(m.group(1))]], e)
            lines.append(f"  {T} v{i} = {T}({e});")
            names[i] = f"v{i}"
    T = dt.glsl_type(reg.dtype)
    src = (f"{T} {name}({', '.join(params)}) {{\n" + "".join(l + "\n" for l in lines)
           + f"  return {T}({names[reg.out]});\n}}\n")
    return src, math


# rough code size of the math library's functions (in simple operations), for the
# compile-time budget of fused kernels: lavapipe's compile time grows faster than linearly
# with a kernel's size, and sin/cos (range reduction) dwarf an add
_WEIGHT = {"vk_sin": 40, "vk_cos": 40, "vk_pow": 40, "vk_floordiv": 30, "vk_remainder": 25, "vk_erf": 30, "vk_erfc": 30, "vk_tanh": 20,
           "vk_expm1": 20, "vk_log1p": 15, "vk_log": 15, "vk_exp": 10, "vk_sigmoid": 12}
_CALL = re.compile(r"\b(vk_\w+)\(")


@lru_cache(maxsize=None)
def op_weight(op: OpKind, in_dtype: np.dtype, out_dtype: np.dtype, approximate=None,
              exponent=None) -> int:
    """Code size of one elementwise operator, in simple operations (double math counts
    twice: its polynomials are longer). IntegerPow: its multiplications."""
    if op is OpKind.IntegerPow:
        return 1 + len(integer_pow_lines("a", exponent, dt.glsl_type(in_dtype), "t")[0])
    e = expression(op, in_dtype, out_dtype, {"approximate": approximate})
    w = 1 + sum(_WEIGHT.get(f, 10) for f in _CALL.findall(e))
    return w * 2 if np.dtype(in_dtype) == dt.float64 and w > 1 else w


def uses_double(reg) -> bool:
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


VECTORIZE = True      # tests turn it off to compare the one-element-per-thread path
VECTOR_MIN = 1 << 14  # elements below which a kernel is not worth a specialised source


CODE_BUDGET = 1000    # a region's weight times the elements a thread computes


def _width(dtypes, dev, weight: int) -> int:
    """Elements per thread in the vector path (1: none). A CPU device (lavapipe) pays per
    loaded component and lane, so 32-bit data moves as uint64 pairs, eight per u64vec4;
    the region's code is repeated per element, within the compile-time budget."""
    wide = dev.profile.cpu and dev.has_int64 and all(dt.itemsize(d) == 4 for d in dtypes)
    for w in ((8, 4) if wide else (4,)):
        if w * weight <= CODE_BUDGET:
            return w
    return 1


def _wide_type(T: str, W: int) -> str:
    return "u64vec4" if W == 8 else _VEC[T]


def _unpack(T: str, W: int, v: str) -> list[str]:
    """The W elements of the wide value v."""
    if W == 4:
        return [f"{v}.{c}" for c in "xyzw"]
    conv = "uintBitsToFloat" if T == "float" else "ivec2"
    return [f"{conv}(unpackUint2x32({v}.{c}))[{k}]" for c in "xyzw" for k in range(2)]


def _pack(T: str, W: int, vals: list[str]) -> str:
    if W == 4:
        return f"{_VEC[T]}({', '.join(vals)})"
    conv = "floatBitsToUint" if T == "float" else "uvec2"
    pairs = [f"packUint2x32({conv}({T[0] if T != 'float' else ''}vec2({vals[2 * i]}, {vals[2 * i + 1]})))"
             for i in range(4)]
    return f"u64vec4({', '.join(pairs)})"


def lower_region(reg, leaf_views: Sequence, out, ctx) -> None:
    """Dispatch one kernel computing the region into the contiguous view out.

    leaf_views are the views of reg.leaves (one binding each). Shapes, strides and
    offsets travel in meta, so one kernel serves every shape of the same computation.
    On large arrays whose innermost axis splits in W, a thread computes W consecutive
    elements: one wide load per contiguous aligned operand, one scalar per operand
    broadcast along that axis, W scalars (a gather) otherwise, and one wide store; and
    it does so for R such groups a workgroup apart. Index decoding (integer division,
    which lavapipe cannot vectorise) happens only when the axes every operand agrees on
    do not merge into one, and then once per W elements. On CPU devices float32 leaves
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
        # a constant alone: its value in meta, so one fill kernel serves every value
        from .fill import fill_view
        fill_view(ctx, out, reg.code[reg.out][2])
        return
    shp, st = collapse(reg.shape, [contiguous_strides(reg.shape)] + [l[2] for l in reg.loads])
    loads = [(l[1], s) for l, s in zip(reg.loads, st[1:])]
    K = len(shp)
    W = _width([v.dtype for v in leaf_views] + [out.dtype], ctx.dev, reg.weight)
    # small kernels keep the one generic source per computation and rank (fewer compiles)
    modes = _vec_modes(shp, loads, W) if VECTORIZE and W > 1 and n >= VECTOR_MIN else None
    if modes is None:
        W, modes = 1, ["s"] * len(loads)
    else:
        shp = shp[:-1] + (shp[-1] // W,)
    # a wide binding only where every load of that leaf is a wide load
    wide_leaf = [all(m == "v" for (li, _, _), m in zip(reg.loads, modes) if li == j)
                 and any(li == j for li, _, _ in reg.loads) for j in range(len(reg.leaves))]
    modes = [("g" if not wide_leaf[li] else m) if m == "v" else m
             for (li, _, _), m in zip(reg.loads, modes)]
    meta = [n // W, *shp]
    for d in shp:
        meta += divisor(d)
    for (off, s), m in zip(loads, modes):
        if m == "v":
            meta += [off // W, *[x // W for x in s[:-1]], 1]
        elif m == "g":
            meta += [off, *s[:-1], W * s[-1], s[-1]]
        else:
            meta += [off, *s]
    nv = n // W
    R = _rounds(nv, W, reg.weight)
    lx = _local_size(ctx.dev, -(-nv // R))
    texels = tuple(texel_format(ctx.dev, v, W if wide else 1) for v, wide in zip(leaf_views, wide_leaf))
    key = (_signature(reg), tuple(str(v.dtype) for v in leaf_views), tuple(modes), tuple(wide_leaf),
           K, W, R, lx, texels)
    body = _SOURCES.get(key)
    if body is None:
        body = _region_source(reg, leaf_views, modes, wide_leaf, K, W, R, lx, texels)
        if len(_SOURCES) > 4096:
            _SOURCES.clear()
        _SOURCES[key] = body
    name = reg.root.op.value if reg.n_ops <= 1 else f"Fused{reg.n_ops}"
    k = ctx.kernel(name, body, 1 + len(leaf_views), local_size=lx, texels=(None, *texels))
    ctx.dispatch(k, meta, [out, *leaf_views], writes=(0,), groups=-(-nv // (R * lx)))


_SOURCES: dict = {}       # region signature and layout -> generated GLSL (eager ops repeat)


def arange_leaf(node) -> tuple | None:
    """(start, step) of an integer Const that holds start + step * i (an Arange that
    simplify computed at compile time), else None. A region reads such a leaf as that
    expression of the element's index, not as a load: on lavapipe an integer load is a
    per-lane loop (the cross-entropy's one-hot gradient read the class indices ten times
    per element: its kernel 120 -> 99 us in `Jitted.profile` of the small MLP step)."""
    a = node.attrs.get("arange") if node.op is OpKind.Const else None
    return tuple(a) if a is not None else None


def progression(a: tuple, idx: str) -> str:
    """GLSL of the value at element index idx of the progression a = (start, step)."""
    return f"({a[0]} + {a[1]} * ({idx}))"


def _signature(reg) -> tuple:
    """What the generated source depends on: the SSA with its types and attributes (the
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


def _region_source(reg, leaf_views, modes, wide_leaf, K: int, W: int, R: int, lx: int,
                   texels: tuple = ()) -> str:
    fn, math = region_function(reg, "fused")
    OT = dt.glsl_type(reg.dtype)
    src = []
    tex = [j < len(texels) and texels[j] is not None for j in range(len(leaf_views))]
    if W == 8:
        src.append("#extension GL_ARB_gpu_shader_int64 : enable\n")
    src.append(binding(1, _wide_type(OT, W) if W > 1 else OT, "o"))
    for j, v in enumerate(leaf_views):
        T = dt.glsl_type(v.dtype)
        if tex[j]:
            src.append(texel_binding(2 + j, f"x{j}"))
        else:
            src.append(binding(2 + j, _wide_type(T, W) if wide_leaf[j] and W > 1 else T, f"x{j}",
                               readonly=True))

    ar = [arange_leaf(n) for n in reg.leaves]

    def fetch(li: int, idx: str) -> str:
        if ar[li] is not None:
            return progression(ar[li], idx)
        return f"texelFetch(x{li}, {idx}).x" if tex[li] else f"x{li}[{idx}]"
    if math:
        src.append(math_lib("double" if uses_double(reg) else "float"))
    src.append(fn)
    # R rounds per thread, a workgroup's width apart (neighbouring lanes read neighbouring
    # memory); every round's loads are issued before any round's arithmetic
    L = ["void main() {", f"  uint g0 = group_id() * {R * lx}u + gl_LocalInvocationID.x;",
         "  uint nv = uint(meta[0]);", "  if (g0 >= nv) return;"]
    Ws = max(W, 1)
    outs = []
    for k in range(R):
        gi = f"(g0 + {k * lx}u)"
        body = []
        if K > 1:
            body.append(f"int r_{k} = int{gi};")
            for d in range(K - 1, 0, -1):
                body.append(f"int dq{d}_{k} = int(udiv(uint(r_{k}), meta[{1 + K + 2 * d}], "
                            f"meta[{2 + K + 2 * d}]));")
                body.append(f"int c{d}_{k} = r_{k} - dq{d}_{k} * meta[{1 + d}]; r_{k} = dq{d}_{k};")
            body.append(f"int c0_{k} = r_{k};")
        elif K == 1:
            body.append(f"int c0_{k} = int{gi};")
        base = 1 + 3 * K
        args = []
        decl = []
        for j, ((li, _, _), m) in enumerate(zip(reg.loads, modes)):
            T = dt.glsl_type(reg.leaves[li].dtype)
            p = " + ".join([f"meta[{base}]"] + [f"c{d}_{k} * meta[{base + 1 + d}]" for d in range(K)])
            base += 1 + K
            body.append(f"int p{j}_{k} = {p};")
            if m == "v" and ar[li] is not None:   # W consecutive values of the progression
                args.append([fetch(li, f"p{j}_{k} * {W} + {c}") for c in range(W)])
            elif m == "v" and tex[li]:     # W elements in one (W <= 4) or two 4-wide texels
                halves = ["a", "b"] if W == 8 else [""]
                decl += [f"vec4 l{j}_{k}{h} = vec4(0);" for h in halves]
                body += [f"l{j}_{k}{h} = texelFetch(x{li}, {len(halves)} * p{j}_{k} + {q});"
                         for q, h in enumerate(halves)]
                args.append([f"l{j}_{k}{h}.{c}" for h in halves for c in "xyzw"][:W])
            elif m == "v":
                WT = _wide_type(T, W)
                decl.append(f"{WT} l{j}_{k} = {WT}(0);")
                body.append(f"l{j}_{k} = x{li}[p{j}_{k}];")
                args.append(_unpack(T, W, f"l{j}_{k}"))
            elif m == "g":
                body.append(f"int q{j}_{k} = meta[{base}];")
                base += 1
                decl += [f"{T} l{j}_{k}_{c} = {T}(0);" for c in range(W)]
                body += [f"l{j}_{k}_{c} = {fetch(li, f'p{j}_{k} + {c} * q{j}_{k}')};" for c in range(W)]
                args.append([f"l{j}_{k}_{c}" for c in range(W)])
            else:
                decl.append(f"{T} l{j}_{k} = {T}(0);")
                body.append(f"l{j}_{k} = {fetch(li, f'p{j}_{k}')};")
                args.append([f"l{j}_{k}"] * Ws)
        L += ["  " + x for x in decl]
        if k == 0:
            L += ["  " + x for x in body]
        else:
            L.append(f"  if ({gi} < nv) {{")
            L += ["    " + x for x in body]
            L.append("  }")
        outs.append((gi, args))
    for k, (gi, args) in enumerate(outs):
        L += [f"  {OT} r{k}_{c} = fused({', '.join(a[c] for a in args)});" for c in range(Ws)]
        val = _pack(OT, W, [f"r{k}_{c}" for c in range(W)]) if W > 1 else f"r{k}_0"
        L.append(f"  o[{gi}] = {val};" if k == 0 else f"  if ({gi} < nv) o[{gi}] = {val};")
    L.append("}")
    return "".join(src) + "\n".join(L) + "\n"


def _rounds(nv: int, W: int, weight: int) -> int:
    """Wide loads per thread: several per thread hide lavapipe's per-invocation cost on
    large kernels, within the code budget (each round repeats the region's code W times)."""
    for r in (4, 2):
        if nv >= r * (1 << 14) and r * max(W, 1) * weight <= CODE_BUDGET:
            return r
    return 1


def _local_size(dev, threads: int) -> int:
    """Invocations per workgroup. lavapipe pays about a microsecond per workgroup, so a
    CPU device gets large groups once there are enough threads to keep every core busy."""
    if dev.profile.cpu and threads >= 1 << 16:
        return min(1024, dev.max_workgroup_invocations)
    return 256


def lower(node, ins, out, ctx) -> None:
    """One elementwise node: a region of one operator over its operands."""
    from ..fusion import build_region
    reg = build_region(node, lambda x: False)
    at = {i.id: v for i, v in zip(node.inputs, ins)}
    lower_region(reg, [at[l.id] for l in reg.leaves], out, ctx)
