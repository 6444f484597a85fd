"""Array.__getitem__: ints, slices with steps, None, ..., and one integer-array index."""
from __future__ import annotations

import numpy as _np

from . import numpy as vnp
from .array import Array, bind
from .trace import dtypes as dt
from .trace.ops import OpKind


def _expand_ellipsis(a: Array, idx: tuple) -> list:
    """The index with `...` (or the implicit trailing one) replaced by full slices."""
    n_used = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_used > a.ndim:
        raise IndexError(f"too many indices for array of shape {a.shape}: {n_used} indices "
                         f"(None and ... excluded) for {a.ndim} axes")
    full = []
    for i in idx:
        if i is Ellipsis:
            full += [slice(None)] * (a.ndim - n_used)
        else:
            full.append(i)
    if not any(i is Ellipsis for i in idx):
        full += [slice(None)] * (a.ndim - n_used)
    return full


def getitem(a: Array, idx) -> Array:
    """NumPy basic indexing plus one integer array (gathered with IndexSelect).

    As in NumPy, an integer array combined with integers that are not next to it (a slice
    or None in between) puts the array's dimensions first: x[0, :, [1, 2]] has shape
    (2, x.shape[1]). An index array out of range raises IndexError when it is concrete
    and is clamped when traced (`vkml.numpy.take`).

    >>> import vkml.numpy as vnp
    >>> vnp.arange(10)[1:8:3].numpy().tolist()
    [1, 4, 7]
    """
    if not isinstance(idx, tuple):
        idx = (idx,)
    full = _expand_ellipsis(a, idx)
    starts, stops, steps = [], [], []
    out_shape = []       # per index entry: ("new",), ("drop",), ("keep",) or ("arr", shape)
    adv_pos = []         # positions in `full` of advanced entries (ints and the array)
    array_index = None   # (axis in the sliced array, index array)
    axis = 0
    for pos, i in enumerate(full):
        if i is None:
            out_shape.append(("new",))
            continue
        d = a.shape[axis]
        if isinstance(i, (Array, _np.ndarray, list)):
            # an empty list is an (empty) integer index in NumPy, though asarray says float
            arr = vnp.asarray(i, dt.int32 if isinstance(i, list) and _np.size(i) == 0 else None)
            if arr.dtype == dt.bool_:
                raise IndexError("boolean mask indexing has a data-dependent shape and is not "
                                 "supported; use vkml.numpy.where")
            if dt.is_float(arr.dtype):
                raise IndexError(f"array index must be integer, got {arr.dtype}")
            if array_index is not None:
                raise IndexError("only one integer-array index is supported (index_select along "
                                 "one axis); index one axis at a time")
            array_index = (axis, arr)
            starts.append(0); stops.append(d); steps.append(1)
            out_shape.append(("arr", arr.shape))
            adv_pos.append(pos)
        elif isinstance(i, slice):
            try:
                b, e, s = i.indices(d)
            except TypeError as err:   # a float bound, or an array that is not 0-d integer
                why = "" if str(err).startswith("slice indices") else f" ({err})"
                raise TypeError(f"index {i!r}: slice indices must be integers or None or have an "
                                f"__index__ method, as a 0-d integer array has{why}") from err
            if len(range(b, e, s)) == 0:
                b, e, s = 0, 0, 1   # any empty range; slice.indices gives start -1 on size 0
            starts.append(b); stops.append(e); steps.append(s)
            out_shape.append(("keep",))
        elif hasattr(i, "__index__") and not isinstance(i, (bool, _np.bool_)):
            k = int(i.__index__())
            if not -d <= k < d:
                raise IndexError(f"index {k} is out of bounds for axis {axis} with size {d}")
            k %= d
            starts.append(k); stops.append(k + 1); steps.append(1)
            out_shape.append(("drop",))
            adv_pos.append(pos)
        else:
            raise IndexError(f"unsupported index {i!r}: use ints, slices, None, ... or one integer array")
        axis += 1
    x = a
    if any((b, e, s) != (0, dd, 1) for b, e, s, dd in zip(starts, stops, steps, a.shape)):
        x = bind(OpKind.Slice, [a], starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))
    arr_first = False
    if array_index is not None:
        ax, arr = array_index
        x = vnp.take(x, arr, axis=ax, _what="getitem")  # replaces axis ax by arr.shape, in place
        # ints count as advanced indices beside an array; split apart, NumPy moves the
        # advanced dimensions to the front
        arr_first = adv_pos[-1] - adv_pos[0] + 1 != len(adv_pos)
    # x's axes now follow the non-None entries; map them to the output dimensions
    final, arr_axes, rest_axes = [], [], []
    ax = 0
    for kind in out_shape:
        if kind[0] == "new":
            final.append(1)
        elif kind[0] == "drop":
            ax += 1
        elif kind[0] == "arr":
            n = len(kind[1])
            arr_axes = list(range(ax, ax + n))
            if not arr_first:
                final += list(kind[1])
            ax += n
        else:
            final.append(x.shape[ax])
            rest_axes.append(ax)
            ax += 1
    if arr_first:
        drops = [i for i in range(x.ndim) if i not in arr_axes and i not in rest_axes]
        x = vnp.transpose(x, arr_axes + rest_axes + drops)
        final = list(array_index[1].shape) + final
    return vnp.reshape(x, tuple(final))
