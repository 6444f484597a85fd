"""vkml.scipy.linalg against NumPy float64 oracles (scipy is not a dependency): triangular
solves in every form, cho_factor/cho_solve, lu_factor/lu_solve/lu by their identities
(P L U = A, pivots of getrf's choice), gradients through cholesky then cho_solve and
through lu_solve (check_grads, order 2), and the errors."""
from __future__ import annotations

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.scipy import linalg as sl
from vkml.test_util import check_grads
from vkml.trace.shapes import ShapeError

F32, F64 = np.float32, np.float64
R = np.random.default_rng(19)


def well(*shape):
    n = shape[-1]
    return R.uniform(-1, 1, shape) / np.sqrt(n) + 2 * np.eye(n)


def spd(*shape):
    n = shape[-1]
    m = R.normal(size=shape)
    return m @ np.swapaxes(m, -1, -2) / n + np.eye(n)


def v(x, d=F64):
    return vnp.asarray(np.asarray(x, d))


def close(got, want, d=F64, k=1.0):
    r = (1e-10 if d == F64 else 2e-4) * k
    np.testing.assert_allclose(np.asarray(got), want, rtol=r, atol=r)


def getrf_pivots(a):
    """LAPACK's interchanges (first largest |pivot|), 0-based, by elimination in float64."""
    m = np.array(a, F64)
    piv = []
    for j in range(m.shape[0]):
        p = j + int(np.argmax(np.abs(m[j:, j])))
        piv.append(p)
        m[[j, p]] = m[[p, j]]
        m[j + 1:, j:] -= np.outer(m[j + 1:, j] / m[j, j], m[j, j:])
    return piv


@pytest.mark.parametrize("d", [F32, F64])
def test_solve_triangular_every_form(d):
    a = well(2, 5, 5)
    bm = R.normal(size=(2, 5, 3))
    for lower in (True, False):
        t = np.tril(a) if lower else np.triu(a)
        for trans in (0, 1, 2, "N", "T", "C"):
            for unit in (False, True):
                m = t * (1 - np.eye(5)) + np.eye(5) if unit else t
                m = m if trans in (0, "N") else np.swapaxes(m, -1, -2)
                got = sl.solve_triangular(v(a, d), v(bm, d), trans=trans, lower=lower, unit_diagonal=unit)
                close(got, np.linalg.solve(m, bm), d, 10)
    # a vector right-hand side (one dimension fewer than a), a 1x1 system, a broadcast batch
    close(sl.solve_triangular(v(a[0], d), v(bm[0, :, 0], d), lower=True),
          np.linalg.solve(np.tril(a[0]), bm[0, :, 0]), d, 10)
    close(sl.solve_triangular(v([[4.0]], d), v([2.0], d)), [0.5], d)
    close(sl.solve_triangular(v(a, d), v(bm[:1], d)), np.linalg.solve(np.triu(a), bm[:1]), d, 10)


@pytest.mark.parametrize("lower", [False, True])
def test_cho_factor_and_solve(lower):
    a = spd(3, 6, 6)
    c, low = sl.cho_factor(v(a), lower=lower)
    assert low is lower
    L = np.linalg.cholesky(a)
    close(c, L if lower else np.swapaxes(L, -1, -2))
    b = R.normal(size=(3, 6, 2))
    close(sl.cho_solve((c, low), v(b)), np.linalg.solve(a, b))
    close(sl.cho_solve((c[0], low), v(b[0, :, 0])), np.linalg.solve(a[0], b[0, :, 0]))
    close(sl.cholesky(v(a), lower=lower), L if lower else np.swapaxes(L, -1, -2))


@pytest.mark.parametrize("d", [F32, F64])
def test_lu_factor_pivots_and_reconstruction(d):
    a = well(2, 6, 6)
    a[0] = a[0][[3, 1, 5, 0, 2, 4]] * 3 + R.uniform(-0.5, 0.5, (6, 6))   # pivots that move
    lu_, piv = sl.lu_factor(v(a, d))
    assert lu_.dtype == d and piv.dtype == np.int32 and piv.shape == (2, 6)
    assert [getrf_pivots(x) for x in a] == np.asarray(piv).tolist()
    F = np.asarray(lu_, F64)
    L, U = np.tril(F, -1) + np.eye(6), np.triu(F)
    p = np.arange(6)[None].repeat(2, 0)
    for i in range(2):
        for j, q in enumerate(np.asarray(piv)[i]):
            p[i, [j, q]] = p[i, [q, j]]
    close(L @ U, np.take_along_axis(a, p[..., None], 1), d, 10)
    b = R.normal(size=(2, 6, 3))
    close(sl.lu_solve((lu_, piv), v(b, d)), np.linalg.solve(a, b), d, 10)
    close(sl.lu_solve((lu_, piv), v(b, d), trans=1), np.linalg.solve(np.swapaxes(a, -1, -2), b), d, 10)
    close(sl.lu_solve((lu_[0], piv[0]), v(b[0, :, 1], d)), np.linalg.solve(a[0], b[0, :, 1]), d, 10)


def test_lu_forms():
    a = well(3, 5, 5)[:, ::-1]          # reversed rows (non-contiguous): every step pivots
    p, l, u = sl.lu(v(a.copy())[:, ::1])
    P, L, U = (np.asarray(x) for x in (p, l, u))
    close(P @ L @ U, a)
    assert np.allclose(np.tril(L), L) and np.allclose(np.diagonal(L, 0, 1, 2), 1) and np.allclose(np.triu(U), U)
    pi, l2, u2 = sl.lu(v(a), p_indices=True)
    close(np.take_along_axis(np.asarray(l2), np.asarray(pi)[..., None].astype(np.int64), 1) @ np.asarray(u2), a)
    pl, u3 = sl.lu(v(a), permute_l=True)
    close(np.asarray(pl) @ np.asarray(u3), a)
    p1, l1, u1 = sl.lu(v([[2.0]]))
    assert np.asarray(p1).tolist() == [[1.0]] and np.asarray(u1).tolist() == [[2.0]]


def test_gradients_through_cholesky_and_solves():
    a, b = v(spd(3, 3)), v(R.normal(size=(3, 2)))

    def gp(a, b):      # a Gaussian process's negative log likelihood, up to constants
        c = sl.cho_factor(a, lower=True)
        return (b * sl.cho_solve(c, b)).sum() + 2 * vnp.log(vnp.diagonal(c[0])).sum()
    check_grads(gp, [a, b], order=2)
    check_grads(lambda a, b: sl.lu_solve(sl.lu_factor(a), b, trans=1), [v(well(3, 3)), b], order=2)
    check_grads(lambda t, b: sl.solve_triangular(t, b, lower=True, trans="T"), [v(well(3, 3)), b], order=2)
    check_grads(lambda a: sl.lu(a)[2], [v(well(3, 3))], order=2)
    # grad of the GP loss: inv(a) - inv(a) b b^T inv(a)
    g = vkml.grad(gp)(a, b)
    ai, bn = np.linalg.inv(np.asarray(a)), np.asarray(b)
    close(g, ai - ai @ bn @ bn.T @ ai, F64, 1000)


def test_errors():
    with pytest.raises(ShapeError, match="solve_triangular: a must be a square matrix"):
        sl.solve_triangular(vnp.ones((2, 3)), vnp.ones(2))
    with pytest.raises(ShapeError, match="solve_triangular: a of shape \\(3, 3\\) and b of shape \\(2,\\)"):
        sl.solve_triangular(vnp.ones((3, 3)), vnp.ones(2))
    with pytest.raises(ValueError, match="solve_triangular: trans"):
        sl.solve_triangular(vnp.eye(3), vnp.ones(3), trans=3)
    with pytest.raises(ShapeError, match="lu_factor: a must be a square matrix"):
        sl.lu_factor(vnp.ones((2, 3)))
    with pytest.raises(ShapeError, match="lu_solve: piv must be int32 of shape \\(3,\\)"):
        sl.lu_solve((vnp.eye(3), vnp.zeros(2, dtype=np.int32)), vnp.ones(3))
    with pytest.raises(TypeError, match="cho_solve: the first argument must be the pair"):
        sl.cho_solve(vnp.eye(3), vnp.ones(3))
    with pytest.raises(ShapeError, match="cho_solve: c must be a square matrix"):
        sl.cho_solve((vnp.ones((3, 2)), True), vnp.ones(3))


def test_lu_factor_of_a_large_matrix_stepwise():
    """Past 128 rows an elimination in device memory runs one step per dispatch pair."""
    a = well(140, 140)[R.permutation(140)] * 4 + R.uniform(-0.5, 0.5, (140, 140))
    lu_, piv = sl.lu_factor(v(a))
    assert np.asarray(piv).tolist() == getrf_pivots(a)
    F = np.asarray(lu_)
    p = sl.lu(v(a), p_indices=True)[0]
    close((np.tril(F, -1) + np.eye(140)) @ np.triu(F), a[np.argsort(np.asarray(p))], F64, 100)


def expm_ref(a):
    """Taylor series of a / 2^s (30 terms), squared s times, in float64."""
    s = max(0, int(np.ceil(np.log2(max(np.abs(a).sum(0).max(), 1e-30))))) + 2
    x, r, t = a / 2.0 ** s, np.eye(len(a)), np.eye(len(a))
    for k in range(1, 30):
        t = t @ x / k
        r = r + t
    for _ in range(s):
        r = r @ r
    return r


def test_expm():
    a = R.normal(size=(3, 4, 4)) * np.array([0.1, 1.0, 20.0])[:, None, None]   # 0 to 7 squarings
    got = np.asarray(sl.expm(v(a)))
    for g, x in zip(got, a):
        np.testing.assert_allclose(g, expm_ref(x), rtol=1e-12 * np.abs(expm_ref(x)).max(), atol=1e-12 * np.abs(expm_ref(x)).max())
    close(sl.expm(v(np.zeros((2, 2)))), np.eye(2))
    close(sl.expm(v(np.diag([1.0, -2.0]))), np.diag(np.exp([1.0, -2.0])), F64, 10)
    close(sl.expm(v(a[1], F32)), expm_ref(a[1]), F32, 10)
    with pytest.raises(ShapeError, match="expm: a must be a square matrix"):
        sl.expm(vnp.ones((2, 3)))


def test_expm_gradients_order2():
    # a norm past one squaring: the masked squarings differentiate as the ones taken
    w = v(R.normal(size=(3, 3)))
    check_grads(lambda a: vnp.sum(sl.expm(a) * w), [v(R.normal(size=(3, 3)))], order=2)
