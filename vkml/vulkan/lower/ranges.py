"""Bounds of a fused region's values, for code that a proved bound makes unnecessary.

sin and cos reduce their argument modulo pi/2 by Cody-Waite for |x| < 4096 and by
Payne-Hanek beyond (vulkan/shaders/math32.glsl); the Payne-Hanek path is most of their
code, and lavapipe compiles every call's copy of it (a chain of a few sin and cos took
most of a cold first call's LLVM time). Where a region proves |x| < SMALL_ARG (the
argument is the output of tanh, sin, a sigmoid, a product of bounded values...), the
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

_BOUNDED = {OpKind.Sin: (-1.0, 1.0), OpKind.Cos: (-1.0, 1.0), OpKind.Tanh: (-1.0, 1.0),
            OpKind.Erf: (-1.0, 1.0), OpKind.Sigmoid: (0.0, 1.0), OpKind.Erfc: (0.0, 2.0)}


def _mul(a: tuple, b: tuple) -> tuple:
    ps = [x * y for x in a for y in b]
    return ANY if any(math.isnan(p) for p in ps) else (min(ps), max(ps))


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return INF


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
    if op is OpKind.Exp:
        return (_exp(lo) if lo > -INF else 0.0, _exp(hi))
    if op is OpKind.Silu:                     # x sigmoid(x) >= -0.2785 everywhere
        return (-0.3, max(hi, 0.0))
    if op is OpKind.Log1p and lo >= -0.5:     # away from -1, which float32 may round to
        return (math.log1p(lo), math.log1p(hi) if hi < INF else INF)
    return ANY


def _clip(r: tuple) -> tuple:
    lo, hi = r
    return (-INF if lo < -HUGE else lo, INF if hi > HUGE else hi)


def bounds(reg) -> list:
    """Per SSA value of reg (`regions.Region`), an interval holding its non-NaN values
    (ANY where nothing is known or the value is not a float)."""
    out: list = []
    for i, ins in enumerate(reg.code):
        if ins[0] == "const":
            # the value as the kernel holds it (rounded to its dtype, as `literal` writes it)
            v = float(np.asarray(ins[2], dtype=ins[1])) if dt.is_float(ins[1]) else None
            out.append(_clip((v, v)) if v is not None and math.isfinite(v) else ANY)
            continue
        if ins[0] != "op" or not dt.is_float(reg.types[i]):
            out.append(ANY)
            continue
        _, op, in_dt, _, _, args = ins
        xs = [out[a] for a in args]
        if op is OpKind.Add:
            r = (xs[0][0] + xs[1][0], xs[0][1] + xs[1][1])
        elif op is OpKind.Sub:
            r = (xs[0][0] - xs[1][1], xs[0][1] - xs[1][0])
        elif op is OpKind.Mul:
            r = _mul(xs[0], xs[1])
        elif op is OpKind.Maximum:
            r = (max(xs[0][0], xs[1][0]), max(xs[0][1], xs[1][1]))
        elif op is OpKind.Minimum:
            r = (min(xs[0][0], xs[1][0]), min(xs[0][1], xs[1][1]))
        elif len(xs) == 1 and dt.is_float(in_dt):
            r = _unary(op, xs[0])
        else:
            r = ANY
        out.append(ANY if any(math.isnan(v) for v in r) else _clip(r))
    return out


def small(b: tuple) -> bool:
    """Whether interval b proves |x| < SMALL_ARG."""
    return -SMALL_ARG < b[0] and b[1] < SMALL_ARG
