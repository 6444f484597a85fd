"""Indexing, gather and scatter as NumPy and JAX have them.

`Array.__getitem__` (every NumPy index form: ints, slices, None, ..., integer arrays
broadcast together, boolean masks, bool scalars), `Array.at[...]` (JAX's functional
updates), and the vkml.numpy functions take, take_along_axis, put_along_axis, nonzero,
argwhere and flatnonzero.

Every index is first turned into a `_Plan`: basic slicing (one Slice), new axes, and
the advanced (array) indices. A gather then views the sliced array as (P, rest..),
P the product of the advanced axes, and gathers rows by one linear index with
IndexSelect; a scatter folds its updates into those rows with ScatterAdd or
ScatterReduce and puts the rows back with SliceBackward. So every form is built from
the registry's gather and scatters, and their gradients are those operators' rules.

Index range: a concrete index out of range raises IndexError (NumPy's rule); a traced
one is clamped by a gather and dropped by a scatter (JAX's), unless `vkml.debug.checks`
checks it on the device. `mode=` chooses otherwise, as in jnp.take and `.at[]`.
"""
from __future__ import annotations

from typing import Any

import numpy as _np

from . import numpy as vnp
from .array import Array, ConcretizationError, bind
from .debug import check_index
from .trace import dtypes as dt
from .trace import tracer
from .trace.ops import OpKind
from .trace.shapes import ShapeError, normalize_axis

__all__ = ["getitem", "take", "take_along_axis", "put_along_axis", "nonzero", "argwhere",
           "flatnonzero", "NonConcreteBooleanIndexError"]

MODES = (None, "raise", "clip", "wrap", "fill", "drop", "promise_in_bounds")


class NonConcreteBooleanIndexError(IndexError):
    """A boolean mask index whose values are traced: the result's shape would depend on
    them (JAX's error of the same name)."""


def _i32(v) -> Array:
    return vnp.full((), int(v), dt.int32)


# --------------------------------------------------------------------------- nonzero

def _count(flat: Array, what: str) -> int:
    """The number of true values of a concrete boolean vector (read back: the shape
    of what follows depends on it)."""
    if flat.is_traced:
        raise ConcretizationError(
            f"{what}: the number of nonzero elements is data dependent and the argument (shape "
            f"{flat.shape}) is traced inside a transform (jit, grad, vmap); pass size= (and "
            f"fill_value=) for a fixed-size result, or use vkml.numpy.where(cond, x, y)")
    return int(vnp.sum(flat.astype(dt.int32)).item())


def _flat_nonzero(flat: Array, size: int) -> tuple[Array, Array]:
    """(positions of the first `size` true values of a boolean vector, in order; which of
    the `size` slots are filled). On the device: a running count gives each true value its
    slot, and a ScatterAdd of the positions puts it there (slots past `size` are dropped)."""
    n = flat.shape[0]
    if size == 0:   # (a scatter into no positions takes no index)
        return vnp.zeros((0,), dt.int32), vnp.zeros((0,), dt.bool_)
    ones = flat.astype(dt.int32)
    slot = vnp.where(flat, vnp.cumsum(ones) - 1, _i32(size))
    pos = bind(OpKind.ScatterAdd, [vnp.arange(n, dtype=dt.int32), slot], axis=0, size=size)
    filled = vnp.less(vnp.arange(size, dtype=dt.int32), vnp.sum(ones))
    return pos, filled


def nonzero(a, *, size: int | None = None, fill_value=None) -> tuple[Array, ...]:
    """Indices of the nonzero elements, one int32 array per axis (C order).

    Without `size` the count is read back from the device, so the argument must be
    concrete; under jit, grad or vmap pass `size=` (JAX's rule): the first `size`
    indices, padded with `fill_value` (0 by default; a tuple gives one per axis).

    >>> import vkml.numpy as vnp
    >>> [i.numpy().tolist() for i in vnp.nonzero(vnp.asarray([[0, 3], [4, 0]]))]
    [[0, 1], [1, 0]]
    >>> vnp.nonzero(vnp.asarray([0, 5, 0, 7]), size=3, fill_value=-1)[0].numpy().tolist()
    [1, 3, -1]
    """
    a = vnp.asarray(a)
    if a.ndim == 0:
        raise ValueError("nonzero: calling nonzero on 0d arrays is not allowed (NumPy's rule); "
                         "use vkml.numpy.atleast_1d(a).nonzero() or argwhere")
    flat = vnp.reshape(vnp.not_equal(a, vnp.zeros((), a.dtype)) if a.dtype != dt.bool_ else a, (-1,))
    if size is None:
        if fill_value is not None:
            raise ValueError("nonzero: fill_value needs size=")
        size = _count(flat, "nonzero")
    elif not isinstance(size, (int, _np.integer)) or isinstance(size, bool) or size < 0:
        raise ValueError(f"nonzero: size must be a non-negative int, got {size!r}")
    size = int(size)
    pos, filled = _flat_nonzero(flat, size)
    fills = fill_value if isinstance(fill_value, (tuple, list)) else (fill_value,) * a.ndim
    if len(fills) != a.ndim:
        raise ValueError(f"nonzero: fill_value has {len(fills)} entries for {a.ndim} axes")
    out, stride = [], a.size
    for d, f in zip(a.shape, fills):
        stride //= max(d, 1)
        c = vnp.remainder(vnp.floor_divide(pos, _i32(max(stride, 1))), _i32(max(d, 1)))
        if f is not None or size:
            c = vnp.where(filled, c, _i32(0 if f is None else f))
        out.append(c)
    return tuple(out)


def flatnonzero(a, *, size: int | None = None, fill_value=None) -> Array:
    """Indices of the nonzero elements of the flattened array (size=, fill_value= as in
    `nonzero`).

    >>> import vkml.numpy as vnp
    >>> vnp.flatnonzero(vnp.asarray([[0, 3], [4, 0]])).numpy().tolist()
    [1, 2]
    """
    return nonzero(vnp.reshape(vnp.asarray(a), (-1,)), size=size, fill_value=fill_value)[0]


def argwhere(a, *, size: int | None = None, fill_value=None) -> Array:
    """Indices of the nonzero elements as rows, shape (count, ndim) (size=, fill_value= as
    in `nonzero`); a 0-d argument gives (1, 0) or (0, 0), as NumPy.

    >>> import vkml.numpy as vnp
    >>> vnp.argwhere(vnp.asarray([[0, 3], [4, 0]])).numpy().tolist()
    [[0, 1], [1, 0]]
    """
    a = vnp.asarray(a)
    if a.ndim == 0:
        (i,) = nonzero(vnp.reshape(a, (1,)), size=size, fill_value=fill_value)
        return vnp.zeros((i.shape[0], 0), dt.int32)
    return vnp.stack(nonzero(a, size=size, fill_value=fill_value), axis=1)


# --------------------------------------------------------------------------- the plan

def _is_bool_scalar(i) -> bool:
    return isinstance(i, (bool, _np.bool_)) or (
        isinstance(i, (Array, _np.ndarray)) and i.ndim == 0 and i.dtype == dt.bool_)


def _as_index_array(i, what: str) -> Array:
    """An integer or boolean array index as an Array (lists and NumPy arrays converted)."""
    if isinstance(i, Array):
        arr = i
    else:
        try:
            # an empty list is an (empty) integer index in NumPy, though asarray says float
            arr = vnp.asarray(i, dt.int32 if isinstance(i, (list, tuple)) and _np.size(i) == 0 else None)
        except Exception as err:
            raise IndexError(f"{what}: index {i!r} is not a valid index: only integers, slices "
                             f"(`:`), ellipsis (`...`), None and integer or boolean arrays are") from err
    if arr.dtype != dt.bool_ and not (arr.dtype == dt.int32 or arr.dtype.kind in "iu"):
        raise IndexError(f"{what}: arrays used as indices must be of integer (or boolean) type, "
                         f"got {arr.dtype}")
    if arr.dtype not in (dt.bool_, dt.int32):
        arr = arr.astype(dt.int32)
    return arr


class _Plan:
    """An index taken apart (see the module docstring).

    pre: per axis of the sliced array with the new axes in (its shape `pre_shape`),
    "keep", "drop" (a basic integer) or "adv"; adv: (axis of pre, int32 index Array or
    None for a constant 0, extent, the index's original axis); B: the broadcast shape of
    the advanced indices; first: whether their dimensions go first (NumPy's rule when
    they are not next to each other).
    """

    def __init__(self, a: Array, idx: Any, what: str):
        self.a, self.what = a, what
        if not isinstance(idx, tuple):
            idx = (idx,)
        items = []
        for i in idx:
            if i is None or i is Ellipsis or isinstance(i, slice) or _is_bool_scalar(i):
                items.append(i)
            elif isinstance(i, (Array, _np.ndarray, list, tuple)):
                items.append(_as_index_array(i, what))
            elif hasattr(i, "__index__"):
                items.append(int(i.__index__()))
            else:
                raise IndexError(f"{what}: only integers, slices (`:`), ellipsis (`...`), None "
                                 f"and integer or boolean arrays are valid indices, got {i!r}")
        # how many axes each entry consumes
        used = [0 if (i is None or i is Ellipsis or _is_bool_scalar(i)) else
                (i.ndim if isinstance(i, Array) and i.dtype == dt.bool_ else 1) for i in items]
        if sum(1 for i in items if i is Ellipsis) > 1:
            raise IndexError(f"{what}: an index can only have a single ellipsis ('...')")
        if sum(used) > a.ndim:
            raise IndexError(f"{what}: too many indices for array of shape {a.shape}: "
                             f"{sum(used)} indexed axes (None and ... excluded) for {a.ndim}")
        ell = [j for j, i in enumerate(items) if i is Ellipsis]
        if ell:
            items[ell[0]:ell[0] + 1] = [slice(None)] * (a.ndim - sum(used))
        else:
            items += [slice(None)] * (a.ndim - sum(used))
        advanced = any(isinstance(i, Array) or _is_bool_scalar(i) for i in items)
        self.starts, self.stops, self.steps = [], [], []
        self.pre, self.pre_shape, self.adv = [], [], []
        self.trusted = set()    # axes indexed by a mask's coordinates: in range by construction
        entry_of = []           # the entry (of `items`) each pre axis comes from
        axis = 0
        for e, i in enumerate(items):
            if i is None or _is_bool_scalar(i):
                self.pre.append("keep" if i is None else "adv")
                self.pre_shape.append(1)
                entry_of.append(e)
                if i is not None:   # True: one position, False: none (a 0-d mask's nonzero)
                    n = 1 if bool(i) else 0
                    self.adv.append((len(self.pre) - 1, vnp.zeros((n,), dt.int32), 1, None))
                continue
            if isinstance(i, Array) and i.dtype == dt.bool_:
                coords = self._mask(i, axis)
                for c in coords:
                    d = a.shape[axis]
                    self._full_axis(d)
                    self.pre.append("adv")
                    self.pre_shape.append(d)
                    entry_of.append(e)
                    self.adv.append((len(self.pre) - 1, c, d, axis))
                    self.trusted.add(axis)
                    axis += 1
                continue
            d = a.shape[axis]
            if isinstance(i, Array):
                self._full_axis(d)
                self.pre.append("adv")
                self.pre_shape.append(d)
                self.adv.append((len(self.pre) - 1, i, d, axis))
            elif isinstance(i, slice):
                try:
                    b, s_, st = i.indices(d)
                except TypeError as err:   # a float bound, or an array not 0-d integer
                    why = "" if str(err).startswith("slice indices") else f" ({err})"
                    raise TypeError(f"{what}: index {i!r}: slice indices must be integers or None "
                                    f"or have an __index__ method, as a 0-d integer array "
                                    f"has{why}") from err
                n = len(range(b, s_, st))
                if n == 0:
                    b, s_, st = 0, 0, 1   # any empty range; slice.indices gives start -1 on size 0
                self.starts.append(b); self.stops.append(s_); self.steps.append(st)
                self.pre.append("keep")
                self.pre_shape.append(n)
            else:
                if not -d <= i < d:
                    raise IndexError(f"{what}: index {i} is out of bounds for axis {axis} with size {d}")
                k = i % d
                self.starts.append(k); self.stops.append(k + 1); self.steps.append(1)
                self.pre.append("adv" if advanced else "drop")
                self.pre_shape.append(1)
                if advanced:
                    self.adv.append((len(self.pre) - 1, None, 1, axis))
            entry_of.append(e)
            axis += 1
        self.sliced = any((b, s_, st) != (0, d, 1) for b, s_, st, d in
                          zip(self.starts, self.stops, self.steps, a.shape))
        self.pre_shape = tuple(self.pre_shape)
        shapes = [() if c is None else c.shape for _, c, _, _ in self.adv]
        try:
            self.B = tuple(_np.broadcast_shapes(*shapes)) if shapes else ()
        except ValueError:
            raise IndexError(f"{what}: shape mismatch: indexing arrays could not be broadcast "
                             f"together with shapes {' '.join(map(str, shapes))}") from None
        adv_entries = sorted({entry_of[p] for p, _, _, _ in self.adv})
        self.first = bool(adv_entries) and adv_entries[-1] - adv_entries[0] + 1 != len(adv_entries)
        self.keep_axes = [p for p, k in enumerate(self.pre) if k == "keep"]
        self.adv_axes = [p for p, _, _, _ in self.adv]
        first_adv = self.adv_axes[0] if self.adv else 0
        self.q = 0 if self.first else sum(1 for p in self.keep_axes if p < first_adv)

    def _full_axis(self, d: int) -> None:
        self.starts.append(0); self.stops.append(d); self.steps.append(1)

    def _mask(self, m: Array, axis: int) -> tuple[Array, ...]:
        """The coordinates of a boolean mask's true values (read back: eager only)."""
        want = self.a.shape[axis:axis + m.ndim]
        for k, (d, md) in enumerate(zip(want, m.shape)):
            if d != md:
                raise IndexError(f"{self.what}: boolean index did not match indexed array along "
                                 f"axis {axis + k}; size of axis is {d} but size of corresponding "
                                 f"boolean axis is {md}")
        if m.is_traced:
            raise NonConcreteBooleanIndexError(
                f"{self.what}: a boolean mask index of shape {m.shape} is traced inside a "
                f"transform (jit, grad, vmap), so the result's shape would depend on its values; "
                f"use vkml.numpy.where(mask, x, other) to keep the shape, or "
                f"vkml.numpy.nonzero(mask, size=..., fill_value=...) for a fixed number of indices")
        with tracer.suspended():
            return nonzero(m)

    # ---------------------------------------------------------------- shapes and views
    @property
    def out_shape(self) -> tuple:
        """The shape of a[idx]."""
        keep = [self.pre_shape[p] for p in self.keep_axes]
        if not self.adv:
            return tuple(keep)
        return tuple(keep[:self.q]) + self.B + tuple(keep[self.q:])

    @property
    def P(self) -> int:
        return int(_np.prod([self.pre_shape[p] for p in self.adv_axes], dtype=_np.int64))

    def x_pre(self, x: Array) -> Array:
        if self.sliced:
            x = bind(OpKind.Slice, [x], starts=tuple(self.starts), stops=tuple(self.stops),
                     steps=tuple(self.steps))
        return vnp.reshape(x, self.pre_shape)

    def rows(self, pre: Array) -> Array:
        """(P, keep..): the advanced axes first, folded into one."""
        t = vnp.transpose(pre, self.adv_axes + self.keep_axes)
        return vnp.reshape(t, (self.P,) + tuple(self.pre_shape[p] for p in self.keep_axes))

    def unrows(self, r: Array) -> Array:
        """The inverse of `rows`: (P, keep..) back to the pre layout."""
        order = self.adv_axes + self.keep_axes
        t = vnp.reshape(r, tuple(self.pre_shape[p] for p in order))
        inv = [0] * len(order)
        for i, p in enumerate(order):
            inv[p] = i
        return vnp.transpose(t, inv)

    def place(self, g: Array) -> Array:
        """(B.., keep..) gathered rows to the output layout (B moved to position q)."""
        nb, q = len(self.B), self.q
        perm = list(range(nb, nb + q)) + list(range(nb)) + list(range(nb + q, g.ndim))
        return vnp.transpose(g, perm)

    def unplace(self, v: Array) -> Array:
        """The inverse of `place`."""
        nb, q = len(self.B), self.q
        perm = list(range(q, q + nb)) + list(range(q)) + list(range(q + nb, v.ndim))
        return vnp.transpose(v, perm)

    def into(self, new_pre: Array, x: Array) -> Array:
        """x with its indexed region (the basic slice) replaced by new_pre."""
        if not self.sliced:
            return vnp.reshape(new_pre, x.shape)
        region = tuple(len(range(b, e, s)) for b, e, s in zip(self.starts, self.stops, self.steps))
        new = vnp.reshape(new_pre, region)
        kw = dict(shape=x.shape, starts=tuple(self.starts), stops=tuple(self.stops),
                  steps=tuple(self.steps))
        inside = bind(OpKind.SliceBackward, [vnp.full(region, True)], **kw)
        return vnp.where(inside, bind(OpKind.SliceBackward, [new], **kw), x)

    # ---------------------------------------------------------------- the linear index
    def linear(self, mode, scatter: bool) -> tuple[Array, Array | None]:
        """(the flat int32 index of each advanced position, of size prod(B), into the P
        rows; where each is in range, or None when all are or the kernels' own rule
        applies). mode: see MODES."""
        if mode not in MODES:
            raise ValueError(f"{self.what}: mode {mode!r} is not one of "
                             f"{', '.join(repr(m) for m in MODES)}")
        strides, s = [], 1
        for _, _, d, _ in reversed(self.adv):
            strides.append(s)
            s *= d
        strides.reverse()
        # the indices that carry positions: not the constant 0 of a basic integer or of a
        # bool scalar's new axis (those only add their shape to B)
        live = []
        for (_, c, d, ax), st in zip(self.adv, strides):
            if c is None or ax is None:
                continue
            if mode in (None, "raise") and ax not in self.trusted:
                c = self._check(c, d, ax, mode)
            live.append((c, d, st))
        M = int(_np.prod(self.B, dtype=_np.int64))
        if len(live) <= 1 and mode in (None, "raise", "promise_in_bounds"):
            # one index (stride 1, extent P): the kernels wrap negatives once, then clamp
            # (a gather) or drop (a scatter)
            lin = live[0][0] if live else vnp.zeros((), dt.int32)
            return vnp.reshape(vnp.broadcast_to(lin, self.B), (M,)), None
        lin, valid = vnp.zeros((), dt.int32), None
        for c, d, st in live:
            k, ok = _normalise(c, d, mode, scatter)
            if ok is not None:
                valid = ok if valid is None else vnp.logical_and(valid, ok)
            lin = lin + (k * _i32(st) if st != 1 else k)
        lin = vnp.reshape(vnp.broadcast_to(lin, self.B), (M,))
        if valid is not None:
            valid = vnp.reshape(vnp.broadcast_to(valid, self.B), (M,))
        return lin, valid

    def _check(self, c: Array, d: int, axis: int, mode) -> Array:
        if mode == "raise" and c.is_traced:
            return bind(OpKind.CheckIndex, [c], size=int(d), negative=True, ignore=None,
                        what=self.what, axis=axis)
        return check_index(self.what, c, d, axis)


def _normalise(c: Array, d: int, mode, scatter: bool) -> tuple[Array, Array | None]:
    """An index into an axis of extent d as the mode reads it: (in [0, d), valid or None)."""
    if mode == "clip":
        return vnp.clip(c, _i32(0), _i32(max(d - 1, 0))), None
    if mode == "wrap":
        return vnp.remainder(c, _i32(max(d, 1))), None
    w = vnp.where(vnp.less(c, _i32(0)), c + _i32(d), c)
    clamped = vnp.clip(w, _i32(0), _i32(max(d - 1, 0)))
    if mode in ("fill", "drop") or scatter:
        return clamped, vnp.logical_and(vnp.greater_equal(w, _i32(0)), vnp.less(w, _i32(d)))
    return clamped, None


def _default_fill(dtype):
    """JAX's fill for out-of-range gathers: nan, the most negative int, True."""
    if dt.is_float(dtype):
        return float("nan")
    return True if dtype == dt.bool_ else -2 ** 31


# --------------------------------------------------------------------------- gather

def _gather(a: Array, plan: _Plan, mode=None, fill_value=None) -> Array:
    pre = plan.x_pre(a)
    if not plan.adv:
        return vnp.reshape(pre, plan.out_shape)
    lin, valid = plan.linear(mode, scatter=False)
    live = [p for p, c, d, ax in plan.adv if c is not None and ax is not None]
    if len(live) == 1 and valid is None and not plan.first:
        # one index (the other advanced axes have extent 1): gather along its own axis,
        # with no transposes around it; B takes the advanced axes' place
        g = bind(OpKind.IndexSelect, [pre, lin], axis=live[0])
        return vnp.reshape(g, plan.out_shape)
    rows = plan.rows(pre)
    g = bind(OpKind.IndexSelect, [rows, lin], axis=0)
    if mode == "fill":
        fill = _default_fill(a.dtype) if fill_value is None else fill_value
        v = vnp.reshape(valid, valid.shape + (1,) * (g.ndim - 1)) if valid is not None else None
        if v is not None:
            g = vnp.where(v, g, vnp.full((), fill, a.dtype))
    g = vnp.reshape(g, plan.B + rows.shape[1:])
    return plan.place(g)


def getitem(a: Array, idx) -> Array:
    """a[idx] with NumPy's indexing: ints, slices, None, ..., integer arrays (broadcast
    together), boolean masks and bool scalars.

    As in NumPy, the dimensions of the advanced indices replace the first one's place
    when they are next to each other, and go first when a slice or None separates them:
    x[[0, 1], :, [1, 2]] has shape (2, x.shape[1]). A concrete index out of range raises
    IndexError; a traced one is clamped (JAX's rule; `vkml.debug.checks` checks it). A
    boolean mask needs a concrete value (its count sets the shape).

    >>> import vkml.numpy as vnp
    >>> vnp.arange(10)[1:8:3].numpy().tolist()
    [1, 4, 7]
    >>> x = vnp.arange(12).reshape(3, 4)
    >>> x[[0, 2], [1, 3]].numpy().tolist(), x[x > 9].numpy().tolist()
    ([1, 11], [10, 11])
    """
    return _gather(a, _Plan(a, idx, "getitem"))


def take(a, indices, axis: int | None = None, mode: str | None = None, fill_value=None,
         *, _what: str = "take") -> Array:
    """Gather along axis (flattened when None); negative indices count from the end.

    mode (jnp.take's): None: a concrete index out of range raises IndexError (NumPy's
    rule), a traced one (under jit, grad or vmap) is clamped and its gradient dropped
    (`vkml.debug.checks` checks it on the device instead); 'raise': as None, and checked
    on the device when traced; 'clip': clamped into range (negative ones to 0); 'wrap':
    taken modulo the extent; 'fill': out of range (after one wrap of negatives) gives
    fill_value (nan, INT_MIN or True by default, as JAX).

    >>> import vkml.numpy as vnp
    >>> vnp.take(vnp.arange(5) * 10, [4, -1]).numpy().tolist()
    [40, 40]
    >>> vnp.take(vnp.arange(3.0), [0, 7], mode="fill", fill_value=-1.0).numpy().tolist()
    [0.0, -1.0]
    """
    a = vnp.asarray(a)
    idx = vnp.asarray(indices)
    if idx.dtype != dt.int32:
        if dt.is_float(idx.dtype):
            raise vnp.DTypeError(f"{_what}: indices must be integers, got {idx.dtype}")
        idx = idx.astype(dt.int32)
    if mode not in (None, "raise", "clip", "wrap", "fill"):
        raise ValueError(f"{_what}: mode {mode!r} is not one of None, 'raise', 'clip', 'wrap', 'fill'")
    if axis is None or a.ndim == 0:   # NumPy: a 0-d array has axis 0 here, as 1-d
        a, axis = vnp.reshape(a, (-1,)), 0 if axis is None else axis
    ax = normalize_axis(_what, axis, a.ndim)
    flat = vnp.reshape(idx, (-1,))
    d = a.shape[ax]
    if mode in (None, "raise"):
        flat = check_index(_what, flat, d, ax) if mode is None or not flat.is_traced else \
            bind(OpKind.CheckIndex, [flat], size=int(d), negative=True, ignore=None, what=_what, axis=ax)
        valid = None
    else:
        flat, valid = _normalise(flat, d, mode, False)
    out = bind(OpKind.IndexSelect, [a, flat], axis=ax)
    if valid is not None:
        fill = _default_fill(a.dtype) if fill_value is None else fill_value
        v = vnp.reshape(valid, (1,) * ax + valid.shape + (1,) * (a.ndim - ax - 1))
        out = vnp.where(v, out, vnp.full((), fill, a.dtype))
    return vnp.reshape(out, a.shape[:ax] + idx.shape + a.shape[ax + 1:])


def _along_axis_index(what: str, arr: Array, indices, axis) -> tuple[Array, tuple]:
    arr = vnp.asarray(arr)
    idx = vnp.asarray(indices)
    if dt.is_float(idx.dtype) or idx.dtype == dt.bool_:
        raise IndexError(f"{what}: indices must be integers, got {idx.dtype}")
    if axis is None:
        if idx.ndim != 1:
            raise ValueError(f"{what}: when axis=None, indices must be 1-d, got shape {idx.shape}")
        arr, axis = vnp.reshape(arr, (-1,)), 0
    if idx.ndim != arr.ndim:
        raise ValueError(f"{what}: `indices` and `arr` must have the same number of dimensions, "
                         f"got {idx.ndim} and {arr.ndim}")
    ax = normalize_axis(what, axis, arr.ndim)
    key = []
    for d in range(arr.ndim):
        if d == ax:
            key.append(idx)
        else:
            shape = [1] * arr.ndim
            shape[d] = arr.shape[d]
            key.append(vnp.reshape(vnp.arange(arr.shape[d], dtype=dt.int32), tuple(shape)))
    return arr, tuple(key)


def take_along_axis(arr, indices, axis: int | None, mode: str | None = None,
                    fill_value=None) -> Array:
    """out[..., j, ...] = arr[..., indices[..., j, ...], ...] along axis (NumPy's: indices
    has arr's rank, the other axes broadcast; axis None: arr flattened, 1-d indices).
    mode and fill_value as `take` (and 'drop', 'promise_in_bounds' as `.at[].get`).

    >>> import vkml.numpy as vnp
    >>> a = vnp.asarray([[10, 30, 20], [60, 40, 50]])
    >>> vnp.take_along_axis(a, vnp.asarray([[0, 2, 1], [1, 2, 0]]), axis=1).numpy().tolist()
    [[10, 20, 30], [40, 50, 60]]
    """
    arr, key = _along_axis_index("take_along_axis", arr, indices, axis)
    return _gather(arr, _Plan(arr, key, "take_along_axis"), mode, fill_value)


def put_along_axis(arr, indices, values, axis: int | None, inplace: bool = False,
                   mode: str | None = None) -> Array:
    """arr with values put at the positions take_along_axis would read (a new array: JAX's
    functional form, so inplace must be False). A position named twice gets one of its
    values (the last, as `.at[].set`).

    >>> import vkml.numpy as vnp
    >>> a = vnp.zeros((2, 3))
    >>> vnp.put_along_axis(a, vnp.asarray([[1], [2]]), 5.0, axis=1).numpy().tolist()
    [[0.0, 5.0, 0.0], [0.0, 0.0, 5.0]]
    """
    if inplace:
        raise ValueError("put_along_axis: vkml arrays are immutable; pass inplace=False and use "
                         "the returned array")
    a0 = vnp.asarray(arr)
    flat, key = _along_axis_index("put_along_axis", a0, indices, axis)
    out = _scatter(flat, _Plan(flat, key, "put_along_axis"), values, "set", mode)
    return vnp.reshape(out, a0.shape)


# --------------------------------------------------------------------------- scatter

_REDUCE_OPS = ("set", "add", "multiply", "divide", "min", "max", "power")


def _scatter(a: Array, plan: _Plan, values, how: str, mode=None) -> Array:
    """a with a[idx] combined with values by `how` (one of _REDUCE_OPS)."""
    if how not in _REDUCE_OPS:
        raise ValueError(f"{plan.what}: unknown update {how!r}; valid: {', '.join(_REDUCE_OPS)}")
    if how == "divide" and not dt.is_float(a.dtype):
        raise vnp.DTypeError(f"{plan.what}: true division of a {a.dtype} array is not defined in "
                             f"its dtype (NumPy's divide.at refuses it too); cast x to a float dtype")
    v = vnp.asarray(values)
    if v.dtype != a.dtype:
        v = v.astype(a.dtype)
    try:
        v = vnp.broadcast_to(v, plan.out_shape)
    except (ValueError, ShapeError):
        raise ValueError(f"{plan.what}: values of shape {v.shape} do not broadcast to the "
                         f"indexed shape {plan.out_shape}") from None
    pre = plan.x_pre(a)
    if not plan.adv:   # basic indexing: one elementwise op on the region
        vp = vnp.reshape(v, plan.pre_shape)
        return plan.into(_combine(how, pre, vp, vp), a)
    rows = plan.rows(pre)
    M = int(_np.prod(plan.B, dtype=_np.int64))
    upd = vnp.reshape(plan.unplace(v), (M,) + rows.shape[1:])
    lin, valid = plan.linear("drop" if mode in ("drop", "fill") else mode, scatter=True)
    if valid is not None:
        lin = vnp.where(valid, lin, _i32(plan.P))     # out of range: the update is dropped
    P = plan.P
    if how == "add":
        new = rows + bind(OpKind.ScatterAdd, [upd, lin], axis=0, size=P)
    elif how in ("min", "max"):
        # the current values take part like updates, so ties share the gradient as JAX's
        src = vnp.concatenate([rows, upd], axis=0)
        ids = vnp.concatenate([vnp.arange(P, dtype=dt.int32), lin])
        new = bind(OpKind.ScatterReduce, [src, ids], axis=0, size=P, reduce=how)
    elif how in ("multiply", "divide", "power"):
        f = bind(OpKind.ScatterReduce, [upd, lin], axis=0, size=P, reduce="mul")
        new = _combine(how, rows, f, f)
    else:   # set: the last write of each position wins (a max of update positions)
        if M == 0:
            return a
        who = bind(OpKind.ScatterReduce, [vnp.arange(M, dtype=dt.int32), lin], axis=0, size=P,
                   reduce="max")
        hit = vnp.reshape(vnp.greater_equal(who, _i32(0)), (P,) + (1,) * (rows.ndim - 1))
        picked = bind(OpKind.IndexSelect, [upd, who], axis=0)   # misses clamp, then masked
        new = vnp.where(hit, picked, rows)
    return plan.into(plan.unrows(new), a)


def _combine(how: str, x: Array, v: Array, f: Array) -> Array:
    """The elementwise update of a region x by v (basic) or by the folded updates f."""
    if how == "set":
        return vnp.broadcast_to(v, x.shape)
    if how == "add":
        return x + v
    if how == "multiply":
        return x * f
    if how == "divide":
        return x / f
    if how == "power":
        return vnp.power(x, f)
    return vnp.minimum(x, v) if how == "min" else vnp.maximum(x, v)


class _IndexUpdateRef:
    """x.at[idx]: the functional updates of JAX (each returns a new array). mode: None (a
    concrete index out of range raises IndexError; traced, a gather clamps and a scatter
    drops), 'drop' / 'fill' (out of range dropped, or read as fill_value), 'clip',
    'promise_in_bounds'. indices_are_sorted and unique_indices are accepted as JAX's hints
    and change nothing (the scatters are deterministic either way)."""
    __slots__ = ("array", "index")

    def __init__(self, array: Array, index):
        self.array, self.index = array, index

    def _plan(self, what: str) -> _Plan:
        return _Plan(self.array, self.index, f"at[].{what}")

    def get(self, *, indices_are_sorted: bool = False, unique_indices: bool = False,
            mode: str | None = None, fill_value=None) -> Array:
        """x[idx] (mode, fill_value as `take`; 'drop' is 'fill').

        >>> import vkml.numpy as vnp
        >>> vnp.arange(3.0).at[5].get(mode="fill", fill_value=0.0).item()
        0.0
        """
        plan = _Plan(self.array, self._index_for(mode), "at[].get")
        return _gather(self.array, plan, "fill" if mode == "drop" else mode, fill_value)

    def _index_for(self, mode):
        # with a mode, plain ints are range-checked by the mode, not here: as 0-d arrays
        if mode in (None, "raise"):
            return self.index
        idx = self.index if isinstance(self.index, tuple) else (self.index,)
        return tuple(vnp.asarray(i, dt.int32) if isinstance(i, (int, _np.integer)) and
                     not isinstance(i, (bool, _np.bool_)) else i for i in idx)

    def _update(self, values, how: str, mode) -> Array:
        plan = _Plan(self.array, self._index_for(mode), f"at[].{how}")
        return _scatter(self.array, plan, values, how, mode)

    def set(self, values, *, indices_are_sorted: bool = False, unique_indices: bool = False,
            mode: str | None = None) -> Array:
        """x with x[idx] = values. A position named twice gets one of its values: the last
        in index order (C order of the broadcast indices).

        >>> import vkml.numpy as vnp
        >>> vnp.zeros(3).at[[0, 2, 0]].set(vnp.asarray([1.0, 2.0, 3.0])).numpy().tolist()
        [3.0, 0.0, 2.0]
        """
        return self._update(values, "set", mode)

    def add(self, values, *, indices_are_sorted: bool = False, unique_indices: bool = False,
            mode: str | None = None) -> Array:
        """x with values added at idx; repeated positions accumulate.

        >>> import vkml.numpy as vnp
        >>> vnp.zeros(3).at[[0, 2, 0]].add(1.0).numpy().tolist()
        [2.0, 0.0, 1.0]
        """
        return self._update(values, "add", mode)

    def subtract(self, values, *, indices_are_sorted: bool = False, unique_indices: bool = False,
            mode: str | None = None) -> Array:
        """x with values subtracted at idx; repeated positions accumulate.

        >>> import vkml.numpy as vnp
        >>> vnp.zeros(2).at[1].subtract(2.0).numpy().tolist()
        [0.0, -2.0]
        """
        return self._update(vnp.negative(vnp.asarray(values)), "add", mode)

    def multiply(self, values, *, indices_are_sorted: bool = False, unique_indices: bool = False,
            mode: str | None = None) -> Array:
        """x multiplied at idx by values; repeated positions multiply by each.

        >>> import vkml.numpy as vnp
        >>> vnp.ones(2).at[[1, 1]].multiply(3.0).numpy().tolist()
        [1.0, 9.0]
        """
        return self._update(values, "multiply", mode)

    def divide(self, values, *, indices_are_sorted: bool = False, unique_indices: bool = False,
            mode: str | None = None) -> Array:
        """x divided at idx by values (by their product where repeated).

        >>> import vkml.numpy as vnp
        >>> vnp.ones(2).at[0].divide(4.0).numpy().tolist()
        [0.25, 1.0]
        """
        return self._update(values, "divide", mode)

    def power(self, values, *, indices_are_sorted: bool = False, unique_indices: bool = False,
            mode: str | None = None) -> Array:
        """x raised at idx to values (x ** (a * b) where repeated: (x ** a) ** b for x > 0).

        >>> import vkml.numpy as vnp
        >>> vnp.full(2, 2.0).at[1].power(3.0).numpy().tolist()
        [2.0, 8.0]
        """
        return self._update(values, "power", mode)

    def min(self, values, *, indices_are_sorted: bool = False, unique_indices: bool = False,
            mode: str | None = None) -> Array:
        """x with x[idx] = minimum(x[idx], values), over every value for a repeated position
        (gradient shared evenly among ties, as JAX's).

        >>> import vkml.numpy as vnp
        >>> vnp.zeros(2).at[[1, 1]].min(vnp.asarray([-1.0, -3.0])).numpy().tolist()
        [0.0, -3.0]
        """
        return self._update(values, "min", mode)

    def max(self, values, *, indices_are_sorted: bool = False, unique_indices: bool = False,
            mode: str | None = None) -> Array:
        """x with x[idx] = maximum(x[idx], values), as `min`.

        >>> import vkml.numpy as vnp
        >>> vnp.zeros(2).at[[1, 1]].max(vnp.asarray([1.0, 3.0])).numpy().tolist()
        [0.0, 3.0]
        """
        return self._update(values, "max", mode)

    def __repr__(self) -> str:
        return f"_IndexUpdateRef({self.array!r}, {self.index!r})"


class IndexUpdateHelper:
    """`x.at`: index it to get the functional update methods (JAX's `.at`).

    >>> import vkml.numpy as vnp
    >>> vnp.zeros((2, 2)).at[0, 1].set(7.0).numpy().tolist()
    [[0.0, 7.0], [0.0, 0.0]]
    """
    __slots__ = ("array",)

    def __init__(self, array: Array):
        self.array = array

    def __getitem__(self, index) -> _IndexUpdateRef:
        return _IndexUpdateRef(self.array, index)
