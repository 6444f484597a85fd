"""Rand: counter-based random numbers, Philox-4x32-10 keyed by an int32[2] key.

Element i (flat, C order) is drawn from one Philox block with counter
(i, 0, 0, RAND_DOMAIN) and key (key[0], key[1]); word w0 (and w1 for float64) of the
output block gives the element:

    int32    w0 reinterpreted as a signed word
    float32  (w0 >> 8) * 2^-24            24 bits, in [0, 1 - 2^-24]
    float64  ((w0 >> 11) * 2^32 + w1) * 2^-53   53 bits, in [0, 1 - 2^-53]

Every step is uint arithmetic or an exact power-of-two scaling, so the bits are the same
on every device. RAND_DOMAIN is the counter's last word: 0 for Rand (so that key 0,
element 0 reproduces the Random123 known-answer vector); any other kernel that draws
Philox numbers must use a different domain so its streams never overlap Rand's.

A batch of keys (..., 2) (what vmap makes of a Rand on a mapped key) gives one block of
`prod(shape)` elements per key, each with the counters 0, 1, ... it would use alone, so
every example gets exactly its unbatched numbers.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...trace import dtypes as dt
from ...trace.shapes import size_of
from ..program import Meta, Program

RAND_DOMAIN = 0

# Philox-4x32 (Salmon et al., SC'11): multipliers and the Weyl key-schedule increments.
PHILOX_GLSL = """
const uint PHILOX_M0 = 0xD2511F53u;
const uint PHILOX_M1 = 0xCD9E8D57u;
const uvec2 PHILOX_W = uvec2(0x9E3779B9u, 0xBB67AE85u);

uvec4 philox_round(uvec4 c, uvec2 k) {
  uint hi0, lo0, hi1, lo1;
  umulExtended(PHILOX_M0, c.x, hi0, lo0);
  umulExtended(PHILOX_M1, c.z, hi1, lo1);
  return uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
}

// Ten rounds; the key is bumped between rounds (not before the first).
uvec4 philox4x32_10(uvec4 c, uvec2 k) {
  c = philox_round(c, k);
  for (int r = 1; r < 10; ++r) {
    k += PHILOX_W;
    c = philox_round(c, k);
  }
  return c;
}
"""

PHILOX_HEADS = 10        # philox4x32_10's loop over rounds: one invocation's loop heads

# float32 2^-24 and float64 2^-53 spelled as bit patterns, so no decimal rounding is involved
_VALUE = {
    dt.int32: "int(w.x)",
    dt.float32: "float(w.x >> 8u) * uintBitsToFloat(0x33800000u)",
    dt.float64: ("(double(w.x >> 11u) * 4294967296.0LF + double(w.y))"
                 " * packDouble2x32(uvec2(0u, 0x3CA00000u))"),
}


@lru_cache(maxsize=1024)
def program(dtype) -> Program:
    """Element g of the output: Philox block (i, 0, 0, domain) under key g // per_key."""
    p = Program(f"Rand_{np.dtype(dtype).name}")
    p.meta = Meta(("n", 1), ("domain", 1), ("per_key", 1))
    key = p.buffer("key", "int", readonly=True)
    o = p.buffer("o", dt.glsl_type(dtype))
    p.library("philox", PHILOX_GLSL)
    p.main("uint g = gidx();", f"if (g >= uint({p.m('n')})) return;",
           "// per_key is >= 1 here: a total of 0 has returned above",
           f"uint n = uint({p.m('per_key')});",
           "uint kb = g / n, i = g - kb * n;",
           f"uvec2 k = uvec2(uint({key}[2u * kb]), uint({key}[2u * kb + 1u]));",
           f"uvec4 w = philox4x32_10(uvec4(i, 0u, 0u, uint({p.m('domain')})), k);",
           f"{o}[g] = {_VALUE[np.dtype(dtype)]};")
    return p


def lower(node, ins, out, ctx) -> None:
    """Fill `out` with Philox draws keyed by the int32 view `ins[0]` of shape (..., 2):
    one block of prod(node.attrs["shape"]) elements per key."""
    d = node.dtype
    if d not in _VALUE:
        raise NotImplementedError(f"Rand: output dtype {d} has no kernel; valid: int32, float32, float64")
    if d == dt.float64 and not ctx.dev.has_float64:
        raise dt.DTypeError(f"Rand: float64 output needs shaderFloat64, which {ctx.dev.name} lacks; "
                            f"draw float32 instead")
    k = ctx.kernel(program(np.dtype(d)))
    total = out.size
    ctx.dispatch(k, {"n": total, "domain": RAND_DOMAIN, "per_key": size_of(node.attrs["shape"])},
                 [ins[0], out], threads=total, heads=PHILOX_HEADS)
