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
    would repeat its work), except in a region of at most SMALL_REGION elements on a CPU
    device, where repeating the work costs less than lavapipe's dispatch;
  * a Reshape of it cannot be expressed as a strided layout (the input of that Reshape
    is materialised instead), or the region grows past the binding/size limits below.
On a CPU device a float Sum over at most SMALL_REDUCE elements per output is not a
kernel at all: the region that reads it adds the elements itself (`_inline_sum`).
A same-shape elementwise *epilogue* of a reduction is applied by the reduction's final
pass before its store, so the reduction's own value never reaches memory; likewise a
small one of a MatMul (a bias, an activation, a mask) is applied at the MatMul's stores.

`schedule(graph)` returns the Groups in execution order; the executor plans memory over
exactly that schedule, so fused-away values take no arena space. `ENABLED` (environment
`VKML_FUSION=0` turns it off) or `with fusion.disabled():` give one kernel per node.

>>> import vkml, vkml.numpy as vnp
>>> f = vkml.jit(lambda x: vnp.tanh(2 * x + 1) * vnp.exp(-x))
>>> f.lower(vnp.ones(8)).kernel_count
1
"""
from __future__ import annotations

import contextlib
import itertools
import os
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterator

import numpy as np

from ..trace import dtypes as dt
from ..trace.graph import Graph, Node
from ..trace.ops import OpKind, SPECS
from ..trace.shapes import contiguous_strides

ENABLED: bool = os.environ.get("VKML_FUSION", "1").strip().lower() not in ("0", "false", "off", "no")

MOVES = frozenset({OpKind.Reshape, OpKind.Permute, OpKind.Expand, OpKind.Slice, OpKind.Flip})
MAX_DEPTH = 200       # nesting of one region's expression (Python recursion, kernel size)
MAX_CODE = 400        # SSA values in one region
# Code-size budgets (simple operations, `elementwise.op_weight`): lavapipe's compile time
# grows faster than linearly with kernel size (32 fused sin/tanh layers and their
# gradients: 9 s), and the vector path repeats a region's code per element of a thread.
REGION_BUDGET = 1000
PROLOGUE_BUDGET = 250  # a reduction's vector loads evaluate its prologue four times
MAX_COPIES = 4         # regions a cheap operator (one simple instruction) is recomputed in
SMALL_REDUCE = 16      # CPU devices: a Sum over at most this many elements per output is inlined
SMALL_REGION = 4096    # CPU devices: regions up to this size recompute their broadcast inputs
RECOMPUTE: str | None = None   # "cpu" / "gpu" forces `_recompute_broadcasts`'s device kind (tests)


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run the enclosed code with one kernel per node (for comparisons and debugging).

    >>> with disabled():
    ...     pass
    """
    global ENABLED
    old, ENABLED = ENABLED, False
    try:
        yield
    finally:
        ENABLED = old


@lru_cache(maxsize=None)
def max_leaves() -> int:
    """Materialised inputs one region may read: a reduction kernel binds meta, two outputs,
    a prologue's and an epilogue's inputs, all within the per-stage storage-buffer limit."""
    from .device import get
    from .vk import vk
    d = get()
    lim = int(vk.vkGetPhysicalDeviceProperties(d.physical).limits.maxPerStageDescriptorStorageBuffers)
    return max(1, min(12, (lim - 4) // 2))


# --------------------------------------------------------------------------- layouts

@dataclass(frozen=True)
class Layout:
    """Element offset and strides reading a buffer as an array of `shape`."""
    shape: tuple
    strides: tuple
    offset: int = 0


def contiguous(shape) -> Layout:
    return Layout(tuple(shape), tuple(contiguous_strides(shape)), 0)


def broadcast(l: Layout, shape) -> Layout:
    """l read as if broadcast to `shape` (NumPy rules: leading axes added, size 1 repeated)."""
    pad = len(shape) - len(l.shape)
    st = [0] * pad + [0 if d == 1 else s for d, s in zip(l.shape, l.strides)]
    return Layout(tuple(shape), tuple(st), l.offset)


def reshape(l: Layout, shape) -> Layout | None:
    """l viewed with a new shape (same C-order elements), or None when no strided layout
    can express it (NumPy's no-copy reshape rule)."""
    shape = tuple(shape)
    n = 1
    for d in shape:
        n *= d
    if n == 0:
        return Layout(shape, tuple(contiguous_strides(shape)), l.offset)
    old = [(d, s) for d, s in zip(l.shape, l.strides) if d != 1]
    new = [i for i, d in enumerate(shape) if d != 1]
    st = [0] * len(shape)
    oi = ni = 0
    while oi < len(old) and ni < len(new):
        po, pn = old[oi][0], shape[new[ni]]
        oe, ne = oi + 1, ni + 1
        while po != pn:
            if po < pn:
                po *= old[oe][0]
                oe += 1
            else:
                pn *= shape[new[ne]]
                ne += 1
        for k in range(oi, oe - 1):          # the old group must be one strided run
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        s = old[oe - 1][1]
        for k in range(ne - 1, ni - 1, -1):
            st[new[k]] = s
            s *= shape[new[k]]
        oi, ni = oe, ne
    return Layout(shape, tuple(st), l.offset)


def _apply(step: tuple, l: Layout) -> Layout | None:
    """One re-indexing step (a movement operator or an elementwise broadcast)."""
    kind = step[0]
    if kind == "b":
        return broadcast(l, step[1])
    if kind == "p":
        perm = step[1]
        return Layout(tuple(l.shape[p] for p in perm), tuple(l.strides[p] for p in perm), l.offset)
    if kind == "s":
        starts, steps, shape = step[1], step[2], step[3]
        if any(d == 0 for d in shape):
            return Layout(shape, tuple(contiguous_strides(shape)), l.offset)
        off = l.offset + sum(b * s for b, s in zip(starts, l.strides))
        return Layout(shape, tuple(s * k for s, k in zip(l.strides, steps)), off)
    if kind == "f":
        axes = step[1]
        off = l.offset + sum((l.shape[i] - 1) * l.strides[i] for i in axes if l.shape[i] > 0)
        return Layout(l.shape, tuple(-s if i in axes else s for i, s in enumerate(l.strides)), off)
    if kind == "r":
        return reshape(l, step[1])
    raise AssertionError(step)


def _move_step(n: Node) -> tuple:
    a = n.attrs
    if n.op is OpKind.Reshape:
        return ("r", n.shape, n)
    if n.op is OpKind.Permute:
        return ("p", tuple(a["perm"]))
    if n.op is OpKind.Expand:
        return ("b", n.shape)
    if n.op is OpKind.Slice:
        return ("s", tuple(a["starts"]), tuple(a["steps"]), n.shape)
    if n.op is OpKind.Flip:
        return ("f", tuple(a["axes"]))
    raise AssertionError(n)


# --------------------------------------------------------------------------- regions

@dataclass
class Region:
    """One fused elementwise computation over the iteration space `shape` (its root's).

    code is SSA: ("load", j) reads loads[j] = (leaf index, offset, strides over shape);
    ("const", dtype, value) is a literal; ("op", op, in_dtype, out_dtype, attrs, args)
    applies an elementwise operator to earlier values. `out` is the root's value.
    """
    root: Node
    shape: tuple
    leaves: list = field(default_factory=list)     # materialised Nodes read (one binding each)
    loads: list = field(default_factory=list)      # (leaf index, offset, strides)
    code: list = field(default_factory=list)
    types: list = field(default_factory=list)      # dtype of each SSA value
    out: int = -1
    n_ops: int = 0                                  # graph nodes computed here
    weight: int = 0                                 # code size (elementwise.op_weight)

    @property
    def dtype(self) -> np.dtype:
        return self.types[self.out]


class _Split(Exception):
    """The region cannot hold `node` as computed inside it: materialise node."""

    def __init__(self, node: Node):
        super().__init__(repr(node))
        self.node = node


def _const_key(n: Node) -> tuple:
    v = n.attrs["value"]
    d = np.dtype(n.dtype)
    if d == dt.float64:
        return ("c", "f8", struct.pack("<d", float(v)))
    if d == dt.float32:
        return ("c", "f4", struct.pack("<f", float(v)))
    return ("c", d.str, int(bool(v)) if d == dt.bool_ else int(v))


def _recompute_broadcasts(shape) -> bool:
    """Whether a region of this shape recomputes what it broadcasts instead of reading it
    from a kernel of its own: on CPU devices, for small regions, where one more dispatch
    (tens of microseconds on lavapipe) costs more than repeating a few operations for at
    most SMALL_REGION elements."""
    from .lower.sizing import device_kind
    n = 1
    for d in shape:
        n *= d
    return n <= SMALL_REGION and device_kind(RECOMPUTE) == "cpu"


def build_region(root: Node, inside, budget: int = REGION_BUDGET) -> Region:
    """The SSA of root's region; inside(n) says whether n is computed in it (else n is
    read from memory). Raises _Split(n) when n has to be materialised first."""
    from .lower.elementwise import op_weight
    reg = Region(root, root.shape)
    R = root.shape
    small = _recompute_broadcasts(R)
    memo: dict[tuple, int] = {}
    leaf_idx: dict[int, int] = {}
    stack: list[Node] = []
    entry: list[int] = []         # reg.weight when each stack node was entered

    def emit(instr, dtype) -> int:
        reg.code.append(instr)
        reg.types.append(np.dtype(dtype))
        return len(reg.code) - 1

    def layout(n: Node, steps: list) -> Layout:
        lay = contiguous(n.shape)
        for st in steps:
            nxt = _apply(st, lay)
            if nxt is None:           # a Reshape no strided layout expresses: copy its input
                raise _Split(st[2].inputs[0])
            lay = nxt
        return lay

    def split_for_leaves() -> Node:
        # the computed operand nearest the root on the current path takes its subtree's
        # inputs with it (a movement operator only if there is nothing else)
        for s in stack[1:]:
            if s.op not in MOVES:
                return s
        if len(stack) > 1:
            return stack[1]
        for i in root.inputs:
            if i.op is not OpKind.Full and inside(i):
                return i
        raise AssertionError("a single operator reads more inputs than a kernel can bind")

    def visit(n: Node, steps: list) -> int:
        if n.op is OpKind.Full:
            k = _const_key(n)
            if k not in memo:
                memo[k] = emit(("const", n.dtype, n.attrs["value"]), n.dtype)
            return memo[k]
        lay = layout(n, steps)
        if n is not root and not inside(n):
            k = ("l", n.id, lay.offset, lay.strides)
            if k in memo:
                return memo[k]
            if n.id not in leaf_idx:
                if len(reg.leaves) >= max_leaves():
                    raise _Split(split_for_leaves())
                leaf_idx[n.id] = len(reg.leaves)
                reg.leaves.append(n)
            reg.loads.append((leaf_idx[n.id], lay.offset, lay.strides))
            memo[k] = emit(("load", len(reg.loads) - 1), n.dtype)
            return memo[k]
        k = ("n", n.id, lay.offset, lay.strides)
        if k in memo:
            return memo[k]
        if n is not root:
            if (n.op not in MOVES and any(s == 0 and d > 1 for s, d in zip(lay.strides, R))
                    and not small):
                raise _Split(n)       # broadcast: compute it once, read it many times
            if len(stack) >= MAX_DEPTH or len(reg.code) >= MAX_CODE:
                raise _Split(n)
        stack.append(n)
        entry.append(reg.weight)
        if n.op in MOVES:
            r = visit(n.inputs[0], [_move_step(n)] + steps)
        elif n.op is OpKind.Sum:       # `_inline_sum`: the elements added in order
            x, axes = n.inputs[0], n.attrs["axes"]
            one = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
            r = None
            for pos in itertools.product(*(range(x.shape[a]) for a in axes)):
                at = dict(zip(axes, pos))
                start = tuple(at.get(i, 0) for i in range(len(x.shape)))
                v = visit(x, [("s", start, (1,) * len(x.shape), one), ("r", n.shape, n)] + steps)
                r = v if r is None else emit(("op", OpKind.Add, n.dtype, n.dtype, {}, (r, v)), n.dtype)
                reg.weight += 1
            reg.n_ops += 1
        else:
            args = tuple(visit(i, ([("b", n.shape)] if i.shape != n.shape else []) + steps)
                         for i in n.inputs)
            in_dt = n.inputs[-1].dtype if n.op is OpKind.Where else n.inputs[0].dtype
            w = op_weight(n.op, np.dtype(in_dt), n.dtype, n.attrs.get("approximate"),
                          n.attrs.get("exponent"))
            if reg.weight + w > budget:
                # split off the largest subtree on the current path that fits the budget,
                # else cut below this node (its first computed operand)
                for s, e in zip(stack[1:], entry[1:]):
                    if s.op not in MOVES and reg.weight + w - e <= budget:
                        raise _Split(s)
                below = [i for i in n.inputs if i.op is not OpKind.Full and inside(i)]
                below.sort(key=lambda i: i.op in MOVES)
                if below:
                    raise _Split(below[0])
            r = emit(("op", n.op, np.dtype(in_dt), n.dtype, n.attrs, args), n.dtype)
            reg.n_ops += 1
            reg.weight += w
        stack.pop()
        entry.pop()
        memo[k] = r
        return r

    reg.out = visit(root, [])
    visit = None    # noqa: F841 -- breaks the closure's cycle, which would hold the graph's arrays
    return reg


def is_identity(load: tuple, shape) -> bool:
    """Does the load read its leaf in the region's own C order (same shape, contiguous)?"""
    _, off, st = load
    return off == 0 and all(d == 1 or s == c for d, s, c in zip(shape, st, contiguous_strides(shape)))


def is_scalar(load: tuple) -> bool:
    """Does the load read one element for the whole region?"""
    return all(s == 0 for s in load[2])


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


def _kind(n: Node) -> str:
    if n.op in (OpKind.Input, OpKind.Const):
        return "leaf"
    if n.op is OpKind.Full:
        return "full"
    if n.op in MOVES:
        return "move"
    if SPECS[n.op].kernel == "elementwise" or _inline_sum(n):
        return "ew"
    return "opaque"


def _inline_sum(n: Node) -> bool:
    """A float Sum over at most SMALL_REDUCE elements per output, on a CPU device: the
    region reading it adds the elements itself (a kernel of its own costs lavapipe a
    dispatch, tens of microseconds, for a few adds)."""
    if n.op is not OpKind.Sum or n.dtype != n.inputs[0].dtype or not dt.is_float(n.dtype):
        return False
    k = 1
    for a in n.attrs["axes"]:
        k *= n.inputs[0].shape[a]
    return 0 < k <= SMALL_REDUCE and _recompute_broadcasts(n.shape)


def _is_reduce(n: Node) -> bool:
    return SPECS[n.op].kernel == "reduce"


def unfused(graph: Graph) -> list[Group]:
    """One group per computed node, in graph order."""
    return [Group(n, node=n, reads=n.inputs) for n in graph.nodes
            if n.op not in (OpKind.Input, OpKind.Const)]


def schedule(graph: Graph, fuse: bool | None = None) -> list[Group]:
    """The kernels that compute graph, in an order respecting every dependency.

    >>> import vkml, vkml.numpy as vnp
    >>> g = vkml.make_graph(lambda x: (vnp.exp(x) * 2.0).sum(), vnp.ones(64))
    >>> [(grp.node.op.value, grp.prologue.n_ops) for grp in schedule(g)]
    [('Sum', 2)]
    """
    if not (ENABLED if fuse is None else fuse):
        return unfused(graph)
    nodes = graph.nodes
    computed = [n for n in nodes if n.op not in (OpKind.Input, OpKind.Const)]
    if len(computed) == 1 and _kind(computed[0]) != "opaque":     # an eager operator
        reg = build_region(computed[0], lambda x: False)
        return [Group(computed[0], region=reg, reads=tuple(reg.leaves))]
    cons = graph.consumers()
    outs = {o.id for o in graph.outputs}
    kind = {n.id: _kind(n) for n in nodes}
    by_id = {n.id: n for n in nodes}
    mat: set[int] = set()       # region roots written to memory
    pro: set[int] = set()       # region roots read by a reduction's kernel (prologues)
    folded = _fold_transposes(nodes, kind, mat)
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

    from .lower.elementwise import op_weight
    cheap = {n.id for n in nodes if kind[n.id] == "ew" and n.op is not OpKind.Sum and op_weight(
        n.op, np.dtype(n.inputs[-1].dtype if n.op is OpKind.Where else n.inputs[0].dtype),
        n.dtype, n.attrs.get("approximate"), n.attrs.get("exponent")) <= 1}
    while True:
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
        regions: dict[int, Region] = {}
        splits = set()
        for rid in [n.id for n in nodes if n.id in mat or n.id in pro]:
            def inside(x: Node, rid=rid) -> bool:
                return (kind[x.id] in ("ew", "move") and x.id not in mat and x.id not in pro
                        and rid in member.get(x.id, ()))
            try:
                regions[rid] = build_region(by_id[rid], inside,
                                            PROLOGUE_BUDGET if rid in pro else REGION_BUDGET)
            except _Split as e:
                splits.add(e.node.id)
        if not splits:
            break
        for s in splits:
            pro.discard(s)
            mat.add(s)

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
        if (n.op is not OpKind.MatMul or not MATMUL_EPILOGUES or n.id in outs or not cons[n.id]
                or len(n.shape) < 2 or n.dtype == np.int32):    # int32: `matmul._int_matmul`
            continue
        e = _sole_region(n, cons, kind, member, mat)
        if e is None or e in epi_of or e in mm_epi:
            continue
        reg = regions[e]
        if tuple(reg.shape) != tuple(n.shape) or reg.dtype != n.dtype or reg.weight > EPILOGUE_BUDGET:
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
    return _inputs_first(groups)


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


def _sole_region(n: Node, cons, kind, member, mat) -> int | None:
    """The one materialised region holding every consumer of n (all elementwise or
    movement), or None: where n can be an epilogue's input instead of a stored value."""
    cs = cons[n.id]
    if any(kind[c.id] not in ("ew", "move") for c in cs):
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


FOLD_TRANSPOSES = True   # tests turn it off to compare with materialised transposes
MATMUL_EPILOGUES = True  # likewise for elementwise epilogues of MatMul
EPILOGUE_BUDGET = 12     # weight (`elementwise.op_weight`) of a MatMul epilogue's code


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
    if not FOLD_TRANSPOSES:
        return out
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
