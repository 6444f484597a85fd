"""Full: every element set to one value."""
from __future__ import annotations

import struct

import numpy as np

from ...trace import dtypes as dt
from ..kernels import binding

_BODY = """{decl}
void main() {{
  uint i = gidx();
  if (i >= uint(meta[0])) return;
  o[i] = {value};
}}
"""


def scalar_bits(value, dtype) -> tuple[list[int], str]:
    """A scalar passed through meta ints exactly, and the GLSL that rebuilds it."""
    d = np.dtype(dtype)
    if d == dt.float64:
        lo, hi = struct.unpack("<ii", struct.pack("<d", float(value)))
        return [lo, hi], "packDouble2x32(uvec2(uint(meta[1]), uint(meta[2])))"
    if d == dt.float32:
        (bits,) = struct.unpack("<i", struct.pack("<f", float(value)))
        return [bits], "intBitsToFloat(meta[1])"
    if d == dt.bool_:
        return [1 if value else 0], "meta[1]"
    return [int(value)], "meta[1]"


def fill_view(ctx, out, value) -> None:
    """Dispatch a fill of the whole view with value (in the view's dtype)."""
    n = out.size
    words, expr = scalar_bits(value, out.dtype)
    body = _BODY.format(decl=binding(1, dt.glsl_type(out.dtype), "o"), value=expr)
    k = ctx.kernel("Full", body, 1)
    ctx.dispatch(k, [n, *words], [out], threads=n)


def lower(node, ins, out, ctx) -> None:
    fill_view(ctx, out, node.attrs["value"])
