"""Loop bodies as subgraphs: building Scan nodes and the bodies they hold.

A Scan's body is a Graph: inputs (constants, carries, one step's slices), outputs (new
carries, one step's outputs). Everything here works on Nodes, so the surface
(`vkml.lax`) and the transforms (gradient, batching) build loops the same way, from a
body traced once: unrolling, blocking (a loop of loops, for O(sqrt T) saved carries)
and the saved carries the gradient reads are compositions of that one graph, never a
second call of the user's function.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .graph import Graph, Node, input_node
from .ops import OpKind, loop_outputs


def substitute(graph: Graph, args: Sequence[Node], tag=None) -> list[Node]:
    """graph's outputs with its inputs replaced by args (nodes not depending on an input
    are shared, not copied).

    >>> x = input_node((2,), "float32", 0)
    >>> g = Graph([x], [Node(OpKind.Exp, [x], {})])
    >>> y = input_node((2,), "float32", 0)
    >>> substitute(g, [y])[0].inputs[0] is y
    True
    """
    env = {i.id: a for i, a in zip(graph.inputs, args)}
    for n in graph.nodes:
        if n.id in env:
            continue
        ins = [env[i.id] for i in n.inputs]
        env[n.id] = n if all(a is b for a, b in zip(ins, n.inputs)) and tag is None else Node(
            n.op, ins, n.attrs, tag=n.tag if tag is None else tag, shape=n.shape, dtype=n.dtype)
    return [env[o.id] for o in graph.outputs]


def fresh_inputs(nodes: Sequence[Node], shapes=None) -> list[Node]:
    """New Input nodes of the nodes' types (or of `shapes`)."""
    return [input_node(n.shape if shapes is None else shapes[k], n.dtype, k)
            for k, n in enumerate(nodes)]


def normalized(body: Graph, n_consts: int, n_carry: int) -> Graph:
    """body with each carry output that is an input other than its own carry made a Copy:
    the lowering then never copies one carry slot onto another within a step."""
    own = body.inputs[n_consts:n_consts + n_carry]
    ids = {i.id for i in body.inputs}
    outs = list(body.outputs)
    changed = False
    for k in range(n_carry):
        o = outs[k]
        if o.id in ids and o is not own[k]:
            outs[k] = Node(OpKind.Copy, [o], {})
            changed = True
    g = Graph(body.inputs, outs) if changed else body
    g.keep = list(getattr(body, "keep", []))
    return g


def with_saved(body: Graph, n_consts: int, n_carry: int) -> Graph:
    """body with the carries each step began from appended as step outputs."""
    g = Graph(body.inputs, list(body.outputs) + list(body.inputs[n_consts:n_consts + n_carry]))
    g.keep = list(getattr(body, "keep", []))
    return g


def scan_nodes(body: Graph, operands: Sequence[Node], length: int, reverse: bool,
               n_consts: int, n_carry: int, saved: bool, tag=None) -> list[Node]:
    """Part nodes of a new Scan over body (its final carries, then its stacked outputs).

    >>> c = input_node((), "float32", 0); x = input_node((), "float32", 1)
    >>> s = Node(OpKind.Add, [c, x], {})
    >>> parts = scan_nodes(Graph([c, x], [s, s]), [input_node((), "float32", 0),
    ...                    input_node((4,), "float32", 1)], 4, False, 0, 1, False)
    >>> [p.shape for p in parts]
    [(), (4,)]
    """
    node = Node(OpKind.Scan, list(operands), {"body": body, "length": int(length), "reverse": bool(reverse),
                                              "n_consts": n_consts, "n_carry": n_carry, "saved": saved},
                tag=tag)
    return parts_of(node, tag)


def parts_of(node: Node, tag=None) -> list[Node]:
    a = node.attrs
    return [Node(OpKind.Part, [node], {"index": k, "shape": s, "dtype": d}, tag=tag)
            for k, (s, d) in enumerate(loop_outputs(node.op, a))]


WHILE_REVERSE = ("Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop "
                 "with dynamic start/stop values (as in JAX: the trip count is only known by "
                 "running it, so the carries a reverse pass needs cannot be planned). Try using "
                 "lax.scan, or using fori_loop with static start/stop; outside jit and vmap, "
                 "vkml's while_loop differentiates in reverse mode too (the trip count is "
                 "computed first from the values).")


def gated_step(body: Graph, cond: Graph, n_consts: int, n_carry: int) -> Graph:
    """One step of a While as it runs: (constants, carries) -> (new carries, go), where
    a lane's new carry is body's where cond holds and its carry where it does not, and go
    (a bool scalar) says whether cond held in any lane. So a step past the end leaves
    the carries as they are: a submission may run more steps than the loop needs."""
    ins = fresh_inputs(body.inputs)
    p = substitute(cond, ins)[0]
    new = substitute(body, ins)
    lead = tuple(p.shape)
    outs = []
    for c, v in zip(ins[n_consts:n_consts + n_carry], new):
        pb = p if len(c.shape) == len(lead) else Node(
            OpKind.Reshape, [p], {"shape": lead + (1,) * (len(c.shape) - len(lead))})
        outs.append(Node(OpKind.Where, [pb, v, c], {}))
    go = p if not lead else Node(OpKind.Max, [p], {"axes": tuple(range(len(lead))), "keepdims": False})
    if go.op in (OpKind.Input, OpKind.Const):
        go = Node(OpKind.Copy, [go], {})      # the flag's copy never reads a carry being written
    return Graph(ins, outs + [go])


def _step(x: Node, j: int) -> Node:
    """Slice j of x along its leading axis, without that axis."""
    nd = len(x.shape)
    s = Node(OpKind.Slice, [x], {"starts": (j,) + (0,) * (nd - 1), "stops": (j + 1,) + tuple(x.shape[1:]),
                                 "steps": (1,) * nd})
    return Node(OpKind.Reshape, [s], {"shape": tuple(x.shape[1:])})


def _stack(ys: Sequence[Node]) -> Node:
    rows = [Node(OpKind.Reshape, [y], {"shape": (1,) + tuple(y.shape)}) for y in ys]
    return rows[0] if len(rows) == 1 else Node(OpKind.Concat, rows, {"axis": 0})


def unrolled(body: Graph, n_consts: int, n_carry: int, u: int, reverse: bool) -> Graph:
    """A body doing u steps of body: its slices are blocks of u steps, its outputs blocks
    of u step outputs (steps in order u-1 .. 0 of the block when reverse)."""
    ins = fresh_inputs(body.inputs, [n.shape if k < n_consts + n_carry else (u,) + tuple(n.shape)
                                     for k, n in enumerate(body.inputs)])
    consts, carry, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
    ys: dict[int, list[Node]] = {}
    for j in (range(u - 1, -1, -1) if reverse else range(u)):
        outs = substitute(body, consts + carry + [_step(x, j) for x in xs])
        carry = outs[:n_carry]
        ys[j] = outs[n_carry:]
    n_y = len(body.outputs) - n_carry
    g = Graph(ins, carry + [_stack([ys[j][k] for j in range(u)]) for k in range(n_y)])
    g.keep = []
    return g


def blocked(body: Graph, n_consts: int, n_carry: int, k: int, reverse: bool, unroll: int = 1) -> Graph:
    """A body running a Scan of k steps of body: an outer loop over blocks of k steps
    saves one carry per block, and each block's gradient recomputes its k carries. With
    unroll u (a divisor of k) the inner Scan runs k / u iterations of u steps each.

    >>> c = input_node((), "float32", 0); x = input_node((), "float32", 1)
    >>> g = blocked(Graph([c, x], [Node(OpKind.Add, [c, x], {})] * 2), 0, 1, 6, False, unroll=3)
    >>> [(n.attrs["length"], sum(m.op is OpKind.Add for m in n.attrs["body"].nodes))
    ...  for n in g.nodes if n.op is OpKind.Scan]
    [(2, 3)]
    """
    ins = fresh_inputs(body.inputs, [n.shape if i < n_consts + n_carry else (k,) + tuple(n.shape)
                                     for i, n in enumerate(body.inputs)])
    u = unroll if unroll > 1 and k % unroll == 0 else 1
    step = body if u == 1 else unrolled(body, n_consts, n_carry, u, reverse)
    inner = with_saved(step, n_consts, n_carry)
    nx = n_consts + n_carry
    operands = ins[:nx] + [x if u == 1 else Node(OpKind.Reshape, [x], {"shape": (k // u, u) + tuple(x.shape[1:])})
                           for x in ins[nx:]]
    parts = scan_nodes(inner, operands, k // u, reverse, n_consts, n_carry, True)
    n_out = len(body.outputs)
    outs = parts[:n_out]
    if u > 1:       # (k / u, u, ...) step outputs as (k, ...)
        outs = outs[:n_carry] + [Node(OpKind.Reshape, [y], {"shape": (k,) + tuple(y.shape[2:])})
                                 for y in outs[n_carry:]]
    g = Graph(ins, outs)
    g.keep = []
    return g


def zeros(shape, dtype) -> Node:
    d = np.dtype(dtype)
    v = False if d == np.bool_ else (0 if d.kind == "i" else 0.0)
    return Node(OpKind.Full, [], {"shape": tuple(shape), "dtype": d, "value": v})
