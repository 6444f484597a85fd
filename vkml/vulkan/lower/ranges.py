"""Bounds of a fused region's values, for code that a proved bound makes unnecessary.

sin and cos reduce their argument modulo pi/2 by Cody-Waite for |x| < 4096 and by
Payne-Hanek beyond (vulkan/shaders/math32.glsl); the Payne-Hanek path is most of their
code, and lavapipe compiles every call's copy of it (a chain of a few sin and cos took
most of a cold first call's LLVM time). Where a region proves |x| < SMALL_ARG (the
argument is the output of tanh, sin, a sigmoid, a product of bounded values, or a form
bounded whatever its input: softsign x / (|x| + c), x tanh(x), x * x...), the
kernel calls `vk_sin_cw` / `vk_cos_cw`, the same functions without that path: the same
bits, since for such x vk_sin takes the Cody-Waite path anyway.

Bounds are intervals of float64 numbers containing every non-NaN value the float32
computation can take (a NaN or an infinity still reaches the functions' own checks); a
value nothing is known about is (-inf, inf), and so is one whose bound passes HUGE, where
float32 may overflow. Rounding is covered by SMALL_ARG's margin below the 4096 where the
paths part.

>>> import vkml, vkml.numpy as vnp
>>> from vkml.trace.ops import OpKind
>>> from vkml.vulkan.regions import build_region
>>> g = vkml.make_graph(lambda x: vnp.sin(vnp.tanh(x) * 3.0 + 1.0), vnp.ones(4))
>>> reg = build_region(g.outputs[0], lambda n: n.op is not OpKind.Input)
>>> bounds(reg)[-2]
(-2.0, 4.0)
"""
from __future__ import annotations

import math

import numpy as np

from ...trace import dtypes as dt
from ...trace.ops import OpKind

INF = math.inf
ANY = (-INF, INF)
SMALL_ARG = 4000.0      # |x| below this takes sin/cos's Cody-Waite path with room to spare
# endpoints past this count as infinite: float32 overflows at 3.4e38, and values near it
# may round past it where float64 stays finite (exp(88.7) * 1e-37 is inf in float32)
HUGE = 2.0 ** 100
# ... and nonzero endpoints nearer 0 than this count as 0: float32 underflows (or flushes
# to zero) below 2^-126, where the float64 bound stays positive (exp(-105) is 0)
TINY = 2.0 ** -100

_BOUNDED = {OpKind.Sin: (-1.0, 1.0), OpKind.Cos: (-1.0, 1.0), OpKind.Tanh: (-1.0, 1.0),
            OpKind.Erf: (-1.0, 1.0), OpKind.Sigmoid: (0.0, 1.0), OpKind.Erfc: (0.0, 2.0),
            OpKind.Sign: (-1.0, 1.0)}


def _mul(a: tuple, b: tuple) -> tuple:
    ps = [x * y for x in a for y in b]
    return ANY if any(math.isnan(p) for p in ps) else (min(ps), max(ps))


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return INF


def _inverse(b: tuple) -> tuple:
    """1 / x over b where b excludes 0 (else ANY: the quotient may be infinite)."""
    lo, hi = b
    if lo > 0 or hi < 0:
        return (1.0 / hi, 1.0 / lo)
    return ANY


def _unary(op: OpKind, a: tuple) -> tuple:
    lo, hi = a
    if op in _BOUNDED:
        return _BOUNDED[op]
    if op in (OpKind.Copy, OpKind.StopGradient):
        return a
    if op is OpKind.Neg:
        return (-hi, -lo)
    if op is OpKind.Abs:
        if lo >= 0:
            return a
        if hi <= 0:
            return (-hi, -lo)
        return (0.0, max(-lo, hi))
    if op is OpKind.Relu:
        return (max(lo, 0.0), max(hi, 0.0))
    if op in (OpKind.Exp, OpKind.Expm1):
        e = (_exp(lo) if lo > -INF else 0.0, _exp(hi))
        return e if op is OpKind.Exp else (e[0] - 1.0, e[1] - 1.0)
    if op is OpKind.Silu:                     # x sigmoid(x) >= -0.2785 everywhere
        return (-0.3, max(hi, 0.0))
    if op is OpKind.Log1p and lo >= -0.5:     # away from -1, which float32 may round to
        return (math.log1p(lo), math.log1p(hi) if hi < INF else INF)
    if op is OpKind.Log and lo > 0:
        return (math.log(lo), math.log(hi) if hi < INF else INF)
    if op is OpKind.Sqrt:                     # negative x gives NaN, which bounds do not hold
        return (math.sqrt(max(lo, 0.0)), math.sqrt(hi) if hi < INF else INF) if hi >= 0 else ANY
    if op is OpKind.Rsqrt and lo > 0:
        return (1.0 / math.sqrt(hi) if hi < INF else 0.0, 1.0 / math.sqrt(lo))
    if op is OpKind.Reciprocal:
        return _inverse(a)
    if op is OpKind.Gelu:                     # x Phi(x) >= -0.17 everywhere
        return (-0.2, max(hi, 0.0))
    if op in (OpKind.Floor, OpKind.Ceil, OpKind.Trunc, OpKind.Rint):
        return (lo - 1.0, hi + 1.0)
    return ANY


def _of(code, i: int, *ops) -> tuple | None:
    """SSA value i's arguments where it is one of ops, else None. One value is one SSA
    index: a region memoises each node at each layout, and every graph that runs is
    simplified first (common subexpressions merged)."""
    ins = code[i]
    return ins[5] if ins[0] == "op" and ins[1] in ops else None


def _mul_same(code, args, xs) -> tuple | None:
    """x * x, and x * tanh(x) or x * erf(x) (both >= 0 and at most |x|): intervals alone
    lose that the factors are one value."""
    i, j = args
    if i == j:
        lo, hi = xs[0]
        return (min(lo * lo, hi * hi), max(lo * lo, hi * hi)) if lo >= 0 or hi <= 0 else (0.0, max(lo * lo, hi * hi))
    for x, y, bx in ((i, j, xs[0]), (j, i, xs[1])):
        if _of(code, y, OpKind.Tanh, OpKind.Erf) == (x,):
            return (0.0, max(abs(bx[0]), abs(bx[1])))
    return None


def _div_shape(code, args, xs) -> tuple | None:
    """x / (|x| + c) for c > 0 (softsign) lies in [-1, 1]; x / (1 + exp(-x)) (silu
    written out) is at least -0.2785."""
    x, d = args
    add = _of(code, d, OpKind.Add)
    if add is None:
        return None
    for p, q in (add, add[::-1]):
        c = code[q]
        cv = float(np.asarray(c[2], dtype=c[1])) if c[0] == "const" and dt.is_float(c[1]) else 0.0
        if not cv > 0:
            continue
        if _of(code, p, OpKind.Abs) == (x,):
            return (-1.0, 1.0)
        e = _of(code, p, OpKind.Exp)
        if cv == 1.0 and e is not None and _of(code, e[0], OpKind.Neg) == (x,):
            return (-0.3, max(xs[0][1], 0.0))
    return None


def _power(a: tuple, e) -> tuple:
    """x ** e over a for IntegerPow's exponent e: a whole e >= 0 by repeated products; a
    half-integer one (x^k sqrt|x|) where x >= 0; else ANY."""
    if isinstance(e, (int, np.integer)) and 0 <= e <= 64:
        r = (1.0, 1.0)
        for _ in range(int(e)):
            r = _mul(r, a)
        return r
    lo, hi = a
    if e > 0 and lo >= 0:
        try:
            return (lo ** e, hi ** e if hi < INF else INF)
        except OverflowError:
            return (lo ** e, INF)
    return ANY


def _meet(a: tuple, b: tuple | None) -> tuple:
    return a if b is None else (max(a[0], b[0]), min(a[1], b[1]))


def _clip(r: tuple, dtype=None) -> tuple:
    """r as the dtype can hold it: ends past HUGE (65504 for float16) infinite, and ends
    nearer 0 than TINY (2^-14 for float16) at 0, where the value may underflow or be
    flushed to zero (so `_inverse` and log never take it for nonzero)."""
    huge, tiny = (65504.0, 2.0 ** -14) if dtype is not None and np.dtype(dtype) == np.float16 else (HUGE, TINY)
    lo, hi = r
    lo = -INF if lo <= -huge else 0.0 if 0 < lo < tiny else lo
    hi = INF if hi >= huge else 0.0 if -tiny < hi < 0 else hi
    return (lo, hi)


def bounds(reg) -> list:
    """Per SSA value of reg (`regions.Region`), an interval holding its non-NaN values
    (ANY where nothing is known or the value is not a float)."""
    out: list = []
    code = reg.code
    for i, ins in enumerate(reg.code):
        if ins[0] == "const":
            # the value as the kernel holds it (rounded to its dtype, as `literal` writes it)
            v = float(np.asarray(ins[2], dtype=ins[1])) if dt.is_float(ins[1]) else None
            out.append(_clip((v, v), ins[1]) if v is not None and math.isfinite(v) else ANY)
            continue
        if ins[0] != "op" or not dt.is_float(reg.types[i]):
            out.append(ANY)
            continue
        _, op, in_dt, out_dt, _, args = ins
        xs = [out[a] for a in args]
        if op is OpKind.Add:
            r = (xs[0][0] + xs[1][0], xs[0][1] + xs[1][1])
        elif op is OpKind.Sub:
            r = (xs[0][0] - xs[1][1], xs[0][1] - xs[1][0])
        elif op is OpKind.Mul:
            r = _meet(_mul(xs[0], xs[1]), _mul_same(code, args, xs))
        elif op is OpKind.Maximum:
            r = (max(xs[0][0], xs[1][0]), max(xs[0][1], xs[1][1]))
        elif op is OpKind.Minimum:
            r = (min(xs[0][0], xs[1][0]), min(xs[0][1], xs[1][1]))
        elif op is OpKind.Div:
            r = _meet(_mul(xs[0], _inverse(xs[1])), _div_shape(code, args, xs))
        elif op is OpKind.Where:                 # either branch's value
            r = (min(xs[1][0], xs[2][0]), max(xs[1][1], xs[2][1]))
        elif op is OpKind.IntegerPow:
            r = _power(xs[0], ins[4]["exponent"])
        elif op is OpKind.Atan2:
            r = (-3.1416, 3.1416)                # |atan2| <= pi
        elif op is OpKind.Cast:               # float to float: rounded, so a little wider
            w = 2.0 ** -7 if dt.is_low(out_dt) else 2.0 ** -20
            lo, hi = xs[0]
            r = (lo - abs(lo) * w, hi + abs(hi) * w) if dt.is_float(in_dt) else ANY
        elif len(xs) == 1 and dt.is_float(in_dt):
            r = _unary(op, xs[0])
        else:
            r = ANY
        out.append(ANY if any(math.isnan(v) for v in r) else _clip(r, reg.types[i]))
    return out


def small(b: tuple) -> bool:
    """Whether interval b proves |x| < SMALL_ARG."""
    return -SMALL_ARG < b[0] and b[1] < SMALL_ARG
