"""Graph simplification: dead-node removal, constant folding, common subexpressions.

Dead nodes vanish because a Graph holds only what its outputs reach. Merging uses each
node's structural key, which includes its tag, so a checkpoint's recomputation is never
merged back into the forward value it recomputes. StopGradient is removed only for
execution (`for_execution=True`): a graph that may still be differentiated keeps it.

Folding that needs a device (an Arange a compiled program reads, computed once into a
Const) is the caller's: `simplify` only says which nodes are worth it (`constant`).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..trace import dtypes as dt
from ..trace.graph import Graph, Node
from ..trace.ops import OpKind as K


def _is_full(n: Node, v=None) -> bool:
    return n.op is K.Full and (v is None or n.attrs["value"] == v)


def _fold(op: K, ins: list[Node], attrs: dict, shape, dtype, for_execution: bool) -> Node | None:
    """A simpler node equal to op(ins), or None."""
    a = ins[0] if ins else None
    if op in (K.Reshape, K.Expand) and a.shape == tuple(shape):
        return a
    if op is K.Cast and a.dtype == np.dtype(dtype):
        return a
    if op is K.Permute and tuple(attrs["perm"]) == tuple(range(len(shape))):
        return a
    if op is K.StopGradient and for_execution:
        return a
    if op is K.Reshape and a.op is K.Reshape:
        return Node(K.Reshape, [a.inputs[0]], {"shape": tuple(shape)}, tag=a.tag)
    if op is K.Neg and a.op is K.Neg:
        return a.inputs[0]
    if op in (K.Reshape, K.Expand, K.Cast) and a.op is K.Full:
        v = a.attrs["value"]
        if op is K.Cast:
            v = bool(v) if dtype == dt.bool_ else (int(v) if dtype == dt.int32 else float(v))
        return Node(K.Full, [], {"shape": tuple(shape), "dtype": np.dtype(dtype), "value": v})
    if op in (K.Add, K.Sub, K.Mul, K.Div) and len(ins) == 2:
        x, y = ins
        if _is_full(x) and _is_full(y) and dt.is_float(dtype):
            t = np.float64 if dtype == dt.float64 else np.float32
            xv, yv = t(x.attrs["value"]), t(y.attrs["value"])
            with np.errstate(all="ignore"):
                v = {K.Add: xv + yv, K.Sub: xv - yv, K.Mul: xv * yv, K.Div: xv / yv}[op]
            return Node(K.Full, [], {"shape": tuple(shape), "dtype": np.dtype(dtype), "value": float(v)})
        if op in (K.Add, K.Sub) and _is_full(y, 0) and x.shape == tuple(shape):
            return x
        if op is K.Add and _is_full(x, 0) and y.shape == tuple(shape):
            return y
        if op in (K.Mul, K.Div) and _is_full(y, 1) and x.shape == tuple(shape):
            return x
        if op is K.Mul and _is_full(x, 1) and y.shape == tuple(shape):
            return y
    if op is K.Where and _is_full(ins[0]):
        pick = ins[1] if ins[0].attrs["value"] else ins[2]
        if pick.shape == tuple(shape):
            return pick
    return None


def simplify(graph: Graph, for_execution: bool = False,
             constant: Callable[[Node], Node | None] | None = None) -> Graph:
    """An equivalent, usually smaller graph (same inputs, same outputs in order).

    `constant`, for a graph about to run (`for_execution`), computes an Arange the graph
    reads into a Const node (its own kernel would run at every call of a compiled
    program), or returns None to keep it.

    >>> import vkml, vkml.numpy as vnp
    >>> g = vkml.make_graph(lambda x: -(-x) * 1.0 + 0.0, vnp.ones(3))
    >>> [n.op.value for n in simplify(g).nodes]
    ['Input']
    """
    new: dict[int, Node] = {}
    memo: dict[tuple, Node] = {}
    outs = {o.id for o in graph.outputs}
    for n in graph.nodes:
        if n.op is K.Input:
            new[n.id] = n
            continue
        ins = [new[i.id] for i in n.inputs]
        m = _fold(n.op, ins, n.attrs, n.shape, n.dtype, for_execution)
        if m is None and n.op is K.Arange and for_execution and constant and n.id not in outs:
            m = constant(n)
        if m is None:
            m = n if all(a is b for a, b in zip(ins, n.inputs)) else Node(
                n.op, ins, n.attrs, tag=n.tag, shape=n.shape, dtype=n.dtype)
        k = m.key()
        if k in memo:
            m = memo[k]
        else:
            memo[k] = m
        new[n.id] = m
    return Graph(graph.inputs, [new[o.id] for o in graph.outputs])
