"""vmap as a graph transform: a per-example graph becomes one graph over a whole batch.

Every value of the batched graph either carries the batch as a new leading axis or does
not depend on a mapped input at all; the latter nodes are reused unchanged (so work that
does not depend on the batch is done once). Each node with a batched operand is rewritten
by its rule in `batching_rules.BATCH_RULES`, which uses the same operators with one extra
leading axis: there is never a loop over the batch, and the batched graph's size does
not depend on the batch size.

custom_vjp regions stay custom regions: their nodes move to a new record whose backward
traces the user's per-example `bwd` and batches it the same way.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from ..trace.graph import Graph, Node, input_node, toposort
from ..trace.ops import OpKind as K
from .batching_rules import BATCH_RULES, BatchCtx
from .custom import CustomRecord, CustomTag, CustomRegions
from .expr import E


class BatchingError(ValueError):
    """A vmap request that cannot be honoured (e.g. an unmapped output of a mapped value)."""


class _Tags:
    """Tag translation for one batching pass: checkpoint tags stay as they are; each
    custom_vjp record is replaced by a batched one (see `_batched_record`)."""

    def __init__(self, order: list[Node], size: int):
        self.size = size
        self.order = order
        self.records: dict[int, CustomRecord] = {}
        self.arg_batched: dict[int, dict[int, bool]] = {}
        self._regions: CustomRegions | None = None

    def _record(self, old: CustomRecord) -> CustomRecord:
        new = self.records.get(id(old))
        if new is None:
            if self._regions is None:
                self._regions = CustomRegions(self.order)
            flags: dict[int, bool] = {}
            self.arg_batched[id(old)] = flags
            bwd = _batched_record(old, self._regions.parts(old), flags, self.size)
            new = dataclasses.replace(old, bwd=bwd)
            self.records[id(old)] = new
        return new

    def final(self, n: Node):
        t = n.tag
        return CustomTag(self._record(t.rec), t.roles) if isinstance(t, CustomTag) else t

    def member(self, n: Node):
        t = n.tag
        return CustomTag(self._record(t.rec), ()) if isinstance(t, CustomTag) else t

    def note(self, n: Node, ins_batched: Sequence[bool], out: Node, batched: bool) -> None:
        """Record what the batched region's backward needs: which arguments carry the
        batch, and the shapes its outputs now have (zero cotangents take those)."""
        t = n.tag
        if not isinstance(t, CustomTag):
            return
        new = self._record(t.rec)
        for role, k in t.roles:
            if role == "in":
                self.arg_batched[id(t.rec)][k] = ins_batched[0]
            elif role == "out" and k < len(new.out_avals):
                avals = list(new.out_avals)
                avals[k] = (out.shape, out.dtype)
                new.out_avals = tuple(avals)


def _batched_record(old: CustomRecord, parts, arg_batched: dict[int, bool], size: int):
    """A custom backward for the batched region: the user's per-example bwd, traced on
    per-example placeholders and batched over whichever residuals and cotangents carry
    the batch. An unbatched argument shared by every example gets the sum over the batch."""
    _, old_outs, old_res = parts
    out_avals = list(old.out_avals) or [(o.shape, o.dtype) for o in old_outs]
    avals = [None if r is None else (r.shape, r.dtype) for r in old_res] + out_avals

    def bwd(res_nodes, g_nodes):
        ph = [None if av is None else input_node(av[0], av[1], i) for i, av in enumerate(avals)]
        cts = old.bwd(ph[:len(old_res)], ph[len(old_res):])
        present = [c for c in cts if c is not None]
        env = {p.id: (a, len(a.shape) == len(p.shape) + 1)
               for p, a in zip(ph, list(res_nodes) + list(g_nodes)) if p is not None}
        it = iter(batch_nodes(present, env, size))
        out = []
        for k, c in enumerate(cts):
            if c is None:
                out.append(None)
                continue
            node, b = next(it)
            want = arg_batched.get(k, True)
            ctx = BatchCtx(size)
            if want and not b:
                node = ctx.materialize(E(node), False).n
            elif b and not want:
                node = ctx.op(K.Sum, node, axes=(0,), keepdims=False).n
            out.append(node)
        return out
    return bwd


def _retag(n: Node, tag) -> Node:
    if n.op in (K.Input, K.Const):
        return Node(K.Copy, [n], {}, tag=tag)
    return Node(n.op, n.inputs, n.attrs, tag=tag, shape=n.shape, dtype=n.dtype)


def batch_nodes(outputs: Sequence[Node], env: dict[int, tuple[Node, bool]],
                size: int) -> list[tuple[Node, bool]]:
    """Batch the nodes that `outputs` reach.

    env maps the id of every Input node reached to (its value in the batched graph,
    whether that value carries a leading batch axis of `size`). Returns (node, batched)
    per output; a batched node has shape (size,) + the original shape.

    >>> x = input_node((3,), "float32", 0)
    >>> y = Node(K.Exp, [x], {})
    >>> xb = input_node((5, 3), "float32", 0)
    >>> [(n.shape, b) for n, b in batch_nodes([y], {x.id: (xb, True)}, 5)]
    [((5, 3), True)]
    """
    order = toposort(outputs)
    memo: dict[int, tuple[Node, bool]] = dict(env)
    tags = _Tags(order, size)
    for n in order:
        if n.id in memo:
            continue
        if n.op is K.Input:
            raise ValueError(f"vmap: graph input {n} has no value in the batched graph")
        ins = [memo[i.id] for i in n.inputs]
        tag = tags.final(n)
        flags = [b for _, b in ins]
        if not any(flags):
            same = tag is n.tag and all(a is i for (a, _), i in zip(ins, n.inputs))
            memo[n.id] = (n if same else Node(n.op, [a for a, _ in ins], n.attrs, tag=tag,
                                              shape=n.shape, dtype=n.dtype), False)
            tags.note(n, flags, *memo[n.id])
            continue
        ctx = BatchCtx(size, tags.member(n))
        out = BATCH_RULES[n.op](ctx, n, [E(a) for a, _ in ins], flags).n
        if n.op not in (K.Scan, K.While) and (out.shape != (size,) + n.shape or out.dtype != n.dtype):
            raise AssertionError(f"batching rule of {n.op.value} made {out.dtype}{list(out.shape)}"
                                 f" for {n} with batch {size}")
        if out.tag != tag:
            out = _retag(out, tag)
        memo[n.id] = (out, True)
        tags.note(n, flags, out, True)
    return [memo[o.id] for o in outputs]


def move_axis(n: Node, src: int, dst: int) -> Node:
    """n with axis src moved to position dst (a Permute, or n itself)."""
    if src == dst:
        return n
    perm = [i for i in range(len(n.shape)) if i != src]
    perm.insert(dst, src)
    return Node(K.Permute, [n], {"perm": tuple(perm)})


def vmap_graph(graph: Graph, in_axes: Sequence[int | None], size: int,
               out_axes: Sequence[int | None], out_names: Sequence[str] | None = None) -> Graph:
    """The batched graph of a per-example graph.

    Input i of the result has graph input i's shape with a batch axis of `size` inserted
    at in_axes[i] (None: unmapped, same shape); output j has its batch axis at
    out_axes[j] (an output that does not depend on a mapped input is broadcast; None keeps
    it unbatched, and is an error for an output that does depend on one). Axes must be
    normalised (non-negative).

    >>> import vkml, vkml.numpy as vnp
    >>> g = vkml.make_graph(lambda x: vnp.sin(x).sum(), vnp.ones(3))
    >>> [o.shape for o in vmap_graph(g, [1], 4, [0]).outputs]
    [(4,)]
    """
    if len(in_axes) != len(graph.inputs) or len(out_axes) != len(graph.outputs):
        raise ValueError(f"vmap_graph: {len(in_axes)} in_axes for {len(graph.inputs)} inputs, "
                         f"{len(out_axes)} out_axes for {len(graph.outputs)} outputs")
    new_inputs, env = [], {}
    for i, (inp, ax) in enumerate(zip(graph.inputs, in_axes)):
        if ax is None:
            new = input_node(inp.shape, inp.dtype, i)
            env[inp.id] = (new, False)
        else:
            new = input_node(inp.shape[:ax] + (size,) + inp.shape[ax:], inp.dtype, i)
            env[inp.id] = (move_axis(new, ax, 0), True)
        new_inputs.append(new)
    outs = []
    for j, ((node, b), ax) in enumerate(zip(batch_nodes(graph.outputs, env, size), out_axes)):
        if ax is None:
            if b:
                name = out_names[j] if out_names else f"output {j}"
                raise BatchingError(
                    f"vmap: {name} (per-example shape {graph.outputs[j].shape}) depends on a "
                    f"mapped argument, so it has a batch axis, but its out_axes is None; give it "
                    f"an axis, or return only values that do not depend on mapped arguments there")
            outs.append(node)
            continue
        if not b:
            node = Node(K.Expand, [node], {"shape": (size,) + node.shape})
        outs.append(move_axis(node, 0, ax))
    return Graph(new_inputs, outs)
