"""The elementwise operators as GLSL: one table that the elementwise kernels, the fusion
scheduler and the families applying fused prologues and epilogues all read.

Each entry is an `Expr`: a GLSL template over the operands `{a}`, `{b}`, `{c}` and the
operand type `{T}` (Python format fields, filled in by `Expr.glsl`), with the functions of
the math library (`shaders/math32.glsl`, `math64.glsl`) that it calls. Those calls decide
whether a kernel needs the library (`Expr.math`) and the operator's code size
(`op_weight`, which the fusion scheduler budgets regions by): nothing reads the GLSL text
back.

>>> import numpy as np
>>> f32 = np.dtype(np.float32)
>>> expression(OpKind.Maximum, f32, f32, {}, "x", "y")
'((x > y || isnan(x)) ? x : y)'
>>> op_weight(OpKind.Add, f32, f32), op_weight(OpKind.Sin, f32, f32)
(1, 41)
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ...trace import dtypes as dt
from ...trace.ops import OpKind

SHADERS = Path(__file__).resolve().parent.parent / "shaders"


@lru_cache(maxsize=1024)
def math_source(name: str) -> str:
    """The GLSL of one math library: "math32" (float32 functions) or "math64" (float64;
    it builds on math32)."""
    return (SHADERS / f"{name}.glsl").read_text()


def math_library(p, double: bool) -> None:
    """Register the math library with program p (float64 functions too where double):
    a merged kernel holds each library once.

    >>> from vkml.vulkan.program import Program
    >>> p = Program("P")
    >>> math_library(p, True)
    >>> list(p.libraries)
    ['math32', 'math64']
    """
    p.library("math32", math_source("math32"))
    if double:
        p.library("math64", math_source("math64"))


# code size of the math library's functions (in simple operations), for the compile-time
# budget of fused kernels: lavapipe's compile time grows faster than linearly with a
# kernel's size, and sin/cos (range reduction) dwarf an add
LIB_WEIGHT = {"vk_sin": 40, "vk_cos": 40, "vk_sin_cw": 15, "vk_cos_cw": 15, "vk_pow": 40, "vk_floordiv": 30,
              "vk_remainder": 25, "vk_erf": 30,
              "vk_erfc": 30, "vk_tanh": 20, "vk_expm1": 20, "vk_log1p": 15, "vk_log": 15, "vk_exp": 10,
              "vk_sigmoid": 12, "vk_div": 10, "vk_ipow": 10,
              "vk_atan2": 35, "vk_gcd": 10}

# loop heads one call of a math library function may run, at most (lavapipe ends every loop
# of an invocation once it has run 65535 heads in all: `vulkan/merge.py` bounds a merged
# kernel's sum). Range reduction for sin/cos, the exponent's bits for an integer power,
# Euclid's steps for gcd, and fmod's halvings (float64 exponents: up to 2 x 2098) for
# floordiv/remainder; every other function runs at most a few (vk_div's rounding fix-up).
LIB_HEADS = {"vk_sin": 160, "vk_cos": 160, "vk_pow": 80, "vk_ipow": 40, "vk_gcd": 64,
             "vk_floordiv": 4400, "vk_remainder": 4400}
OTHER_HEADS = 8


@dataclass(frozen=True)
class Expr:
    """A GLSL expression template: operands `{a}`, `{b}`, `{c}`, operand type `{T}`;
    calls: the math library functions it calls.

    >>> Expr("vk_exp({a})", ("vk_exp",)).glsl("float", "v0")
    'vk_exp(v0)'
    """
    text: str
    calls: tuple = ()

    def glsl(self, T: str, a: str = "a", b: str = "b", c: str = "c") -> str:
        return self.text.format(T=T, a=a, b=b, c=c)

    @property
    def math(self) -> bool:
        """Whether it calls into the math library."""
        return bool(self.calls)

    @property
    def weight(self) -> int:
        """Code size in simple operations (one, plus the library functions it calls)."""
        return 1 + sum(LIB_WEIGHT[f] for f in self.calls)

    @property
    def heads(self) -> int:
        """Loop heads one evaluation may run, at most (`LIB_HEADS`)."""
        return sum(LIB_HEADS.get(f, OTHER_HEADS) for f in self.calls)


def _e(text: str, *calls: str) -> Expr:
    return Expr(text, calls)


FLOAT_EXPR = {
    OpKind.Neg: _e("-{a}"),
    OpKind.Reciprocal: _e("{T}(1) / {a}"),
    OpKind.Exp: _e("vk_exp({a})", "vk_exp"),
    OpKind.Log: _e("vk_log({a})", "vk_log"),
    OpKind.Log1p: _e("vk_log1p({a})", "vk_log1p"),
    OpKind.Expm1: _e("vk_expm1({a})", "vk_expm1"),
    OpKind.Sqrt: _e("sqrt({a})"),
    OpKind.Rsqrt: _e("{T}(1) / sqrt({a})"),
    OpKind.Sin: _e("vk_sin({a})", "vk_sin"),
    OpKind.Cos: _e("vk_cos({a})", "vk_cos"),
    OpKind.Tanh: _e("vk_tanh({a})", "vk_tanh"),
    OpKind.Sigmoid: _e("vk_sigmoid({a})", "vk_sigmoid"),
    OpKind.Abs: _e("abs({a})"),
    OpKind.Sign: _e("(isnan({a}) ? {a} : sign({a}))"),
    OpKind.Erf: _e("vk_erf({a})", "vk_erf"),
    OpKind.Erfc: _e("vk_erfc({a})", "vk_erfc"),
    OpKind.Relu: _e("(({a} > {T}(0) || isnan({a})) ? {a} : {T}(0))"),
    OpKind.Silu: _e("({a} * vk_sigmoid({a}))", "vk_sigmoid"),
    OpKind.Floor: _e("floor({a})"),
    OpKind.Ceil: _e("ceil({a})"),
    # from floor and ceil, which keep -0: lavapipe's trunc and roundEven lose the sign of a
    # zero result (and its double roundEven rounds 1.5 to 1); halves go to the even
    # neighbour, and a zero result takes its sign from the truncation
    OpKind.Trunc: _e("(({a} < {T}(0)) ? ceil({a}) : floor({a}))"),
    OpKind.Rint: _e("((({a} - floor({a}) > {T}(0.5)) || ({a} - floor({a}) == {T}(0.5) && "
                    "floor({a}) - {T}(2) * floor(floor({a}) * {T}(0.5)) != {T}(0))) ? "
                    "((floor({a}) == {T}(-1)) ? ceil({a}) : floor({a}) + {T}(1)) : floor({a}))"),
    OpKind.Copy: _e("{a}"),
    OpKind.StopGradient: _e("{a}"),
    OpKind.Add: _e("({a} + {b})"),
    OpKind.Sub: _e("({a} - {b})"),
    OpKind.Mul: _e("({a} * {b})"),
    # Vulkan guarantees division only for |b| in [2^-126, 2^126]: vk_div scales the rest
    OpKind.Div: _e("vk_div({a}, {b})", "vk_div"),
    OpKind.Pow: _e("vk_pow({a}, {b})", "vk_pow"),
    OpKind.Atan2: _e("vk_atan2({a}, {b})", "vk_atan2"),
    OpKind.FloorDivide: _e("vk_floordiv({a}, {b})", "vk_floordiv"),
    OpKind.Remainder: _e("vk_remainder({a}, {b})", "vk_remainder"),
    OpKind.Maximum: _e("(({a} > {b} || isnan({a})) ? {a} : {b})"),
    OpKind.Minimum: _e("(({a} < {b} || isnan({a})) ? {a} : {b})"),
}
# float32 sin and cos of an argument `ranges` proves below 4000 in magnitude: the same
# bits without the Payne-Hanek path (`elementwise.region_function` chooses them)
SMALL_ARG_EXPR = {OpKind.Sin: _e("vk_sin_cw({a})", "vk_sin_cw"), OpKind.Cos: _e("vk_cos_cw({a})", "vk_cos_cw")}
INT_EXPR = {
    OpKind.Neg: _e("-{a}"), OpKind.Abs: _e("abs({a})"), OpKind.Sign: _e("sign({a})"),
    OpKind.Relu: _e("max({a}, 0)"), OpKind.Copy: _e("{a}"), OpKind.StopGradient: _e("{a}"),
    OpKind.Add: _e("({a} + {b})"), OpKind.Sub: _e("({a} - {b})"), OpKind.Mul: _e("({a} * {b})"),
    OpKind.Maximum: _e("max({a}, {b})"), OpKind.Minimum: _e("min({a}, {b})"),
    OpKind.Pow: _e("vk_ipow({a}, {b})", "vk_ipow"),
    OpKind.Gcd: _e("vk_gcd({a}, {b})", "vk_gcd"),
    # bool is a 0/1 word: and, or and xor of two bools stay 0/1 (BitwiseNot is below)
    OpKind.BitwiseAnd: _e("({a} & {b})"), OpKind.BitwiseOr: _e("({a} | {b})"),
    OpKind.BitwiseXor: _e("({a} ^ {b})"),
    # GLSL leaves counts outside [0, 32) undefined: NumPy's answers are 0 for a left
    # shift and the sign (a >> 31: 0 or -1) for the arithmetic right shift
    OpKind.ShiftLeft: _e("((uint({b}) < 32u) ? ({a} << {b}) : 0)"),
    OpKind.ShiftRight: _e("((uint({b}) < 32u) ? ({a} >> {b}) : ({a} >> 31))"),
    # NumPy's floor division from the truncating one: one less where the truncated
    # remainder is non-zero with the sign opposite to b's; b == 0 gives 0 and b == -1 is
    # -a (INT_MIN / -1 is undefined in SPIR-V, NumPy wraps it)
    OpKind.FloorDivide: _e("(({b} == 0) ? 0 : (({b} == -1) ? -{a} : (({a} / {b}) - "
                           "(((({a} - ({a} / {b}) * {b}) ^ {b}) < 0 && ({a} - ({a} / {b}) * {b}) != 0) ? 1 : 0))))"),
    OpKind.Remainder: _e("(({b} == 0 || {b} == -1) ? 0 : (({a} - ({a} / {b}) * {b}) + "
                         "(((({a} - ({a} / {b}) * {b}) ^ {b}) < 0 && ({a} - ({a} / {b}) * {b}) != 0) ? {b} : 0)))"),
}
CMP = {OpKind.Equal: "==", OpKind.NotEqual: "!=", OpKind.Less: "<", OpKind.LessEqual: "<=",
       OpKind.Greater: ">", OpKind.GreaterEqual: ">="}
GELU = {True: _e("({T}(0.5) * {a} * ({T}(1) + vk_tanh({T}(0.7978845608028654) * ({a} + {T}(0.044715) * {a} * {a} * {a}))))",
                 "vk_tanh"),
        False: _e("({T}(0.5) * {a} * vk_erfc(-{a} * {T}(0.7071067811865476)))", "vk_erfc")}
WHERE = _e("(({a} != 0) ? {b} : {c})")


def op_expr(op: OpKind, in_dtype: np.dtype, out_dtype: np.dtype, attrs: dict) -> Expr:
    """The template computing op on operands of in_dtype (IntegerPow: `integer_pow_lines`)."""
    fl = dt.is_float(in_dtype)
    if op in CMP:
        return _e(f"(({{a}} {CMP[op]} {{b}}) ? 1 : 0)")
    if op is OpKind.Where:
        return WHERE
    if op is OpKind.Cast:
        dst = np.dtype(out_dtype)
        if dst == dt.bool_:
            return _e("(({a} != " + ("{T}(0)" if fl else "0") + ") ? 1 : 0)")
        if dt.is_low(dst):     # through float32 (from float64: rounded twice, as a double's cast)
            return _e(f"lp_round_{'bf16' if dst == dt.bfloat16 else 'f16'}(float({{a}}))")
        return _e(f"{dt.compute_type(dst)}({{a}})")
    if op is OpKind.BitwiseNot:
        return _e("({a} ^ 1)" if np.dtype(in_dtype) == dt.bool_ else "(~{a})")
    if op is OpKind.Gelu:
        return GELU[bool(attrs.get("approximate"))]
    table = FLOAT_EXPR if fl else INT_EXPR
    if op not in table:
        raise NotImplementedError(f"{op.value}: no elementwise expression for dtype {in_dtype}")
    return table[op]


def expression(op: OpKind, in_dtype: np.dtype, out_dtype: np.dtype, attrs: dict,
               a: str = "a", b: str = "b", c: str = "c") -> str:
    """The GLSL expression computing op on operands a, b, c (GLSL expressions)."""
    if op is OpKind.IntegerPow:
        lines, e = integer_pow_lines(a, attrs["exponent"], dt.compute_type(in_dtype), "t")
        if lines:
            raise NotImplementedError("IntegerPow needs statements: use integer_pow_lines")
        return e
    return op_expr(op, in_dtype, out_dtype, attrs).glsl(dt.compute_type(in_dtype), a, b, c)


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


@lru_cache(maxsize=1024)
def op_weight(op: OpKind, in_dtype: np.dtype, out_dtype: np.dtype, approximate=None,
              exponent=None) -> int:
    """Code size of one elementwise operator, in simple operations (double math counts
    twice: its polynomials are longer). IntegerPow: its multiplications."""
    if op is OpKind.IntegerPow:
        return 1 + len(integer_pow_lines("a", exponent, dt.compute_type(in_dtype), "t")[0])
    w = op_expr(op, in_dtype, out_dtype, {"approximate": approximate}).weight
    return w * 2 if np.dtype(in_dtype) == dt.float64 and w > 1 else w


def op_heads(op: OpKind, in_dtype: np.dtype, out_dtype: np.dtype, attrs: dict) -> int:
    """Loop heads one evaluation of an elementwise operator may run, at most (IntegerPow:
    straight-line multiplications, none).

    >>> f32 = np.dtype(np.float32)
    >>> op_heads(OpKind.Add, f32, f32, {}), op_heads(OpKind.Sin, f32, f32, {})
    (0, 160)
    """
    if op is OpKind.IntegerPow:
        return 0
    return op_expr(op, in_dtype, out_dtype, attrs).heads


def literal(dtype, value) -> str:
    """An exact GLSL literal of dtype (a Full constant folded into a kernel).

    >>> literal(np.float32, 2), literal(np.float32, 0.1), literal(np.int32, -3)
    ('2.0', 'uintBitsToFloat(0x3dcccccdu)', '(-3)')
    """
    d = np.dtype(dtype)
    if dt.is_low(d):       # the 16-bit value, as the float32 kernels hold it
        return literal(dt.float32, np.float32(np.asarray(value, dtype=np.float64).astype(d)))
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
