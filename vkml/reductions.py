"""More of NumPy's reductions, composed from vkml.numpy's: count_nonzero, average, ptp and
the nan-ignoring family (nansum ... nanargmin). Exported from vkml.numpy.

A nan-ignoring reduction replaces the nans by the reduction's identity (where, so the
gradient at a nan element is zero) and counts the others where it divides. Over an
all-nan slice: nanmax/nanmin give nan, nanmean/nanvar/nanstd nan, nansum 0, nanprod 1,
as NumPy; nanargmax/nanargmin raise ValueError as NumPy on a concrete input, and give -1
for that slice on a traced one (as jax.numpy: a trace cannot raise on a value).

>>> import vkml.numpy as vnp
>>> vnp.nanmean(vnp.asarray([1.0, vnp.nan, 3.0])).item()
2.0
"""
from __future__ import annotations

import builtins as _b

from . import numpy as _vnp
from .array import Array
from .trace import dtypes as dt
from .trace.shapes import ShapeError, normalize_axes

_np_module = "vkml.numpy"


def _export(f):
    f.__module__ = _np_module
    return f


def _reduced_shape(a: Array, axes, keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(a.shape))
    return tuple(d for i, d in enumerate(a.shape) if i not in axes)


@_export
def count_nonzero(a, axis=None, *, keepdims: bool = False) -> Array:
    """The number of non-zero elements along axis (int32).

    >>> import vkml.numpy as vnp
    >>> count_nonzero(vnp.asarray([[1, 0], [2, 2]]), axis=1).numpy().tolist()
    [1, 2]
    """
    a = _vnp.asarray(a)
    return _vnp.sum(_vnp.not_equal(a, _vnp.zeros((), a.dtype)), axis=axis, keepdims=keepdims)


@_export
def ptp(a, axis=None, out=None, keepdims: bool = False) -> Array:
    """Peak to peak: max - min along axis (ValueError over no elements, TypeError for bool,
    as NumPy).

    >>> import vkml.numpy as vnp
    >>> ptp(vnp.asarray([[4, 9], [2, 1]]), axis=0).numpy().tolist()
    [2, 8]
    """
    _no_out("ptp", out)
    a = _vnp.asarray(a)
    hi, lo = _vnp.max(a, axis, keepdims), _vnp.min(a, axis, keepdims)   # their errors first
    if a.dtype == dt.bool_:
        raise dt.DTypeError("ptp: numpy boolean subtract is not supported; cast the bool array "
                            "to int32 first")
    return hi - lo


@_export
def average(a, axis=None, weights=None, returned: bool = False, *,
            keepdims: bool = False):
    """Weighted average along axis: sum(a * w) / sum(w). weights has a's shape, or (with an
    int axis) is 1-d along that axis; returned also gives sum(w) broadcast to the result.
    Weights that sum to zero raise ZeroDivisionError on a concrete input (as NumPy), and
    give nan or inf traced.

    >>> import vkml.numpy as vnp
    >>> average(vnp.asarray([1.0, 2.0, 3.0]), weights=[3.0, 1.0, 0.0]).item()
    1.25
    """
    a = _vnp.asarray(a)
    if weights is None:
        avg = _vnp.mean(a, axis, keepdims)
        if avg.size == 0:
            # NumPy divides a.size by avg.size here (for `returned`) whether returned or not
            raise ZeroDivisionError(f"average: division by zero: the result of shape "
                                    f"{avg.shape} has no elements (input {a.shape}, axis {axis})")
        if not returned:
            return avg
        axes = normalize_axes("average", axis, a.ndim)
        n = 1
        for ax in axes:
            n *= a.shape[ax]
        return avg, _vnp.full(avg.shape, float(n), avg.dtype)
    w = _vnp.asarray(weights)
    (af, wf), d = _vnp._float_operands("average", a, w)
    axes = normalize_axes("average", axis, a.ndim)
    if wf.shape != af.shape:
        if axis is None:
            raise TypeError(f"average: axis must be specified when shapes of a {a.shape} and "
                            f"weights {w.shape} differ")
        want = tuple(a.shape[ax] for ax in axes)
        if wf.shape != want:
            raise ShapeError(f"average: shape of weights {w.shape} must be consistent with shape "
                             f"of a {a.shape} along axis {axis} (expected {want})")
        shape = tuple(a.shape[i] if i in axes else 1 for i in range(a.ndim))
        wf = _vnp.broadcast_to(_vnp.reshape(wf, shape), af.shape)
    scl = _vnp.sum(wf, axes, keepdims)
    if scl._trace is None and scl.size and bool(_vnp.any(_vnp.equal(scl, 0.0))):
        raise ZeroDivisionError("average: weights sum to zero, can't be normalized")
    avg = _vnp.sum(af * wf, axes, keepdims) / scl
    return (avg, scl) if returned else avg


# --------------------------------------------------------------------------- ignoring nan


def _no_out(name: str, out) -> None:
    if out is not None:
        raise NotImplementedError(f"{name}: the 'out' argument is not supported (vkml arrays "
                                  f"are immutable); use the returned array")


def _nan_filled(name: str, a, fill, where=None):
    """(a with nan, and what where= leaves out, replaced by fill; the mask of the elements
    kept, or None where that is every element)."""
    a = _vnp.asarray(a)
    where = _vnp._mask_arg(where)
    keep = None if where is None else _vnp._where_mask(name, a, where)
    if dt.is_float(a.dtype):
        ok = _vnp.logical_not(_vnp.isnan(a))
        keep = ok if keep is None else _vnp.logical_and(keep, ok)
    if keep is None:
        return a, None
    return _vnp.where(keep, a, _vnp.full((), fill, a.dtype)), keep


@_export
def nansum(a, axis=None, dtype=None, out=None, keepdims: bool = False, initial=None,
           where=None) -> Array:
    """Sum treating nan as 0 (an all-nan slice sums to 0, or to `initial`).

    >>> import vkml.numpy as vnp
    >>> nansum(vnp.asarray([1.0, vnp.nan, 2.0])).item()
    3.0
    """
    _no_out("nansum", out)
    a = _vnp.asarray(a)
    filled, _ = _nan_filled("nansum", a if dtype is None else a.astype(dtype), 0, where)
    return _vnp.sum(filled, axis, keepdims, dtype, initial=initial)


@_export
def nanprod(a, axis=None, dtype=None, out=None, keepdims: bool = False, initial=None,
            where=None) -> Array:
    """Product treating nan as 1.

    >>> import vkml.numpy as vnp
    >>> nanprod(vnp.asarray([2.0, vnp.nan, 3.0])).item()
    6.0
    """
    _no_out("nanprod", out)
    a = _vnp.asarray(a)
    if dtype is not None:
        a = a.astype(dtype)
    elif a.dtype == dt.bool_:
        a = a.astype(dt.int32)
    filled, _ = _nan_filled("nanprod", a, 1, where)
    return _vnp.prod(filled, axis, keepdims, initial=initial)


def _nan_extremum(name: str, fn, fill: float, a, axis, keepdims, initial, where) -> Array:
    a = _vnp.asarray(a)
    if not dt.is_float(a.dtype):
        return fn(a, axis, keepdims, initial=initial, where=where)
    what = "fmax" if fill < 0 else "fmin"
    axes = normalize_axes(name, axis, a.ndim, scalar_0d=True)
    if initial is None:
        if _vnp._mask_arg(where) is not None:
            raise ValueError(f"{name}: reduction operation '{what}' does not have an identity, "
                             f"so to use a where mask one has to specify 'initial'")
        _vnp._need_nonempty(name, what, a, axes)
    filled, keep = _nan_filled(name, a, fill, where)
    r = fn(filled, axis, keepdims, initial=initial)
    if initial is not None:
        return r   # NumPy's fmax: initial stands where every element was nan
    seen = _vnp.any(keep, axis, keepdims)
    return _vnp.where(seen, r, _vnp.full((), _vnp.nan, a.dtype))


@_export
def nanmax(a, axis=None, out=None, keepdims: bool = False, initial=None, where=None) -> Array:
    """Maximum ignoring nan: nan for an all-nan slice (initial there, when given); ValueError
    over no elements without initial, and for where= without initial, as NumPy.

    >>> import vkml.numpy as vnp
    >>> nanmax(vnp.asarray([1.0, vnp.nan, 3.0])).item()
    3.0
    """
    _no_out("nanmax", out)
    return _nan_extremum("nanmax", _vnp.max, -_vnp.inf, a, axis, keepdims, initial, where)


@_export
def nanmin(a, axis=None, out=None, keepdims: bool = False, initial=None, where=None) -> Array:
    """Minimum ignoring nan (all-nan slices, initial and where as nanmax).

    >>> import vkml.numpy as vnp
    >>> nanmin(vnp.asarray([1.0, vnp.nan, 3.0])).item()
    1.0
    """
    _no_out("nanmin", out)
    return _nan_extremum("nanmin", _vnp.min, _vnp.inf, a, axis, keepdims, initial, where)


def _float(a) -> Array:
    a = _vnp.asarray(a)
    return a if dt.is_float(a.dtype) else a.astype(dt.float32)


def _nan_axes(name: str, a, axis, dtype):
    """(a as float, the axes): NumPy's nanmean and nanvar sum a float input (so axis 0 of a
    0-d one is no axis, as in sum) but hand an integer one to mean and var (AxisError)."""
    a = _vnp.asarray(a)
    floats = dt.is_float(a.dtype)
    a = _float(a if dtype is None else a.astype(dtype))
    return a, normalize_axes(name, axis, a.ndim, scalar_0d=floats)


def _kept(name: str, a: Array, where) -> tuple:
    """(a with nan and the left-out elements as 0, the kept elements as 1.0 / 0.0)."""
    filled, keep = _nan_filled(name, a, 0, where)
    ones = _vnp.ones(a.shape, a.dtype) if keep is None else keep.astype(a.dtype)
    return filled, keep, ones


@_export
def nanmean(a, axis=None, dtype=None, out=None, keepdims: bool = False, *,
            where=None) -> Array:
    """Mean of the elements that are not nan (and where= picks): nan for an all-nan or
    empty slice.

    >>> import vkml.numpy as vnp
    >>> nanmean(vnp.asarray([[1.0, vnp.nan], [3.0, 5.0]]), axis=1).numpy().tolist()
    [1.0, 4.0]
    """
    _no_out("nanmean", out)
    a, axes = _nan_axes("nanmean", a, axis, dtype)
    filled, _, ones = _kept("nanmean", a, where)
    return _vnp.sum(filled, axes, keepdims) / _vnp.sum(ones, axes, keepdims)


@_export
def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims: bool = False, *,
           where=None) -> Array:
    """Variance of the elements that are not nan (and where= picks), dividing by
    (count - ddof); nan where that is <= 0 (NumPy's nanvar; var itself gives inf there).

    >>> import vkml.numpy as vnp
    >>> nanvar(vnp.asarray([1.0, vnp.nan, 3.0])).item()
    1.0
    """
    _no_out("nanvar", out)
    a, axes = _nan_axes("nanvar", a, axis, dtype)
    filled, keep, ones = _kept("nanvar", a, where)
    m = _vnp.sum(filled, axes, True) / _vnp.sum(ones, axes, True)
    dev = (a - m) if keep is None else _vnp.where(keep, a - m, _vnp.zeros((), a.dtype))
    s = _vnp.sum(dev * dev, axes, keepdims)
    dof = _vnp.sum(ones, axes, keepdims) - float(ddof)
    ok = _vnp.greater(dof, 0.0)
    # the divisor where dof <= 0 is 1, not dof: the untaken branch (and its gradient) stays finite
    return _vnp.where(ok, s / _vnp.where(ok, dof, _vnp.ones((), a.dtype)),
                      _vnp.full((), _vnp.nan, a.dtype))


@_export
def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims: bool = False, *,
           where=None) -> Array:
    """Standard deviation of the elements that are not nan: sqrt of nanvar.

    >>> import vkml.numpy as vnp
    >>> nanstd(vnp.asarray([1.0, vnp.nan, 3.0])).item()
    1.0
    """
    _no_out("nanstd", out)
    return _vnp.sqrt(nanvar(a, axis, dtype, None, ddof, keepdims, where=where))


def _nan_arg(name: str, fn, fill: float, a, axis, keepdims) -> Array:
    a = _vnp.asarray(a)
    if not dt.is_float(a.dtype):
        return fn(a, axis, keepdims=keepdims)
    if isinstance(axis, tuple) and a.size:
        # NumPy's order: the all-nan test (skipped for no elements) takes the tuple
        # (AxisError on a 0-d array), then argmax refuses it (TypeError)
        normalize_axes(name, axis, a.ndim)
    nan = _vnp.isnan(a)
    r = fn(_vnp.where(nan, _vnp.full((), fill, a.dtype), a), axis, keepdims=keepdims)
    flat = axis is None or a.ndim == 0
    all_nan = _vnp.all(_vnp.reshape(nan, (-1,)) if flat else nan, None if flat else axis,
                       keepdims=keepdims and not flat)
    if flat and keepdims:
        all_nan = _vnp.reshape(all_nan, r.shape)
    if a._trace is None:
        if all_nan.size and bool(_vnp.any(all_nan)):
            raise ValueError(f"{name}: All-NaN slice encountered (input of shape {a.shape}, "
                             f"axis {axis})")
        return r
    return _vnp.where(all_nan, _vnp.full((), -1, r.dtype), r)


@_export
def nanargmax(a, axis=None, out=None, *, keepdims: bool = False) -> Array:
    """Index of the first maximum ignoring nan. An all-nan slice raises ValueError (NumPy)
    on a concrete input; traced, its index is -1 (jax.numpy).

    >>> import vkml.numpy as vnp
    >>> nanargmax(vnp.asarray([1.0, vnp.nan, 3.0])).item()
    2
    """
    _no_out("nanargmax", out)
    return _nan_arg("nanargmax", _vnp.argmax, -_vnp.inf, a, axis, keepdims)


@_export
def nanargmin(a, axis=None, out=None, *, keepdims: bool = False) -> Array:
    """Index of the first minimum ignoring nan (all-nan slices: see nanargmax).

    >>> import vkml.numpy as vnp
    >>> nanargmin(vnp.asarray([vnp.nan, 1.0, 3.0])).item()
    1
    """
    _no_out("nanargmin", out)
    return _nan_arg("nanargmin", _vnp.argmin, _vnp.inf, a, axis, keepdims)
