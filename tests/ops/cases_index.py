"""Cases for the index family: IndexSelect and ScatterAdd against NumPy.

ScatterAdd is run on both of its paths: short index arrays (every output element scans
them) and long ones (> SORT_MIN, sorted in scratch first). The long cases use values on
a 1/8 grid so float32 sums are exact and any misrouted contribution shows.
"""
import numpy as np

from vkml.array import bind
from vkml.trace.ops import OpKind
from vkml.vulkan.lower.index import SORT_MIN

from .cases import Case, rand, tol

IS, SA, CI, SR = OpKind.IndexSelect, OpKind.ScatterAdd, OpKind.CheckIndex, OpKind.ScatterReduce


def norm_index(idx: np.ndarray, n: int) -> np.ndarray:
    """The kernels' index rule: negative wraps once, then clamp to [0, n-1]."""
    idx = np.asarray(idx, dtype=np.int64)
    return np.clip(np.where(idx < 0, idx + n, idx), 0, max(n - 1, 0))


def index_select_ref(x: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    return np.take(x, norm_index(idx, x.shape[axis]), axis=axis)


def scatter_add_ref(src: np.ndarray, idx: np.ndarray, axis: int, size: int) -> np.ndarray:
    """np.add.at with JAX's scatter rule: negative wraps once, out of range is dropped."""
    shape = list(src.shape)
    shape[axis] = size + 1           # one spare position collects the dropped updates
    out = np.zeros(shape, dtype=src.dtype)
    key = [slice(None)] * src.ndim
    w = np.where(np.asarray(idx, np.int64) < 0, np.asarray(idx, np.int64) + size, idx)
    key[axis] = np.where((w < 0) | (w >= size), size, w)
    np.add.at(out, tuple(key), src)
    return np.take(out, np.arange(size), axis=axis)


_UFUNC = {"max": np.maximum, "min": np.minimum, "mul": np.multiply}


def scatter_reduce_ref(src: np.ndarray, idx: np.ndarray, axis: int, size: int, reduce: str) -> np.ndarray:
    """ufunc.at from the reduction's identity (-inf / +inf, INT_MIN / INT_MAX, 1), indices
    as scatter_add_ref's."""
    if reduce == "mul":
        ident = 1
    elif src.dtype.kind == "f":
        ident = -np.inf if reduce == "max" else np.inf
    else:
        ident = np.iinfo(np.int32).min if reduce == "max" else np.iinfo(np.int32).max
    shape = list(src.shape)
    shape[axis] = size + 1
    out = np.full(shape, ident, dtype=np.int64 if src.dtype.kind == "i" else src.dtype)
    key = [slice(None)] * src.ndim
    w = np.where(np.asarray(idx, np.int64) < 0, np.asarray(idx, np.int64) + size, idx)
    key[axis] = np.where((w < 0) | (w >= size), size, w)
    _UFUNC[reduce].at(out, tuple(key), src)
    out = np.take(out, np.arange(size), axis=axis)
    if src.dtype.kind == "i":   # products wrap as int32's
        out = ((out + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)
    return out


def _sr(name, src, idx, axis, size, reduce, prep=lambda s, i: (s, i), exact=False):
    rt, at = tol(src.dtype)
    return Case(SR, f"{reduce}-{name}",
                lambda s, i: bind(SR, list(prep(s, i)), axis=axis, size=size, reduce=reduce),
                lambda s, i: scatter_reduce_ref(*prep(s, i), axis, size, reduce),
                [src, idx], rtol=rt, atol=at, exact=exact)


def _ix(*v):
    return np.asarray(v, dtype=np.int32)


def _grid(shape, dtype, lo=-4, hi=4):
    """Random values on a 1/8 grid: sums of a few hundred are exact even in float32."""
    return (np.round(rand(shape, np.float64, lo, hi) * 8) / 8).astype(dtype)


def _sel(name, x, idx, axis, prep=lambda x, i: (x, i)):
    rt, at = tol(x.dtype)
    return Case(IS, name,
                lambda x, i: bind(IS, list(prep(x, i)), axis=axis),
                lambda x, i: index_select_ref(*prep(x, i), axis),
                [x, idx], rtol=rt, atol=at, exact=True)


def _sca(name, src, idx, axis, size, prep=lambda s, i: (s, i), exact=False):
    rt, at = tol(src.dtype)
    return Case(SA, name,
                lambda s, i: bind(SA, list(prep(s, i)), axis=axis, size=size),
                lambda s, i: scatter_add_ref(*prep(s, i), axis, size),
                [src, idx], rtol=rt, atol=at, exact=exact)


def _chk(name, idx, size, negative=True, ignore=None):
    """CheckIndex on in-range indices: the identity (out-of-range ones raise: test_debug)."""
    return Case(CI, name,
                lambda i: bind(CI, [i], size=size, negative=negative, ignore=ignore, what="t", axis=0),
                lambda i: i, [idx], exact=True)


_T = lambda x, i: (x.T, i)                  # noqa: E731  non-contiguous data operand
_STEP = lambda x, i: (x, i[::2])            # noqa: E731  non-contiguous index operand

CASES = [
    # IndexSelect: every dtype, every axis position, wrap and clamp, non-contiguous operands
    _sel("f32-axis0-repeat-neg", rand((5, 4)), _ix(4, 0, -1, 2, 2, -5), 0),
    _sel("f32-axis1-transposed-clamp", rand((4, 3)), _ix(-7, 9, 1, -2, 3), 1, _T),
    _sel("f64-axis2-3d", rand((2, 3, 4), np.float64), _ix(3, -4, 5, -9, 0, 1), 2),
    _sel("f64-strided-index", rand((6, 2), np.float64), _ix(5, 9, -1, 9, 0, 9, 2), 0, _STEP),
    _sel("i32-axis1", rand((3, 5, 2), np.int32, -100, 100), _ix(0, 4, 4, -1, 2), 1),
    _sel("bool-axis0", rand((4, 3), np.bool_), _ix(3, 3, -4, 1), 0),
    _sel("f32-empty-index", rand((3, 4)), _ix(), 1),
    _sel("f32-zero-size-other-axis", rand((0, 3)), _ix(2, 0), 1),
    _sel("f32-size1-dims", rand((1, 5, 1)), _ix(4, -5), 1),
    _sel("f32-scalar-axis-size1", rand((1,)), _ix(0, 3, -2, 0), 0),
    _sel("i32-long-index", rand((3, 7), np.int32, -9, 9),
         rand((150,), np.int32, -10, 10), 1),

    # ScatterAdd, scan path: repeated and negative indices, empty destinations
    _sca("f32-axis0-repeat-neg", rand((6, 3)), _ix(1, -1, 1, 0, 3, -4), 0, 4),
    _sca("f32-axis1-transposed", rand((5, 3)), _ix(0, 2, 2, -9, 7), 1, 3, _T),
    _sca("f64-axis1-3d", rand((3, 6, 2), np.float64), _ix(6, 0, -1, 6, 2, 2), 1, 7),
    _sca("f64-strided-index", rand((3, 2), np.float64), _ix(2, 9, -3, 9, 2), 0, 3, _STEP),
    _sca("i32-axis2", rand((2, 2, 5), np.int32, -50, 50), _ix(1, 1, -1, 0, 9), 2, 2),
    _sca("f32-empty-index", rand((3, 0)), _ix(), 1, 4),
    _sca("f64-empty-index-empty-out", rand((0,), np.float64), _ix(), 0, 0),
    _sca("f32-size1", rand((1, 1)), _ix(0), 0, 1),
    _sca("f32-zero-size-other-axis", rand((0, 4)), _ix(0, 1, 1, 0), 1, 2),

    # ScatterAdd, sorted path (more than SORT_MIN indices): run lengths not powers of two,
    # one destination taking everything, many empty destinations
    _sca("f32-sorted-axis0", _grid((SORT_MIN * 3 + 5, 2), np.float32),
         rand((SORT_MIN * 3 + 5,), np.int32, -15, 15), 0, 10, exact=True),
    _sca("f64-sorted-axis1-sparse", rand((2, SORT_MIN + 1, 3), np.float64),
         rand((SORT_MIN + 1,), np.int32, -60, 59), 1, 50),
    _sca("f32-sorted-one-bucket", _grid((2 * SORT_MIN,), np.float32),
         np.full(2 * SORT_MIN, -2, np.int32), 0, 5, exact=True),
    _sca("i32-sorted-transposed", rand((3, 2 * SORT_MIN + 3), np.int32, -1000, 1000),
         rand((2 * SORT_MIN + 3,), np.int32, -3, 3), 0, 4, _T),
    # bitwise: both paths add in index order j = 0, 1, ..., exactly what a sequential
    # float32 np.add.at does, so the results must match it bit for bit
    *[Case(SA, f"f32-bitwise-j-order-{m}",
           lambda s, i: bind(SA, [s, i], axis=0, size=3),
           lambda s, i: scatter_add_ref(s.astype(np.float32), i, 0, 3),
           [rand((m, 4), np.float32, -1e3, 1e3) * rand((m, 1), np.float32, 0, 1) ** 6,
            rand((m,), np.int32, 0, 2)], exact=True)
      for m in (SORT_MIN, 3 * SORT_MIN + 1)],
    _sca("i32-sorted-axis1", rand((2, 4 * SORT_MIN, 2), np.int32, -1000, 1000),
         rand((4 * SORT_MIN,), np.int32, -8, 8), 1, 7),
    # ScatterAdd drops updates whose index is out of range after wrapping (both paths)
    _sca("f32-drop-out-of-range", rand((5, 2)), _ix(3, -5, -4, 4, 0), 0, 4),
    _sca("f32-sorted-drop", _grid((2 * SORT_MIN + 1,), np.float32),
         rand((2 * SORT_MIN + 1,), np.int32, -9, 9), 0, 4, exact=True),

    # ScatterReduce: each reduction on both paths, every dtype, empty destinations (the
    # identity), dropped updates, non-contiguous operands, nan through max and min
    *[c for red in ("max", "min", "mul") for c in (
        _sr("f32-axis0-repeat-neg-drop", rand((6, 3)), _ix(1, -1, 1, 0, 9, -4), 0, 4, red),
        _sr("f64-axis1-transposed", rand((5, 3), np.float64), _ix(0, 2, 2, -9, 7), 1, 3, red, _T),
        _sr("i32-axis2", rand((2, 2, 5), np.int32, -50, 50), _ix(1, 1, -1, 0, 9), 2, 2, red, exact=True),
        _sr("f32-empty-index", rand((3, 0)), _ix(), 1, 4, red),
        _sr("f64-strided-index", rand((3, 2), np.float64), _ix(2, 9, -3, 9, 2), 0, 3, red, _STEP),
        _sr("f32-sorted", _grid((SORT_MIN * 2 + 3, 2), np.float32, 0.5, 1.5),
            rand((SORT_MIN * 2 + 3,), np.int32, -12, 12), 0, 10, red),
        _sr("i32-sorted-transposed", rand((3, 2 * SORT_MIN + 3), np.int32, -3, 3),
            rand((2 * SORT_MIN + 3,), np.int32, -5, 5), 0, 4, red, _T, exact=True),
    )],
    *[_sr(f"f32-nan-{path}", np.where(np.arange(m)[:, None] == 1, np.nan, rand((m, 2))).astype(np.float32),
          np.zeros(m, np.int32), 0, 2, red)
      for red in ("max", "min") for path, m in (("scan", 4), ("sorted", SORT_MIN + 2))],

    # CheckIndex: the identity on indices in range (negative ones, an ignored label)
    _chk("i32-negative", _ix(0, -3, 2, -1), 3),
    _chk("i32-labels-ignore", _ix(0, 4, -100, 1), 5, negative=False, ignore=-100),
    _chk("i32-2d", rand((3, 4), np.int32, 0, 5), 6, negative=False),
]
