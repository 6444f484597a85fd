"""vkml.numpy's triangle, diagonal, rearranging, stacking, splitting and product functions
(composed from other vkml.numpy operations) against NumPy, their errors against NumPy's
exception types, and a few gradients against jax.numpy."""
from __future__ import annotations

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


# --------------------------------------------------------------------------- gradients, jit


@pytest.fixture
def jnp():
    """jax.numpy with float64 on, restored after the test."""
    import jax
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    import jax.numpy
    yield jax.numpy
    jax.config.update("jax_enable_x64", old)


def grad_like_jax(f, *xs):
    """vkml.grad of sum(f(...) * w) equals jax.grad of the same, w a fixed random weight
    (so every output element's cotangent differs), for each float64 argument."""
    import jax
    import jax.numpy as jnp
    out = np.asarray(f(np, *xs))
    w = RNG.standard_normal(out.shape)
    for i in range(len(xs)):
        got = vkml.grad(lambda *a: vnp.sum(f(vnp, *a) * w), argnums=i)(*xs)
        want = jax.grad(lambda *a: jnp.sum(f(jnp, *a) * w), argnums=i)(*xs)
        check(got, np.asarray(want), F64)


GRADS = {
    "trace": (lambda m, x: m.trace(x, 1, -1, 0), [(3, 4, 2)]),
    "diagonal": (lambda m, x: m.diagonal(x, -1), [(4, 3)]),
    "tril": (lambda m, x: m.tril(x, -1), [(2, 3, 4)]),
    "triu": (lambda m, x: m.triu(x, 1), [(3, 4)]),
    "diag": (lambda m, x: m.diag(x, 1), [(3,)]),
    "roll": (lambda m, x: m.roll(x, (1, -2), (0, 1)), [(3, 4)]),
    "rot90": (lambda m, x: m.rot90(x, 3, (1, 0)), [(2, 3)]),
    "stacks": (lambda m, x, y: m.column_stack([x, y]) + m.vstack([x, x]).T[:, :1] * m.hstack([y, y]), [(3,), (3, 1)]),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_grad_against_jax(name, jnp):
    f, shapes = GRADS[name]
    grad_like_jax(f, *[f64(*s) for s in shapes])


def test_under_jit():
    x, y = f64(3, 4), f64(3)
    f = vkml.jit(lambda a, b: (vnp.trace(a, 1), vnp.tril(a, -1), vnp.roll(a, 2, 1),
                               vnp.rot90(a), vnp.vstack([b, b]), vnp.diag(b, -1)))
    want = (np.trace(x, 1), np.tril(x, -1), np.roll(x, 2, 1), np.rot90(x), np.vstack([y, y]),
            np.diag(y, -1))
    for _ in range(2):
        for g, w in zip(f(x, y), want):
            check(g, w, F64)
