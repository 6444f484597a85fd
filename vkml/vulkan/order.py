"""The order kernels run in: a memory-aware topological order of the fusion schedule.

Graph order (a depth-first walk from the outputs) runs what the first output needs first.
In a training graph that is the whole backward chain down to the first layer's weight
gradient; every other layer's weight-gradient MatMul and bias Sum come after it, so every
cotangent and recomputed activation stays alive to the end and checkpointing saves nothing.

`memory_order` list-schedules instead: of the kernels whose inputs exist, it runs the one
that frees the most bytes net of what it writes (the last reader of a value frees it), the
graph order breaking ties; reverse mode's own order comes out (each weight gradient right
after its cotangent exists). A greedy order is not always the better one, so the planned
peak of both (live bytes, `live_peak`) decides, as XLA's memory scheduler chooses among
its heuristics. Both run in O(N log N): a value's last reader is re-ranked once, when
it becomes the last.
"""
from __future__ import annotations

import heapq
from typing import Callable, Sequence

from ..trace.graph import Node
from .memory import ALIGN


def _bytes(n: Node) -> int:
    b = max(n.size * n.dtype.itemsize, 4)
    return (b + ALIGN - 1) // ALIGN * ALIGN


def _readers(groups: Sequence) -> tuple[dict, dict]:
    """{node id: group index producing it}, {node id: distinct groups reading it}."""
    prod = {g.out.id: t for t, g in enumerate(groups)}
    uses: dict[int, int] = {}
    for g in groups:
        for i in {r.id for r in g.reads}:
            uses[i] = uses.get(i, 0) + 1
    return prod, uses


def live_peak(groups: Sequence, outputs: set[int], scratch: Callable | None = None) -> int:
    """The most bytes of computed, non-output values alive at once when groups run in this
    order (a value lives from its kernel to its last reader; `scratch(g)`: a kernel's own
    temporary bytes). Fragmentation aside, the arena `executor.plan` lays out."""
    prod, uses = _readers(groups)
    left = dict(uses)
    live = peak = 0
    for g in groups:
        out = 0 if g.out.id in outputs else _bytes(g.out)
        sc = scratch(g) if scratch is not None else 0
        peak = max(peak, live + out + sc)
        live += out
        if not uses.get(g.out.id):
            live -= out           # written, never read (dead unless an output)
        for i in {r.id: r for r in g.reads}.values():
            left[i.id] -= 1
            if left[i.id] == 0 and i.id in prod and i.id not in outputs:
                live -= _bytes(i)
    return peak


def list_order(groups: Sequence, outputs: set[int]) -> list:
    """groups in a topological order that, at each step, runs the ready kernel freeing the
    most bytes net of its output (ties: the earlier in `groups`)."""
    prod, uses = _readers(groups)
    left = dict(uses)
    deps = [0] * len(groups)
    succ: list[list[int]] = [[] for _ in groups]
    readers: dict[int, list[int]] = {}
    for t, g in enumerate(groups):
        for i in {r.id for r in g.reads}:
            readers.setdefault(i, []).append(t)
            p = prod.get(i)
            if p is not None:
                deps[t] += 1
                succ[p].append(t)

    def score(t: int) -> int:
        g = groups[t]
        freed = sum(_bytes(r) for r in {r.id: r for r in g.reads}.values()
                    if left[r.id] == 1 and r.id in prod and r.id not in outputs)
        return freed - (0 if g.out.id in outputs else _bytes(g.out))

    done = [False] * len(groups)
    heap = [(-score(t), t) for t in range(len(groups)) if deps[t] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        s, t = heapq.heappop(heap)
        if done[t]:
            continue
        if -s != score(t):       # re-ranked since pushed (stale entry)
            continue
        done[t] = True
        g = groups[t]
        out.append(g)
        for i in {r.id for r in g.reads}:
            left[i] -= 1
            if left[i] == 1:     # its one remaining reader now frees it: rank it again
                for u in readers[i]:
                    if not done[u] and deps[u] == 0:
                        heapq.heappush(heap, (-score(u), u))
        for u in succ[t]:
            deps[u] -= 1
            if deps[u] == 0:
                heapq.heappush(heap, (-score(u), u))
    assert len(out) == len(groups), "the kernel schedule has a cycle"
    return out


def memory_order(groups: Sequence, outputs: Sequence[Node], scratch: Callable | None = None) -> list:
    """groups reordered to lower the planned peak: `list_order` where its `live_peak` is
    lower than the given order's, else the given order.

    >>> import vkml, vkml.numpy as vnp
    >>> from vkml.vulkan import fusion
    >>> g = vkml.make_graph(lambda x: (vnp.exp(x) @ x, vnp.tanh(x).sum()), vnp.ones((64, 64)))
    >>> len(memory_order(fusion.schedule(g), g.outputs)) == len(fusion.schedule(g))
    True
    """
    outs = {o.id for o in outputs}
    groups = list(groups)
    if len(groups) < 3:
        return groups
    cand = list_order(groups, outs)
    if live_peak(cand, outs, scratch) < live_peak(groups, outs, scratch):
        return cand
    return groups
