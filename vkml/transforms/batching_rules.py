"""Batching rules: one entry per OpKind, used by the vmap graph transform.

A rule sees one node of the per-example graph and its operands as they are in the
batched graph, each flagged batched (a leading batch axis of size `ctx.size`) or not, and
returns the node's value for every example at once, batch axis first. Rules are called
only when at least one operand is batched; they emit ordinary forward operators (the same
kernels, one extra leading axis), never a loop over the batch.

    rule(ctx, node, ins, batched) -> E

`BATCH_RULES` has a key for every OpKind; tests/transforms/test_vmap.py checks that it
matches the registry.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..trace import dtypes as dt
from ..trace.graph import Node
from ..trace.ops import SPECS, OpKind as K
from ..trace.shapes import size_of
from . import expr
from .control import batch_part, batch_scan, batch_while
from .expr import E


class BatchCtx:
    """What a rule builds with: the batch size and the tag its new nodes carry (a
    checkpoint region of the node being batched stays on everything made for it)."""

    def __init__(self, size: int, tag: Any = None):
        self.size = size
        self.tag = tag

    # the `expr` helpers, with this context's tag
    def op(self, kind: K, *args, **attrs) -> E:
        return expr.op(kind, *args, tag=self.tag, **attrs)

    def reshape(self, x: E, shape) -> E:
        return expr.reshape(x, shape, tag=self.tag)

    def permute(self, x: E, perm) -> E:
        return expr.permute(x, perm, tag=self.tag)

    def expand(self, x: E, shape) -> E:
        return expr.expand(x, shape, tag=self.tag)

    def full(self, shape, value, dtype) -> E:
        return expr.full(shape, value, dtype, tag=self.tag)

    def materialize(self, x: E, batched: bool) -> E:
        """x with a batch axis: an unbatched operand is broadcast along a new axis 0."""
        return x if batched else self.expand(x, (self.size,) + x.shape)

    def align(self, x: E, batched: bool, rank: int) -> E:
        """A batched operand with unit axes after the batch axis, so that its per-example
        rank is `rank`: NumPy broadcasting then pairs per-example axes as it did unbatched.
        Unbatched operands broadcast from the right already and are returned as they are."""
        if not batched or x.ndim - 1 >= rank:
            return x
        return self.reshape(x, (x.shape[0],) + (1,) * (rank - x.ndim + 1) + x.shape[1:])

    def to_front(self, x: E, axis: int) -> E:
        """Move `axis` of x to position 0."""
        perm = [axis] + [i for i in range(x.ndim) if i != axis]
        return self.permute(x, perm)

    def from_front(self, x: E, axis: int) -> E:
        """Move axis 0 of x to position `axis`."""
        rest = list(range(1, x.ndim))
        return self.permute(x, rest[:axis] + [0] + rest[axis:])


Rule = Callable[[BatchCtx, Node, Sequence[E], Sequence[bool]], E]


# --------------------------------------------------------------------------- leaves

def _leaf(ctx, n, ins, bat):
    raise AssertionError(f"{n.op.value} has no operands, so it is never batched")


def _rand(ctx, n, ins, bat):
    # Rand takes a batch of keys (..., 2): each key draws exactly its own numbers
    return ctx.op(K.Rand, ins[0], **n.attrs)


# --------------------------------------------------------------------------- elementwise

def _elementwise(ctx, n, ins, bat):
    r = len(n.shape)
    return ctx.op(n.op, *[ctx.align(x, b, r) for x, b in zip(ins, bat)], **n.attrs)


# --------------------------------------------------------------------------- reductions

def _reduce(ctx, n, ins, bat):
    return ctx.op(n.op, ins[0], axes=tuple(a + 1 for a in n.attrs["axes"]),
                  keepdims=n.attrs["keepdims"])


def _leading(ctx, n, ins, bat):
    return ctx.op(n.op, ins[0], **n.attrs)


def _along_axis(ctx, n, ins, bat):
    return ctx.op(n.op, ins[0], **{**n.attrs, "axis": n.attrs["axis"] + 1})


# --------------------------------------------------------------------------- movement

def _reshape(ctx, n, ins, bat):
    return ctx.op(K.Reshape, ins[0], shape=(ctx.size,) + tuple(n.attrs["shape"]))


def _permute(ctx, n, ins, bat):
    return ctx.op(K.Permute, ins[0], perm=(0,) + tuple(p + 1 for p in n.attrs["perm"]))


def _expand(ctx, n, ins, bat):
    shape = tuple(n.attrs["shape"])
    x = ctx.align(ins[0], True, len(shape))
    return ctx.op(K.Expand, x, shape=(ctx.size,) + shape)


def _slice_attrs(n, size):
    a = n.attrs
    return dict(starts=(0,) + tuple(a["starts"]), stops=(size,) + tuple(a["stops"]),
                steps=(1,) + tuple(a["steps"]))


def _slice(ctx, n, ins, bat):
    return ctx.op(K.Slice, ins[0], **_slice_attrs(n, ctx.size))


def _slice_backward(ctx, n, ins, bat):
    return ctx.op(K.SliceBackward, ins[0], shape=(ctx.size,) + tuple(n.attrs["shape"]),
                  **_slice_attrs(n, ctx.size))


def _pad(ctx, n, ins, bat):
    return ctx.op(K.Pad, ins[0], pads=((0, 0),) + tuple(tuple(p) for p in n.attrs["pads"]),
                  value=n.attrs["value"])


def _concat(ctx, n, ins, bat):
    return ctx.op(K.Concat, *[ctx.materialize(x, b) for x, b in zip(ins, bat)],
                  axis=n.attrs["axis"] + 1)


def _flip(ctx, n, ins, bat):
    return ctx.op(K.Flip, ins[0], axes=tuple(a + 1 for a in n.attrs["axes"]))


# --------------------------------------------------------------------------- indexing

def _norm_index(ctx, idx: E, n: int) -> E:
    """Indices as the gather kernels read them (negative wraps once, then clamps into
    [0, n-1]), so that adding a per-example offset keeps every example in its own block."""
    i32 = dt.int32
    wrapped = ctx.op(K.Where, ctx.op(K.Less, idx, ctx.full((), 0, i32)),
                     ctx.op(K.Add, idx, ctx.full((), n, i32)), idx)
    low = ctx.op(K.Maximum, wrapped, ctx.full((), 0, i32))
    return ctx.op(K.Minimum, low, ctx.full((), max(n - 1, 0), i32))


def _offset_index(ctx, idx: E, n: int) -> E:
    """Flat (B*m,) indices into B stacked blocks of n positions: example b's index k
    becomes b*n + norm(k)."""
    B, m = idx.shape
    base = ctx.op(K.Mul, ctx.op(K.Arange, n=B, start=0, step=1, dtype=dt.int32),
                  ctx.full((), n, dt.int32))
    flat = ctx.op(K.Add, _norm_index(ctx, idx, n), ctx.reshape(base, (B, 1)))
    return ctx.reshape(flat, (B * m,))


def _offset_drop(ctx, idx: E, n: int) -> E:
    """As _offset_index for a scatter: an index out of range (after wrapping once) becomes
    B*n, out of range of the stacked axis too, so its update is still dropped."""
    B, m = idx.shape
    i32 = dt.int32
    wrapped = ctx.op(K.Where, ctx.op(K.Less, idx, ctx.full((), 0, i32)),
                     ctx.op(K.Add, idx, ctx.full((), n, i32)), idx)
    ok = ctx.op(K.Where, ctx.op(K.Less, wrapped, ctx.full((), 0, i32)), ctx.full((), False, dt.bool_),
                ctx.op(K.Less, wrapped, ctx.full((), n, i32)))
    base = ctx.op(K.Mul, ctx.op(K.Arange, n=B, start=0, step=1, dtype=i32), ctx.full((), n, i32))
    flat = ctx.op(K.Where, ok, ctx.op(K.Add, wrapped, ctx.reshape(base, (B, 1))), ctx.full((), B * n, i32))
    return ctx.reshape(flat, (B * m,))


def _stack_axis(ctx, x: E, ax: int) -> E:
    """(B, pre.., n, post..) -> (pre.., B*n, post..): the batch joins the indexed axis."""
    B = x.shape[0]
    x = ctx.from_front(x, ax) if ax else x
    return ctx.reshape(x, x.shape[:ax] + (B * x.shape[ax + 1],) + x.shape[ax + 2:])


def _unstack_axis(ctx, y: E, ax: int, B: int) -> E:
    """(pre.., B*m, post..) -> (B, pre.., m, post..)."""
    m = y.shape[ax] // B if B else 0
    y = ctx.reshape(y, y.shape[:ax] + (B, m) + y.shape[ax + 1:])
    return ctx.to_front(y, ax)


def _index_select(ctx, n, ins, bat):
    x, idx = ins
    ax, B = n.attrs["axis"], ctx.size
    if not bat[1]:
        return ctx.op(K.IndexSelect, x, idx, axis=ax + 1)
    if not bat[0]:
        # one gather with every example's indices; the kernel normalises them against x
        m = idx.shape[1]
        y = ctx.op(K.IndexSelect, x, ctx.reshape(idx, (B * m,)), axis=ax)
        return _unstack_axis(ctx, y, ax, B)
    size = n.inputs[0].shape[ax]
    y = ctx.op(K.IndexSelect, _stack_axis(ctx, x, ax), _offset_index(ctx, idx, size), axis=ax)
    return _unstack_axis(ctx, y, ax, B)


def _scatter_add(ctx, n, ins, bat):
    """ScatterAdd and ScatterReduce (whose `reduce` rides along in the attributes)."""
    src, idx = ins
    ax, size, B = n.attrs["axis"], n.attrs["size"], ctx.size
    if not bat[1]:
        return ctx.op(n.op, src, idx, **dict(n.attrs, axis=ax + 1))
    src = ctx.materialize(src, bat[0])
    # each destination block b*size.. only receives example b's contributions, still in
    # index order, so the sums are bitwise those of the unbatched scatter
    y = ctx.op(n.op, _stack_axis(ctx, src, ax), _offset_drop(ctx, idx, size),
               **dict(n.attrs, axis=ax, size=B * size))
    return _unstack_axis(ctx, y, ax, B)


# --------------------------------------------------------------------------- contraction

def _matmul(ctx, n, ins, bat):
    (x, y), (bx, by) = ins, bat
    xs, ys = n.inputs[0].shape, n.inputs[1].shape
    if bx and not by and len(ys) == 2:
        # shared right operand: fold the batch into the rows, one plain matrix product
        rows = ctx.reshape(x, (size_of(x.shape[:-1]), x.shape[-1]))
        out = ctx.op(K.MatMul, rows, y)
        return ctx.reshape(out, (ctx.size,) + tuple(n.shape))
    r = max(len(xs), len(ys))
    return ctx.op(K.MatMul, ctx.align(x, bx, r), ctx.align(y, by, r))


# --------------------------------------------------------------------------- windows

def _fold(ctx, x: E) -> E:
    """(B, N, ...) -> (B*N, ...)."""
    return ctx.reshape(x, (x.shape[0] * x.shape[1],) + x.shape[2:])


def _window_op(ctx, n, ins, bat):
    ys = [_fold(ctx, ctx.materialize(x, b)) for x, b in zip(ins, bat)]
    out = ctx.op(n.op, *ys, **n.attrs)
    return ctx.reshape(out, (ctx.size,) + tuple(n.shape))


# --------------------------------------------------------------------------- the table

# every operator of the elementwise kernel family (read from the registry, so a new one
# is batched without being listed here)
_ELEMENTWISE = [k for k, s in SPECS.items() if s.kernel == "elementwise"]

BATCH_RULES: dict[K, Rule] = {
    K.Input: _leaf, K.Const: _leaf, K.Full: _leaf, K.Arange: _leaf,
    K.Rand: _rand,
    **{k: _elementwise for k in _ELEMENTWISE},
    **{k: _reduce for k in (K.Sum, K.Mean, K.Max, K.Min, K.Prod, K.ArgMax, K.ArgMin)},
    K.Cumsum: _along_axis, K.ArgSort: _along_axis, K.Softmax: _along_axis, K.LogSoftmax: _along_axis,
    K.Reshape: _reshape,
    K.Permute: _permute,
    K.Expand: _expand,
    K.Slice: _slice,
    K.SliceBackward: _slice_backward,
    K.Pad: _pad,
    K.Concat: _concat,
    K.Flip: _flip,
    K.IndexSelect: _index_select,
    K.ScatterAdd: _scatter_add,
    K.ScatterReduce: _scatter_add,
    K.CheckIndex: _elementwise,     # each index checked against the same bound
    K.MatMul: _matmul,
    K.Im2Col: _window_op, K.Col2Im: _window_op, K.MaxPool2d: _window_op,
    K.MaxPool2dBackward: _window_op,
    K.Scan: batch_scan, K.Part: batch_part, K.While: batch_while,    # the body batched (transforms/control.py)
    # the decompositions act on the last two axes: a batch axis is one more leading axis
    K.Eigh: _leading, K.Svd: _leading, K.Qr: _leading,
}

# the linear-algebra operators take any leading batch: their rules live with their gradients
from .linalg_rules import BATCH_RULES as _LINALG_BATCH  # noqa: E402

BATCH_RULES.update(_LINALG_BATCH)
