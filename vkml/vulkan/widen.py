"""float16/bfloat16 through the float32 kernels: a graph rewrite before scheduling.

Only the elementwise family (and Full) reads and writes 16-bit floats itself
(`lower/lowp.py`). Every other operator on a 16-bit float (reductions, softmax, MatMul,
sort, scan, gathers and scatters, windows, padding and concatenation, random numbers) is
rewritten to convert in, compute in float32 and convert out:

    Sum(x: bf16) -> Cast(Sum(Cast(x, f32)), bf16)

so reductions, softmax, norms and MatMuls accumulate in float32 and round once at the
end, and no kernel family needs 16-bit variants. The Casts are elementwise operators: the
scheduler fuses them into the neighbouring regions (a reduction's fused prologue and
epilogue read and write the 16-bit values themselves), so a bf16 activation feeding a
MatMul is converted where its producer writes it. A float32 Rand rounded to a 16-bit
dtype could reach 1.0: the widened draw is capped below 1, keeping [0, 1). Movement operators, which regions
apply as strided loads, are left alone while fusion is on.

>>> import vkml, vkml.numpy as vnp
>>> g = vkml.make_graph(lambda x: x.sum(), vnp.ones(4, dtype=vnp.bfloat16))
>>> [(n.op.value, str(n.dtype)) for n in widen(g).nodes]
[('Input', 'bfloat16'), ('Cast', 'float32'), ('Sum', 'float32'), ('Cast', 'bfloat16')]
"""
from __future__ import annotations

import numpy as np

from ..trace import dtypes as dt
from ..trace.graph import Graph, Node
from ..trace.ops import OpKind, SPECS
from .regions import MOVES      # the operators a region applies as strided loads

NATIVE = frozenset({"elementwise", "fill", None})    # families that take 16-bit floats as they are
LOOPS = frozenset({OpKind.Scan, OpKind.While, OpKind.Part})   # a loop's body is lowered (and widened) on its own


def coop_native(op: OpKind, ins) -> bool:
    """Whether a MatMul of ins runs on tensor cores as it is (`lower/matmul/coop.py`):
    float16 operands, each of M, N and K a multiple of 8 (so the kernel's 16-byte loads
    fit whichever operand layout fusion gives it)."""
    if op is not OpKind.MatMul or not all(i.dtype == dt.float16 for i in ins):
        return False
    a, b = ins[0].shape, ins[1].shape
    return len(a) >= 2 and len(b) >= 2 and a[-2] % 8 == 0 and a[-1] % 8 == 0 and b[-1] % 8 == 0


def widen(graph: Graph, fuse: bool = True, coop: bool = False) -> Graph:
    """graph with every operator outside the elementwise family computed in float32 on
    its 16-bit float operands and results (the graph itself where there are none).
    fuse: whether movement operators become strided loads of regions (else they are
    kernels of their own, and widened too). coop: float16 MatMuls that tensor cores take
    (`coop_native`) stay float16."""
    if not any(dt.is_low(n.dtype) for n in graph.nodes):
        return graph
    new: dict[int, Node] = {}
    up: dict[int, Node] = {}          # node id -> its float32 Cast (one per value)

    def f32(x: Node) -> Node:
        if not dt.is_low(x.dtype):
            return x
        c = up.get(x.id)
        if c is None:
            c = up[x.id] = Node(OpKind.Cast, (x,), {"dtype": dt.float32}, tag=x.tag)
        return c
    for n in graph.nodes:
        ins = [new[i.id] for i in n.inputs]
        # a Scan's body is lowered (and widened) as a graph of its own, in its own dtypes
        native = (SPECS[n.op].kernel in NATIVE or (fuse and n.op in MOVES) or n.op in LOOPS
                  or (coop and coop_native(n.op, ins)))
        low_in = any(dt.is_low(i.dtype) for i in ins)
        low_attr = dt.is_low(n.attrs["dtype"]) if "dtype" in n.attrs and n.op is not OpKind.Cast else False
        if native or not (low_in or low_attr or dt.is_low(n.dtype)):
            same = all(a is b for a, b in zip(ins, n.inputs))
            new[n.id] = n if same else Node(n.op, ins, n.attrs, tag=n.tag)
            continue
        attrs = dict(n.attrs)
        if low_attr:
            attrs["dtype"] = dt.float32
        m = Node(n.op, [f32(i) for i in ins], attrs, tag=n.tag)
        if m.dtype != n.dtype:
            m = Node(OpKind.Cast, (m,), {"dtype": n.dtype}, tag=n.tag)
            if n.op is OpKind.Rand:
                # float32 draws just below 1 round up to 1: keep [0, 1) (as JAX's uniform)
                below = float(np.nextafter(np.asarray(1.0, n.dtype), np.asarray(0.0, n.dtype)))
                top = Node(OpKind.Full, (), {"shape": (), "dtype": n.dtype, "value": below}, tag=n.tag)
                m = Node(OpKind.Minimum, (m, top), {}, tag=n.tag)
        new[n.id] = m
    out = Graph(graph.inputs, [new[o.id] for o in graph.outputs])
    out.keep = graph.keep
    return out
