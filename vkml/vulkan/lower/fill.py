"""Full: every element set to one value."""
from __future__ import annotations

import struct
from functools import lru_cache

import numpy as np

from ...trace import dtypes as dt
from ..program import Meta, Program
from .copies import _WIDE, _pack, _rounds, _widths
from .elementwise import _local_size


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
    """Dispatch a fill of the whole view out with value (in its dtype), W words an
    invocation (a 16-bit value is the word of two, a float64 one two words); `program`,
    one element an invocation, on small or odd-sized views."""
    d = np.dtype(out.dtype)
    n = out.size
    if n == 0:
        return
    words = scalar_words(value, d)
    size = dt.itemsize(d)
    if size == 2:
        words = [(words[0] & 0xFFFF) * 0x10001]
    nw = n * size // 4
    prof = ctx.profile
    if (size == 2 and n % 2) or not prof.vectorize or nw < prof.vector_min:
        k = ctx.kernel(program(d))
        ctx.dispatch(k, {"n": n, "value": scalar_words(value, d)}, [out], threads=n, heads=0)
        return
    W = next(w for w in _widths(ctx.dev) if nw % w == 0 and w >= len(words))
    lo = words[0] - (1 << 32) if words[0] >= 1 << 31 else words[0]
    hi = words[-1] - (1 << 32) if words[-1] >= 1 << 31 else words[-1]
    nv = nw // W
    R = _rounds(nv)
    lx = _local_size(ctx.dev, -(-nv // R))
    ctx.dispatch(ctx.kernel(fill_program(W, R, lx)), {"nv": nv, "lo": lo, "hi": hi}, [out],
                 groups=-(-nv // (R * lx)), heads=0)


@lru_cache(maxsize=64)
def fill_program(W: int, R: int, lx: int) -> Program:
    """o[i] = the words (lo, hi, lo, hi, ...) for the nv groups of W words, R groups an
    invocation (W = 1 only for a one-word pattern: lo = hi)."""
    p = Program("Full", local_size=lx)
    p.meta = Meta(("nv", 1), ("lo", 1), ("hi", 1))
    if W == 8:
        p.extension("GL_ARB_gpu_shader_int64")
    o = p.buffer("o", _WIDE[W] if W > 1 else "uint")
    val = "lo" if W == 1 else _pack(W, ["lo", "hi"] * (W // 2))
    # the meta values read before the range check, where lavapipe reads them once
    L = [f"uint g0 = group_id() * {R * lx}u + lidx();", f"uint nv = uint({p.m('nv')});",
         f"uint lo = uint({p.m('lo')}), hi = uint({p.m('hi')});", f"{_WIDE.get(W, 'uint')} val = {val};",
         "if (g0 >= nv) return;", f"{o}[g0] = val;"]
    L += [f"if (g0 + {k * lx}u < nv) {o}[g0 + {k * lx}u] = val;" for k in range(1, R)]
    p.main(*L)
    return p



def lower(node, ins, out, ctx) -> None:
    fill_view(ctx, out, node.attrs["value"])
