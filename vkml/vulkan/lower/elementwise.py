"""Elementwise kernels: one generated GLSL source per (expression, dtypes, rank, arity).

Every operand, the output included, is addressed as offset + sum(index * stride) with
shapes and strides read from the dispatch's meta ints, so broadcasting (stride 0),
slicing, permuting and flipping (negative strides) are all the same kernel. Movement
operators and the scatters lower onto `strided`, the generic form used here.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from ...trace import dtypes as dt
from ...trace.ops import OpKind
from ...trace.shapes import contiguous_strides
from ..kernels import binding

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
    OpKind.Copy: "a",
    OpKind.StopGradient: "a",
    OpKind.Add: "(a + b)",
    OpKind.Sub: "(a - b)",
    OpKind.Mul: "(a * b)",
    OpKind.Div: "(a / b)",
    OpKind.Pow: "vk_pow(a, b)",
    OpKind.Maximum: "((a > b || isnan(a)) ? a : b)",
    OpKind.Minimum: "((a < b || isnan(a)) ? a : b)",
}
_INT_EXPR = {
    OpKind.Neg: "-a", OpKind.Abs: "abs(a)", OpKind.Sign: "sign(a)", OpKind.Relu: "max(a, 0)",
    OpKind.Copy: "a", OpKind.StopGradient: "a", OpKind.Add: "(a + b)", OpKind.Sub: "(a - b)", OpKind.Mul: "(a * b)",
    OpKind.Maximum: "max(a, b)", OpKind.Minimum: "min(a, b)",
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
        src, dst = np.dtype(in_dtype), np.dtype(out_dtype)
        if dst == dt.bool_:
            return "((a != " + (f"{T}(0)" if fl else "0") + ") ? 1 : 0)"
        return f"{dt.glsl_type(dst)}(a)"
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
        lines.append(f"  for (int d = {R - 1}; d >= 0; --d) {{")
        lines.append("    int sz = meta[1 + d]; int c = rem % sz; rem /= sz;")
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
    in_types = tuple(dt.glsl_type(v.dtype) for v in ins)
    body = _source(expr, in_types, dt.glsl_type(out.dtype), R)
    k = ctx.kernel(name, body, 1 + len(ins))
    ctx.dispatch(k, meta, [out, *ins], writes=(0,), threads=n)


def bcast_layout(in_shape: Sequence[int], out_shape: Sequence[int]):
    """(0, strides) reading a contiguous in_shape broadcast against out_shape."""
    st = contiguous_strides(in_shape)
    pad = len(out_shape) - len(in_shape)
    return (0, tuple([0] * pad + [0 if d == 1 else s for d, s in zip(in_shape, st)]))


def lower(node, ins, out, ctx) -> None:
    expr = expression(node.op, ins[-1].dtype if node.op is OpKind.Where else ins[0].dtype,
                      node.dtype, node.attrs)
    layouts = [bcast_layout(v.shape, node.shape) for v in ins]
    strided(ctx, node.op.value, expr, out, (0, contiguous_strides(node.shape)), ins, layouts, node.shape)
