"""Arange: start + step * i, computed in the output dtype (float64 exactly)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...trace import dtypes as dt
from ..program import Meta, Program
from .fill import scalar_field, scalar_read, scalar_words


@lru_cache(maxsize=1024)
def program(dtype) -> Program:
    T = dt.glsl_type(dtype)
    p = Program("Arange")
    p.meta = Meta(("n", 1), scalar_field("start", dtype), scalar_field("step", dtype))
    o = p.buffer("o", T)
    p.main("uint i = gidx();", f"if (i >= uint({p.m('n')})) return;",
           f"{T} start = {scalar_read(p, 'start', dtype)};",
           f"{T} step = {scalar_read(p, 'step', dtype)};",
           f"{o}[i] = start + step * {T}(i);")
    return p


def lower(node, ins, out, ctx) -> None:
    d = np.dtype(node.dtype)
    k = ctx.kernel(program(d))
    ctx.dispatch(k, {"n": node.size, "start": scalar_words(node.attrs["start"], d),
                     "step": scalar_words(node.attrs["step"], d)}, [out], threads=node.size, heads=0)
