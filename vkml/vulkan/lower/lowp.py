"""float16 and bfloat16 in the elementwise kernels: 16-bit storage, float32 values.

A 16-bit float lives in a storage buffer as its bits (`uint16_t`, or packed two to a
32-bit word where a thread moves W consecutive elements: `uvec2` for 4, `uvec4` for 8,
the bandwidth-friendly path) and in a kernel as the float32 of the same number. The
conversions are the functions of `shaders/lowp.glsl`; these helpers write the GLSL that
calls them.

>>> import numpy as np, ml_dtypes
>>> bf = np.dtype(ml_dtypes.bfloat16)
>>> load(bf, "x[i]"), round_value(bf, "v"), store(bf, "v")
('lp_from_bf16(uint(x[i]))', 'lp_round_bf16(v)', 'uint16_t(lp_to_bf16(v))')
>>> unpack(bf, 4, "l")
['lp_from_bf16(l.x & 0xFFFFu)', 'lp_from_bf16(l.x >> 16)', 'lp_from_bf16(l.y & 0xFFFFu)', 'lp_from_bf16(l.y >> 16)']
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...trace import dtypes as dt
from .expressions import SHADERS

EXTENSION = "GL_EXT_shader_16bit_storage"


def _tag(d) -> str:
    return "bf16" if np.dtype(d) == dt.bfloat16 else "f16"


@lru_cache(maxsize=None)
def source() -> str:
    return (SHADERS / "lowp.glsl").read_text()


def setup(p) -> None:
    """Give program p the 16-bit storage extension and the conversion library."""
    p.extension(EXTENSION)
    p.library("lowp", source())


def buffer_type(W: int = 1) -> str:
    """The GLSL element type of a 16-bit binding moved W (1, 4 or 8) elements at a time."""
    return {1: "uint16_t", 4: "uvec2", 8: "uvec4"}[W]


def load(d, ref: str) -> str:
    """The float32 value of the 16-bit element ref (a uint16_t lvalue)."""
    return f"lp_from_{_tag(d)}(uint({ref}))"


def round_value(d, e: str) -> str:
    """The float32 expression e rounded to dtype d (nearest, ties to even)."""
    return f"lp_round_{_tag(d)}({e})"


def store(d, v: str) -> str:
    """The uint16_t bits of the float32 value v rounded to dtype d."""
    return f"uint16_t(lp_to_{_tag(d)}({v}))"


def unpack(d, W: int, v: str) -> list[str]:
    """The W float32 values of the packed wide value v (`buffer_type(W)`)."""
    t = _tag(d)
    return [f"lp_from_{t}({v}.{c} {'& 0xFFFFu' if k == 0 else '>> 16'})"
            for c in "xyzw"[:W // 2] for k in range(2)]


def pack(d, W: int, vals: list[str]) -> str:
    """The packed wide value (`buffer_type(W)`) of W float32 values rounded to dtype d."""
    t = _tag(d)
    words = [f"(lp_to_{t}({vals[2 * i]}) | (lp_to_{t}({vals[2 * i + 1]}) << 16))" for i in range(W // 2)]
    return f"{buffer_type(W)}({', '.join(words)})"
