"""Full: every element set to one value."""
from __future__ import annotations

import struct
from functools import lru_cache

import numpy as np

from ...trace import dtypes as dt
from ..program import Meta, Program


def scalar_words(value, dtype) -> list[int]:
    """A scalar of dtype as the meta ints that carry it exactly (two for float64)."""
    d = np.dtype(dtype)
    if dt.is_low(d):        # the 16-bit pattern, rounded to nearest even as astype does
        return [int(np.asarray(value, dtype=np.float64).astype(d).view(np.uint16))]
    if d == dt.float64:
        return list(struct.unpack("<ii", struct.pack("<d", float(value))))
    if d == dt.float32:
        return list(struct.unpack("<i", struct.pack("<f", float(value))))
    if d == dt.bool_:
        return [1 if value else 0]
    return [int(value)]


def scalar_field(name: str, dtype) -> tuple[str, int]:
    """The meta field of a scalar of dtype: (name, its word count)."""
    return name, 2 if np.dtype(dtype) == dt.float64 else 1


def scalar_read(p: Program, name: str, dtype) -> str:
    """GLSL rebuilding the scalar of dtype held in p's meta field name (`scalar_words`)."""
    d = np.dtype(dtype)
    if d == dt.float64:
        return f"packDouble2x32(uvec2(uint({p.m(name, 0)}), uint({p.m(name, 1)})))"
    if d == dt.float32:
        return f"intBitsToFloat({p.m(name, 0)})"
    return p.m(name, 0)


@lru_cache(maxsize=1024)
def program(dtype) -> Program:
    """o[i] = the meta's value, for i < n: one kernel per dtype serves every value."""
    p = Program("Full")
    p.meta = Meta(("n", 1), scalar_field("value", dtype))
    low = dt.is_low(dtype)
    if low:
        p.extension("GL_EXT_shader_16bit_storage")
    o = p.buffer("o", "uint16_t" if low else dt.glsl_type(dtype))
    v = f"uint16_t(uint({p.m('value', 0)}))" if low else scalar_read(p, 'value', dtype)
    p.main("uint i = gidx();", f"if (i >= uint({p.m('n')})) return;", f"{o}[i] = {v};")
    return p


def fill_view(ctx, out, value) -> None:
    """Dispatch a fill of the whole view with value (in the view's dtype): many words an
    invocation (`copies.fill`), `program` on small or odd-sized views."""
    from .copies import fill
    fill(ctx, out, value)


def lower(node, ins, out, ctx) -> None:
    fill_view(ctx, out, node.attrs["value"])
