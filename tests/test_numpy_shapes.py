"""vkml.numpy's triangle, diagonal, rearranging, stacking, splitting and product functions
(composed from other vkml.numpy operations) against NumPy, their errors against NumPy's
exception types, and a few gradients against NumPy's central differences."""
from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp

from tests.test_numpy import check

F64, I32 = np.float64, np.int32
RNG = np.random.default_rng(17)


def f64(*shape):
    return RNG.standard_normal(shape)


def i32(*shape):
    return RNG.integers(-9, 10, size=shape).astype(I32)


def same(got, want):
    """Exact equality of a vkml result (or tuple/list of them) with NumPy's."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
        return
    want = np.asarray(want)
    dtype = {np.dtype(np.int64): I32}.get(want.dtype, want.dtype)
    check(got, want.astype(dtype), dtype)


def raises_like(np_call, vk_call):
    """vk_call raises an exception of the type np_call raises (NumPy's), naming the function."""
    with pytest.raises(Exception) as want:
        np_call()
    with pytest.raises(want.type) as got:
        vk_call()
    return got


# --------------------------------------------------------------------------- triangles, diagonals


@pytest.mark.parametrize("shape", [(4,), (3, 4), (4, 3), (2, 3, 3), (0, 3), (2, 0, 0)])
@pytest.mark.parametrize("k", [-5, -1, 0, 1, 2, 7])
def test_tril_triu(shape, k):
    for x in (f64(*shape), i32(*shape)):
        same(vnp.tril(x, k), np.tril(x, k))
        same(vnp.triu(x, k), np.triu(x, k))
    b = RNG.random(shape) < 0.5
    same(vnp.tril(b, k), np.tril(b, k))


@pytest.mark.parametrize("N, M, k", [(3, None, 0), (3, 5, -1), (4, 2, 2), (0, 3, 0), (2, 2, -9)])
def test_tri(N, M, k):
    same(vnp.tri(N, M, k, dtype=I32), np.tri(N, M, k, dtype=I32))
    check(vnp.tri(N, M, k), np.tri(N, M, k), np.float32)


@pytest.mark.parametrize("shape", [(3, 4), (4, 3), (2, 3, 4), (2, 0, 3), (1, 1)])
@pytest.mark.parametrize("offset", [-4, -1, 0, 1, 3])
@pytest.mark.parametrize("axes", [(0, 1), (1, 0), (-1, 0), (-2, -1)])
def test_diagonal_trace(shape, offset, axes):
    x, y = i32(*shape), f64(*shape)
    same(vnp.diagonal(x, offset, *axes), np.diagonal(x, offset, *axes))
    same(vnp.diagonal(y, offset, *axes), np.diagonal(y, offset, *axes))
    same(vnp.trace(x, offset, *axes), np.trace(x, offset, *axes))
    check(vnp.trace(y, offset, *axes), np.trace(y, offset, *axes), F64)


@pytest.mark.parametrize("shape", [(3,), (1,), (0,), (3, 4), (4, 3)])
@pytest.mark.parametrize("k", [-2, 0, 1, 4])
def test_diag_diagflat(shape, k):
    x = i32(*shape)
    same(vnp.diag(x, k), np.diag(x, k))
    same(vnp.diagflat(x, k), np.diagflat(x, k))
    y = np.array([np.inf, np.nan, -1.0])   # no 0 * inf: off-diagonal cells stay exactly 0
    same(vnp.diag(y, k), np.diag(y, k))


def test_triangle_diagonal_errors():
    raises_like(lambda: np.diagonal(np.ones(3)), lambda: vnp.diagonal(np.ones(3)))
    e = raises_like(lambda: np.diagonal(np.ones((2, 2)), 0, 1, -1),
                    lambda: vnp.diagonal(np.ones((2, 2)), 0, 1, -1))
    assert "diagonal" in str(e.value) and "(2, 2)" in str(e.value)
    raises_like(lambda: np.diagonal(np.ones((2, 2)), 0, 0, 2),
                lambda: vnp.diagonal(np.ones((2, 2)), 0, 0, 2))
    e = raises_like(lambda: np.diag(np.ones((2, 2, 2))), lambda: vnp.diag(np.ones((2, 2, 2))))
    assert "diag" in str(e.value)
    raises_like(lambda: np.trace(np.ones(3)), lambda: vnp.trace(np.ones(3)))


# --------------------------------------------------------------------------- rearranging


@pytest.mark.parametrize("shape, shift, axis", [
    ((5,), 2, None), ((5,), -7, 0), ((2, 3), 4, None), ((2, 3), 1, -1), ((2, 3, 4), (1, -2), (0, 2)),
    ((2, 3, 4), (1, 2), (1, 1)), ((2, 3, 4), 1, (0, 1, 2)), ((0, 3), 2, 0), ((0, 3), 2, None),
    ((), 3, None), ((3, 3), 0, 1), ((4,), 4, 0),
])
def test_roll(shape, shift, axis):
    for x in (i32(*shape), f64(*shape)):
        same(vnp.roll(x, shift, axis), np.roll(x, shift, axis))


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4), (0, 2)])
@pytest.mark.parametrize("k", [-3, -1, 0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("axes", [(0, 1), (1, 0), (-1, 0), (0, -1)])
def test_rot90(shape, k, axes):
    x = i32(*shape)
    same(vnp.rot90(x, k, axes), np.rot90(x, k, axes))


@pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 3, 4), (0, 2)])
def test_flipud_fliplr(shape):
    x = i32(*shape)
    same(vnp.flipud(x), np.flipud(x))
    if len(shape) >= 2:
        same(vnp.fliplr(x), np.fliplr(x))


def test_rearranging_errors():
    raises_like(lambda: np.rot90(np.ones(3)), lambda: vnp.rot90(np.ones(3)))
    raises_like(lambda: np.rot90(np.ones((2, 2)), axes=(0, 0)),
                lambda: vnp.rot90(np.ones((2, 2)), axes=(0, 0)))
    raises_like(lambda: np.rot90(np.ones((2, 2)), axes=(0, 1, 2)),
                lambda: vnp.rot90(np.ones((2, 2)), axes=(0, 1, 2)))
    raises_like(lambda: np.rot90(np.ones((2, 2)), axes=(0, 2)),
                lambda: vnp.rot90(np.ones((2, 2)), axes=(0, 2)))
    e = raises_like(lambda: np.flipud(np.float64(1)), lambda: vnp.flipud(np.float64(1)))
    assert "flipud" in str(e.value)
    e = raises_like(lambda: np.fliplr(np.ones(3)), lambda: vnp.fliplr(np.ones(3)))
    assert "fliplr" in str(e.value) and "(3,)" in str(e.value)
    raises_like(lambda: np.roll(np.ones((2, 2)), 1, 2), lambda: vnp.roll(np.ones((2, 2)), 1, 2))
    raises_like(lambda: np.roll(np.ones((2, 2)), (1, 2, 3), (0, 1)),
                lambda: vnp.roll(np.ones((2, 2)), (1, 2, 3), (0, 1)))


# --------------------------------------------------------------------------- at least n-d, stacking


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (2, 3, 4), (0,)])
def test_atleast(shape):
    x = i32(*shape)
    for name in ("atleast_1d", "atleast_2d", "atleast_3d"):
        same(getattr(vnp, name)(x), getattr(np, name)(x))
        same(getattr(vnp, name)(x, np.float32(2.5)), getattr(np, name)(x, np.float32(2.5)))


@pytest.mark.parametrize("shapes", [
    [(3,), (3,)], [(2, 3), (1, 3)], [(), ()], [(2, 3, 4), (2, 3, 4)], [(0, 3), (2, 3)], [(4,)],
])
def test_stacks(shapes):
    xs = [i32(*s) for s in shapes]
    for name in ("vstack", "hstack", "dstack", "column_stack", "row_stack"):
        try:
            want = getattr(np, "vstack" if name == "row_stack" else name)(xs)
        except ValueError:
            with pytest.raises(ValueError, match=name):
                getattr(vnp, name)(xs)
            continue
        same(getattr(vnp, name)(xs), want)
    mixed = [xs[0].astype(F64), xs[0]]     # dtypes promoted
    same(vnp.hstack(mixed), np.hstack(mixed))


def test_stack_errors():
    for name in ("vstack", "hstack", "dstack", "column_stack"):
        e = raises_like(lambda: getattr(np, name)([]), lambda: getattr(vnp, name)([]))
        assert name in str(e.value)
        raises_like(lambda: getattr(np, name)([np.ones((2, 2)), np.ones((3, 3))]),
                    lambda: getattr(vnp, name)([np.ones((2, 2)), np.ones((3, 3))]))


# --------------------------------------------------------------------------- products, differences


@pytest.mark.parametrize("sa, sb, axes", [
    ((2, 3, 4), (3, 4, 5), 2), ((2, 3), (3, 2), 1), ((2, 3), (4,), 0), ((), (), 0),
    ((2, 3, 4), (4, 3), ([2, 1], [0, 1])), ((3, 2), (2, 3), ([0], [1])), ((2, 0), (0, 3), 1),
    ((2, 3), (2, 3), ([-1, -2], [1, 0])), ((0, 2), (2, 3), 1),
])
def test_tensordot(sa, sb, axes):
    xi, yi = i32(*sa), i32(*sb)
    same(vnp.tensordot(xi, yi, axes), np.tensordot(xi, yi, axes))
    x, y = f64(*sa), f64(*sb)
    check(vnp.tensordot(x, y, axes), np.tensordot(x, y, axes), F64)


@pytest.mark.parametrize("sa, sb", [((3,), (3,)), ((2, 3), (4, 3)), ((), (2, 2)), ((2, 1, 4), (4,))])
def test_inner(sa, sb):
    x, y = f64(*sa), f64(*sb)
    check(vnp.inner(x, y), np.inner(x, y), F64)
    xi, yi = i32(*sa), i32(*sb)
    same(vnp.inner(xi, yi), np.inner(xi, yi))


@pytest.mark.parametrize("sa, sb", [((2,), (3,)), ((2, 2), (2, 3)), ((3,), (2, 2)), ((2, 1, 2), (3, 2)),
                                    ((), (2,)), ((0, 2), (2, 2))])
def test_kron(sa, sb):
    xi, yi = i32(*sa), i32(*sb)
    same(vnp.kron(xi, yi), np.kron(xi, yi))
    x, y = f64(*sa), f64(*sb)
    check(vnp.kron(x, y), np.kron(x, y), F64)


@pytest.mark.parametrize("sa, sb, kw", [
    ((3,), (3,), {}), ((4, 3), (3,), {}), ((2, 1, 3), (4, 3), {}), ((3, 2), (3, 2), {"axis": 0}),
    ((3, 4), (4, 3), {"axisa": 0, "axisc": 0}), ((2,), (3,), {}), ((3,), (2,), {}),
    ((5, 2), (5, 2), {}), ((0, 3), (3,), {}), ((2, 3), (3, 2), {"axisb": 0, "axisc": -2}),
])
def test_cross(sa, sb, kw):
    x, y = f64(*sa), f64(*sb)
    check(vnp.cross(x, y, **kw), _np_cross(x, y, **kw), F64)
    xi, yi = i32(*sa), i32(*sb)
    same(vnp.cross(xi, yi, **kw), _np_cross(xi, yi, **kw))


def _np_cross(a, b, **kw):
    """np.cross, with NumPy 1's 2-vectors (a missing z of 0; two of them give the z
    value), which newer NumPy refuses: the cases with them here use the last axis."""
    if kw or (a.shape[-1] == 3 and b.shape[-1] == 3) or 0 in a.shape + b.shape:
        with _quiet():
            return np.cross(a, b, **kw)
    pad = [(0, 0)] * (a.ndim - 1) + [(0, 3 - a.shape[-1])], [(0, 0)] * (b.ndim - 1) + [(0, 3 - b.shape[-1])]
    c = np.cross(np.pad(a, pad[0]), np.pad(b, pad[1]))
    return c[..., 2] if a.shape[-1] == 2 and b.shape[-1] == 2 else c


@contextlib.contextmanager
def _quiet():
    """NumPy 2 deprecates 2-vectors in cross; its answer is still the oracle."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


@pytest.mark.parametrize("shape, n, axis, pre, app", [
    ((5,), 1, -1, None, None), ((5,), 3, 0, None, None), ((3, 4), 1, 0, None, None),
    ((3, 4), 2, -1, 0, None), ((3, 4), 1, 1, None, np.ones((3, 2), I32)), ((2, 3, 4), 1, -2, None, None),
    ((4,), 0, -1, None, None), ((3,), 5, -1, None, None), ((0, 3), 1, 0, None, None), ((2,), 1, 0, 7, [1, 2]),
])
def test_diff(shape, n, axis, pre, app):
    x = i32(*shape)
    kw = {k: v for k, v in (("prepend", pre), ("append", app)) if v is not None}
    same(vnp.diff(x, n, axis, pre, app), np.diff(x, n, axis, **kw))
    y = f64(*shape)
    check(vnp.diff(y, n, axis), np.diff(y, n, axis), F64)
    b = RNG.random(shape) < 0.5
    same(vnp.diff(b, n, axis), np.diff(b, n, axis))


@pytest.mark.parametrize("shape", [(5,), (2, 3), (1,), (0,)])
def test_ediff1d(shape):
    x = i32(*shape)
    same(vnp.ediff1d(x), np.ediff1d(x))
    same(vnp.ediff1d(x, to_end=[7, 8], to_begin=-1), np.ediff1d(x, to_end=[7, 8], to_begin=-1))
    y = f64(*shape)
    check(vnp.ediff1d(y, to_begin=np.array([1.5])), np.ediff1d(y, to_begin=np.array([1.5])), F64)


# --------------------------------------------------------------------------- repeating, splitting


@pytest.mark.parametrize("shape, repeats, axis", [
    ((3,), 2, None), ((2, 3), 2, None), ((2, 3), 3, 1), ((2, 3), [1, 0, 2], -1), ((2, 3), [2, 1], 0),
    ((), 3, None), ((2, 3), 0, 0), ((0, 3), 2, 0), ((2, 3), np.array([1, 2, 3]), 1), ((3,), [4], 0),
])
def test_repeat(shape, repeats, axis):
    x = i32(*shape)
    same(vnp.repeat(x, repeats, axis), np.repeat(x, repeats, axis))


@pytest.mark.parametrize("shape, reps", [
    ((3,), 2), ((3,), (2, 2)), ((2, 3), (2,)), ((2, 3), (1, 2, 1)), ((), (2, 3)), ((2, 3), 0), ((0, 2), 3),
    ((2, 1, 2), (2, 1, 3)),
])
def test_tile(shape, reps):
    x = i32(*shape)
    same(vnp.tile(x, reps), np.tile(x, reps))


@pytest.mark.parametrize("sa, sb, axis", [((3,), (2,), None), ((2, 3), (4,), None), ((2, 3), (1, 3), 0),
                                          ((2, 3), (2, 2), -1), ((), (), None)])
def test_append(sa, sb, axis):
    x, y = i32(*sa), i32(*sb)
    same(vnp.append(x, y, axis), np.append(x, y, axis))


@pytest.mark.parametrize("shape, ios, axis", [
    ((7,), 3, 0), ((6,), 3, 0), ((2, 5), 4, 1), ((2, 5), 7, -1), ((6, 2), [1, 4], 0), ((6,), [2, 2, 9], 0),
    ((6,), [-2], 0), ((0,), 2, 0), ((3,), [], 0),
])
def test_array_split(shape, ios, axis):
    x = i32(*shape)
    same(vnp.array_split(x, ios, axis), np.array_split(x, ios, axis))


@pytest.mark.parametrize("shape, ios", [((4, 2, 6), 2), ((4, 2, 6), [1, 3]), ((6,), 3), ((2, 4, 2), [1])])
def test_vsplit_hsplit_dsplit(shape, ios):
    x = i32(*shape)
    for name in ("vsplit", "hsplit", "dsplit"):
        try:
            want = getattr(np, name)(x, ios)
        except ValueError:
            with pytest.raises(ValueError, match=name):
                getattr(vnp, name)(x, ios)
            continue
        same(getattr(vnp, name)(x, ios), want)


@pytest.mark.parametrize("sizes", [(3,), (2, 3), (2, 3, 4), (0, 2), ()])
@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("sparse", [False, True])
def test_meshgrid(sizes, indexing, sparse):
    xs = [i32(n) for n in sizes]
    same(vnp.meshgrid(*xs, indexing=indexing, sparse=sparse),
         np.meshgrid(*xs, indexing=indexing, sparse=sparse))
    if len(sizes) == 2:   # dtypes kept apart
        xs[1] = f64(sizes[1])
        same(vnp.meshgrid(*xs, indexing=indexing, sparse=sparse),
             np.meshgrid(*xs, indexing=indexing, sparse=sparse))


def test_group_b_errors():
    a, b = np.ones((2, 3)), np.ones((4, 3))
    cases = [
        ("tensordot", lambda m: m.tensordot(a, b, 1)),
        ("tensordot", lambda m: m.tensordot(a, b, ([0, 1], [0]))),
        ("inner", lambda m: m.inner(a, np.ones(2))),
        ("cross", lambda m: m.cross(np.ones(4), np.ones(3))),
        ("diff", lambda m: m.diff(np.float64(1))),
        ("diff", lambda m: m.diff(a, -1)),
        ("diff", lambda m: m.diff(a, 1, 2)),
        ("repeat", lambda m: m.repeat(a, [1, 2], 1)),
        ("repeat", lambda m: m.repeat(a, -1)),
        ("tile", lambda m: m.tile(a, -1)),
        ("append", lambda m: m.append(a, np.ones((2, 2)), 0)),
        ("array_split", lambda m: m.array_split(a, 0)),
        ("vsplit", lambda m: m.vsplit(np.ones(4), 2)),
        ("hsplit", lambda m: m.hsplit(np.float64(1), 2)),
        ("dsplit", lambda m: m.dsplit(a, 2)),
        ("split", lambda m: m.hsplit(a, 2)),
        ("meshgrid", lambda m: m.meshgrid(np.ones(2), indexing="xx")),
    ]
    for name, call in cases:
        e = raises_like(lambda: call(np), lambda: call(vnp))
        assert name in str(e.value), (name, str(e.value))
    raises_like(lambda: np.ediff1d(np.arange(3), to_begin=1.5),
                lambda: vnp.ediff1d(np.arange(3), to_begin=1.5))


# --------------------------------------------------------------------------- gradients, jit


def grad_like_numpy(f, *xs):
    """vkml.grad of sum(f(...) * w) equals NumPy's float64 central differences of the same, w a
    fixed random weight (so every output element's cotangent differs), for each argument.
    Every case below is at most quadratic in each argument, so the central difference is exact
    up to rounding and the tolerance can stay float64's."""
    out = np.asarray(f(np, *xs))
    w = RNG.standard_normal(out.shape)
    h = 0.5
    for i in range(len(xs)):
        got = vkml.grad(lambda *a: vnp.sum(f(vnp, *a) * w), argnums=i)(*xs)
        want = np.zeros_like(xs[i])
        for j in np.ndindex(xs[i].shape):
            plus, minus = [list(xs) for _ in range(2)]
            plus[i], minus[i] = xs[i].copy(), xs[i].copy()
            plus[i][j] += h
            minus[i][j] -= h
            want[j] = (np.sum(f(np, *plus) * w) - np.sum(f(np, *minus) * w)) / (2 * h)
        check(got, want, F64)


GRADS = {
    "trace": (lambda m, x: m.trace(x, 1, -1, 0), [(3, 4, 2)]),
    "diagonal": (lambda m, x: m.diagonal(x, -1), [(4, 3)]),
    "tril": (lambda m, x: m.tril(x, -1), [(2, 3, 4)]),
    "triu": (lambda m, x: m.triu(x, 1), [(3, 4)]),
    "diag": (lambda m, x: m.diag(x, 1), [(3,)]),
    "roll": (lambda m, x: m.roll(x, (1, -2), (0, 1)), [(3, 4)]),
    "rot90": (lambda m, x: m.rot90(x, 3, (1, 0)), [(2, 3)]),
    "kron": (lambda m, x, y: m.kron(x, y), [(2, 3), (3, 2)]),
    "cross": (lambda m, x, y: m.cross(x, y, axisa=0), [(3, 4), (4, 3)]),
    "diff": (lambda m, x: m.diff(x, 2, 0), [(5, 3)]),
    "tensordot": (lambda m, x, y: m.tensordot(x, y, ([0, 2], [1, 0])), [(2, 3, 4), (4, 2)]),
    "repeat_tile": (lambda m, x: m.repeat(x, 2, 1) + m.tile(x, (1, 2)), [(2, 3)]),
    "repeat_counts": (lambda m, x: m.repeat(x, np.array([2, 0, 1]), 0), [(3, 2)]),
    "splits": (lambda m, x: m.array_split(x, 3, 1)[1] * m.hsplit(x, [2])[0][:, 1:], [(2, 5)]),
    "meshgrid": (lambda m, x, y: m.meshgrid(x, y)[0] * m.meshgrid(x, y)[1], [(3,), (2,)]),
    "stacks": (lambda m, x, y: m.column_stack([x, y]) + m.vstack([x, x]).T[:, :1] * m.hstack([y, y]), [(3,), (3, 1)]),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_grad_against_numpy(name):
    f, shapes = GRADS[name]
    grad_like_numpy(f, *[f64(*s) for s in shapes])


def test_under_jit():
    x, y = f64(3, 4), f64(3)
    f = vkml.jit(lambda a, b: (vnp.trace(a, 1), vnp.tril(a, -1), vnp.roll(a, 2, 1),
                               vnp.rot90(a), vnp.vstack([b, b]), vnp.diag(b, -1)))
    want = (np.trace(x, 1), np.tril(x, -1), np.roll(x, 2, 1), np.rot90(x), np.vstack([y, y]),
            np.diag(y, -1))
    for _ in range(2):
        for g, w in zip(f(x, y), want):
            check(g, w, F64)


def test_group_b_under_jit():
    x, y, z = f64(3, 4), f64(4, 3), f64(2, 3)
    f = vkml.jit(lambda a, b, c: (vnp.tensordot(a, b, 1), vnp.kron(c, a), vnp.cross(a, b, axisa=0),
                                  vnp.diff(a, 2, 1, prepend=0.0), vnp.repeat(c, [2, 0], 0),
                                  vnp.tile(c, (2, 1)), vnp.array_split(a, 3, 1)[2],
                                  vnp.meshgrid(c[0], a[0])[1]))
    want = (np.tensordot(x, y, 1), np.kron(z, x), np.cross(x, y, axisa=0),
            np.diff(x, 2, 1, prepend=0.0), np.repeat(z, [2, 0], 0), np.tile(z, (2, 1)),
            np.array_split(x, 3, 1)[2], np.meshgrid(z[0], x[0])[1])
    for _ in range(2):
        for g, w in zip(f(x, y, z), want):
            check(g, w, F64)
