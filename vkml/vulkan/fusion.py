"""Kernel fusion: the schedule of kernels a Graph is lowered into.

A graph's elementwise operators, the movement operators that only re-index
(Reshape/Permute/Expand/Slice/Flip) and Full constants are grouped into maximal
*regions*; each region becomes ONE generated kernel (`lower/elementwise.py:lower_region`).
Inside a region nothing touches memory: movement operators are pushed down to the
region's inputs as strided layouts (broadcast = stride 0, flip = negative stride),
Full constants become literals, and a value used several times at the same index is
computed once (a local of the generated function).

A value is materialised (written to memory, ending its region) where it must be:
  * it is a graph output;
  * an opaque operator (matmul, reductions, index, window, rand, softmax, scan, Pad,
    Concat, SliceBackward) reads it, except that the elementwise producers of a
    reduction's only input are read by the reduction's kernel itself (a *prologue*);
  * its consumers lie in different regions (movement operators and Full, being free,
    are instead repeated in every region that uses them, and so are operators of one
    simple instruction (add, compare, select, cast...) in up to MAX_COPIES regions:
    recomputing x - mu where it is used costs less than writing and re-reading it);
  * a consumer broadcasts it (an elementwise result re-evaluated per broadcast element
    would repeat its work), except in a region of at most `profile.recompute_small`
    elements (CPU devices), where repeating the work costs less than lavapipe's dispatch;
  * a Reshape of it cannot be expressed as a strided layout (the input of that Reshape
    is materialised instead), or the region grows past the binding/size limits below.
Where the profile says so (CPU devices) a float Sum over at most `profile.inline_sum`
elements per output is not a kernel at all: the region that reads it adds the elements
itself (`_inline_sum`).
A same-shape elementwise *epilogue* of a reduction is applied by the reduction's final
pass before its store, so the reduction's own value never reaches memory; likewise a
small one of a MatMul (a bias, an activation, a mask) is applied at the MatMul's stores.

The regions themselves are built by `vulkan/regions.py`. `schedule(graph, profile)`
returns the Groups in execution order, a memory-aware order (`order.memory_order`); the
executor plans memory over exactly that schedule, so fused-away values take no arena
space. The profile decides what fuses
(`fuse`, which the environment `VKML_FUSION=0` turns off, `recompute_small`,
`inline_sum`, `fold_transposes`, `matmul_epilogues`, `max_leaves`); `with
fusion.disabled():` gives one kernel per node.

>>> import vkml, vkml.numpy as vnp
>>> f = vkml.jit(lambda x: vnp.tanh(2 * x + 1) * vnp.exp(-x))
>>> f.lower(vnp.ones(8)).kernel_count
1
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..trace import dtypes as dt
from ..trace.graph import Graph, Node
from ..trace.ops import OpKind, SPECS
from . import device
from .lower.expressions import op_weight
from .order import memory_order
from .regions import (MOVES, REGION_BUDGET, Region, Split, build_region, is_identity, is_scalar,
                      recomputes_broadcasts)

__all__ = ["Group", "schedule", "unfused", "disabled", "describe", "Region", "build_region"]

PROLOGUE_BUDGET = 250  # a reduction's vector loads evaluate its prologue four times
MAX_COPIES = 4         # regions a cheap operator (one simple instruction) is recomputed in


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run the enclosed code with one kernel per node (for comparisons and debugging):
    the device profile with `fuse=False` (`device.using`).

    >>> with disabled():
    ...     device.get().profile.fuse
    False
    """
    with device.using(fuse=False):
        yield


# --------------------------------------------------------------------------- schedule

@dataclass
class Group:
    """One entry of the schedule: the kernel(s) producing `out`.

    Either a region (region set, node None) or an opaque node lowered by its family,
    possibly reading its input through `prologue` and applying `epilogue` to its result
    before the store (then out is the epilogue's root, not node)."""
    out: Node
    node: Node | None = None
    region: Region | None = None
    prologue: Region | None = None
    epilogue: Region | None = None
    reads: tuple = ()
    operands: tuple | None = None    # read in place of node.inputs (a transpose folded in)
    transposed: tuple = ()           # per operand: it is the transpose of what is read

    @property
    def nodes(self) -> int:
        """Graph nodes this group computes (for reports)."""
        n = 0 if self.node is None else 1
        for r in (self.region, self.prologue, self.epilogue):
            if r is not None:
                n += r.n_ops
        return n


def _kind(n: Node, profile) -> str:
    if n.op in (OpKind.Input, OpKind.Const):
        return "leaf"
    if n.op is OpKind.Full:
        return "full"
    if n.op in MOVES:
        return "move"
    if SPECS[n.op].kernel == "elementwise" or _inline_sum(n, profile):
        return "ew"
    return "opaque"


def _inline_sum(n: Node, profile) -> bool:
    """A float Sum over at most `profile.inline_sum` elements per output (CPU devices),
    in a region small enough to recompute what it broadcasts: the region reading it adds
    the elements itself (a kernel of its own costs lavapipe a dispatch for a few adds)."""
    if n.op is not OpKind.Sum or n.dtype != n.inputs[0].dtype or not dt.is_float(n.dtype):
        return False
    k = 1
    for a in n.attrs["axes"]:
        k *= n.inputs[0].shape[a]
    return 0 < k <= profile.inline_sum and recomputes_broadcasts(n.shape, profile)


def _is_reduce(n: Node) -> bool:
    return SPECS[n.op].kernel == "reduce"


def unfused(graph: Graph) -> list[Group]:
    """One group per computed node, in memory order (`order.memory_order`)."""
    return memory_order([Group(n, node=n, reads=n.inputs) for n in graph.nodes
                         if n.op not in (OpKind.Input, OpKind.Const)], graph.outputs)


def schedule(graph: Graph, fuse: bool | None = None, profile: device.Profile | None = None) -> list[Group]:
    """The kernels that compute graph, in an order respecting every dependency, for a
    device profile (default the current device's); fuse overrides `profile.fuse`.

    >>> import vkml, vkml.numpy as vnp
    >>> g = vkml.make_graph(lambda x: (vnp.exp(x) * 2.0).sum(), vnp.ones(64))
    >>> [(grp.node.op.value, grp.prologue.n_ops) for grp in schedule(g)]
    [('Sum', 2)]
    """
    if profile is None:
        profile = device.get().profile
    if not (profile.fuse if fuse is None else fuse):
        return unfused(graph)
    nodes = graph.nodes
    computed = [n for n in nodes if n.op not in (OpKind.Input, OpKind.Const)]
    if len(computed) == 1 and _kind(computed[0], profile) != "opaque":     # an eager operator
        reg = build_region(computed[0], lambda x: False, profile=profile)
        return [Group(computed[0], region=reg, reads=tuple(reg.leaves))]
    cons = graph.consumers()
    outs = {o.id for o in graph.outputs}
    kind = {n.id: _kind(n, profile) for n in nodes}
    by_id = {n.id: n for n in nodes}
    mat: set[int] = set()       # region roots written to memory
    pro: set[int] = set()       # region roots read by a reduction's kernel (prologues)
    folded = _fold_transposes(nodes, kind, mat) if profile.fold_transposes else {"pairs": set()}
    for n in nodes:
        k = kind[n.id]
        if k in ("leaf", "opaque"):
            continue
        if n.id in outs:
            mat.add(n.id)
            continue
        opq = [c for c in cons[n.id] if kind[c.id] == "opaque" and (c.id, n.id) not in folded["pairs"]]
        if opq:
            if len(cons[n.id]) == 1 and _is_reduce(opq[0]):
                pro.add(n.id)
            else:
                mat.add(n.id)

    cheap = {n.id for n in nodes if kind[n.id] == "ew" and n.op is not OpKind.Sum and op_weight(
        n.op, np.dtype(n.inputs[-1].dtype if n.op is OpKind.Where else n.inputs[0].dtype),
        n.dtype, n.attrs.get("approximate"), n.attrs.get("exponent")) <= 1}
    def memberships() -> dict:
        """The materialised roots each node reaches through unmaterialised consumers
        (the regions it is computed in), materialising a node whose work would repeat."""
        member: dict[int, frozenset] = {}
        for n in reversed(nodes):
            k = kind[n.id]
            if k in ("leaf", "opaque"):
                continue
            if n.id in mat or n.id in pro:
                member[n.id] = frozenset((n.id,))
                continue
            s = frozenset().union(*(member.get(c.id, frozenset()) for c in cons[n.id]))
            if k in ("move", "full") or len(s) <= 1 or (n.id in cheap and len(s) <= MAX_COPIES):
                member[n.id] = s          # movement, constants, cheap ops: repeated where used
            else:
                mat.add(n.id)
                member[n.id] = frozenset((n.id,))
        return member

    # A region is what its root reaches through unmaterialised elementwise and movement
    # nodes, so it changes only where a node it holds is materialised: a split rebuilds
    # the regions holding the split node (`holders`) and builds the new one, never the
    # others, and membership is recomputed once per round of splits, not once per split.
    # A chain of N operators is then planned in O(N), where rebuilding every region per
    # split took O(N^2 / region size).
    def inside(x: Node, seen: list) -> bool:
        if kind[x.id] in ("ew", "move") and x.id not in mat and x.id not in pro:
            seen.append(x.id)
            return True
        return False

    regions: dict[int, Region] = {}
    holders: dict[int, set] = {}      # node id -> roots of the regions computing it
    held: dict[int, list] = {}        # root -> the nodes its region computes
    todo, waiting = [], set()

    def rebuild(r: int) -> None:
        if r not in waiting:
            waiting.add(r)
            todo.append(r)

    member = memberships()
    for n in reversed(nodes):
        if n.id in mat or n.id in pro:
            rebuild(n.id)
    while True:
        while todo:
            rid = todo.pop()
            waiting.discard(rid)
            for x in held.pop(rid, ()):
                holders[x].discard(rid)
            regions.pop(rid, None)
            seen: list = []
            try:
                regions[rid] = build_region(by_id[rid], lambda x: inside(x, seen),
                                            PROLOGUE_BUDGET if rid in pro else REGION_BUDGET, profile)
            except Split as e:
                sid = e.node.id
                pro.discard(sid)
                mat.add(sid)
                for r in {rid, sid} | holders.get(sid, set()):
                    rebuild(r)
                continue
            held[rid] = seen
            for x in seen:
                holders.setdefault(x, set()).add(rid)
        before = len(mat)
        member = memberships()
        if len(mat) == before:
            break
        for x in mat:
            if x not in regions and x not in waiting:
                rebuild(x)
            for r in holders.get(x, ()):
                rebuild(r)

    # epilogues: a reduction whose every consumer lies in one region that reads it in
    # its own order (its shape, or a reshape of it)
    epi_of: dict[int, int] = {}       # region root id -> reduction node id
    for n in nodes:
        # an inlined Sum is elementwise code in the region that reads it, not a kernel
        if not _is_reduce(n) or kind[n.id] != "opaque" or n.id in outs or not cons[n.id]:
            continue
        if any(n.inputs[0].shape[a] == 0 for a in n.attrs["axes"]):
            continue                  # an empty reduction is a fill: nothing to fuse into
        e = _sole_region(n, cons, kind, member, mat)
        if e is None or e in epi_of:
            continue
        reg = regions[e]
        if by_id[e].size != n.size:       # the same elements in the same order, any shape
            continue
        others = _other_loads(reg, n)
        if others is None or not all(is_identity(ld, reg.shape) or is_scalar(ld) for ld in others):
            continue
        epi_of[e] = n.id
    fused_reduce = set(epi_of.values())

    # MatMul epilogues: a product whose consumers are all in one region of its own shape
    # and dtype, read in its order, where the region's other loads are the product's
    # order too or have no batch stride (a bias), and the code is small (it is repeated
    # at every store of the kernel's register tile)
    mm_epi: dict[int, int] = {}       # region root id -> MatMul node id
    for n in nodes:
        if (n.op is not OpKind.MatMul or not profile.matmul_epilogues or n.id in outs or not cons[n.id]
                or len(n.shape) < 2 or n.dtype == np.int32):    # int32: `matmul._int_matmul`
            continue
        e = _sole_region(n, cons, kind, member, mat)
        if e is None or e in epi_of or e in mm_epi:
            continue
        reg = regions[e]
        # a float16 product (on tensor cores: `widen` leaves no other) computes its
        # epilogue in float32 from 16-bit or float32 leaves and stores either width
        tc = (COOP_EPILOGUES and profile.matmul_coop and all(i.dtype == dt.float16 for i in n.inputs)
              and all(np.dtype(t) != np.float64 for t in (*reg.types, *(l.dtype for l in reg.leaves))))
        if (tuple(reg.shape) != tuple(n.shape) or reg.weight > EPILOGUE_BUDGET
                or (reg.dtype != n.dtype and not (tc and reg.dtype in _COOP_OUT))
                or (_low_region(reg) and not tc)):
            continue
        others = _other_loads(reg, n)
        if others is None or len(others) > 4:
            continue
        if not all(is_identity(ld, reg.shape) or
                   all(x == 0 or d == 1 for x, d in zip(ld[2][:-2], reg.shape[:-2])) for ld in others):
            continue
        mm_epi[e] = n.id
    fused_mm = set(mm_epi.values())

    groups = []
    for n in nodes:
        k = kind[n.id]
        if k in ("ew", "move", "full") and n.id in mat:
            if n.id in epi_of:
                rd = by_id[epi_of[n.id]]
                groups.append(_reduce_group(rd, regions, pro, regions[n.id], n))
            elif n.id in mm_epi:
                m = by_id[mm_epi[n.id]]
                ops, tr = folded.get(m.id, (tuple(m.inputs), (False, False)))
                reg = regions[n.id]
                groups.append(Group(n, node=m, epilogue=reg, operands=tuple(ops), transposed=tuple(tr),
                                    reads=tuple(ops) + tuple(l for l in reg.leaves if l is not m)))
            else:
                reg = regions[n.id]
                groups.append(Group(n, region=reg, reads=tuple(reg.leaves)))
        elif k == "opaque" and n.id not in fused_reduce and n.id not in fused_mm:
            if _is_reduce(n):
                groups.append(_reduce_group(n, regions, pro, None, n))
            elif n.id in folded:
                ops, tr = folded[n.id]
                groups.append(Group(n, node=n, reads=ops, operands=ops, transposed=tr))
            else:
                groups.append(Group(n, node=n, reads=n.inputs))
    return _inputs_first(memory_order(groups, graph.outputs))


EARLY_BYTES = 4096   # the largest output a kernel reading only inputs is moved first with


def _inputs_first(groups: list) -> list:
    """groups with those that read only the graph's inputs and constants and write at most
    EARLY_BYTES moved to the front. Nothing they read is computed, so no order they had
    to keep changes; only their small outputs live longer. The count of labels in a
    cross-entropy then runs beside the first layer instead of after the forward pass, so
    that a CPU device merges it into that dispatch (`merge`) instead of giving it one."""
    def early(g) -> bool:
        return (all(r.op in (OpKind.Input, OpKind.Const) for r in g.reads)
                and g.out.size * g.out.dtype.itemsize <= EARLY_BYTES)
    return [g for g in groups if early(g)] + [g for g in groups if not early(g)]


_COOP_OUT = (dt.float16, dt.bfloat16, dt.float32)    # what a tensor-core epilogue stores
# whether float16 products on tensor cores take epilogues: off, because on the H200 the
# epilogue's stores through the staging tile cost more than the separate elementwise
# pass they save (bench/RESULTS.md, issue 23; `bench/tools/amp_mlp.py --coop-epilogues on`)
COOP_EPILOGUES = False


def _low_region(reg: Region) -> bool:
    """Whether a region holds a 16-bit float (the elementwise and reduction kernels take
    them, not the MatMul's epilogue)."""
    return (dt.is_low(reg.dtype) or any(dt.is_low(t) for t in reg.types)
            or any(dt.is_low(l.dtype) for l in reg.leaves))


def _sole_region(n: Node, cons, kind, member, mat) -> int | None:
    """The one materialised region holding every consumer of n (all elementwise or
    movement), or None: where n can be an epilogue's input instead of a stored value."""
    cs = cons[n.id]
    if any(kind[c.id] not in ("ew", "move") for c in cs):
        return None
    # a consumer in no region is a transpose a MatMul reads in place (`_fold_transposes`):
    # that MatMul reads n itself, so n must be stored
    if any(not member.get(c.id) for c in cs):
        return None
    s = frozenset().union(*(member[c.id] for c in cs))
    if len(s) != 1:
        return None
    (e,) = s
    return e if e in mat else None


def _other_loads(reg: Region, n: Node) -> list | None:
    """reg's loads of leaves other than n, when it reads n exactly once in its own order
    (else None)."""
    mine = [ld for ld in reg.loads if reg.leaves[ld[0]] is n]
    if len(mine) != 1 or not is_identity(mine[0], reg.shape):
        return None
    return [ld for ld in reg.loads if reg.leaves[ld[0]] is not n]


EPILOGUE_BUDGET = 12     # weight (`expressions.op_weight`) of a MatMul epilogue's code


def _is_transpose(n: Node) -> bool:
    """A Permute swapping the last two axes and keeping the others."""
    if n.op is not OpKind.Permute:
        return False
    p, r = tuple(n.attrs["perm"]), len(n.shape)
    return r >= 2 and p[:-2] == tuple(range(r - 2)) and p[-2:] == (r - 1, r - 2)


def _fold_transposes(nodes, kind, mat: set) -> dict:
    """MatMuls that read a transposed operand in place (both kernels read either layout,
    always contiguously).

    Returns {matmul id: (operands, transposed flags)} plus "pairs": the (matmul id,
    transpose id) edges that need no materialised transpose. A computed (elementwise)
    source is materialised instead."""
    out: dict = {"pairs": set()}
    for n in nodes:
        if n.op is not OpKind.MatMul:
            continue
        ops, tr = list(n.inputs), [False, False]
        for j, i in enumerate(n.inputs):
            if _is_transpose(i) and kind[i.inputs[0].id] in ("leaf", "opaque", "ew"):
                ops[j], tr[j] = i.inputs[0], True
        if any(tr):
            out[n.id] = (tuple(ops), tuple(tr))
            for j, i in enumerate(n.inputs):
                if tr[j]:
                    out["pairs"].add((n.id, i.id))
                    if kind[ops[j].id] == "ew":
                        mat.add(ops[j].id)
    return out


def _reduce_group(rd: Node, regions, pro, epi: Region | None, out: Node) -> Group:
    x = rd.inputs[0]
    p = regions[x.id] if x.id in pro else None
    reads = list(p.leaves) if p is not None else [x]
    if epi is not None:
        reads += [l for l in epi.leaves if l is not rd]
    return Group(out, node=rd, prologue=p, epilogue=epi, reads=tuple(reads))


def describe(groups: list[Group]) -> str:
    """One line per group (for debugging and reports)."""
    lines = []
    for g in groups:
        if g.node is None:
            lines.append(f"region -> %{g.out.id} {list(g.out.shape)}: {g.region.n_ops} ops, "
                         f"{len(g.region.leaves)} inputs")
        else:
            extra = []
            if g.prologue is not None:
                extra.append(f"prologue {g.prologue.n_ops} ops")
            if g.epilogue is not None:
                extra.append(f"epilogue {g.epilogue.n_ops} ops -> %{g.out.id}")
            lines.append(f"{g.node.op.value} %{g.node.id}" + (f" ({', '.join(extra)})" if extra else ""))
    return "\n".join(lines)
