"""vkml.numpy's sorting, selection and running reductions (vkml/sorting.py) and
vkml.lax.top_k against NumPy in float64, their errors against NumPy's exception types,
and the gradients of the differentiable ones by check_grads (order 2)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.array import ConcretizationError
from vkml.lax import top_k
from vkml.test_util import check_grads

F32, F64, I32 = np.float32, np.float64, np.int32
RNG = np.random.default_rng(23)


def ties(*shape, dtype=F64):
    """Few distinct values (ties everywhere), nan, +-inf and both zeros among them."""
    pool = np.array([-2.0, -0.0, 0.0, 1.0, 1.5, 3.0, np.nan, np.inf, -np.inf])
    return RNG.choice(pool, size=shape).astype(dtype)


def distinct(*shape):
    """Values far enough apart that finite differences never reorder them."""
    n = int(np.prod(shape))
    return (RNG.permutation(n) * 0.37 + RNG.uniform(-0.05, 0.05, n)).reshape(shape)


def same(got, want, exact=True, rtol=1e-12):
    want = np.asarray(want)
    got = np.asarray(got)
    if want.dtype.kind in "iu":
        assert got.dtype == I32, got.dtype
    assert got.shape == want.shape, (got.shape, want.shape)
    if exact:
        np.testing.assert_array_equal(got, want.astype(got.dtype))
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, equal_nan=True)


def jnp_argsort(x, axis, descending):
    """jax.numpy's argsort: stable; descending is the reversed order with ties kept."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    return np.flip(n - 1 - np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)


# --------------------------------------------------------------------------- sort, argsort

@pytest.mark.parametrize("dtype", [F64, F32, I32, np.bool_])
@pytest.mark.parametrize("shape,axis", [((9,), -1), ((4, 7), 0), ((3, 5, 2), 1), ((4, 7), None),
                                        ((0, 3), 1), ((1,), 0), ((), None)])
def test_sort_and_argsort_match_numpy(dtype, shape, axis):
    x = np.nan_to_num(ties(*shape), posinf=9, neginf=-9).astype(dtype) if dtype == I32 \
        else ties(*shape).astype(dtype) if dtype != np.bool_ else RNG.random(shape) < 0.5
    same(vnp.sort(x, axis=axis), np.sort(x, axis=axis))
    same(vnp.argsort(x, axis=axis), np.argsort(x, axis=axis, kind="stable"))
    ax = -1 if axis is None else axis
    flat = x.ravel() if axis is None else x
    if flat.ndim:
        same(vnp.argsort(x, axis=axis, descending=True), jnp_argsort(flat, ax, True))
        same(vnp.sort(x, axis=axis, descending=True),
             np.take_along_axis(flat, jnp_argsort(flat, ax, True), ax))


def test_sort_signed_zeros_and_nan_order():
    x = np.array([0.0, -0.0, np.nan, -np.inf, 0.0, np.nan, -0.0, np.inf])
    got = vnp.sort(x).numpy()
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.sort(x, kind="stable")))   # zeros keep their order
    same(vnp.argsort(x), np.argsort(x, kind="stable"))
    same(vnp.argsort(x, descending=True), jnp_argsort(x, 0, True))


def test_long_rows_and_many_rows():
    x = np.round(RNG.standard_normal(1 << 20) * 100).astype(F32)
    same(vnp.argsort(x), np.argsort(x, kind="stable"))
    y = ties(3, 5000)
    same(vnp.sort(y, axis=1), np.sort(y, axis=1))
    z = ties(4001, 3, dtype=F32)
    same(vnp.argsort(z, axis=0), np.argsort(z, axis=0, kind="stable"))


def test_sort_non_contiguous_and_jit():
    x = ties(6, 8)
    same(vnp.sort(vnp.asarray(x).T, axis=1), np.sort(x.T, axis=1))
    same(vnp.sort(vnp.asarray(x)[::2, 1::3], axis=0), np.sort(x[::2, 1::3], axis=0))
    same(vkml.jit(lambda a: vnp.sort(a, axis=0))(x), np.sort(x, axis=0))
    same(vkml.vmap(lambda a: vnp.argsort(a))(x), np.argsort(x, axis=1, kind="stable"))


def test_sort_gradients():
    x = distinct(3, 5)
    check_grads(lambda a: vnp.sort(a, axis=1) * vnp.arange(5.0), (x,), order=2)
    check_grads(lambda a: vnp.sort(a, axis=0, descending=True) ** 2, (x,), order=2)
    check_grads(lambda a: vnp.sort(a, axis=None)[:4], (x,), order=2)
    g = vkml.grad(lambda a: vnp.sum(vnp.sort(a) * vnp.arange(4.0)))(np.array([3.0, 1.0, 2.0, 0.0]))
    same(g, [3.0, 1.0, 2.0, 0.0])   # d/dx_i = rank of x_i


def test_partition_and_argpartition():
    x = ties(5, 9)
    for kth in (0, 4, -1, [1, 6]):
        p = vnp.partition(x, kth, axis=1).numpy()
        ip = vnp.argpartition(x, kth, axis=1).numpy()
        s = np.sort(x, axis=1)
        for k in np.atleast_1d(kth) % 9:
            np.testing.assert_array_equal(p[:, k], s[:, k])
            np.testing.assert_array_equal(np.take_along_axis(x, ip, 1)[:, k], s[:, k])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert np.all((p[:, :k] <= p[:, k:k + 1]) | np.isnan(p[:, k:k + 1]))
    with pytest.raises(ValueError):
        np.partition(x, 9, axis=1)
    with pytest.raises(ValueError, match="partition"):
        vnp.partition(x, 9, axis=1)
    check_grads(lambda a: vnp.partition(a, 2)[..., :3], (distinct(2, 6),), order=2)


def test_sort_errors_match_numpy():
    for bad in (2, -3):
        with pytest.raises(np.exceptions.AxisError):
            np.sort(np.zeros((2, 2)), axis=bad)
        with pytest.raises(np.exceptions.AxisError):
            vnp.sort(np.zeros((2, 2)), axis=bad)
    with pytest.raises(np.exceptions.AxisError):
        vnp.argsort(np.float64(1.0))            # NumPy: a 0-d array has no axis -1
    with pytest.raises(NotImplementedError, match="order"):
        vnp.sort(np.zeros(3), order="f")


# --------------------------------------------------------------------------- top_k

def test_top_k():
    x = ties(4, 9)
    x[np.isnan(x)] = 7.0           # lax.top_k's order of nan is its backend's
    for k in (0, 1, 3, 9):
        v, i = top_k(x, k)
        want = jnp_argsort(x, 1, True)[:, :k]
        same(i, want)
        same(v, np.take_along_axis(x, want, 1))
    with pytest.raises(ValueError, match="top_k"):
        top_k(x, 10)
    with pytest.raises(ValueError, match="top_k"):
        top_k(np.float32(1.0), 1)
    check_grads(lambda a: top_k(a, 3)[0], (distinct(3, 7),), order=2)


def _top_k_ref(row):
    """lax.top_k's order of one row: NaN first, then larger values, ties by position."""
    return sorted(range(len(row)), key=lambda j: (not np.isnan(row[j]),
                                                  0.0 if np.isnan(row[j]) else -float(row[j]), j))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_])
def test_top_k_select_and_sort_paths_agree(dtype):
    """k <= TOP_K_SELECT selects k times, larger k sorts: the same order on ties, NaN,
    -inf (which the select path must not confuse with its taken positions) and integer
    minima, batched over leading axes."""
    from vkml.sorting import TOP_K_SELECT
    R = np.random.default_rng(5)
    n = 40 if dtype == np.float64 else 16 * 16 * 4 + 37   # long rows take the chunked path
    if dtype == np.bool_:
        x = R.random((2, 3, n)) < 0.3
    elif dtype == np.int32:
        x = R.integers(-3, 3, (2, 3, n)).astype(np.int32)
        x[..., ::7] = np.iinfo(np.int32).min
    else:
        x = R.integers(-3, 3, (2, 3, n)).astype(dtype)
        x[..., ::5] = -np.inf
        x[..., 3::11] = np.nan
    for k in (1, 4, TOP_K_SELECT, TOP_K_SELECT + 1, 40):
        v, i = top_k(x, k)
        want = np.array([_top_k_ref(r)[:k] for r in x.reshape(-1, n)]).reshape(x.shape[:-1] + (k,))
        np.testing.assert_array_equal(np.asarray(i), want, err_msg=f"k={k}")
        np.testing.assert_array_equal(np.asarray(v), np.take_along_axis(x, want, -1), err_msg=f"k={k}")
    if dtype == np.float32:      # fewer large entries than k: the rest are -inf, lowest first
        y = np.full((2, 4133), -np.inf, dtype)
        y[0, [7, 3000, 4100]] = [1.0, 2.0, 1.0]
        v, i = top_k(y, 8)
        want = np.array([_top_k_ref(r)[:8] for r in y])
        np.testing.assert_array_equal(np.asarray(i), want)


# --------------------------------------------------------------------------- quantiles

METHODS = ["linear", "lower", "higher", "nearest", "midpoint", "hazen", "weibull",
           "median_unbiased", "normal_unbiased", "interpolated_inverted_cdf"]


@pytest.mark.parametrize("method", METHODS)
def test_quantile_methods(method):
    x = RNG.standard_normal((5, 8))
    q = np.array([0.0, 0.05, 0.25, 0.5, 0.61, 0.75, 1.0])
    for axis, kd in [(None, False), (0, True), (1, False), ((0, 1), True), (-1, True)]:
        same(vnp.quantile(x, q, axis=axis, method=method, keepdims=kd),
             np.quantile(x, q, axis=axis, method=method, keepdims=kd), exact=False)
    same(vnp.quantile(x, 0.3, axis=1, method=method), np.quantile(x, 0.3, axis=1, method=method),
         exact=False)
    same(vnp.percentile(x, [10.0, 90.0], axis=0, method=method),
         np.percentile(x, [10.0, 90.0], axis=0, method=method), exact=False)


def test_median_and_nan_rows():
    x = RNG.standard_normal((4, 7))
    x[1, 3] = np.nan
    for axis in (None, 0, 1, (0, 1)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            same(vnp.median(x, axis=axis), np.median(x, axis=axis), exact=False)
            same(vnp.quantile(x, [0.2, 0.9], axis=axis), np.quantile(x, [0.2, 0.9], axis=axis),
                 exact=False)
    same(vnp.median(x[:, :6], axis=1, keepdims=True), np.median(x[:, :6], axis=1, keepdims=True),
         exact=False)
    same(vnp.median(np.arange(6, dtype=I32)), 2.5)
    assert vnp.median(np.arange(6, dtype=I32)).dtype == F32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same(vnp.median(np.zeros((0, 3)), axis=0), np.median(np.zeros((0, 3)), axis=0))


def test_quantile_errors():
    with pytest.raises(ValueError):
        np.quantile(np.zeros(3), 1.5)
    with pytest.raises(ValueError, match="quantile"):
        vnp.quantile(np.zeros(3), 1.5)
    with pytest.raises(ValueError, match="percentile"):
        vnp.percentile(np.zeros(3), -1.0)
    with pytest.raises(ValueError, match="method"):
        vnp.quantile(np.zeros(3), 0.5, method="bogus")


def test_quantile_gradients():
    x = distinct(3, 6)
    check_grads(lambda a: vnp.quantile(a, np.array([0.1, 0.5, 0.8]), axis=1), (x,), order=2)
    check_grads(lambda a: vnp.median(a, axis=0), (x,), order=2)
    check_grads(lambda q: vnp.quantile(np.arange(5.0) ** 2, q), (np.array([0.3, 0.62]),), order=2)


# --------------------------------------------------------------------------- searchsorted

@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted(side):
    a = np.sort(ties(40))
    v = ties(3, 11)
    same(vnp.searchsorted(a, v, side=side), np.searchsorted(a, v, side=side))
    same(vnp.searchsorted(a, 1.0, side=side), np.searchsorted(a, 1.0, side=side))
    perm = RNG.permutation(40)
    b = a[perm]
    sorter = np.argsort(b, kind="stable").astype(I32)
    same(vnp.searchsorted(b, v, side=side, sorter=sorter), np.searchsorted(b, v, side=side, sorter=sorter))
    ai = np.sort(RNG.integers(-5, 5, 30)).astype(I32)
    same(vnp.searchsorted(ai, np.arange(-6, 7, dtype=I32), side=side),
         np.searchsorted(ai, np.arange(-6, 7), side=side))
    same(vnp.searchsorted(np.zeros(0), v, side=side), np.searchsorted(np.zeros(0), v, side=side))
    same(vnp.searchsorted(a, np.zeros((0, 2)), side=side), np.searchsorted(a, np.zeros((0, 2)), side=side))
    same(vkml.jit(lambda x, y: vnp.searchsorted(x, y, side=side))(a, v), np.searchsorted(a, v, side=side))


def test_searchsorted_errors():
    with pytest.raises(ValueError, match="side"):
        vnp.searchsorted(np.arange(3.0), 1.0, side="middle")
    with pytest.raises(ValueError):
        np.searchsorted(np.arange(3.0), 1.0, side="middle")
    with pytest.raises(ValueError, match="1-d"):
        vnp.searchsorted(np.zeros((2, 2)), 1.0)


# --------------------------------------------------------------------------- unique

@pytest.mark.parametrize("x", [np.array([3, 1, 3, 2, 2, 2, 7, -1], I32), ties(4, 6),
                               np.array([True, False, True]), np.array([5.0]), np.zeros(0)],
                         ids=["int", "float-ties-nan", "bool", "one", "empty"])
def test_unique_matches_numpy(x):
    same(vnp.unique(x), np.unique(x))
    got = vnp.unique(x, return_index=True, return_inverse=True, return_counts=True)
    want = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    for g, w in zip(got, want):
        same(g, w)


def test_unique_with_size_and_under_jit():
    x = np.array([4, 1, 4, 9, 1, 1], I32)
    v, i, inv, c = vnp.unique(x, return_index=True, return_inverse=True, return_counts=True,
                              size=5, fill_value=-7)
    same(v, [1, 4, 9, -7, -7])
    same(i, [1, 0, 3, 0, 0])
    same(inv, [1, 0, 1, 2, 0, 0])
    same(c, [3, 2, 1, 0, 0])
    same(vnp.unique(x, size=2), [1, 4])                     # truncated, as jax.numpy
    same(vnp.unique(x, size=4), [1, 4, 9, 1])               # default fill: the smallest value
    same(vkml.jit(lambda a: vnp.unique(a, size=4, fill_value=0))(x), [1, 4, 9, 0])
    with pytest.raises(ConcretizationError, match="size="):
        vkml.jit(lambda a: vnp.unique(a))(x)
    with pytest.raises(NotImplementedError, match="axis"):
        vnp.unique(np.zeros((2, 2)), axis=0)


def test_unique_gradient():
    # distinct values: finite differences would split a tie into two unique values
    check_grads(lambda a: vnp.unique(a, size=4) * 2.0, (np.array([5.0, 2.0, 9.0]),), order=2)


# --------------------------------------------------------------------------- running ops

RUNNING = [("cumprod", np.cumprod), ("cummax", np.maximum.accumulate),
           ("cummin", np.minimum.accumulate), ("logcumsumexp", np.logaddexp.accumulate),
           ("nancumsum", np.nancumsum), ("nancumprod", np.nancumprod)]


@pytest.mark.parametrize("name,ref", RUNNING, ids=[n for n, _ in RUNNING])
def test_running_ops_match_numpy(name, ref):
    fn = getattr(vnp, name)
    x = RNG.uniform(-1.5, 1.5, (5, 13))
    x[2, 4] = np.nan
    x[3, 7] = 0.0
    for axis in (0, 1, -1, None):
        want = ref(x.ravel() if axis is None else x, axis=0 if axis is None else axis)
        same(fn(x, axis=axis), want, exact=False)
    for n in (1, 2, 3, 1000):
        y = RNG.uniform(0.9, 1.1, n)
        same(fn(y), ref(y, axis=0), exact=False, rtol=1e-10)
    same(fn(np.zeros((0, 3)), axis=1), ref(np.zeros((0, 3)), axis=1))
    same(fn(np.float64(0.5)), ref(np.atleast_1d(0.5), axis=0), exact=False)


def test_running_ops_dtypes():
    i = np.array([3, -1, 4, 1, -5], I32)
    same(vnp.cumprod(i), np.cumprod(i))
    same(vnp.cummax(i), np.maximum.accumulate(i))
    same(vnp.cumprod(np.array([True, True, False])), [1, 1, 0])
    assert vnp.logcumsumexp(i).dtype == F32
    same(vnp.logcumsumexp(np.array([-np.inf, -np.inf, 0.0])), [-np.inf, -np.inf, 0.0])
    same(vnp.logcumsumexp(np.array([1000.0, 1000.0])), np.logaddexp.accumulate([1000.0, 1000.0]),
         exact=False)
    with pytest.raises(np.exceptions.AxisError):
        vnp.cumprod(np.zeros((2, 2)), axis=2)


def test_running_gradients():
    x = RNG.uniform(0.5, 1.5, (2, 7))
    x[0, 2] = 0.0                   # cumprod's gradient with a zero: exact, as JAX's
    x[1, 4] = 0.0
    check_grads(lambda a: vnp.cumprod(a, axis=1), (x,), order=2)
    g = vkml.grad(lambda a: vnp.sum(vnp.cumprod(a)))(np.array([2.0, 0.0, 3.0]))
    same(g, [1.0, 2.0 + 6.0, 0.0], exact=False)
    d = distinct(3, 6)
    check_grads(lambda a: vnp.cummax(a, axis=1), (d,), order=2)
    check_grads(lambda a: vnp.cummin(a, axis=0), (d,), order=2)
    g = vkml.grad(lambda a: vnp.sum(vnp.cummax(a)))(np.array([1.0, 3.0, 2.0, 0.5, 4.0]))
    same(g, [1.0, 3.0, 0.0, 0.0, 1.0])      # to the position of the running maximum
    check_grads(lambda a: vnp.logcumsumexp(a, axis=1), (RNG.standard_normal((2, 9)),), order=2)
    check_grads(lambda a: vnp.nancumsum(a), (RNG.standard_normal(5),), order=2)
