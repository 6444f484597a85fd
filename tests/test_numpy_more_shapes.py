"""vkml.numpy's index helpers and selectors (rollaxis, indices, ix_, unravel_index,
ravel_multi_index, select, piecewise, r_, c_) against NumPy, their errors against NumPy's
exception types; arrays built from (nested) sequences of traced arrays, and linspace in
traced bounds, with gradients by check_grads(order=2)."""
from __future__ import annotations

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.test_util import check_grads

from tests.test_numpy_shapes import raises_like, same

F64, I32 = np.float64, np.int32
RNG = np.random.default_rng(23)
A = np.arange(6).reshape(2, 3)
VA = vnp.asarray(A)

# --------------------------------------------------------------------------- rollaxis, indices


@pytest.mark.parametrize("axis, start", [(3, 1), (2, 0), (1, 4), (-1, 0), (0, -1), (2, 2),
                                         (0, 3), (3, 4), (1, -4)])
def test_rollaxis(axis, start):
    x = RNG.standard_normal((2, 3, 4, 5))
    same(vnp.rollaxis(x, axis, start), np.rollaxis(x, axis, start))


@pytest.mark.parametrize("axis, start", [(0, 5), (4, 0), (0, -5), (-5, 0), (1.0, 0), (0, 1.5)])
def test_rollaxis_errors(axis, start):
    x = np.zeros((2, 3, 4, 5))
    raises_like(lambda: np.rollaxis(x, axis, start), lambda: vnp.rollaxis(x, axis, start))


@pytest.mark.parametrize("dims", [(2, 3), (), (0, 2), (4,), (2, 1, 3)])
def test_indices(dims):
    same(vnp.indices(dims), np.indices(dims))
    same(vnp.indices(dims, sparse=True), np.indices(dims, sparse=True))
    got = vnp.indices(dims, dtype=vnp.float64)
    assert got.dtype == F64
    np.testing.assert_array_equal(got.numpy(), np.indices(dims, dtype=float))


@pytest.mark.parametrize("dims", [(-1,), (2.0,), (2, -3)])
def test_indices_errors(dims):
    raises_like(lambda: np.indices(dims), lambda: vnp.indices(dims))


# --------------------------------------------------------------------------- ix_


def test_ix_():
    for args in [([0, 1], [2, 0, 1]), ([True, False, True], [2]), ([],), ([], [1]), (),
                 (np.array([3, 1]), np.array([False, True]), [0])]:
        same(vnp.ix_(*args), np.ix_(*args))
    same(vnp.ix_(vnp.zeros(3, bool), vnp.asarray([True, True])),
         np.ix_(np.zeros(3, bool), np.array([True, True])))


def test_ix_errors():
    raises_like(lambda: np.ix_([[1]]), lambda: vnp.ix_([[1]]))
    raises_like(lambda: np.ix_(5), lambda: vnp.ix_(5))
    with pytest.raises(TypeError, match="ix_: a traced bool index"):
        vkml.jit(lambda m: vnp.ix_(m)[0])(vnp.asarray([True, False]))


# --------------------------------------------------------------------------- unravel / ravel


@pytest.mark.parametrize("indices, shape", [([5, 7, 0], (2, 4)), (np.array([[22, 41], [37, 0]]),
                                                                 (7, 6, 1)),
                                            (3, (4,)), (0, ()), (11, (2, 3, 2)), ([], (2, 2)),
                                            (True, (2,))])
@pytest.mark.parametrize("order", ["C", "F"])
def test_unravel_index(indices, shape, order):
    same(vnp.unravel_index(indices, shape, order=order),
         np.unravel_index(np.asarray(indices, np.int64), shape, order=order))


@pytest.mark.parametrize("indices, shape", [(8, (2, 4)), (-1, (2, 4)), ([1, 9], (3, 3)),
                                            (1.0, (2, 4)), ([1.5], (2,)), (0, (0, 3)),
                                            (0, (2, 4.0))])
def test_unravel_index_errors(indices, shape):
    raises_like(lambda: np.unravel_index(indices, shape), lambda: vnp.unravel_index(indices, shape))
    with pytest.raises(ValueError):
        vnp.unravel_index(0, (2,), order="K")


def test_unravel_index_traced_clips_as_jax():
    got = vkml.jit(lambda i: vnp.unravel_index(i, (2, 3)))(vnp.asarray([-1, 7, -9, 4]))
    # jax.numpy: clipped into [-6, 6), negative from the end: -1 -> 5, 7 -> 5, -9 -> 0
    same(got, np.unravel_index([5, 5, 0, 4], (2, 3)))


@pytest.mark.parametrize("multi, dims, kw", [
    (([1, 0], [2, 3]), (2, 4), {}), (([1, 0], [2, 3]), (2, 4), {"order": "F"}),
    (([3, -1], [9, 3]), (2, 4), {"mode": "wrap"}), (([3, -1], [9, 3]), (2, 4), {"mode": "clip"}),
    (([3, -1], [9, 3]), (2, 4), {"mode": ("clip", "wrap")}),
    ((np.array([[1], [0]]), [2, 3, 1]), (2, 4), {}), ((1, 2), (2, 4), {}),
    (([0, 2], [1, 1], [3, 0]), (3, 2, 4), {"order": "F"}), (([], []), (2, 2), {}),
])
def test_ravel_multi_index(multi, dims, kw):
    want = np.ravel_multi_index(tuple(np.asarray(m, np.int64) for m in multi), dims, **kw)
    same(vnp.ravel_multi_index(multi, dims, **kw), want)
    # the round trip through unravel_index
    if "mode" not in kw and np.size(want):
        same(vnp.unravel_index(vnp.ravel_multi_index(multi, dims, **kw), dims, **kw),
             np.unravel_index(want, dims, **kw))


@pytest.mark.parametrize("multi, dims, kw", [
    (([3, 0], [1, 3]), (2, 4), {}), (([-1], [1]), (2, 4), {}), (([1, 0],), (2, 4), {}),
    (([1.0, 0], [2, 3]), (2, 4), {}), (([1], [2]), (2, 4), {"mode": "foo"}),
    (([1], [2]), (2, 4), {"mode": ("clip",)}), (([1], [2]), (2, 4), {"order": "X"}),
    (([0], [0]), (2, -4), {}),
])
def test_ravel_multi_index_errors(multi, dims, kw):
    raises_like(lambda: np.ravel_multi_index(multi, dims, **kw),
                lambda: vnp.ravel_multi_index(multi, dims, **kw))


def test_ravel_multi_index_traced_modes():
    f = vkml.jit(lambda i, j: vnp.ravel_multi_index((i, j), (2, 4), mode="wrap"))
    same(f(vnp.asarray([3, -1]), vnp.asarray([9, 3])),
         np.ravel_multi_index(([3, -1], [9, 3]), (2, 4), mode="wrap"))
    with pytest.raises(TypeError, match="mode='raise' needs concrete coordinates"):
        vkml.jit(lambda i: vnp.ravel_multi_index((i, i), (2, 4)))(vnp.asarray([1]))
    with pytest.raises(ValueError, match="larger than the largest int32 index"):
        vnp.ravel_multi_index(([1], [2]), (2 ** 40, 4))   # int32 indices (NumPy's are intp)


# --------------------------------------------------------------------------- select, piecewise


def test_select():
    x = RNG.standard_normal((3, 4))
    i = np.arange(12, dtype=I32).reshape(3, 4)
    for conds, choices, default in [
        ([x < 0, x > 0.5], [x, x * 10], 7.0), ([x < 0, x < 1], [x, -x], 0),
        ([i % 2 == 0, i > 6], [i, i * 10], -1), ([i > 3], [i[0]], 0),       # broadcast
        ([np.array([True, False, True, False])], [x], np.nan),
        ([x > 0, x > 0], [1.0, 2.0], x),                                    # the first wins
    ]:
        same(vnp.select([vnp.asarray(c) for c in conds], choices, default),
             np.select(conds, choices, default))


@pytest.mark.parametrize("conds, choices", [([np.array([1, 0])], [np.array([1, 2])]), ([], []),
                                            ([np.array([True])], [1, 2])])
def test_select_errors(conds, choices):
    raises_like(lambda: np.select(conds, choices), lambda: vnp.select(conds, choices))


def test_piecewise():
    x = np.linspace(-2, 2, 9)
    v = vnp.asarray(x)
    cases = [
        (lambda a: [a < 0, a > 1], [lambda t: -t, 9.0, lambda t: t * 2]),
        (lambda a: a < 0, [lambda t: -t, 9.0]),
        (lambda a: [a < 0, a < 1], [lambda t: t ** 2, lambda t: t + 10]),    # the last wins
        (lambda a: [a > 5], [lambda t: t]),                                 # 0 where none holds
        (lambda a: [a < 0], [lambda t, k: t * k]),
    ]
    for conds, funcs in cases:
        extra = (3.0,) if funcs[0].__code__.co_argcount == 2 else ()
        same(vnp.piecewise(v, conds(v), funcs, *extra), np.piecewise(x, conds(x), funcs, *extra))
    i = np.arange(5)
    same(vnp.piecewise(vnp.arange(5), [vnp.arange(5) > 1], [lambda t: t * 1.5]),
         np.piecewise(i, [i > 1], [lambda t: t * 1.5]))      # the result has x's dtype
    same(vnp.piecewise(vnp.asarray(1.5, F64), [True, False], [1.0, 2.0]),
         np.piecewise(np.array(1.5), [True, False], [1.0, 2.0]))
    same(vnp.piecewise(v, [[True] * 4 + [False] * 5], [5.0]),
         np.piecewise(x, [[True] * 4 + [False] * 5], [5.0]))
    raises_like(lambda: np.piecewise(x, [x < 0], [1, 2, 3]),
                lambda: vnp.piecewise(v, [v < 0], [1, 2, 3]))


def test_piecewise_gradient():
    x = vnp.asarray([-1.3, -0.2, 0.7, 1.9], F64)
    f = lambda a: vnp.piecewise(a, [a < 0, a > 1], [lambda t: t ** 3, lambda t: vnp.sin(t),
                                                      lambda t: t * t])
    check_grads(f, (x,), order=2)
    g = vkml.grad(lambda a: vnp.sum(f(a)))(x).numpy()
    np.testing.assert_allclose(g, [3 * 1.3 ** 2, 3 * 0.2 ** 2, 2 * 0.7, np.cos(1.9)])


# --------------------------------------------------------------------------- r_, c_

R_CASES = ["1:4, 0, [7, 8]", "0:1:5j", "-1:1:3j, 5", "'0,2', [1, 2, 3], [4, 5, 6]",
           "'0,2,0', [1, 2, 3], [4, 5, 6]", "'1,2,0', [1, 2, 3], [4, 5, 6]", "'-1', A, A",
           "'r', [1, 2], [3]", "'c', [1, 2], [3]", "A, A", "2.5, [1, 2]", "'1', A, [[9], [9]]",
           "0:6:2", "::-1", "5:1:-2", "0.5:2", "'1,2,3,4', [1]", "[True], [False]",
           "np.array([1.5, 2.5]), 3"]
C_CASES = ["[1, 2, 3], [4, 5, 6]", "A, A", "A, [[9], [9]]", "[1, 2], 0:4:2",
           "np.array([1, 2])[:, None], [3, 4]", "'0', [1, 2], [3, 4]", "0:1:3j, [7, 8, 9]"]


def same_weak(got, want, key: str):
    """same, NumPy's float64 made float32 where the floats came from Python (slices, 2.5):
    vkml's default float, as jax.numpy's."""
    want = np.asarray(want)
    if want.dtype == F64 and "np.array([1.5" not in key:
        want = want.astype(np.float32)
    same(got, want)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("key", R_CASES)
def test_r_(key):
    same_weak(eval(f"vnp.r_[{key}]"), eval(f"np.r_[{key}]"), key)
    same_weak(eval(f"vnp.r_[{key.replace('A, A', 'VA, A')}]"), eval(f"np.r_[{key}]"), key)


@pytest.mark.parametrize("key", C_CASES)
def test_c_(key):
    same_weak(eval(f"vnp.c_[{key}]"), eval(f"np.c_[{key}]"), key)


@pytest.mark.parametrize("key", ["[1, 2], 'r'", "'x', [1]", "'0,x', [1]", "A, [1, 2]", ""])
def test_r_errors(key):
    raises_like(lambda: eval(f"np.r_[{key}]"), lambda: eval(f"vnp.r_[{key}]"))


def test_r_c_of_traced_arrays_are_differentiable():
    x = vnp.asarray([0.5, -1.0], F64)
    check_grads(lambda a: vnp.r_[a, 2.0, a * a], (x,), order=2)
    check_grads(lambda a: vnp.c_[a, vnp.sin(a)], (x,), order=2)
    assert len(vnp.r_) == 0 and len(vnp.c_) == 0      # as NumPy's


# --------------------------------------------------------------------------- sequences of tracers


def test_array_of_traced_arrays_is_stacked_and_differentiable():
    x, y = vnp.asarray(1.5, F64), vnp.asarray(-0.5, F64)
    check_grads(lambda a, b: vnp.array([a, b]), (x, y), order=2)
    check_grads(lambda a, b: vnp.asarray([[a, 1.0], [b, a * b]]), (x, y), order=2)
    check_grads(lambda a, b: vnp.array((vnp.stack([a, b]), vnp.asarray([2.0, 3.0], F64))),
                (x, y), order=2)
    check_grads(lambda a, b: vnp.concatenate([vnp.array([a]), vnp.stack((b, a))]), (x, y),
                order=2)
    g = vkml.grad(lambda a, b: vnp.sum(vnp.array([a, 2 * b, a * b]) ** 2), argnums=(0, 1))(x, y)
    np.testing.assert_allclose([float(g[0]), float(g[1])], [2 * 1.5 + 2 * 1.5 * 0.25,
                                                            8 * -0.5 + 2 * 0.5 * 1.5 ** 2 * -1])
    same(vkml.jit(lambda a, b: vnp.array([[a, 1], [b, 2]]))(x, y), np.array([[1.5, 1], [-0.5, 2]]))
    same(vkml.vmap(lambda a: vnp.array([a, a * 2]))(vnp.asarray([1.0, 2.0], F64)),
         np.array([[1.0, 2.0], [2.0, 4.0]]))


def test_array_of_arrays_dtypes_and_errors():
    assert vnp.array([vnp.asarray(1.5, F64), 1]).dtype == F64
    assert vnp.array([vnp.asarray(1), 2.5]).dtype == np.float32     # weak Python float
    assert vnp.array([vnp.asarray(1), 2]).dtype == I32
    same(vnp.array([vnp.asarray([1, 2]), [3, 4]], dtype=F64), np.array([[1, 2], [3, 4]], F64))
    same(vnp.array([vnp.asarray([True]), np.array([False])]), np.array([[True], [False]]))
    with pytest.raises(ValueError, match="array: .*inhomogeneous"):
        vnp.array([vnp.ones(2), vnp.ones(3)])
    with pytest.raises(ValueError):
        np.array([np.ones(2), np.ones(3)])


def test_reductions_of_sequences_of_tracers():
    x, y = vnp.asarray(1.5, F64), vnp.asarray(-0.5, F64)
    check_grads(lambda a, b: vnp.mean([a, b, a * b]) + vnp.std([a, b]) + vnp.var((a, b)),
                (x, y), order=2)
    check_grads(lambda a, b: vnp.stack([a, b, a + b]) * vnp.max([a, b]), (x, y), order=2)
    check_grads(lambda a, b: vnp.nansum([[a, b], [b, 1.0]], axis=0), (x, y), order=2)


# --------------------------------------------------------------------------- linspace, arange traced


def test_linspace_in_traced_bounds():
    x, y = vnp.asarray(1.5, F64), vnp.asarray(-0.5, F64)
    check_grads(lambda a, b: vnp.linspace(a, b, 5), (x, y), order=2)
    check_grads(lambda a, b: vnp.linspace(a, b, 4, endpoint=False), (x, y), order=2)
    check_grads(lambda a: vnp.linspace(a, 3.0, 1), (x,), order=2)
    v = vnp.asarray([1.0, 2.0], F64)
    check_grads(lambda a: vnp.linspace(a, a * 2 + 1, 3), (v,), order=2)
    g = vkml.grad(lambda a: vnp.sum(vnp.linspace(a, 2.0, 3)))(vnp.asarray(1.0))
    assert float(g) == 1.5                     # (1 - t) summed over t = 0, 1/2, 1
    same(vkml.jit(lambda a: vnp.linspace(a, 1.0, 3))(x), np.linspace(1.5, 1.0, 3))


@pytest.mark.parametrize("start, stop, num, endpoint", [
    ([0.0, 1.0], 2.0, 3, True), ([0.0, 1.0], [[2.0], [3.0]], 4, False), (np.array(2.0), 0.0, 5, True),
    ([1.0, 2.0], [3.0, 5.0], 0, True), ([1.0, 2.0], [3.0, 5.0], 1, True),
])
def test_linspace_of_array_bounds(start, stop, num, endpoint):
    want = np.linspace(start, stop, num, endpoint=endpoint)
    same(vnp.linspace(vnp.asarray(np.asarray(start, F64)), np.asarray(stop, F64), num,
                      endpoint=endpoint), want)


def test_arange_refuses_traced_bounds_as_jax():
    for f in (lambda a: vnp.arange(a), lambda a: vnp.arange(0.0, a),
              lambda a: vnp.arange(0.0, 4.0, a)):
        with pytest.raises(TypeError, match="arange: .* is a traced value .* needs a concrete"):
            vkml.jit(f)(vnp.asarray(3.0))
        with pytest.raises(vkml.ConcretizationError):
            vkml.grad(lambda a: vnp.sum(f(a)))(vnp.asarray(3.0))
    same(vnp.arange(vnp.asarray(3)), np.arange(3))      # concrete 0-d arrays are fine
