"""vkml.numpy.linalg's spectral half against NumPy in float64: qr, eigh, eigvalsh, svd,
pinv, lstsq, matrix_rank, cond, norm, multi_dot. Batched, size-1 and non-contiguous
inputs, reconstruction identities (Q R = A, Q^T Q = I, V diag(w) V^T = A, U S V^T = A),
second-order gradients of gauge-invariant functions, vmap and jit, and the errors."""
from __future__ import annotations

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
import vkml.numpy.linalg as la
from vkml.test_util import check_grads
from vkml.trace.shapes import ShapeError

R = np.random.default_rng(7)
F64, F32 = np.float64, np.float32


def A(*shape, dtype=F64):
    return R.standard_normal(shape).astype(dtype)


def sym(*shape, dtype=F64):
    a = R.standard_normal(shape)
    return ((a + np.swapaxes(a, -1, -2)) / 2).astype(dtype)


def close(got, want, tol=1e-12):
    np.testing.assert_allclose(np.asarray(got, F64), want, rtol=0, atol=tol * max(1.0, np.abs(want).max()))


def mT(x):
    return np.swapaxes(x, -1, -2)


# --------------------------------------------------------------------------- qr


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 3, 4, 4), (1, 1)])
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr_reconstructs_and_matches_numpy(shape, mode):
    a = A(*shape)
    q, r = la.qr(vnp.asarray(a), mode=mode)
    q, r = np.asarray(q), np.asarray(r)
    qn, rn = np.linalg.qr(a, mode=mode)
    assert q.shape == qn.shape and r.shape == rn.shape
    close(q @ r, a)
    close(mT(q) @ q, np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + (q.shape[-1],) * 2))
    close(np.abs(r), np.abs(rn))
    assert np.all(np.tril(r, -1) == 0)
    close(np.abs(np.asarray(la.qr(vnp.asarray(a), mode="r"))), np.abs(np.linalg.qr(a, mode="r")))


def test_qr_of_transposed_and_integer_input():
    a = A(4, 6)
    q, r = la.qr(vnp.asarray(a).T)
    close(np.asarray(q) @ np.asarray(r), a.T)
    qi, ri = la.qr(vnp.asarray(np.arange(6).reshape(3, 2)))
    assert qi.dtype == np.float32 and ri.dtype == np.float32
    close(np.asarray(qi) @ np.asarray(ri), np.arange(6.0).reshape(3, 2), 1e-6)


# --------------------------------------------------------------------------- eigh


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (3, 2, 5, 5)])
def test_eigh_reconstructs_and_matches_numpy(shape):
    a = sym(*shape)
    w, v = la.eigh(vnp.asarray(a))
    w, v = np.asarray(w), np.asarray(v)
    close(w, np.linalg.eigvalsh(a))
    close((v * w[..., None, :]) @ mT(v), a)
    close(mT(v) @ v, np.broadcast_to(np.eye(shape[-1]), a.shape))
    close(la.eigvalsh(vnp.asarray(a)), np.linalg.eigvalsh(a))


def test_eigh_uplo_float32_and_noncontiguous():
    a = A(6, 6)
    # symmetrize_input=False reads one triangle only, as NumPy's eigh
    for uplo in ("L", "U"):
        close(la.eigvalsh(vnp.asarray(a), UPLO=uplo, symmetrize_input=False), np.linalg.eigvalsh(a, UPLO=uplo))
    # the default (JAX's) symmetrizes
    close(la.eigvalsh(vnp.asarray(a)), np.linalg.eigvalsh((a + a.T) / 2))
    s = sym(2, 33, 33)
    w, v = la.eigh(vnp.swapaxes(vnp.asarray(s.astype(F32)), -1, -2))
    assert w.dtype == np.float32
    close(w, np.linalg.eigvalsh(s), 2e-6)
    close((np.asarray(v) * np.asarray(w)[..., None, :]) @ mT(np.asarray(v)), s, 2e-5)


# --------------------------------------------------------------------------- svd


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (2, 3, 3), (1, 1), (5, 1)])
def test_svd_thin_and_full(shape):
    a = A(*shape)
    k = min(shape[-2:])
    u, s, vh = (np.asarray(t) for t in la.svd(vnp.asarray(a), full_matrices=False))
    close(s, np.linalg.svd(a, compute_uv=False))
    close((u * s[..., None, :]) @ vh, a)
    close(mT(u) @ u, np.broadcast_to(np.eye(k), a.shape[:-2] + (k, k)))
    close(vh @ mT(vh), np.broadcast_to(np.eye(k), a.shape[:-2] + (k, k)))
    U, S, Vh = (np.asarray(t) for t in la.svd(vnp.asarray(a)))
    m, n = shape[-2:]
    assert U.shape[-2:] == (m, m) and Vh.shape[-2:] == (n, n)
    close(mT(U) @ U, np.broadcast_to(np.eye(m), a.shape[:-2] + (m, m)))
    close(Vh @ mT(Vh), np.broadcast_to(np.eye(n), a.shape[:-2] + (n, n)))
    close((U[..., :, :k] * S[..., None, :]) @ Vh[..., :k, :], a)
    close(la.svd(vnp.asarray(a), compute_uv=False), np.linalg.svd(a, compute_uv=False))


def test_svd_hermitian_and_transposed():
    a = sym(5, 5)
    u, s, vh = (np.asarray(t) for t in la.svd(vnp.asarray(a), hermitian=True))
    close(s, np.linalg.svd(a, compute_uv=False))
    close((u * s) @ vh, a)
    b = A(3, 7)
    close(la.svd(vnp.asarray(b).T, compute_uv=False), np.linalg.svd(b.T, compute_uv=False))


# --------------------------------------------------------------------------- composed


def test_pinv_lstsq_rank_cond():
    a = A(6, 4)
    close(la.pinv(vnp.asarray(a)), np.linalg.pinv(a))
    batch = A(2, 3, 5)
    close(la.pinv(vnp.asarray(batch)), np.linalg.pinv(batch))
    low = A(5, 2) @ A(2, 4)          # rank 2
    close(la.pinv(vnp.asarray(low)), np.linalg.pinv(low), 1e-10)
    assert int(la.matrix_rank(vnp.asarray(low))) == 2 == np.linalg.matrix_rank(low)
    np.testing.assert_array_equal(la.matrix_rank(vnp.asarray(np.stack([low, a[:5]]))), [2, 4])
    assert int(la.matrix_rank(vnp.asarray(low), tol=1e9)) == 0
    assert int(la.matrix_rank(vnp.asarray([0.0, 1.0]))) == 1
    for b in (A(6), A(6, 3)):
        x, res, rank, s = la.lstsq(vnp.asarray(a), vnp.asarray(b))
        xn, resn, rankn, sn = np.linalg.lstsq(a, b)
        close(x, xn)
        close(res, resn)
        assert int(rank) == rankn
        close(s, sn)
    x, res, rank, s = la.lstsq(vnp.asarray(low), vnp.asarray(A(5)))
    assert int(rank) == 2
    sq = A(4, 4)
    for p in (None, 2, -2, 1, -1, np.inf, -np.inf, "fro", "nuc"):
        close(la.cond(vnp.asarray(sq), p), np.linalg.cond(sq, p), 1e-10)
    close(la.cond(vnp.asarray(a)), np.linalg.cond(a), 1e-10)


def test_norm_orders_axes_keepdims():
    x = A(3, 4, 5)
    v = A(7)
    for o in (None, 2, 1, 0, 3.5, -1.5, np.inf, -np.inf):
        close(la.norm(vnp.asarray(v), o), np.linalg.norm(v, o))
        close(la.norm(vnp.asarray(x), o, axis=1, keepdims=True), np.linalg.norm(x, o, axis=1, keepdims=True))
    for o in (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
        close(la.norm(vnp.asarray(x[0]), o), np.linalg.norm(x[0], o))
        for ax in ((0, 2), (2, 0), (-1, -2)):
            for kd in (False, True):
                close(la.norm(vnp.asarray(x), o, axis=ax, keepdims=kd), np.linalg.norm(x, o, axis=ax, keepdims=kd))
    close(la.norm(vnp.asarray(x)), np.linalg.norm(x))
    close(la.norm(vnp.asarray(x), keepdims=True), np.linalg.norm(x, keepdims=True))
    assert la.norm(vnp.asarray(np.arange(4))).dtype == np.float32
    with pytest.raises(ValueError):
        la.norm(vnp.asarray(x), 2)
    with pytest.raises(ValueError):
        la.norm(vnp.asarray(x[0]), 3)
    with pytest.raises(ValueError):
        la.norm(vnp.asarray(v), "fro")
    with pytest.raises(np.exceptions.AxisError):
        la.norm(vnp.asarray(v), axis=1)


def test_multi_dot_orders():
    ms = [A(2, 9), A(9, 3), A(3, 8), A(8, 4)]
    close(la.multi_dot([vnp.asarray(m) for m in ms]), np.linalg.multi_dot(ms))
    v0, v1 = A(2), A(4)
    close(la.multi_dot([vnp.asarray(v0)] + [vnp.asarray(m) for m in ms] + [vnp.asarray(v1)]),
          np.linalg.multi_dot([v0] + ms + [v1]))
    close(la.multi_dot([vnp.asarray(ms[0]), vnp.asarray(ms[1])]), ms[0] @ ms[1])


# --------------------------------------------------------------------------- gradients


def test_grads_eigh():
    s = vnp.asarray(sym(3, 3))
    check_grads(lambda x: (la.eigvalsh(x) ** 2).sum(), (s,), order=2)
    # squared eigenvector entries weighted by the eigenvalues: sign-gauge invariant
    check_grads(lambda x: (lambda w, v: (v * v * vnp.exp(w)).sum())(*la.eigh(x)), (s,), order=2,
                modes=("rev",))


def test_grads_svd_qr():
    a = vnp.asarray(A(4, 3))
    check_grads(lambda x: (la.svd(x, compute_uv=False) ** 3).sum(), (a,), order=2, modes=("rev",))
    # the rank-one term s_0 u_0 v_0^T (sign-gauge invariant), tall and wide
    for x0 in (a, vnp.asarray(A(2, 4))):
        check_grads(lambda x: (lambda u, s, vh: ((u[:, :1] * s[:1]) @ vh[:1]) ** 2 * x)(
            *la.svd(x, full_matrices=False)).sum(), (x0,), order=2, modes=("rev",))
    check_grads(lambda x: (lambda q, r: (q * q[:, :1]).sum() + (vnp.abs(vnp.diagonal(r)) ** 1.5).sum())(
        *la.qr(x)), (a,), order=2, modes=("rev",))
    check_grads(lambda x: la.norm(x, "nuc") + la.norm(x, 2) + (la.pinv(x) ** 2).sum(), (a,), order=1)


def test_gradient_limits_match_jax():
    with pytest.raises(NotImplementedError, match="qr"):
        vkml.grad(lambda x: la.qr(x)[1].sum())(vnp.asarray(A(2, 4)))
    with pytest.raises(NotImplementedError, match="qr"):
        vkml.grad(lambda x: la.svd(x)[0].sum())(vnp.asarray(A(4, 2)))


def test_vmap_and_jit():
    xs = sym(3, 4, 4)
    w = vkml.vmap(la.eigvalsh)(vnp.asarray(xs))
    close(w, np.linalg.eigvalsh(xs))
    f = vkml.jit(lambda x: la.svd(x, compute_uv=False))
    b = A(2, 5, 3)
    close(f(vnp.asarray(b)), np.linalg.svd(b, compute_uv=False))
    g = vkml.vmap(vkml.grad(lambda x: (la.eigvalsh(x) ** 2).sum()))(vnp.asarray(xs))
    # d/dA sum(w^2) = 2 V diag(w) V^T = 2 A for the symmetrized input
    close(g, 2 * xs, 1e-10)


def test_nan_and_exact_degeneracy():
    a = np.eye(4)
    a[1, 2] = a[2, 1] = np.nan
    w, v = la.eigh(vnp.asarray(a))
    assert np.isnan(np.asarray(w)).all() and np.isnan(np.asarray(v)).all()
    # repeated eigenvalues and exact zeros: values still right, V orthonormal
    ones = np.ones((3, 3))
    close(la.eigvalsh(vnp.asarray(ones)), [0.0, 0.0, 3.0])
    w, v = (np.asarray(t) for t in la.eigh(vnp.asarray(ones)))
    close(mT(v) @ v, np.eye(3))
    close(la.svd(vnp.asarray(ones), compute_uv=False), [3.0, 0.0, 0.0])


def test_solves_split_across_dispatches(monkeypatch):
    """Under lavapipe's loop limit a solve runs as several dispatches, its state in scratch
    between them; forced here to a few rounds (QR steps) each."""
    import vkml.vulkan.lower.spectral as sp
    monkeypatch.setattr(sp, "_rounds", lambda edges, total, limit, what: 3)
    s, a = sym(2, 5, 5), A(2, 5, 3)
    close(la.eigvalsh(vnp.asarray(s)), np.linalg.eigvalsh(s))
    close(la.svd(vnp.asarray(a), compute_uv=False), np.linalg.svd(a, compute_uv=False))
    q, r = (np.asarray(t) for t in la.qr(vnp.asarray(a)))
    close(q @ r, a)
    close(np.abs(r), np.abs(np.linalg.qr(a)[1]))


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("fn,arg,name", [
    (la.qr, A(3), "qr"), (la.eigh, A(3, 4), "eigh"), (la.eigvalsh, A(2), "eigh"),
    (la.svd, A(4), "svd"), (la.pinv, A(3), "pinv"), (la.cond, A(3), "cond"),
    (lambda a: la.lstsq(a, vnp.asarray(A(4))), A(3, 2), "lstsq"),
    (lambda a: la.lstsq(a, vnp.asarray(A(3))), A(2, 3, 2), "lstsq"),
    (lambda a: la.multi_dot([a, vnp.asarray(A(4, 2))]), A(2, 3), "multi_dot"),
    (lambda a: la.multi_dot([a, vnp.asarray(A(3, 2, 2))]), A(2, 3), "multi_dot"),
    (lambda a: la.cond(a, 1), A(3, 4), "cond"),
    (lambda a: la.svd(a, hermitian=True), A(3, 4), "svd"),
])
def test_shape_errors_name_the_function(fn, arg, name):
    with pytest.raises(ShapeError, match=name):
        fn(vnp.asarray(arg))


def test_value_errors():
    with pytest.raises(ValueError, match="mode"):
        la.qr(vnp.asarray(A(3, 3)), mode="economic")
    with pytest.raises(ValueError, match="UPLO"):
        la.eigh(vnp.asarray(A(3, 3)), UPLO="X")
    with pytest.raises(ValueError, match="at least two"):
        la.multi_dot([vnp.asarray(A(2, 2))])
