"""vkml.numpy.linalg's factorisations and solves against NumPy float64: batched, size-1 and
non-contiguous inputs, reconstruction identities, JAX's values for singular and
non-positive-definite input, gradients by check_grads(order=2) (hessian of slogdet against
its closed form), vmap and jit, and the errors."""
from __future__ import annotations

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
import vkml.numpy.linalg as la
from vkml.test_util import check_grads
from vkml.trace.shapes import ShapeError

F32, F64 = np.float32, np.float64
R = np.random.default_rng(18)


def spd(*shape):
    n = shape[-1]
    m = R.normal(size=shape)
    return m @ np.swapaxes(m, -1, -2) / n + np.eye(n)


def well(*shape):
    n = shape[-1]
    return R.uniform(-1, 1, shape) / np.sqrt(n) + 2 * np.eye(n)


def v(x, d=F64):
    return vnp.asarray(np.asarray(x, d))


def close(got, want, d=F64, k=1.0):
    r = (1e-10 if d == F64 else 2e-4) * k
    np.testing.assert_allclose(np.asarray(got), want, rtol=r, atol=r)


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize("d", [F32, F64])
def test_cholesky_batched_and_reconstructs(d):
    a = spd(2, 3, 6, 6)
    L = la.cholesky(v(a, d))
    assert L.shape == a.shape and L.dtype == d
    close(L, np.linalg.cholesky(a), d)
    Ln = np.asarray(L, F64)
    close(Ln @ np.swapaxes(Ln, -1, -2), a, d, 10)
    close(la.cholesky(v(a, d), upper=True), np.swapaxes(np.linalg.cholesky(a), -1, -2), d)


def test_cholesky_size1_noncontiguous_and_symmetrised():
    close(la.cholesky(v([[4.0]])), [[2.0]])
    a = spd(4, 5, 5)
    x = v(np.swapaxes(a, -1, -2).copy())[::2]                   # a strided batch
    close(la.cholesky(vnp.swapaxes(x, -1, -2)), np.linalg.cholesky(a[::2]))
    # jax.numpy's: the factor of (a + a^T) / 2
    n = R.normal(size=(5, 5)) * 0.1
    close(la.cholesky(v(a[0] + n)), np.linalg.cholesky(a[0] + (n + n.T) / 2))


def test_cholesky_not_positive_definite_is_nan():
    out = np.asarray(la.cholesky(v([[[1.0, 2.0], [2.0, 1.0]], [[4.0, 0.0], [0.0, 9.0]]])))
    assert np.isnan(out[0]).all()
    close(out[1], [[2.0, 0.0], [0.0, 3.0]])


@pytest.mark.parametrize("d", [F32, F64])
def test_solve_vector_matrix_and_broadcast(d):
    a = well(2, 1, 5, 5)
    bm = R.normal(size=(3, 5, 2))
    got = la.solve(v(a, d), v(bm, d))
    assert got.shape == (2, 3, 5, 2)
    close(got, np.linalg.solve(a, bm), d, 10)
    bv = R.normal(size=5)
    close(la.solve(v(a[0, 0], d), v(bv, d)), np.linalg.solve(a[0, 0], bv), d, 10)
    close(la.solve(v([[2.0]], d), v([3.0], d)), [1.5], d)


def test_solve_non_contiguous_and_int_input():
    a = well(6, 6)
    b = R.normal(size=(6, 3))
    close(la.solve(v(a.T.copy()).T, v(b)[:, ::2]), np.linalg.solve(a, b[:, ::2]))
    x = la.solve(vnp.asarray([[2, 0], [0, 4]]), vnp.asarray([2, 2]))
    assert x.dtype == F32
    np.testing.assert_allclose(np.asarray(x), [1.0, 0.5])


def test_singular_gives_inf_or_nan_det_zero():
    s = v([[1.0, 2.0], [2.0, 4.0]])
    assert not np.isfinite(np.asarray(la.solve(s, v([1.0, 1.0])))).all()
    assert not np.isfinite(np.asarray(la.inv(s))).all()
    assert float(la.det(s)) == 0.0
    sign, logdet = la.slogdet(s)
    assert float(sign) == 0.0 and float(logdet) == -np.inf


@pytest.mark.parametrize("d", [F32, F64])
def test_inv_det_slogdet(d):
    a = well(2, 4, 4) * np.array([1.0, -1.0])[:, None, None]     # both signs of det
    a[1] = a[1][[1, 0, 2, 3]]                                      # a pivot that swaps
    close(la.inv(v(a, d)), np.linalg.inv(a), d, 10)
    close(la.det(v(a, d)), np.linalg.det(a), d, 10)
    sign, logdet = la.slogdet(v(a, d))
    ws, wl = np.linalg.slogdet(a)
    np.testing.assert_array_equal(np.asarray(sign), ws)
    close(logdet, wl, d, 10)
    close(la.det(v([[3.0]], d)), 3.0, d)


def test_matrix_power():
    a = well(2, 3, 3)
    for n in (0, 1, 2, 5, -1, -3):
        close(la.matrix_power(v(a), n), np.linalg.matrix_power(a, n), F64, 100)
    with pytest.raises(TypeError, match="matrix_power"):
        la.matrix_power(v(a), 1.5)


# --------------------------------------------------------------------------- transforms


def test_gradients_order2():
    a, b = v(well(2, 3, 3)), v(R.normal(size=(2, 3, 2)))
    check_grads(la.solve, [a, b], order=2)
    check_grads(la.inv, [a[0]], order=2)
    check_grads(lambda a: la.slogdet(a).logabsdet, [a], order=2)
    check_grads(la.det, [a], order=2)
    check_grads(lambda s: la.cholesky(s), [v(spd(3, 3))], order=2)
    check_grads(lambda a: la.matrix_power(a, -2), [a[1]], order=2)


def test_hessian_of_slogdet():
    """d^2 log|det A| / dA_ij dA_kl = -inv(A)_jk inv(A)_li."""
    a = well(3, 3)
    h = vkml.hessian(lambda x: la.slogdet(x)[1])(v(a))
    ai = np.linalg.inv(a)
    close(h, -np.einsum("jk,li->ijkl", ai, ai), F64, 1000)


def test_vmap_and_jit_of_solve():
    a, b = well(4, 3, 3), R.normal(size=(4, 3))
    got = vkml.vmap(la.solve)(v(a), v(b))
    close(got, np.stack([np.linalg.solve(x, y) for x, y in zip(a, b)]))
    got = vkml.vmap(la.solve, in_axes=(None, 0))(v(a[0]), v(b))
    close(got, np.linalg.solve(a[0], b.T).T)
    close(vkml.jit(lambda a, b: la.solve(a, b[..., None]) * 2)(v(a), v(b)), 2 * np.linalg.solve(a, b[..., None]))
    g = vkml.vmap(vkml.grad(lambda a, b: la.solve(a, b).sum()))(v(a), v(b))
    want = [-np.outer(np.linalg.solve(x.T, np.ones(3)), np.linalg.solve(x, y)) for x, y in zip(a, b)]
    close(g, np.stack(want), F64, 100)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("name", ["cholesky", "inv", "det", "slogdet"])
def test_non_square_and_rank_errors(name):
    f = getattr(la, name)
    with pytest.raises(ShapeError, match=f"{name}: a must be a square matrix.*\\(3, 4\\)"):
        f(vnp.ones((3, 4)))
    with pytest.raises(ShapeError, match=name):
        f(vnp.ones((3,)))


def test_solve_shape_errors():
    with pytest.raises(ShapeError, match="solve: a of shape \\(3, 3\\) and b of shape \\(4,\\)"):
        la.solve(vnp.ones((3, 3)), vnp.ones(4))
    with pytest.raises(ShapeError, match="solve: the batch dims"):
        la.solve(vnp.ones((2, 3, 3)), vnp.ones((4, 3, 1)))
    with pytest.raises(ValueError):     # NumPy 2: a 2-d b is (n, k), here (2, 3) against n = 3
        la.solve(vnp.ones((2, 3, 3)), vnp.ones((2, 3)))
    with pytest.raises(ShapeError, match="matrix_power"):
        la.matrix_power(vnp.ones((2, 3)), 2)


def test_large_systems_past_one_kernels_loop_budget():
    """Systems whose elimination passes one dispatch's loop budget on a driver with a loop
    limit (lavapipe's) run as several dispatches: a solve past 128 rows and a Cholesky past
    64 are blocked (MatMuls for the trailing updates), a triangular solve runs as row ranges."""
    a, b = well(240, 240)[R.permutation(240)], R.normal(size=(240, 2))     # every step pivots
    close(la.solve(v(a, F32), v(b, F32)), np.linalg.solve(a, b), F32, 10)
    s = spd(2, 130, 130)
    close(la.cholesky(v(s, F32)), np.linalg.cholesky(s), F32, 10)
    from vkml.scipy.linalg import solve_triangular
    t = well(400, 400)
    close(solve_triangular(v(t, F32), v(b[:1].repeat(400, 0)[:, :1], F32), lower=True),
          np.linalg.solve(np.tril(t), np.full((400, 1), b[0, 0])), F32, 10)


def test_float64_past_shared_memory_held_per_invocation():
    """A float64 40x40 matrix does not fit 16 KiB of shared memory but is small enough for
    the one-invocation-per-matrix kernels (CPU devices): they must not be handed the device-
    memory kernels' scratch. Every step pivots (rows permuted), and 32 right-hand sides."""
    a, b = well(2, 40, 40)[:, R.permutation(40)], R.normal(size=(2, 40, 32))
    close(la.det(v(a)), np.linalg.det(a), F64, 100)
    close(la.solve(v(a[:, :, :30], F64)[:, :30], v(b[:, :30])), np.linalg.solve(a[:, :30, :30], b[:, :30]), F64, 100)
