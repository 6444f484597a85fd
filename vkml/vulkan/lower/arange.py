"""Arange: start + step * i, computed in the output dtype (float64 exactly)."""
from __future__ import annotations

from ...trace import dtypes as dt
from ..kernels import binding
from .fill import scalar_bits

_BODY = """{decl}
void main() {{
  uint i = gidx();
  if (i >= uint(meta[0])) return;
  {T} start = {start};
  {T} step = {step};
  o[i] = start + step * {T}(i);
}}
"""


def lower(node, ins, out, ctx) -> None:
    T = dt.glsl_type(node.dtype)
    sw, _ = scalar_bits(node.attrs["start"], node.dtype)
    tw, _ = scalar_bits(node.attrs["step"], node.dtype)
    if node.dtype == dt.float64:
        start = "packDouble2x32(uvec2(uint(meta[1]), uint(meta[2])))"
        step = "packDouble2x32(uvec2(uint(meta[3]), uint(meta[4])))"
    elif node.dtype == dt.float32:
        start, step = "intBitsToFloat(meta[1])", "intBitsToFloat(meta[2])"
    else:
        start, step = "meta[1]", "meta[2]"
    body = _BODY.format(decl=binding(1, T, "o"), T=T, start=start, step=step)
    k = ctx.kernel("Arange", body, 1)
    ctx.dispatch(k, [node.size, *sw, *tw], [out], threads=node.size)
