"""NumPy's index helpers and branch selectors, composed from vkml.numpy's operations:
rollaxis, indices, ix_, unravel_index, ravel_multi_index, select, piecewise and the
index-trick objects r_ and c_. Exported from vkml.numpy.

Index arithmetic runs on the device in int32. Where NumPy raises on an index out of range
(unravel_index; ravel_multi_index with mode='raise'), a concrete input is read back and
checked; traced, unravel_index clips as jax.numpy does and ravel_multi_index's
mode='raise' is refused (ConcretizationError, as jax.numpy: use 'wrap' or 'clip').

>>> import vkml.numpy as vnp
>>> vnp.r_[1:4, 0, vnp.asarray([7, 8])].numpy().tolist()
[1, 2, 3, 0, 7, 8]
"""
from __future__ import annotations

import builtins as _b
from typing import Any, Callable, Sequence

import numpy as _np

from . import numpy as _vnp
from .array import Array, ConcretizationError
from .trace import dtypes as dt
from .trace.shapes import AxisError, ShapeError, broadcast_shapes, normalize_axis

INT32_MAX = 2 ** 31 - 1


def _export(f):
    f.__module__ = "vkml.numpy"
    return f


# --------------------------------------------------------------------------- axes, grids


@_export
def rollaxis(a, axis: int, start: int = 0) -> Array:
    """Axis `axis` moved to lie before position `start` (the others keep their order), as
    NumPy's rollaxis (prefer moveaxis).

    >>> import vkml.numpy as vnp
    >>> rollaxis(vnp.zeros((3, 4, 5)), 2).shape
    (5, 3, 4)
    """
    a = _vnp.asarray(a)
    n = a.ndim
    axis = normalize_axis("rollaxis", axis, n)
    start = _vnp._dim("rollaxis", start)
    s = start + n if start < 0 else start
    if not 0 <= s < n + 1:
        raise AxisError(f"rollaxis: 'start' arg requires {-n} <= start < {n + 1}, but {start} "
                        f"was passed in")
    if axis < s:
        s -= 1
    if axis == s:
        return a
    axes = list(range(n))
    axes.remove(axis)
    axes.insert(s, axis)
    return _vnp.transpose(a, axes)


@_export
def indices(dimensions: Sequence[int], dtype=int, sparse: bool = False):
    """The index grid of an array of shape `dimensions`: shape (len(dimensions),) +
    dimensions, entry i along axis i; sparse gives the unbroadcast grids as a tuple.

    >>> import vkml.numpy as vnp
    >>> indices((2, 3))[1].numpy().tolist()
    [[0, 1, 2], [0, 1, 2]]
    """
    dims = _vnp._shape(tuple(dimensions), "indices")
    d = dt.int32 if dtype is int else dt.canonical(dtype, "indices")
    n = len(dims)
    grids = [_vnp.reshape(_vnp.arange(k, dtype=d), (1,) * i + (k,) + (1,) * (n - i - 1))
             for i, k in enumerate(dims)]
    if sparse:
        return tuple(grids)
    if not grids:
        return _vnp.zeros((0,), d)
    return _vnp.stack([_vnp.broadcast_to(g, dims) for g in grids])


def _nonzero_1d(name: str, m: Array) -> Array:
    """The positions of the True elements of a concrete 1-d bool array, on the device: the
    count is read back (it is the result's length), the j-th position is the number of
    elements whose running count of Trues is at most j."""
    if m._trace is not None:
        raise ConcretizationError(f"{name}: a traced bool index has a data-dependent length; "
                                  f"pass integer indices")
    k = int(_vnp.sum(m))
    if k == 0:
        return _vnp.zeros((0,), dt.int32)
    cs = _vnp.cumsum(m.astype(dt.int32))
    return _vnp.sum(_vnp.less_equal(cs[None, :], _vnp.arange(k)[:, None]), axis=1)


@_export
def ix_(*args) -> tuple:
    """Open-mesh index arrays from 1-d sequences: the k-th of n has shape (1,)*k + (len,) +
    (1,)*(n-k-1), so a[ix_(rows, cols)] picks the cross product. A bool sequence stands
    for the positions of its Trues (a concrete one: the count decides the shape).

    >>> import vkml.numpy as vnp
    >>> [g.shape for g in ix_([0, 1], [2, 0, 1])]
    [(2, 1), (1, 3)]
    """
    n = len(args)
    out = []
    for k, v in enumerate(args):
        given = isinstance(v, (Array, _np.ndarray))
        x = _vnp.asarray(v)
        if x.ndim != 1:
            raise ValueError(f"ix_: cross index must be 1 dimensional, argument {k} has shape "
                             f"{x.shape}")
        if not given and x.size == 0:
            x = x.astype(dt.int32)      # as NumPy: an empty list indexes (intp)
        if x.dtype == dt.bool_:
            x = _nonzero_1d("ix_", x)
        out.append(_vnp.reshape(x, (1,) * k + (x.shape[0],) + (1,) * (n - k - 1)))
    return tuple(out)


# --------------------------------------------------------------------------- flat <-> multi index


def _int_index(name: str, v) -> Array:
    """Integer coordinates (bool counts as int, an empty list as no indices), TypeError
    for floats as NumPy."""
    x = _vnp.asarray(v)
    if x.dtype == dt.bool_ or (x.size == 0 and not isinstance(v, (Array, _np.ndarray))):
        x = x.astype(dt.int32)
    if x.dtype != dt.int32:
        raise TypeError(f"{name}: only int indices permitted, got {x.dtype}")
    return x


def _dims(name: str, shape) -> tuple:
    dims = _vnp._shape(shape, name)
    total = 1
    for d in dims:
        total *= d
    if total > INT32_MAX:
        raise ValueError(f"{name}: invalid dims {dims}: the array size they define, {total}, is "
                         f"larger than the largest int32 index")
    return dims


@_export
def unravel_index(indices, shape, order: str = "C") -> tuple:
    """The coordinates in an array of `shape` of flat indices (C or F order), one int32
    array per axis. Out of range raises ValueError on a concrete input (NumPy); traced,
    indices are clipped into [-size, size) and negative ones count from the end (jax.numpy).

    >>> import vkml.numpy as vnp
    >>> [c.numpy().tolist() for c in unravel_index([5, 7], (2, 4))]
    [[1, 1], [1, 3]]
    """
    if order not in ("C", "F"):
        raise ValueError(f"unravel_index: order must be 'C' or 'F', got {order!r}")
    idx = _int_index("unravel_index", indices)
    dims = _dims("unravel_index", shape)
    size = 1
    for d in dims:
        size *= d
    if idx._trace is None:
        if idx.size:
            lo, hi = int(_vnp.min(idx)), int(_vnp.max(idx))
            if lo < 0 or hi >= size:
                bad = lo if lo < 0 else hi
                raise ValueError(f"unravel_index: index {bad} is out of bounds for array with "
                                 f"size {size}")
    else:
        if size == 0:
            raise ValueError(f"unravel_index: cannot unravel into shape {dims} (size 0)")
        idx = _vnp.clip(idx, -size, size - 1)
        idx = _vnp.where(_vnp.less(idx, 0), idx + size, idx)
    out = []
    for d in (reversed(dims) if order == "C" else dims):
        out.append(_vnp.remainder(idx, d) if d else idx)
        idx = _vnp.floor_divide(idx, d) if d else idx
    return tuple(reversed(out)) if order == "C" else tuple(out)


@_export
def ravel_multi_index(multi_index, dims, mode="raise", order: str = "C") -> Array:
    """Flat indices (int32) of the coordinates multi_index (one integer array per axis,
    broadcast together) in an array of shape dims. mode ('raise', 'wrap', 'clip', or one
    per axis): out-of-range coordinates raise ValueError, wrap around, or are clipped.
    mode='raise' needs concrete coordinates (as jax.numpy).

    >>> import vkml.numpy as vnp
    >>> ravel_multi_index(([1, 0], [2, 3]), (2, 4)).numpy().tolist()
    [6, 3]
    """
    if order not in ("C", "F"):
        raise ValueError(f"ravel_multi_index: order must be 'C' or 'F', got {order!r}")
    dims = _dims("ravel_multi_index", dims)
    coords = list(multi_index) if isinstance(multi_index, (list, tuple)) else \
        [multi_index[i] for i in range(len(multi_index))]
    if len(coords) != len(dims):
        raise ValueError(f"ravel_multi_index: parameter multi_index must be a sequence of "
                         f"length {len(dims)} (one coordinate array per dimension), got "
                         f"{len(coords)}")
    modes = (mode,) * len(dims) if isinstance(mode, str) else tuple(mode)
    if len(modes) != len(dims) or _b.any(m not in ("raise", "wrap", "clip") for m in modes):
        raise ValueError(f"ravel_multi_index: mode must be 'raise', 'wrap' or 'clip', or a "
                         f"sequence of them, one per dimension; got {mode!r}")
    coords = [_int_index("ravel_multi_index", c) for c in coords]
    shape = broadcast_shapes("ravel_multi_index", *[c.shape for c in coords])
    strides, acc = [0] * len(dims), 1
    for i in (reversed(range(len(dims))) if order == "C" else range(len(dims))):
        strides[i], acc = acc, acc * dims[i]
    flat = _vnp.zeros(shape, dt.int32)
    for i, (c, d, m) in enumerate(zip(coords, dims, modes)):
        if m == "raise":
            if c._trace is not None:
                raise ConcretizationError(
                    "ravel_multi_index: mode='raise' needs concrete coordinates, but coordinate "
                    f"{i} is traced; use mode='wrap' or mode='clip' inside a transform")
            if c.size and (int(_vnp.min(c)) < 0 or int(_vnp.max(c)) >= d):
                raise ValueError(f"ravel_multi_index: invalid entry in coordinates array "
                                 f"{i} (valid: 0 <= index < {d})")
        elif d == 0:
            raise ValueError(f"ravel_multi_index: cannot {m} coordinates of dimension {i} of "
                             f"size 0")
        elif m == "wrap":
            c = _vnp.remainder(c, d)
        else:
            c = _vnp.clip(c, 0, d - 1)
        flat = flat + c * strides[i]
    return flat


# --------------------------------------------------------------------------- branch selection


@_export
def select(condlist: Sequence, choicelist: Sequence, default=0) -> Array:
    """choicelist[i] where condlist[i] is the first true condition, else default (all
    broadcast together; choices promoted, Python scalars weakly).

    >>> import vkml.numpy as vnp
    >>> x = vnp.arange(5)
    >>> select([x < 2, x > 3], [x, x * 10], default=-1).numpy().tolist()
    [0, 1, -1, -1, 40]
    """
    condlist, choicelist = list(condlist), list(choicelist)
    if len(condlist) != len(choicelist):
        raise ValueError(f"select: list of cases must be same length as list of conditions "
                         f"({len(choicelist)} choices, {len(condlist)} conditions)")
    if not condlist:
        raise ValueError("select: select with an empty condition list is not possible")
    conds = []
    for i, c in enumerate(condlist):
        c = _vnp.asarray(c)
        if c.dtype != dt.bool_:
            raise TypeError(f"select: invalid entry {i} in condlist: should be boolean ndarray, "
                            f"got {c.dtype}")
        conds.append(c)
    vals, _ = _vnp._operands("select", *choicelist, default)
    out = vals[-1]
    shape = broadcast_shapes("select", *[c.shape for c in conds], *[v.shape for v in vals])
    out = _vnp.broadcast_to(out, shape)
    for c, v in zip(reversed(conds), reversed(vals[:-1])):
        out = _vnp.where(c, v, out)
    return out


@_export
def piecewise(x, condlist, funclist: Sequence, *args: Any, **kw: Any) -> Array:
    """funclist[i](x) where condlist[i] holds (the last true condition wins, as NumPy), 0
    elsewhere, or funclist[-1](x) there when it has one entry more than condlist; an entry
    may be a constant. As jax.numpy, each function is applied to all of x and the result
    selected (so an untaken branch's nan is not seen, though it is computed); the result has
    x's dtype.

    >>> import vkml.numpy as vnp
    >>> x = vnp.asarray([-2.0, 0.5, 3.0])
    >>> piecewise(x, [x < 0, x > 1], [lambda v: -v, 9.0, lambda v: v * 2]).numpy().tolist()
    [2.0, 1.0, 9.0]
    """
    x = _vnp.asarray(x)
    if isinstance(condlist, (Array, _np.ndarray)) or _np.isscalar(condlist) or (
            isinstance(condlist, (list, tuple)) and condlist and x.ndim != 0
            and not isinstance(condlist[0], (list, tuple, Array, _np.ndarray))):
        condlist = [condlist]
    conds = [_vnp.asarray(c, dt.bool_) for c in condlist]
    n, funcs = len(conds), list(funclist)
    if len(funcs) not in (n, n + 1):
        raise ValueError(f"piecewise: with {n} condition(s), either {n} or {n + 1} functions "
                         f"are expected, got {len(funcs)}")
    if len(funcs) == n + 1:
        none = _vnp.logical_not(_vnp.any(_vnp.stack(_vnp.broadcast_arrays(*conds)), axis=0)) \
            if conds else _vnp.full(x.shape, True)
        conds.append(none)
    out = _vnp.zeros(x.shape, x.dtype)
    for c, f in zip(conds, funcs):
        v = f(x, *args, **kw) if callable(f) else f
        v = _vnp.asarray(v).astype(x.dtype) if isinstance(v, Array) or _np.ndim(v) else \
            _vnp.full((), v, x.dtype)
        out = _vnp.where(c, v, out)
    if out.shape != x.shape:
        raise ShapeError(f"piecewise: conditions and function values of shapes "
                         f"{[c.shape for c in conds]} do not match x's shape {x.shape}")
    return out


# --------------------------------------------------------------------------- r_ and c_


class _AxisConcatenator:
    """Concatenation by slicing syntax, as NumPy's r_ / c_: slices become arange (linspace
    for a complex step: 5j is 5 samples, stop included), sequences and scalars arrays of at
    least ndmin dimensions; a first string is a directive: 'r' / 'c' (a row or column
    result, 2-d arrays standing in for NumPy's matrix), 'axis', 'axis,ndmin' or
    'axis,ndmin,trans1d'."""

    def __init__(self, axis: int = 0, ndmin: int = 1, trans1d: int = -1):
        self.axis, self.ndmin, self.trans1d = axis, ndmin, trans1d

    def __len__(self) -> int:
        return 0

    def __getitem__(self, key) -> Array:
        name = type(self).__name__.strip("_").lower()
        key = key if isinstance(key, tuple) else (key,)
        axis, ndmin, trans1d = self.axis, self.ndmin, self.trans1d
        matrix = col = False
        objs: list = []
        for k, item in enumerate(key):
            if isinstance(item, str):
                if k != 0:
                    raise ValueError(f"{name}: special directives must be the first entry, "
                                     f"got {item!r} at position {k}")
                if item in ("r", "c"):
                    matrix, col = True, item == "c"
                    continue
                try:
                    vec = [int(v) for v in item.split(",")]
                except ValueError:
                    raise ValueError(f"{name}: unknown special directive {item!r}") from None
                if len(vec) == 1:
                    axis = vec[0]
                else:   # NumPy reads a fourth number and on as nothing
                    axis, ndmin = vec[:2]
                    trans1d = vec[2] if len(vec) == 3 else trans1d
                continue
            if isinstance(item, slice):
                obj = self._range(item)
                if ndmin > 1:
                    obj = _vnp.reshape(obj, (1,) * (ndmin - 1) + obj.shape)
                    if trans1d != -1:
                        obj = _vnp.swapaxes(obj, -1, trans1d)
                objs.append(obj)
            elif _scalar(item):
                objs.append(item)
            else:
                obj = _vnp.asarray(item)
                nd = obj.ndim
                if nd < ndmin:
                    obj = _vnp.reshape(obj, (1,) * (ndmin - nd) + obj.shape)
                    if trans1d != -1:
                        k2, k1 = ndmin - nd, trans1d
                        if k1 < 0:
                            k1 += k2 + 1
                        ax = list(range(ndmin))
                        obj = _vnp.transpose(obj, ax[:k1] + ax[k2:] + ax[k1:k2])
                objs.append(obj)
        if not objs:
            raise ValueError(f"{name}: need at least one array to concatenate")
        arrs, _ = _vnp._operands(name, *objs)
        arrs = [_vnp.reshape(a, (1,) * (ndmin - a.ndim) + a.shape) if a.ndim < ndmin else a
                for a in arrs]
        res = _vnp.concatenate(arrs, axis=axis)
        if matrix:
            old = res.ndim
            res = _vnp.atleast_2d(res)
            if old == 1 and col:
                res = _vnp.transpose(res)
        return res

    @staticmethod
    def _range(s: slice) -> Array:
        start = 0 if s.start is None else s.start
        step = 1 if s.step is None else s.step
        if isinstance(step, (complex, _np.complexfloating)):
            return _vnp.linspace(start, s.stop, int(_b.abs(step)))
        return _vnp.arange(start, s.stop, step)   # stop None: arange(start), as NumPy


def _scalar(v) -> bool:
    return isinstance(v, (bool, int, float, _np.generic))


class _RClass(_AxisConcatenator):
    """Row-wise concatenation by slicing syntax (NumPy's r_).

    >>> import vkml.numpy as vnp
    >>> vnp.r_[0:1:3j].numpy().tolist()
    [0.0, 0.5, 1.0]
    """

    def __init__(self):
        super().__init__(0)


class _CClass(_AxisConcatenator):
    """Column-wise concatenation by slicing syntax (NumPy's c_): 1-d inputs become columns.

    >>> import vkml.numpy as vnp
    >>> vnp.c_[vnp.asarray([1, 2]), vnp.asarray([3, 4])].numpy().tolist()
    [[1, 3], [2, 4]]
    """

    def __init__(self):
        super().__init__(-1, ndmin=2, trans1d=0)


r_ = _RClass()
c_ = _CClass()
