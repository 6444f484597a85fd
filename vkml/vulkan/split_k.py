"""Long contractions on a driver that ends loops: a graph rewrite before scheduling.

lavapipe's gallivm ends a kernel's loops once an invocation has passed
`Profile.loop_limit` loop heads (65535), silently: a float MatMul whose k loop would run
longer returns a partial sum. The subgroup kernel passes about 2K/S heads for transposed
A (one S-wide chunk of k a step) and K/S otherwise, so on lavapipe (S = 16) a product
came out wrong from K = 2^19 with A transposed and 2^20 without. Past `max_k` (half the
shortest failing K) the contraction is cut into P equal chunks, each a batch entry of
one MatMul, and the partial products are summed:

    A (..., M, K) @ B (..., K, N) -> Sum_p (A' (..., P, M, Kc) @ B' (..., P, Kc, N))

K is zero-padded to P * Kc where the chunks do not divide it. The integer kernel has its
own bound (`matmul.INT_MAX_K`, an error).

>>> import vkml, vkml.numpy as vnp
>>> g = vkml.make_graph(lambda a, b: a @ b, vnp.ones((2, 10)), vnp.ones((10, 3)))
>>> [n.op.value for n in split_k(g, 4).nodes]
['Input', 'Pad', 'Reshape', 'Permute', 'Input', 'Pad', 'Reshape', 'MatMul', 'Sum']
"""
from __future__ import annotations

from ..trace import dtypes as dt
from ..trace.graph import Graph, Node
from ..trace.ops import OpKind


def max_k(loop_limit: int, subgroup_size: int) -> int:
    """The longest contraction the float MatMul kernels run in one piece under a driver
    that ends loops after loop_limit heads (0: no limit, no bound).

    >>> max_k(65535, 16), max_k(0, 16)
    (262140, 0)
    """
    return loop_limit * max(subgroup_size, 1) // 4 if loop_limit > 0 else 0


def _split(n: Node, a: Node, b: Node, limit: int) -> Node:
    K = a.shape[-1]
    P = -(-K // limit)
    Kc = -(-K // P)
    pad = P * Kc - K
    if pad:
        a = Node(OpKind.Pad, [a], {"pads": ((0, 0),) * (len(a.shape) - 1) + ((0, pad),), "value": 0},
                 tag=n.tag)
        b = Node(OpKind.Pad, [b], {"pads": ((0, 0),) * (len(b.shape) - 2) + ((0, pad), (0, 0)), "value": 0},
                 tag=n.tag)
    ra = len(a.shape)
    a = Node(OpKind.Reshape, [a], {"shape": tuple(a.shape[:-1]) + (P, Kc)}, tag=n.tag)
    a = Node(OpKind.Permute, [a], {"perm": tuple(range(ra - 2)) + (ra - 1, ra - 2, ra)}, tag=n.tag)
    b = Node(OpKind.Reshape, [b], {"shape": tuple(b.shape[:-2]) + (P, Kc, b.shape[-1])}, tag=n.tag)
    parts = Node(OpKind.MatMul, [a, b], {}, tag=n.tag)
    return Node(OpKind.Sum, [parts], {"axes": (len(parts.shape) - 3,), "keepdims": False}, tag=n.tag)


def split_k(graph: Graph, limit: int) -> Graph:
    """graph with every float MatMul whose contraction is longer than limit cut into
    chunks of at most limit (the graph itself where there is none, or limit is 0)."""
    if not limit or not any(n.op is OpKind.MatMul and n.inputs[0].shape[-1] > limit
                            and n.dtype != dt.int32 for n in graph.nodes):
        return graph
    new: dict[int, Node] = {}
    for n in graph.nodes:
        ins = [new[i.id] for i in n.inputs]
        if n.op is OpKind.MatMul and n.dtype != dt.int32 and ins[0].shape[-1] > limit:
            new[n.id] = _split(n, ins[0], ins[1], limit)
            continue
        same = all(x is y for x, y in zip(ins, n.inputs))
        new[n.id] = n if same else Node(n.op, ins, n.attrs, tag=n.tag)
    out = Graph(graph.inputs, [new[o.id] for o in graph.outputs])
    out.keep = graph.keep
    return out
