"""custom_vjp regions: a user-written backward rule for a traced subgraph.

Calling a custom_vjp function inside a trace inlines its `fwd` with every node tagged
`CustomTag(rec, roles)`: "in k" marks a Copy of argument k, "out k" the k-th primal
output, "res k" the k-th residual. The reverse walk holds back the outputs' cotangents
(their ordinary rules never run), lets cotangents that reach residuals flow through the
ordinary rules (that is what makes second order through a custom rule work), and, when
it reaches the region's earliest node, calls `bwd(residuals, cotangents)` traced into
forward operators and deposits the result on the arguments.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..trace.graph import Graph, Node


@dataclass(eq=False)
class CustomRecord:
    """One call of a custom_vjp function."""
    bwd: Callable            # (residual nodes, output cotangent nodes) -> arg cotangent nodes | None
    n_args: int
    n_out: int
    n_res: int
    name: str
    out_avals: tuple = ()    # (shape, dtype) of each primal output


@dataclass(frozen=True)
class CustomTag:
    rec: CustomRecord
    roles: tuple             # e.g. (("out", 0), ("res", 1))

    def __hash__(self):
        return hash((id(self.rec), self.roles))

    def __eq__(self, o):
        return isinstance(o, CustomTag) and o.rec is self.rec and o.roles == self.roles


def roles(n: Node, kind: str) -> list[int]:
    t = n.tag
    if not isinstance(t, CustomTag):
        return []
    return [k for r, k in t.roles if r == kind]


def inline_nodes(graph: Graph, args: list[Node]) -> list[Node]:
    """Copy graph's nodes with its inputs replaced by args (a node-level inline)."""
    env = {i.id: a for i, a in zip(graph.inputs, args)}
    for n in graph.nodes:
        if n.id not in env:
            env[n.id] = Node(n.op, [env[i.id] for i in n.inputs], n.attrs, tag=n.tag,
                             shape=n.shape, dtype=n.dtype)
    return [env[o.id] for o in graph.outputs]


class CustomRegions:
    """What the reverse walk needs to know about custom regions in one graph."""

    def __init__(self, order: list[Node]):
        self.first: dict[int, Node] = {}     # id(rec) -> earliest node in the order
        self.members: dict[int, list[Node]] = {}
        for n in order:
            if isinstance(n.tag, CustomTag):
                key = id(n.tag.rec)
                self.first.setdefault(key, n)
                self.members.setdefault(key, []).append(n)

    def __bool__(self) -> bool:
        return bool(self.first)

    def is_output(self, n: Node) -> bool:
        return bool(roles(n, "out"))

    def trigger(self, n: Node) -> CustomRecord | None:
        """The record whose backward must run after n, if n is its region's earliest node."""
        if isinstance(n.tag, CustomTag) and self.first.get(id(n.tag.rec)) is n:
            return n.tag.rec
        return None

    def parts(self, rec: CustomRecord):
        """(argument nodes, output nodes, residual nodes) of a region, by position."""
        args, outs, res = [None] * rec.n_args, [None] * rec.n_out, [None] * rec.n_res
        for n in self.members[id(rec)]:
            for r, k in n.tag.roles:
                if r == "in":
                    args[k] = n.inputs[0]
                elif r == "out":
                    outs[k] = n
                elif r == "res":
                    res[k] = n
        return args, outs, res
