"""Sorting, selection and running reductions of vkml.numpy (exported from there).

Everything sorts through one operator, ArgSort: the stable permutation along an axis
(NaN last, -0.0 equal to 0.0, as NumPy). Values are a gather through it (IndexSelect),
so their gradient is IndexSelect's rule; positions (argsort, searchsorted, unique's
indices) carry none. The running products and extremes are associative scans over
existing operators (`_assoc_scan`): log2(n) levels of strided slices and one
elementwise combine each, so their gradients are those of Mul, Maximum, ... and exact
where an input is zero, as JAX's cumprod.

>>> import vkml.numpy as vnp
>>> vnp.sort(vnp.asarray([3.0, vnp.nan, -1.0])).numpy().tolist()
[-1.0, 3.0, nan]
"""
from __future__ import annotations

import math
from typing import Any

import numpy as _np

from . import numpy as vnp
from .array import Array, ConcretizationError, bind
from .trace import dtypes as dt
from .trace.ops import OpKind
from .trace.shapes import normalize_axes, normalize_axis, size_of

__all__ = ["sort", "argsort", "partition", "argpartition", "median", "quantile", "percentile",
           "searchsorted", "unique", "cumprod", "cummax", "cummin", "logcumsumexp",
           "nancumsum", "nancumprod"]


# --------------------------------------------------------------------------- helpers

def _flat_or_axis(name: str, a: Array, axis) -> tuple[Array, int]:
    """(a, axis) with axis None meaning the flattened array, as NumPy's sorts."""
    if axis is None:
        return vnp.reshape(a, (-1,)), 0
    return a, normalize_axis(name, axis, a.ndim)


def _argsort(a: Array, axis: int, descending: bool = False) -> Array:
    return bind(OpKind.ArgSort, [a], axis=axis, descending=bool(descending))


def take_along(a: Array, idx: Array, axis: int) -> Array:
    """a gathered along axis at idx (int32 in [0, a.shape[axis]), the shape of a but along
    axis): one IndexSelect of the flattened array at row offset + idx.

    >>> take_along(vnp.asarray([[1, 2], [3, 4]]), vnp.asarray([[1], [0]], dtype="int32"), 1).numpy().tolist()
    [[2], [3]]
    """
    A, n, B = size_of(a.shape[:axis]), a.shape[axis], size_of(a.shape[axis + 1:])
    k = idx.shape[axis]
    out_shape = a.shape[:axis] + (k,) + a.shape[axis + 1:]
    if size_of(out_shape) == 0:
        return vnp.zeros(out_shape, a.dtype)
    i3 = vnp.reshape(idx, (A, k, B))
    rows = vnp.reshape(vnp.arange(A, dtype=dt.int32) * (n * B), (A, 1, 1))
    cols = vnp.reshape(vnp.arange(B, dtype=dt.int32), (1, 1, B))
    flat = vnp.reshape(i3 * B + rows + cols, (-1,))
    got = bind(OpKind.IndexSelect, [vnp.reshape(a, (-1,)), flat], axis=0)
    return vnp.reshape(got, out_shape)


def _no_order(name: str, order) -> None:
    if order is not None:
        raise NotImplementedError(f"{name}: order= (structured arrays) is not supported; vkml "
                                  f"arrays have no fields")


# --------------------------------------------------------------------------- sorts

def sort(a, axis: int | None = -1, *, kind=None, order=None, stable: bool | None = True,
         descending: bool = False) -> Array:
    """Sorted copy along axis (flattened when None): stable, NaN last, as NumPy; with
    descending the reverse order with ties kept, as jax.numpy. kind is ignored (every
    sort is stable). Differentiable: the cotangent is scattered back through the
    permutation.

    >>> sort(asarray([[3, 1, 2], [0, 5, 4]]), descending=True).numpy().tolist()
    [[3, 2, 1], [5, 4, 0]]
    """
    _no_order("sort", order)
    a, ax = _flat_or_axis("sort", vnp.asarray(a), axis)
    if a.size == 0:
        return a
    return take_along(a, _argsort(a, ax, descending), ax)


def argsort(a, axis: int | None = -1, *, kind=None, order=None, stable: bool | None = True,
            descending: bool = False) -> Array:
    """Stable sorting positions along axis (flattened when None) as int32: equal values
    keep their order, NaN last (descending: as jax.numpy, the reversed order with ties
    kept). Not differentiable.

    >>> argsort(asarray([2.0, 1.0, 2.0, 0.0])).numpy().tolist()
    [3, 1, 0, 2]
    """
    _no_order("argsort", order)
    a, ax = _flat_or_axis("argsort", vnp.asarray(a), axis)
    if a.size == 0:
        return vnp.zeros(a.shape, dt.int32)
    return _argsort(a, ax, descending)


def _check_kth(name: str, kth, n: int) -> None:
    for k in _np.atleast_1d(_np.asarray(kth)).ravel():
        if not _np.issubdtype(_np.asarray(k).dtype, _np.integer):
            raise TypeError(f"{name}: kth must be an integer or a sequence of integers, got {kth!r}")
        if not -n <= int(k) < n:
            raise ValueError(f"{name}: kth(={int(k)}) out of bounds ({n})")


def partition(a, kth, axis: int | None = -1, kind: str = "introselect", order=None) -> Array:
    """An array whose element kth (each of them, for a sequence) is where a sort puts it,
    smaller or equal ones before and the rest after, as NumPy's. vkml returns the fully
    sorted array, which is one such partition (NumPy leaves the order inside each part
    unspecified).

    >>> partition(asarray([5, 1, 4, 2]), 1).numpy()[1].item()
    2
    """
    _no_order("partition", order)
    a, ax = _flat_or_axis("partition", vnp.asarray(a), axis)
    _check_kth("partition", kth, a.shape[ax])
    return sort(a, ax)


def argpartition(a, kth, axis: int | None = -1, kind: str = "introselect", order=None) -> Array:
    """Positions that partition a around kth (see `partition`): here the stable sorting
    positions, one valid answer.

    >>> argpartition(asarray([5, 1, 4, 2]), 1).numpy()[1].item()
    3
    """
    _no_order("argpartition", order)
    a, ax = _flat_or_axis("argpartition", vnp.asarray(a), axis)
    _check_kth("argpartition", kth, a.shape[ax])
    return argsort(a, ax)


def top_k(x, k: int) -> tuple[Array, Array]:
    """The k largest entries along the last axis, largest first, and their int32
    positions (ties: the lower position first; NaN counts as the largest), as
    jax.lax.top_k. Differentiable in the values.

    >>> v, i = top_k(vnp.asarray([1.0, 4.0, 2.0, 4.0]), 2)
    >>> v.numpy().tolist(), i.numpy().tolist()
    ([4.0, 4.0], [1, 3])
    """
    x = vnp.asarray(x)
    if x.ndim == 0:
        raise ValueError("top_k: operand must have at least one dimension, got a 0-d array")
    n = x.shape[-1]
    if isinstance(k, bool) or not isinstance(k, (int, _np.integer)) or not 0 <= int(k) <= n:
        raise ValueError(f"top_k: k must be an int in [0, {n}] (the last axis of shape "
                         f"{x.shape}), got {k!r}")
    k, ax = int(k), x.ndim - 1
    if k == 0 or x.size == 0:
        shape = x.shape[:-1] + (k,)
        return vnp.zeros(shape, x.dtype), vnp.zeros(shape, dt.int32)
    if k <= TOP_K_SELECT and n >= 16 * TOP_K_SELECT * k:
        idx = _top_k_chunked(x, k)
    elif k <= TOP_K_SELECT:
        idx = _top_k_select(x, k)
    else:
        idx = _argsort(x, ax, True)
        if k < n:
            idx = idx[..., :k]
    return take_along(x, idx, ax), idx


# k up to which top_k selects k times (a max, a compare and an argmax over the row each)
# instead of sorting every row: 3k passes over the data against the sort's log^2 n
TOP_K_SELECT = 16


def _top_k_chunked(x: Array, k: int) -> Array:
    """_top_k_select on long rows, through chunks of about sqrt(n): the k largest entries lie
    in the k chunks with the largest maxima (ties: the lower chunk first), since any entry
    outside them ranks after those k maxima. So: one max per chunk, the top k chunks of
    those, sorted by position, and the top k of their k * c entries, which are in row order
    (ties still come out lower position first). The row is padded at its end with the
    dtype's lowest value, which ranks after every real entry."""
    if x.dtype == dt.bool_:
        x = x.astype(dt.int32)
    n = x.shape[-1]
    c = 1 << max(4, round(math.log2(math.sqrt(n))))
    nc = -(-n // c)
    low = -math.inf if dt.is_float(x.dtype) else int(_np.iinfo(_np.int32).min)
    lead = x.shape[:-1]
    if nc * c != n:
        x = vnp.concatenate([x, vnp.full(lead + (nc * c - n,), low, x.dtype)], axis=-1)
    xr = vnp.reshape(x, lead + (nc, c))
    best = vnp.sort(_top_k_select(vnp.max(xr, axis=-1), k), axis=-1)       # (..., k) chunks
    ax = len(lead)
    cand = take_along(xr, vnp.broadcast_to(best[..., None], lead + (k, c)), ax)
    local = _top_k_select(vnp.reshape(cand, lead + (k * c,)), k)             # (..., k)
    chunk = take_along(best, local // c, ax)
    return chunk * c + local % c


def _top_k_select(x: Array, k: int) -> Array:
    """The positions of the k largest entries of each row (last axis), largest first:
    k rounds, each taking the first position not yet taken that holds the largest value
    not yet taken (NaN as the largest), so ties come out lower position first as in the
    sort. The mask keeps taken positions out even where the values are the dtype's
    smallest (-inf), which a sentinel value could not."""
    if x.dtype == dt.bool_:
        x = x.astype(dt.int32)
    low = -math.inf if dt.is_float(x.dtype) else int(_np.iinfo(_np.int32).min)
    pos = vnp.arange(x.shape[-1], dtype=dt.int32)
    taken = vnp.zeros(x.shape, dt.bool_)
    out = []
    for _ in range(k):
        rest = vnp.where(taken, low, x)
        m = vnp.max(rest, axis=-1, keepdims=True)
        hit = vnp.logical_and(vnp.logical_not(taken), vnp.equal(x, m))
        if dt.is_float(x.dtype):
            hit = vnp.logical_or(hit, vnp.logical_and(vnp.logical_not(taken),
                                                      vnp.logical_and(vnp.isnan(x), vnp.isnan(m))))
        i = vnp.argmax(hit, axis=-1)
        out.append(i)
        taken = vnp.logical_or(taken, vnp.equal(pos, i[..., None]))
    return vnp.stack(out, axis=-1)


# --------------------------------------------------------------------------- quantiles

# NumPy's continuous methods: virtual index n * q + alpha + q * (1 - alpha - beta) - 1
_ALPHA_BETA = {"interpolated_inverted_cdf": (0.0, 1.0), "hazen": (0.5, 0.5),
               "weibull": (0.0, 0.0), "median_unbiased": (1 / 3, 1 / 3),
               "normal_unbiased": (3 / 8, 3 / 8)}
_METHODS = ("linear", "lower", "higher", "nearest", "midpoint") + tuple(_ALPHA_BETA)


def _lerp(a: Array, b: Array, t: Array) -> Array:
    """NumPy's _lerp: from a below t = 0.5, from b above, so that t = 1 gives b exactly."""
    d = b - a
    return vnp.where(t >= 0.5, b - d * (1.0 - t), a + d * t)


def _quantile(name: str, a, q, axis, method: str, keepdims: bool, scale: float) -> Array:
    if method not in _METHODS:
        raise ValueError(f"{name}: method {method!r} is not supported; valid: {', '.join(_METHODS)}")
    a = vnp.asarray(a)
    if not dt.is_float(a.dtype):
        a = a.astype(dt.float32)
    # q in a's dtype from the start: a Python 0.3 made float32 first would be off in float64
    qa = q if isinstance(q, Array) else vnp.asarray(_np.asarray(q, _np.float64), a.dtype)
    if not qa.is_traced:
        qv = _np.asarray(qa.numpy(), _np.float64)
        if qv.size and not (_np.all(qv >= 0) and _np.all(qv <= scale)):
            raise ValueError(f"{name}: q must be in the range [0, {scale:g}], got {q!r}")
    qa = qa.astype(a.dtype) * (1.0 / scale) if scale != 1 else qa.astype(a.dtype)
    axes = normalize_axes(name, axis, a.ndim)
    rest = [i for i in range(a.ndim) if i not in axes]
    x = vnp.transpose(a, rest + list(axes))
    keep = tuple(a.shape[i] for i in rest)
    n = size_of([a.shape[i] for i in axes])
    if n == 0:
        raise IndexError(f"{name}: cannot take a quantile of an empty reduction (shape "
                         f"{a.shape}, axis {axis!r})")
    x = vnp.reshape(x, keep + (n,))
    s = sort(x, -1)
    qf = vnp.reshape(qa, (-1,))
    if method in _ALPHA_BETA:
        al, be = _ALPHA_BETA[method]
        vi = qf * n + (al + qf * (1.0 - al - be)) - 1.0
    else:
        vi = qf * (n - 1)
    vi = vnp.clip(vi, 0.0, float(n - 1))
    lo_f = vnp.floor(vi)
    if method == "nearest":
        lo_f = vnp.rint(vi)          # NumPy's around: halves to even
    elif method == "higher":
        lo_f = vnp.ceil(vi)
    lo = lo_f.astype(dt.int32)
    hi = vnp.minimum(lo + 1, n - 1)
    v_lo = vnp.take(s, lo, axis=-1)
    if method in ("lower", "higher", "nearest"):
        out = v_lo
    else:
        t = vi - lo_f
        if method == "midpoint":
            t = vnp.where(vnp.equal(t, 0.0), 0.0, 0.5)
        out = _lerp(v_lo, vnp.take(s, hi, axis=-1), t)
    # NaN sorts last: a row holding one has it in its last place, and NumPy answers nan
    out = vnp.where(vnp.isnan(s[..., -1:]), vnp.nan, out)
    out = vnp.moveaxis(out, -1, 0)
    out = vnp.reshape(out, qa.shape + keep)
    if keepdims:
        full = [1 if i in axes else a.shape[i] for i in range(a.ndim)]
        out = vnp.reshape(out, qa.shape + tuple(full))
    return out


def quantile(a, q, axis=None, out=None, overwrite_input: bool = False, method: str = "linear",
             keepdims: bool = False, *, weights=None, interpolation=None) -> Array:
    """The q-th quantiles (q in [0, 1], any shape: result dims first) over axis (None:
    all), with NumPy's methods linear, lower, higher, nearest, midpoint, hazen, weibull,
    median_unbiased, normal_unbiased and interpolated_inverted_cdf; nan where a
    reduced row holds nan. Differentiable in a and q.

    >>> quantile(asarray([1.0, 2.0, 3.0, 4.0]), 0.25).item()
    1.75
    """
    if out is not None or weights is not None:
        raise NotImplementedError("quantile: out= and weights= are not supported")
    return _quantile("quantile", a, q, axis, interpolation or method, keepdims, 1.0)


def percentile(a, q, axis=None, out=None, overwrite_input: bool = False, method: str = "linear",
               keepdims: bool = False, *, weights=None, interpolation=None) -> Array:
    """quantile with q in percent ([0, 100]).

    >>> percentile(asarray([1.0, 2.0, 3.0, 4.0]), 50).item()
    2.5
    """
    if out is not None or weights is not None:
        raise NotImplementedError("percentile: out= and weights= are not supported")
    return _quantile("percentile", a, q, axis, interpolation or method, keepdims, 100.0)


def median(a, axis=None, out=None, overwrite_input: bool = False, keepdims: bool = False) -> Array:
    """The median over axis (None: all): the mean of the two middle values of an even
    count; nan for a row with nan, and for an empty reduction (as NumPy, which warns).

    >>> median(asarray([[3.0, 1.0], [2.0, 5.0]]), axis=1).numpy().tolist()
    [2.0, 3.5]
    """
    if out is not None:
        raise NotImplementedError("median: out= is not supported")
    a = vnp.asarray(a)
    axes = normalize_axes("median", axis, a.ndim)
    if size_of([a.shape[i] for i in axes]) == 0:
        shape = tuple(1 if i in axes else d for i, d in enumerate(a.shape)) if keepdims else \
            tuple(d for i, d in enumerate(a.shape) if i not in axes)
        return vnp.full(shape, vnp.nan, a.dtype if dt.is_float(a.dtype) else dt.float32)
    return _quantile("median", a, 0.5, axis, "linear", keepdims, 1.0)


# --------------------------------------------------------------------------- searching

def searchsorted(a, v, side: str = "left", sorter=None, *, method: str | None = None) -> Array:
    """Insertion positions of v into the sorted 1-d a (int32, shape of v): the first
    place keeping order ('left') or the last ('right'), with NaN ordered last, as NumPy.
    sorter: the positions that sort a. One stable sort of a and v together places them
    all; not differentiable.

    >>> searchsorted(asarray([1.0, 2.0, 2.0, 3.0]), asarray([2.0, 5.0]), side="right").numpy().tolist()
    [3, 4]
    """
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    (a, v), _ = vnp._operands("searchsorted", a, v)
    if a.ndim != 1:
        raise ValueError(f"searchsorted: a must be 1-d, got shape {a.shape}")
    if sorter is not None:
        a = vnp.take(a, sorter)
    n, m = a.shape[0], v.size
    if m == 0 or n == 0:
        return vnp.zeros(v.shape, dt.int32)
    vf = vnp.reshape(v, (-1,))
    # the stable order puts each v before the a's equal to it when it comes first
    # (left), after them when it comes second (right); its place minus its rank among the
    # v's is the count of a's before it
    both = vnp.concatenate([vf, a] if side == "left" else [a, vf])
    place = _argsort(_argsort(both, 0), 0)
    place = place[:m] if side == "left" else place[n:]
    rank = _argsort(_argsort(vf, 0), 0)
    return vnp.reshape(place - rank, v.shape)


def unique(ar, return_index: bool = False, return_inverse: bool = False,
           return_counts: bool = False, axis=None, *, equal_nan: bool = True,
           size: int | None = None, fill_value=None, sorted: bool = True):
    """The sorted distinct values of the flattened ar (NaNs as one value when equal_nan),
    with the first positions, the inverse (ar's shape) and the counts on request, as
    NumPy. The count of values is data-dependent: eagerly it is read back from the
    device; under jit, grad or vmap pass size= as in jax.numpy: the result then has
    `size` entries, the missing ones fill_value (default: the smallest value), their
    index 0 and count 0.

    >>> unique(asarray([3, 1, 3, 2]), return_counts=True)[1].numpy().tolist()
    [1, 1, 2]
    """
    if axis is not None:
        raise NotImplementedError("unique: axis= is not supported; vkml finds unique values "
                                  "of the flattened array (axis=None)")
    x = vnp.reshape(vnp.asarray(ar), (-1,))
    n = x.shape[0]
    if size is not None and (isinstance(size, bool) or not isinstance(size, (int, _np.integer))
                             or size < 0):
        raise ValueError(f"unique: size must be a non-negative int, got {size!r}")
    perm = _argsort(x, 0) if n else vnp.zeros((0,), dt.int32)
    s = take_along(x, perm, 0) if n else x
    if n:
        differs = vnp.not_equal(s[1:], s[:-1])
        if dt.is_float(x.dtype) and equal_nan:
            differs = vnp.logical_and(differs, vnp.logical_not(
                vnp.logical_and(vnp.isnan(s[1:]), vnp.isnan(s[:-1]))))
        first = vnp.concatenate([vnp.full((1,), True), differs])
    else:
        first = vnp.zeros((0,), dt.bool_)
    count = vnp.sum(first.astype(dt.int32))
    if size is None:
        if first.is_traced:
            raise ConcretizationError(
                "unique: the number of unique values depends on the data, so it is unknown "
                "under jit, grad or vmap; pass size= (and fill_value=) for a fixed-size "
                "result, as jax.numpy.unique")
        size = int(count.numpy())
    size = int(size)
    # positions of the first of every run, in order: a stable sort puts the True flags first
    starts = _argsort(vnp.logical_not(first), 0)[:size] if n else vnp.zeros((0,), dt.int32)
    if size > n:
        starts = vnp.concatenate([starts, vnp.zeros((size - n,), dt.int32)])
    valid = vnp.less(vnp.arange(size, dtype=dt.int32), count)
    starts = vnp.where(valid, starts, 0)
    if n:
        fill = s[0] if fill_value is None else vnp.asarray(fill_value).astype(x.dtype)
        values = vnp.where(valid, vnp.take(s, starts), fill)
    else:
        values = vnp.full((size,), 0 if fill_value is None else fill_value, x.dtype)
    out = [values]
    if return_index:
        out.append(vnp.where(valid, vnp.take(perm, starts), 0) if n else vnp.zeros((size,), dt.int32))
    if return_inverse:
        if n:
            group = vnp.cumsum(first.astype(dt.int32)) - 1
            inv = take_along(group, _argsort(perm, 0), 0)
        else:
            inv = vnp.zeros((0,), dt.int32)
        out.append(vnp.reshape(inv, vnp.asarray(ar).shape))
    if return_counts:
        if n:
            nxt = vnp.concatenate([starts[1:], vnp.zeros((1,), dt.int32)]) if size else starts
            last = vnp.less(vnp.arange(size, dtype=dt.int32) + 1, count)
            out.append(vnp.where(valid, vnp.where(last, nxt, n) - starts, 0))
        else:
            out.append(vnp.zeros((size,), dt.int32))
    return out[0] if len(out) == 1 else tuple(out)


# --------------------------------------------------------------------------- running ops

def _slice(x: Array, axis: int, start, stop, step: int = 1) -> Array:
    idx = [slice(None)] * x.ndim
    idx[axis] = slice(start, stop, step)
    return x[tuple(idx)]


def _assoc_scan(fn, x: Array, axis: int) -> Array:
    """Inclusive scan of the associative fn(earlier, later) along axis: combine neighbours
    pairwise, scan the half, then fill in the even places (Blelloch's up and down sweep,
    O(n) work in O(log n) levels of existing operators)."""
    n = x.shape[axis]
    if n < 2:
        return x
    even, odd = _slice(x, axis, 0, None, 2), _slice(x, axis, 1, None, 2)
    h = odd.shape[axis]
    r = _assoc_scan(fn, fn(_slice(even, axis, 0, h), odd), axis)      # places 1, 3, 5, ...
    rest = fn(_slice(r, axis, 0, even.shape[axis] - 1), _slice(even, axis, 1, None))
    ev = vnp.concatenate([_slice(even, axis, 0, 1), rest], axis=axis)  # places 0, 2, 4, ...
    if ev.shape[axis] > h:                                             # odd n: one spare
        r = vnp.concatenate([r, _slice(r, axis, h - 1, h)], axis=axis)
    both = vnp.stack([ev, r], axis=axis + 1)
    shape = x.shape[:axis] + (2 * ev.shape[axis],) + x.shape[axis + 1:]
    return _slice(vnp.reshape(both, shape), axis, 0, n)


def _running(name: str, fn, a, axis, kind: str) -> Array:
    """A running fn along axis (flattened when None; a 0-d input gives shape (1,))."""
    a = vnp.asarray(a)
    if kind == "float" and not dt.is_float(a.dtype):
        a = a.astype(dt.float32)
    elif kind == "num" and a.dtype == dt.bool_:
        a = a.astype(dt.int32)
    if axis is None or a.ndim == 0:
        ax = 0 if axis is None else normalize_axis(name, axis, 1)
        a = vnp.reshape(a, (-1,))
    else:
        ax = normalize_axis(name, axis, a.ndim)
    return _assoc_scan(fn, a, ax)


def cumprod(a, axis: int | None = None, dtype=None) -> Array:
    """Running product along axis (flattened when None); bool counts as int32. Its
    gradient is exact where an input is 0, as JAX's.

    >>> cumprod(asarray([1, 2, 3, 4])).numpy().tolist()
    [1, 2, 6, 24]
    """
    a = vnp.asarray(a) if dtype is None else vnp.asarray(a).astype(dtype)
    return _running("cumprod", vnp.multiply, a, axis, "num")


def cummax(a, axis: int | None = None) -> Array:
    """Running maximum along axis (flattened when None), NumPy's maximum.accumulate (nan
    propagates); the gradient goes to the position of the running maximum, as
    jax.lax.cummax.

    >>> cummax(asarray([1, 3, 2, 5])).numpy().tolist()
    [1, 3, 3, 5]
    """
    return _running("cummax", vnp.maximum, a, axis, "any")


def cummin(a, axis: int | None = None) -> Array:
    """Running minimum along axis (flattened when None), NumPy's minimum.accumulate.

    >>> cummin(asarray([3, 1, 2, 0])).numpy().tolist()
    [3, 1, 1, 0]
    """
    return _running("cummin", vnp.minimum, a, axis, "any")


def logcumsumexp(a, axis: int | None = None) -> Array:
    """Running log(sum(exp(a))) along axis (flattened when None) without overflow, as
    jax.lax.cumlogsumexp (NumPy: logaddexp.accumulate).

    >>> logcumsumexp(asarray([0.0, 0.0, 1000.0], "float64")).numpy().round(4).tolist()
    [0.0, 0.6931, 1000.0]
    """
    return _running("logcumsumexp", vnp.logaddexp, a, axis, "float")


def nancumsum(a, axis: int | None = None) -> Array:
    """cumsum with nan counted as zero.

    >>> nancumsum(asarray([1.0, nan, 2.0])).numpy().tolist()
    [1.0, 1.0, 3.0]
    """
    a = vnp.asarray(a)
    if dt.is_float(a.dtype):
        a = vnp.where(vnp.isnan(a), 0.0, a)
    return vnp.cumsum(a, axis)


def nancumprod(a, axis: int | None = None) -> Array:
    """cumprod with nan counted as one.

    >>> nancumprod(asarray([2.0, nan, 3.0])).numpy().tolist()
    [2.0, 2.0, 6.0]
    """
    a = vnp.asarray(a)
    if dt.is_float(a.dtype):
        a = vnp.where(vnp.isnan(a), 1.0, a)
    return cumprod(a, axis)


for _f in [sort, argsort, partition, argpartition, median, quantile, percentile, searchsorted,
           unique, cumprod, cummax, cummin, logcumsumexp, nancumsum, nancumprod]:
    _f.__module__ = "vkml.numpy"
