"""Checkpointing as "re-emit that subgraph".

Nodes traced inside `vkml.checkpoint(f)` carry a `Segment` tag. After the backward walk,
every reference from a backward node to a forward node of a region (other than what the
policy saves) is replaced by a recomputed copy, tagged `Recompute`, so common
subexpression merging never folds it back into the forward value; the forward
intermediates then die early and the recomputation runs where the backward pass needs it.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..trace.graph import Node, toposort
from ..trace.ops import OpKind

POLICIES = ("nothing_saveable", "dots_saveable", "everything_saveable")
_ids = itertools.count()


@dataclass(frozen=True)
class Segment:
    """Tag of nodes traced inside one call of a checkpointed function."""
    id: int
    policy: str = "nothing_saveable"

    @staticmethod
    def new(policy: str) -> "Segment":
        if policy not in POLICIES:
            raise ValueError(f"checkpoint: unknown policy {policy!r}; valid: {', '.join(POLICIES)}")
        return Segment(next(_ids), policy)


@dataclass(frozen=True)
class Recompute:
    """Tag of a node recomputed in the backward pass for a Segment."""
    region: Segment


def _saved(n: Node) -> bool:
    r = n.tag
    if r.policy == "everything_saveable":
        return True
    return r.policy == "dots_saveable" and n.op is OpKind.MatMul


def rematerialize(forward: set[int], outputs: list[Node]) -> list[Node]:
    """outputs with backward references to unsaved region nodes replaced by recomputations."""
    if not any(isinstance(n.tag, Segment) for n in toposort(outputs)):
        return outputs
    copies: dict[int, Node] = {}

    def recompute(n: Node, region: Segment | None = None) -> Node:
        """A copy of n recomputed from its region's inputs (values from outside the
        region, including other regions' outputs, are the saved residuals)."""
        if (not isinstance(n.tag, Segment) or (region is not None and n.tag != region)
                or _saved(n) or n.op in (OpKind.Input, OpKind.Const)):
            return n
        c = copies.get(n.id)
        if c is None:
            c = Node(n.op, [recompute(i, n.tag) for i in n.inputs], n.attrs, tag=Recompute(n.tag),
                     shape=n.shape, dtype=n.dtype)
            copies[n.id] = c
        return c

    rebuilt: dict[int, Node] = {}
    for n in toposort(outputs):
        if n.id in forward:
            continue
        ins = [rebuilt.get(i.id) or (recompute(i) if i.id in forward else i) for i in n.inputs]
        rebuilt[n.id] = n if all(a is b for a, b in zip(ins, n.inputs)) else Node(
            n.op, ins, n.attrs, tag=n.tag, shape=n.shape, dtype=n.dtype)
    return [rebuilt.get(o.id, o) for o in outputs]
