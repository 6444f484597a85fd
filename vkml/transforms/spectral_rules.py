"""Reverse-mode rules of the spectral decompositions (Eigh, Svd, Qr), as JAX defines them.

Each operator's output packs its factors (see the registry), so a rule slices the factors
and their cotangents out of the packed arrays and returns the transpose of JAX's JVP rule,
built from forward operators only (MatMul, elementwise, Slice): differentiating a rule
differentiates those and the decomposition again, so second order works. Qr's rule needs
R^-T; it takes it from an Svd of R (R = U S V^T, R^-T = U S^-1 V^T) rather than a
triangular solve, so this file depends on no other linear-algebra operator.

Degenerate spectra give inf/nan gradients of the eigenvectors and singular vectors, as in
JAX (the 1 / (w_j - w_i) factors).
"""
from __future__ import annotations

import numpy as np

from ..trace.ops import OpKind as K
from .expr import E, cast, op, reciprocal, reshape


def _block(x: E, r0: int, r1: int, c0: int, c1: int) -> E:
    """Rows r0:r1 and columns c0:c1 of the last two axes."""
    nd = x.ndim
    return op(K.Slice, x, starts=(0,) * (nd - 2) + (r0, c0), stops=tuple(x.shape[:-2]) + (r1, c1),
              steps=(1,) * nd)


def _eye(n: int, dtype) -> E:
    i = op(K.Arange, n=n, start=0, step=1, dtype=np.dtype(np.int32))
    return cast(op(K.Equal, reshape(i, (n, 1)), reshape(i, (1, n))), dtype)


def _strict_lower(n: int, dtype) -> E:
    i = op(K.Arange, n=n, start=0, step=1, dtype=np.dtype(np.int32))
    return cast(op(K.Greater, reshape(i, (n, 1)), reshape(i, (1, n))), dtype)


def _inv_gaps(row: E, col: E, I: E) -> E:
    """F_ij = 1 / (row_j - col_i) off the diagonal, 0 on it (JAX's Fmat)."""
    return reciprocal(I + row - col) - I


def _eigh(n_, g, a):
    """A = V diag(w) V^T: gA = V (diag(gw) + F o (V^T gV)) V^T, F_ij = 1 / (w_j - w_i)."""
    n = a.shape[-1]
    P = E(n_)
    V, w = _block(P, 0, n, 0, n), _block(P, n, n + 1, 0, n)          # w: (..., 1, n)
    gV, gw = _block(g, 0, n, 0, n), _block(g, n, n + 1, 0, n)
    I = _eye(n, a.dtype)
    inner = _inv_gaps(w, w.mT, I) * (V.mT @ gV) + I * gw
    return (V @ inner @ V.mT,)


def _svd(n_, g, a):
    """A = U diag(s) V^T (thin): the transpose of JAX's svd_jvp_rule. With dS = U^T dA V,
    the cotangent of dS is diag(gs) + (X + X^T) S + S (Y + Y^T), X = F o (U^T gU),
    Y = F o (V^T gV), F_ij = 1 / (s_j^2 - s_i^2); m > n adds (I - U U^T) gU S^-1 V^T and
    n > m adds U S^-1 gV^T (I - V V^T)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    P = E(n_)
    U, V, s = _block(P, 0, m, 0, k), _block(P, m, m + n, 0, k), _block(P, m + n, m + n + 1, 0, k)
    gU, gV, gs = _block(g, 0, m, 0, k), _block(g, m, m + n, 0, k), _block(g, m + n, m + n + 1, 0, k)
    I = _eye(k, a.dtype)
    sc = s.mT
    F = reciprocal(I + (s + sc) * (s - sc)) - I
    UgU, VgV = U.mT @ gU, V.mT @ gV
    X, Y = F * UgU, F * VgV
    gdS = I * gs + (X + X.mT) * s + sc * (Y + Y.mT)
    gA = U @ gdS @ V.mT
    if m > n:
        gA = gA + ((gU - U @ UgU) / s) @ V.mT
    if n > m:
        gA = gA + U @ ((gV - V @ VgV) / s).mT
    return (gA,)


def _qr(n_, g, a):
    """A = Q R, m >= n, reduced (or complete and square), as JAX's qr_jvp_rule transposed:
    with C = Q^T dA R^-1, dQ = Q (dO - C) + dA R^-1 and dR = (C - dO) R, dO = L - L^T,
    L = tril(C, -1); so K = gR R^T - Q^T gQ, gC = K - tril(K - K^T, -1) and
    gA = (Q gC + gQ) R^-T."""
    m, n = a.shape[-2:]
    complete = n_.attrs["complete"]
    if m < n or (complete and m != n):
        raise NotImplementedError(
            f"qr: the gradient is defined for m >= n with mode 'reduced' (or a square matrix), "
            f"as JAX's; got a {m} x {n} matrix with mode {'complete' if complete else 'reduced'}")
    P = E(n_)
    Q, R = _block(P, 0, m, 0, n), _block(P, 0, n, n, 2 * n)
    gQ, gR = _block(g, 0, m, 0, n), _block(g, 0, n, n, 2 * n)
    Ps = op(K.Svd, R)
    Ur, Vr, sr = _block(Ps, 0, n, 0, n), _block(Ps, n, 2 * n, 0, n), _block(Ps, 2 * n, 2 * n + 1, 0, n)
    RinvT = (Ur / sr) @ Vr.mT
    Kc = gR @ R.mT - Q.mT @ gQ
    gC = Kc - _strict_lower(n, a.dtype) * (Kc - Kc.mT)
    return ((Q @ gC + gQ) @ RinvT,)


SPECTRAL_RULES = {K.Eigh: _eigh, K.Svd: _svd, K.Qr: _qr}
