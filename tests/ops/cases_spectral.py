"""Cases for the spectral family (Eigh, Svd, Qr) against NumPy's float64 LAPACK.

The packed factors have gauge freedom (eigenvector and singular-vector signs), so each case
compares what is unique: the eigenvalues or singular values, the reconstruction V diag(w)
V^T or U diag(s) V^T or Q R, orthonormality (V^T V, U^T U, Q^T Q against the identity), and
|R| (LAPACK's signs make R unique up to nothing, |R| is robust to a zero pivot's sign).
Shapes: one element, odd and even sizes (the round-robin's dummy index), tall and wide,
batches, a transposed (non-contiguous) input, and 40 x 40 (several invocations per phase).
"""
from __future__ import annotations

import numpy as np

import vkml.numpy as vnp
from vkml.array import bind
from vkml.trace.ops import OpKind

from .cases import RNG, Case

CASES: list[Case] = []


def _tol(d, n):
    return dict(rtol=0.0, atol=(3e-6 * n if np.dtype(d) == np.float32 else 1e-13 * n))


def _sym(shape, d):
    a = RNG.standard_normal(shape)
    return ((a + np.swapaxes(a, -1, -2)) / 2).astype(d)


def _flat(*xs):
    """Matrices flattened and the last one (a vector per matrix) joined along one axis."""
    *ms, v = xs
    return vnp.concatenate([vnp.reshape(x, x.shape[:-2] + (-1,)) for x in ms] + [v], axis=-1)


def _nflat(*xs):
    *ms, v = xs
    return np.concatenate([x.reshape(x.shape[:-2] + (-1,)) for x in ms] + [v], axis=-1)


def eigh_fn(x):
    n = x.shape[-1]
    P = bind(OpKind.Eigh, [x])
    V, w = P[..., :n, :], P[..., n, :]
    VT = vnp.swapaxes(V, -1, -2)
    return _flat(vnp.matmul(V * w[..., None, :], VT), vnp.matmul(VT, V), w)


def eigh_ref(x):
    n = x.shape[-1]
    return _nflat(x, np.broadcast_to(np.eye(n), x.shape), np.linalg.eigvalsh(x))


def svd_fn(x):
    m, n = x.shape[-2:]
    P = bind(OpKind.Svd, [x])
    U, V, s = P[..., :m, :], P[..., m:m + n, :], P[..., m + n, :]
    UT, VT = vnp.swapaxes(U, -1, -2), vnp.swapaxes(V, -1, -2)
    return _flat(vnp.matmul(U * s[..., None, :], VT), vnp.matmul(UT, U), vnp.matmul(VT, V), s)


def svd_ref(x):
    k = min(x.shape[-2:])
    eye = np.broadcast_to(np.eye(k), x.shape[:-2] + (k, k))
    return _nflat(x, eye, eye, np.linalg.svd(x, compute_uv=False))


def qr_fn(complete):
    def fn(x):
        m, n = x.shape[-2:]
        kq = m if complete else min(m, n)
        P = bind(OpKind.Qr, [x], complete=complete)
        Q, R = P[..., :, :kq], P[..., :kq, kq:]
        return _flat(vnp.matmul(Q, R), vnp.matmul(vnp.swapaxes(Q, -1, -2), Q), vnp.abs(R),
                     vnp.reshape(vnp.abs(R), R.shape[:-2] + (-1,)))
    return fn


def qr_ref(complete):
    def ref(x):
        m, n = x.shape[-2:]
        kq = m if complete else min(m, n)
        R = np.linalg.qr(x, mode="complete" if complete else "reduced")[1]
        return _nflat(x, np.broadcast_to(np.eye(kq), x.shape[:-2] + (kq, kq)), np.abs(R),
                      np.abs(R).reshape(R.shape[:-2] + (-1,)))
    return ref


T_ = lambda x: vnp.swapaxes(x, -1, -2)      # noqa: E731
for d in (np.float32, np.float64):
    for name, shape, prep in [("1", (1, 1), None), ("odd-batch", (3, 5, 5), None), ("even", (6, 6), None),
                              ("of-T", (2, 7, 7), T_), ("40", (40, 40), None)]:
        n = shape[-1]
        CASES.append(Case(OpKind.Eigh, f"{name}-{np.dtype(d).name}",
                          (lambda x, p=prep: eigh_fn(p(x) if p else x)),
                          (lambda x, p=prep: eigh_ref(np.swapaxes(x, -1, -2) if p else x)),
                          [_sym(shape, d)], **_tol(d, n)))
    for name, shape, prep in [("1", (1, 1), None), ("tall-batch", (2, 7, 4), None), ("wide", (3, 8), None),
                              ("square-of-T", (5, 5), T_), ("40x37", (40, 37), None)]:
        CASES.append(Case(OpKind.Svd, f"{name}-{np.dtype(d).name}",
                          (lambda x, p=prep: svd_fn(p(x) if p else x)),
                          (lambda x, p=prep: svd_ref(np.swapaxes(x, -1, -2) if p else x)),
                          [RNG.standard_normal(shape).astype(d)], **_tol(d, max(shape))))
    for complete in (False, True):
        for name, shape in [("1", (1, 1)), ("tall-batch", (2, 7, 4)), ("wide", (3, 8)), ("40", (40, 40))]:
            CASES.append(Case(OpKind.Qr, f"{name}-{'complete' if complete else 'reduced'}-{np.dtype(d).name}",
                              qr_fn(complete), qr_ref(complete), [RNG.standard_normal(shape).astype(d)],
                              **_tol(d, max(shape))))
