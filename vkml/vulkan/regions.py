"""Regions: a fused elementwise computation as SSA over strided loads of its inputs.

`build_region(root, inside, profile=...)` walks root's operands: the nodes `inside` says
are computed in the region become SSA instructions, the others loads of a materialised
input (a *leaf*) through a strided layout. Movement operators (Reshape/Permute/Expand/
Slice/Flip) never reach the code: they are pushed down to the loads as offsets and
strides (broadcast = stride 0, flip = negative stride); Full constants become literals,
and a value used several times at the same index is computed once. The fusion scheduler
(`vulkan/fusion.py`) decides what is inside which region; the elementwise family
(`lower/elementwise.py`) turns a region into a kernel, a single node being a region of
one operator; reductions and MatMuls apply regions as prologues and epilogues.

>>> import vkml, vkml.numpy as vnp
>>> g = vkml.make_graph(lambda x: vnp.exp(x.T) * 2.0, vnp.ones((2, 3)))
>>> reg = build_region(g.outputs[0], lambda n: n.op is not OpKind.Input)
>>> [ins[0] for ins in reg.code], reg.loads
(['load', 'op', 'const', 'op'], [(0, 0, (1, 3))])
"""
from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field

import numpy as np

from ..trace import dtypes as dt
from ..trace.graph import Node
from ..trace.ops import OpKind
from ..trace.shapes import contiguous_strides
from . import device
from .lower.expressions import op_weight

MOVES = frozenset({OpKind.Reshape, OpKind.Permute, OpKind.Expand, OpKind.Slice, OpKind.Flip})
MAX_DEPTH = 200       # nesting of one region's expression (Python recursion, kernel size)
MAX_CODE = 400        # SSA values in one region
# Code-size budget (simple operations, `expressions.op_weight`): lavapipe's compile time
# grows faster than linearly with kernel size, and the vector path repeats a region's
# code per element of a thread.
REGION_BUDGET = 1000


# --------------------------------------------------------------------------- layouts

@dataclass(frozen=True)
class Layout:
    """Element offset and strides reading a buffer as an array of `shape`."""
    shape: tuple
    strides: tuple
    offset: int = 0


def contiguous(shape) -> Layout:
    """The C-order layout of a buffer of shape."""
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
    weight: int = 0                                 # code size (expressions.op_weight)

    @property
    def dtype(self) -> np.dtype:
        return self.types[self.out]


class Split(Exception):
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
    if dt.is_low(d):      # by its 16-bit pattern (-0.0 and 0.0 differ)
        return ("c", str(d), int(np.asarray(v, np.float64).astype(d).view(np.uint16)))
    return ("c", d.str, int(bool(v)) if d == dt.bool_ else int(v))


def recomputes_broadcasts(shape, profile) -> bool:
    """Whether a region of this shape recomputes what it broadcasts instead of reading it
    from a kernel of its own: where the profile says so (CPU devices), for regions of at
    most `profile.recompute_small` elements, where one more dispatch (on lavapipe) costs
    more than repeating a few operations."""
    n = 1
    for d in shape:
        n *= d
    return bool(profile.recompute_small) and n <= profile.recompute_small


def _weight(n: Node) -> int:
    """n's `op_weight` (n computed inside a region)."""
    in_dt = n.inputs[-1].dtype if n.op is OpKind.Where else n.inputs[0].dtype if n.inputs else n.dtype
    return op_weight(n.op, np.dtype(in_dt), n.dtype, n.attrs.get("approximate"), n.attrs.get("exponent"))


def build_region(root: Node, inside, budget: int = REGION_BUDGET, profile=None) -> Region:
    """The SSA of root's region; inside(n) says whether n is computed in it (else n is
    read from memory). Raises Split(n) when n has to be materialised first. profile:
    the device profile regions are built for (its `max_leaves` and `recompute_small`;
    default the current device's)."""
    if profile is None:
        profile = device.get().profile
    reg = Region(root, root.shape)
    R = root.shape
    small = recomputes_broadcasts(R, profile)
    memo: dict[tuple, int] = {}
    leaf_idx: dict[int, int] = {}
    stack: list[Node] = []
    down: list[int] = []          # the weight of the stack's operators, root to each
    entry: list[int] = []         # reg.weight when each stack node was entered
    entry_leaves: list[int] = []  # and len(reg.leaves)
    finished: dict[int, tuple] = {}   # computed node id -> (inputs its subtree added, node)

    def emit(instr, dtype) -> int:
        reg.code.append(instr)
        reg.types.append(np.dtype(dtype))
        return len(reg.code) - 1

    def layout(n: Node, steps: list) -> Layout:
        lay = contiguous(n.shape)
        for st in steps:
            nxt = _apply(st, lay)
            if nxt is None:           # a Reshape no strided layout expresses: copy its input
                raise Split(st[2].inputs[0])
            lay = nxt
        return lay

    def split_for_leaves() -> Node:
        # the finished subtree that brought the most inputs takes them with it, so the
        # region keeps all it can: the walk reaches a chain's first inputs first, and a
        # chain reading two inputs per step is then cut every max_leaves / 2 steps
        # (cutting on the current path, nearest the root, left one step per region)
        best = max(finished.values(), key=lambda f: f[0], default=None)
        if best is not None and best[0] >= 2:
            return best[1]
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
                if len(reg.leaves) >= profile.max_leaves:
                    raise Split(split_for_leaves())
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
                raise Split(n)       # broadcast: compute it once, read it many times
            if len(stack) >= MAX_DEPTH or len(reg.code) >= MAX_CODE:
                raise Split(n)
        # the operators on the current path all go into the region: once they alone pass
        # the budget, cut here, before walking n's subtree (a long chain is then walked
        # about twice per region, not once per failed try below)
        w_in = _weight(n) if n.op not in MOVES and n.op is not OpKind.Sum else 0
        if n is not root and w_in and down[-1] + w_in > budget:
            raise Split(n)
        down.append((down[-1] if down else 0) + w_in)
        stack.append(n)
        entry.append(reg.weight)
        entry_leaves.append(len(reg.leaves))
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
            w = w_in                  # `_weight(n)`, taken on the way down
            if reg.weight + w > budget:
                # split off the largest subtree on the current path that fits the budget,
                # else cut below this node (its first computed operand)
                for s, e in zip(stack[1:], entry[1:]):
                    if s.op not in MOVES and reg.weight + w - e <= budget:
                        raise Split(s)
                below = [i for i in n.inputs if i.op is not OpKind.Full and inside(i)]
                below.sort(key=lambda i: i.op in MOVES)
                if below:
                    raise Split(below[0])
            r = emit(("op", n.op, np.dtype(in_dt), n.dtype, n.attrs, args), n.dtype)
            reg.n_ops += 1
            reg.weight += w
        stack.pop()
        down.pop()
        entry.pop()
        added = len(reg.leaves) - entry_leaves.pop()
        if n is not root and n.op not in MOVES and added > finished.get(n.id, (0,))[0]:
            finished[n.id] = (added, n)
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

