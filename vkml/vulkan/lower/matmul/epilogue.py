"""Elementwise epilogues: a same-shape region (a bias, an activation, a mask) applied to
the product at a MatMul kernel's stores, so the product itself is never written.

An epilogue's kernel key is `Epi` (the region's GLSL function, whether it calls the math
library, the leaves' binding types, the loads); `operands` makes it and the dispatch's meta
fields and views from the region, `declare` adds its bindings, helpers and meta reads to a
kernel's Program and gives the store expression.

Each region load is -1 (the product itself) or (leaf, kind): 'i' reads the leaf in the
product's own order (off + batch offset + row * N + col); 'm' through row and column
strides with no batch stride (off + row * sM + col * sN); 'c' (the subgroup kernel) a
column vector (sM = 0: a bias) loaded once per column of a lane (`Store.column_loads`).
Offsets and strides travel in meta (fields eo<q>, er<q>, ec<q> of load q) and are read
once into locals: the compiler cannot tell meta from C, so a read at every store is
repeated at every store.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ....trace import dtypes as dt
from .. import lowp
from ...kernels import TEXEL_FORMATS, texel_format
from ...program import Program

SHADERS = Path(__file__).resolve().parents[2] / "shaders"
_LOW = {"f16": dt.float16, "bf16": dt.bfloat16}
_LOW_TAG = {np.dtype(v): k for k, v in _LOW.items()}


class Epi(NamedTuple):
    """An epilogue as far as the kernel's source depends on it (hashable: a cache key)."""
    fn: str           # GLSL `T epi(T0 a0, ...)`: the region's root from its loads
    math: bool        # fn calls the math library
    double: bool      # ... its float64 part
    types: tuple      # per bound leaf: its GLSL type, "tex" (a float32 texel buffer), or
                      # "f16" / "bf16" (16-bit float bits, read as float32: the coop kernel)
    loads: tuple      # per region load: -1 (the product) or (bound leaf, 'i' | 'm' | 'c')


@lru_cache(maxsize=1024)
def _shader(name: str) -> str:
    return (SHADERS / name).read_text()


def add_math(p: Program, double: bool) -> None:
    """The float32 (and, for double kernels, float64) math functions as libraries of p
    (a merged kernel holds each once).

    >>> p = Program("T"); add_math(p, False); list(p.libraries)
    ['math32']
    """
    p.library("math32", _shader("math32.glsl"))
    if double:
        p.library("math64", _shader("math64.glsl"))


def fields(epi: Epi | None) -> tuple:
    """The meta fields of an epilogue's loads (after the product's: `prologue.meta_fields`).

    >>> fields(Epi("", False, False, ("float",), (-1, (0, "m"))))
    (('eo1', 1), ('er1', 1), ('ec1', 1))
    """
    if epi is None:
        return ()
    out = []
    for q, ld in enumerate(epi.loads):
        if ld == -1:
            continue
        out.append((f"eo{q}", 1))
        if ld[1] == "m":
            out.append((f"er{q}", 1))
        if ld[1] in ("c", "m"):
            out.append((f"ec{q}", 1))
    return tuple(out)


def _contiguous(shape) -> list:
    st, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        st[i] = acc
        acc *= shape[i]
    return st


def _is_identity(st, shape) -> bool:
    return all(d == 1 or s == c for d, s, c in zip(shape, st, _contiguous(shape)))


def operands(epilogue, node, dev=None, round_each: bool = False) -> tuple:
    """(Epi or None, meta fields, views, texel formats) of an elementwise epilogue
    (region, views per leaf, None for the product itself). dev (the subgroup kernel's
    device): float32 leaves may be texels there (`Profile.matmul_texels`), and a load
    whose row stride is 0 (a bias) is a column vector ('c'). 16-bit float leaves (only
    the float16 product on tensor cores has such epilogues: `fusion`) are read as their
    bits; round_each: as `elementwise.region_function`'s.

    >>> operands(None, None)
    (None, {}, [], [])
    """
    if epilogue is None:
        return None, {}, [], []
    from ..elementwise import region_function, uses_double
    reg, eviews = epilogue
    fn, math = region_function(reg, "epi", round_each)
    zi, types, views, fmts = {}, [], [], []
    for j, (l, v) in enumerate(zip(reg.leaves, eviews)):
        if v is not None:
            zi[j] = len(types)
            f = texel_format(dev, v, 1, on=dev.profile.matmul_texels) if dev is not None else None
            types.append("tex" if f is not None else _LOW_TAG[np.dtype(l.dtype)]
                         if dt.is_low(l.dtype) else dt.glsl_type(l.dtype))
            fmts.append(f)
            views.append(v)
    loads, meta = [], {}
    N = node.shape[-1]
    for q, (li, off, st) in enumerate(reg.loads):
        if eviews[li] is None:
            loads.append(-1)
        elif tuple(st) == tuple(_contiguous(reg.shape)) or _is_identity(st, reg.shape):
            loads.append((zi[li], "i"))
            meta[f"eo{q}"] = off
        else:
            if any(x and d > 1 for x, d in zip(st[:-2], reg.shape[:-2])):
                raise AssertionError(f"MatMul: epilogue load {st} over {reg.shape} strides a batch dim")
            sM, sN = st[-2] if reg.shape[-2] > 1 else 0, st[-1] if N > 1 else 0
            if dev is not None and sM == 0:
                loads.append((zi[li], "c"))
                meta.update({f"eo{q}": off, f"ec{q}": sN})
            else:
                loads.append((zi[li], "m"))
                meta.update({f"eo{q}": off, f"er{q}": sM, f"ec{q}": sN})
    return Epi(fn, math, uses_double(reg), tuple(types), tuple(loads)), meta, views, fmts


class Store:
    """The product's value v at (r, c) through the epilogue, as GLSL (`declare`); with
    none, v itself."""

    def __init__(self, epi: Epi | None = None, row_len: str = "N"):
        self.epi, self.row_len = epi, row_len

    def _z(self, j: int, idx: str) -> str:
        t = self.epi.types[j]
        if t == "tex":
            return f"texelFetch(z{j}, {idx}).x"
        if t in _LOW:
            return lowp.load(_LOW[t], f"z{j}[{idx}]")
        return f"z{j}[{idx}]"

    def __call__(self, v: str, r: str, c: str, j: int | None = None) -> str:
        """The epilogue at (r, c); j: c's column within the lane, whose column-vector
        loads `column_loads` made once for every row."""
        if self.epi is None:
            return v
        args = []
        for q, ld in enumerate(self.epi.loads):
            if ld == -1:
                args.append(v)
            elif ld[1] == "i":
                args.append(self._z(ld[0], f"eo{q} + ({r}) * {self.row_len} + {c}"))
            elif ld[1] == "c":
                args.append(f"ez{q}_{j}" if j is not None else self._z(ld[0], f"eo{q} + ({c}) * ec{q}"))
            else:
                args.append(self._z(ld[0], f"eo{q} + ({r}) * er{q} + ({c}) * ec{q}"))
        return f"epi({', '.join(args)})"

    def column_loads(self, cols: list) -> list[str]:
        """Each column-vector (bias) load once per column, for `store(..., j)`."""
        if self.epi is None:
            return []
        types = self.epi.types
        return [f"{'float' if types[ld[0]] == 'tex' else types[ld[0]]} ez{q}_{j} = "
                f"{self._z(ld[0], f'eo{q} + ({c}) * ec{q}')};"
                for q, ld in enumerate(self.epi.loads) if ld != -1 and ld[1] == "c" for j, c in enumerate(cols)]


def declare(p: Program, epi: Epi | None, row_len: str = "N") -> tuple[list[str], Store]:
    """Add an epilogue to p (after its C, A and B bindings; p.meta holds `fields(epi)`):
    (lines for main's start, reading the offsets and strides once, and the `Store`).
    row_len: the GLSL expression of the output's row length (the kernel's N, or its M
    where it computes the transposed product, `subgroup.program`).

    >>> declare(Program("T"), None)[0]
    []
    """
    if epi is None:
        return [], Store()
    for j, t in enumerate(epi.types):
        if t == "tex":
            p.buffer(f"z{j}", "float", readonly=True, texel=TEXEL_FORMATS[1])
        elif t in _LOW:
            lowp.setup(p)
            p.buffer(f"z{j}", lowp.buffer_type(1), readonly=True)
        else:
            p.buffer(f"z{j}", t, readonly=True)
    if epi.math:
        add_math(p, epi.double)
    p.add(epi.fn, names=("epi",))
    hoist = []
    for q, ld in enumerate(epi.loads):
        if ld == -1:
            continue
        if ld[1] == "i":
            hoist.append(f"int eo{q} = {p.m(f'eo{q}')} + coff;")
        elif ld[1] == "c":
            hoist.append(f"int eo{q} = {p.m(f'eo{q}')}; int ec{q} = {p.m(f'ec{q}')};")
        else:
            hoist.append(f"int eo{q} = {p.m(f'eo{q}')}; int er{q} = {p.m(f'er{q}')}; "
                         f"int ec{q} = {p.m(f'ec{q}')};")
    return hoist, Store(epi, row_len)
