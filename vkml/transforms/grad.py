"""Reverse mode as a graph transform: the walk of autograd-semantics.txt.

Order the subgraph reachable from the roots; seed the roots; walk it backwards so that a
node's cotangent is complete (every consumer has contributed) before its rule runs;
accumulate fan-out by addition; leaves receive and do not propagate. Every node the walk
appends is an ordinary forward operator, so the result can itself be differentiated.
"""
from __future__ import annotations

from typing import Sequence

from ..trace import dtypes as dt
from ..trace.dtypes import DTypeError
from ..trace.graph import Node, toposort
from ..trace.ops import LOOPS, SPECS, Grad, OpKind
from . import checkpoint as _ckpt
from .custom import CustomRegions
from .expr import E, full
from .rules import RULES


class NoGradientRule(NotImplementedError):
    """Differentiation reached an operator without a gradient rule."""


def _requires(order: list[Node], wrt_ids: set[int]) -> set[int]:
    """Float nodes that depend on a node being differentiated."""
    req = set()
    for n in order:
        if not dt.is_float(n.dtype) and n.op not in LOOPS:   # a loop: its Parts' token
            continue
        if n.id in wrt_ids or any(i.id in req for i in n.inputs):
            req.add(n.id)
    return req


def _piece(n: Node):
    """(axis, [(start, stop, value)]) for a SliceBackward of a unit-step slice along one
    axis, else None."""
    if n.op is not OpKind.SliceBackward or n.dtype != n.inputs[0].dtype:
        return None
    a = n.attrs
    cut = [i for i, (b, e, st, d) in enumerate(zip(a["starts"], a["stops"], a["steps"], a["shape"]))
           if (b, e, st) != (0, d, 1)]
    if len(cut) != 1 or a["steps"][cut[0]] != 1:
        return None
    ax = cut[0]
    return ax, [(a["starts"][ax], a["stops"][ax], n.inputs[0])]


def backward(roots: Sequence[Node], seeds: Sequence[Node], wrt: Sequence[Node],
             keep: Sequence[Node] = ()) -> list[Node]:
    """Cotangents of sum_k <seeds[k], roots[k]> with respect to each node of wrt.

    Unused wrt nodes get zeros of their shape. `keep` are nodes the walk must know about
    although no root reaches them (custom_vjp residuals; see Graph.keep). Raises DTypeError for non-float roots or
    wrt nodes, NoGradientRule naming the operator when the walk meets one without a rule.
    """
    for r, s in zip(roots, seeds):
        if not dt.is_float(r.dtype):
            raise DTypeError(f"grad: the differentiated output has dtype {r.dtype}; only float32 "
                             f"and float64 outputs have gradients")
        if s.shape != r.shape or s.dtype != r.dtype:
            raise ValueError(f"grad: seed {s.dtype}{list(s.shape)} does not match output "
                             f"{r.dtype}{list(r.shape)}")
    for w in wrt:
        if not dt.is_float(w.dtype):
            raise DTypeError(f"grad: cannot differentiate with respect to a {w.dtype} input of shape "
                             f"{w.shape}; only float32/float64 inputs have gradients (pass "
                             f"integer data through a non-differentiated argument)")
    order = toposort(list(roots) + list(keep))
    wrt_ids = {w.id for w in wrt}
    req = _requires(order, wrt_ids)
    ct: dict[int, E] = {}

    pieces: dict[int, tuple] = {}     # an accumulated cotangent -> its disjoint slices

    def give(node: Node, c: E) -> None:
        if c.shape != node.shape:
            raise AssertionError(f"rule for a consumer of {node} produced shape {c.shape}")
        if node.id not in ct:
            ct[node.id] = c
            return
        old = ct[node.id]
        pa, pb = pieces.get(old.n.id) or _piece(old.n), pieces.get(c.n.id) or _piece(c.n)
        s = old + c
        if pa and pb and pa[0] == pb[0]:
            # the cotangents of slices (a split's parts) that tile the axis: one Concat
            # instead of zero-filled SliceBackwards summed
            ax, parts = pa[0], sorted(pa[1] + pb[1], key=lambda p: p[0])
            if all(p[1] <= q[0] for p, q in zip(parts, parts[1:])):
                if parts[0][0] == 0 and parts[-1][1] == node.shape[ax] and all(
                        p[1] == q[0] for p, q in zip(parts, parts[1:])):
                    s = E(Node(OpKind.Concat, [p[2] for p in parts], {"axis": ax}))
                else:
                    pieces[s.n.id] = (ax, parts)
        ct[node.id] = s

    for r, s in zip(roots, seeds):
        if r.id in req:
            give(r, E(s))
    regions = CustomRegions(order)
    part_ct: dict[int, dict[int, E]] = {}    # Scan id -> {result index: cotangent}
    for n in reversed(order):
        g = ct.get(n.id)
        if n.op is OpKind.Part:
            # a loop has several results: their cotangents meet at the Scan (all its
            # Parts come later in the order, so they are complete when it is reached)
            if g is not None and n.inputs[0].id in req:
                d = part_ct.setdefault(n.inputs[0].id, {})
                k = n.attrs["index"]
                d[k] = g if k not in d else d[k] + g
        elif n.op in LOOPS:
            gs = part_ct.pop(n.id, None)
            if gs:
                from .control import scan_vjp, while_vjp
                for inp, c in zip(n.inputs, (scan_vjp if n.op is OpKind.Scan else while_vjp)(n, gs)):
                    if c is not None and inp.id in req:
                        give(inp, c)
        elif (g is not None and not (n.id in wrt_ids and n.op is OpKind.Input)
                and any(i.id in req for i in n.inputs)
                and not (regions and regions.is_output(n))):   # custom rule handles those
            sp = SPECS[n.op]
            if sp.grad is not Grad.RULE:
                # stop_gradient on the op's input would not help: the walk still reaches
                # the op itself; on its output, the walk stops before it
                raise NoGradientRule(f"{sp.name} has no gradient rule ({sp.grad.value}); "
                                     f"differentiation reached it from the output. If no gradient "
                                     f"should flow through it, wrap its output (not its input) in "
                                     f"vkml.stop_gradient: stop_gradient({sp.name.lower()}(x)).")
            outs = RULES[n.op](n, g, *[E(i) for i in n.inputs])
            for inp, c in zip(n.inputs, outs):
                if c is not None and inp.id in req:
                    give(inp, c)
        rec = regions.trigger(n) if regions else None
        if rec is not None:
            args, outs_, res = regions.parts(rec)
            # outputs this graph never used (or that got no cotangent) contribute zeros
            if any(o is not None and o.id in ct for o in outs_):
                gs = [ct[o.id].n if o is not None and o.id in ct else full(s, 0, d).n
                      for o, (s, d) in zip(outs_, rec.out_avals)]
                for a, c in zip(args, rec.bwd(res, gs)):
                    if c is not None and a is not None and a.id in req:
                        give(a, E(c))
    result = [ct[w.id].n if w.id in ct else full(w.shape, 0, w.dtype).n for w in wrt]
    return _ckpt.rematerialize({n.id for n in order}, result)


def seed_ones(root: Node) -> Node:
    return full(root.shape, 1, root.dtype).n
