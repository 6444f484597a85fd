"""`vkml.numpy.linalg`'s spectral half: qr, eigh, eigvalsh, svd, pinv, lstsq, matrix_rank,
cond, norm, multi_dot, with NumPy's signatures and JAX's semantics where they differ.

The decompositions are the registry's Eigh (parallel cyclic Jacobi), Svd (one-sided Jacobi)
and Qr (Householder) operators, each one kernel per batch (`vulkan/lower/spectral.py` says
why those algorithms); everything else is composed from them and ordinary operators, so
grad, jvp, vmap and jit apply throughout. Batched over leading axes; float32 and float64
(integer and bool input computes in float32, as jax.numpy's). pinv and lstsq use the SVD
(no solve). Singular or degenerate inputs give what the formulas give (inf/nan gradients
of eigenvectors at repeated eigenvalues, as in JAX).

>>> import vkml.numpy as vnp
>>> w, v = eigh(vnp.asarray([[2.0, 1.0], [1.0, 2.0]]))
>>> w.numpy().round(5).tolist()
[1.0, 3.0]
"""
from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import ml_dtypes as _ml_dtypes  # finfo of bfloat16 too, whatever numpy
import numpy as _np

from .. import numpy as vnp
from ..array import Array, bind
from ..trace import dtypes as dt
from ..trace.ops import OpKind
from ..trace.shapes import ShapeError

__all__ = ["qr", "eigh", "eigvalsh", "svd", "pinv", "lstsq", "matrix_rank", "cond", "norm",
           "multi_dot", "EighResult", "QRResult", "SVDResult"]


class EighResult(NamedTuple):
    eigenvalues: Array
    eigenvectors: Array


class QRResult(NamedTuple):
    Q: Array
    R: Array


class SVDResult(NamedTuple):
    U: Array
    S: Array
    Vh: Array


def _float(name: str, a, min_rank: int = 2, square: bool = False) -> Array:
    """a as a float array of rank >= min_rank (square in its last two axes when asked)."""
    a = vnp.asarray(a)
    if not dt.is_float(a.dtype):
        a = a.astype(dt.float32)
    if a.ndim < min_rank:
        raise ShapeError(f"{name}: expected an array of rank >= {min_rank} (a stack of matrices "
                         f"in the last two axes), got shape {a.shape}")
    if square and a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{name}: expected square matrices in the last two axes, got shape {a.shape}")
    return a


def _mT(a: Array) -> Array:
    return vnp.swapaxes(a, -1, -2)


def _rows(x: Array, r0: int, r1: int) -> Array:
    return x[..., r0:r1, :]


# --------------------------------------------------------------------------- qr


def qr(a, mode: str = "reduced"):
    """QR decomposition of (..., m, n) by Householder reflections (R's diagonal carries
    LAPACK's signs, as NumPy's). mode 'reduced': Q (..., m, k), R (..., k, n), k = min(m, n);
    'complete': Q (..., m, m), R (..., m, n); 'r': R only. Differentiable for m >= n in
    'reduced' mode (or square), as JAX's.

    >>> import vkml.numpy as vnp
    >>> q, r = qr(vnp.asarray([[3.0, 0.0], [4.0, 5.0]]))
    >>> r.numpy().round(4).tolist()
    [[-5.0, -4.0], [0.0, 3.0]]
    """
    if mode not in ("reduced", "complete", "r", "raw"):
        raise ValueError(f"qr: unrecognized mode {mode!r}; valid: 'reduced', 'complete', 'r'")
    if mode == "raw":
        raise NotImplementedError("qr: mode 'raw' (LAPACK's Householder form) is not available")
    a = _float("qr", a)
    m, n = a.shape[-2:]
    complete = mode == "complete"
    kq = m if complete else min(m, n)
    P = bind(OpKind.Qr, [a], complete=complete)
    R = P[..., :kq, kq:]
    if mode == "r":
        return R
    return QRResult(P[..., :, :kq], R)


# --------------------------------------------------------------------------- eigh


def _symmetric(name: str, a, UPLO, symmetrize_input: bool) -> Array:
    a = _float(name, a, square=True)
    if UPLO not in (None, "L", "U"):
        raise ValueError(f"{name}: UPLO must be 'L' or 'U', got {UPLO!r}")
    if symmetrize_input:
        return (a + _mT(a)) * 0.5
    # NumPy's reading: only the UPLO triangle is used
    lo = vnp.tril(a, -1) if UPLO in (None, "L") else _mT(vnp.triu(a, 1))
    d = vnp.tril(vnp.triu(a))
    return lo + d + _mT(lo)


def eigh(a, UPLO: str | None = None, symmetrize_input: bool = True) -> EighResult:
    """Eigenvalues (ascending) and orthonormal eigenvectors (columns) of symmetric
    matrices (..., n, n), by parallel cyclic Jacobi. As jax.numpy: the input is first
    symmetrized, (a + a^T) / 2 (so the gradient is symmetric); symmetrize_input=False reads
    only the UPLO triangle ('L' by default), as NumPy. Eigenvector signs are arbitrary.

    >>> import vkml.numpy as vnp
    >>> eigh(vnp.asarray([[2.0, 0.0], [0.0, 1.0]])).eigenvalues.numpy().tolist()
    [1.0, 2.0]
    """
    s = _symmetric("eigh", a, UPLO, symmetrize_input)
    n = s.shape[-1]
    P = bind(OpKind.Eigh, [s])
    return EighResult(P[..., n, :], _rows(P, 0, n))


def eigvalsh(a, UPLO: str | None = None, symmetrize_input: bool = True) -> Array:
    """The eigenvalues of symmetric matrices, ascending (eigh's first result).

    >>> import vkml.numpy as vnp
    >>> eigvalsh(vnp.asarray([[0.0, 1.0], [1.0, 0.0]])).numpy().round(5).tolist()
    [-1.0, 1.0]
    """
    return eigh(a, UPLO, symmetrize_input).eigenvalues


# --------------------------------------------------------------------------- svd


def _complement(u: Array) -> Array:
    """Columns completing the orthonormal columns of u (..., m, k) to a basis of R^m: the
    last m - k columns of a complete QR of u."""
    m, k = u.shape[-2:]
    P = bind(OpKind.Qr, [u], complete=True)
    return P[..., :, k:m]


def svd(a, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False):
    """Singular value decomposition a = U diag(S) Vh of (..., m, n) by one-sided Jacobi:
    S descending; U (..., m, m) and Vh (..., n, n) with full_matrices (completed by a QR),
    else (..., m, k) and (..., k, n), k = min(m, n). compute_uv=False returns S only.
    hermitian: from eigh (S = |w|). Gradients as JAX's: not with full_matrices and
    compute_uv on non-square input (NotImplementedError from the completion's QR); U's
    columns of zero singular values are zero.

    >>> import vkml.numpy as vnp
    >>> svd(vnp.asarray([[3.0, 0.0], [0.0, -4.0]]), compute_uv=False).numpy().tolist()
    [4.0, 3.0]
    """
    a = _float("svd", a)
    m, n = a.shape[-2:]
    k = min(m, n)
    if hermitian:
        if m != n:
            raise ShapeError(f"svd: hermitian=True needs square matrices, got shape {a.shape}")
        w, v = eigh(a)
        s = vnp.abs(w)
        order = vnp.argsort(-s, axis=-1)
        S = vnp.take_along_axis(s, order, axis=-1)
        if not compute_uv:
            return S
        idx = vnp.broadcast_to(order[..., None, :], v.shape)
        U = vnp.take_along_axis(v, idx, axis=-1)
        sg = vnp.where(w < 0, -1.0, 1.0).astype(a.dtype)
        Vh = _mT(vnp.take_along_axis(v * sg[..., None, :], idx, axis=-1))
        return SVDResult(U, S, Vh)
    P = bind(OpKind.Svd, [a])
    S = P[..., m + n, :]
    if not compute_uv:
        return S
    U, V = _rows(P, 0, m), _rows(P, m, m + n)
    if full_matrices and m != n:
        if m > n:
            U = vnp.concatenate([U, _complement(U)], axis=-1)
        else:
            V = vnp.concatenate([V, _complement(V)], axis=-1)
    return SVDResult(U, S, _mT(V))


def _cutoff(name: str, s: Array, rtol, m: int, n: int) -> Array:
    """rtol * the largest singular value, shaped to broadcast against s (..., k)."""
    if rtol is None:
        rtol = max(m, n) * float(_ml_dtypes.finfo(_np.dtype(s.dtype)).eps)
    rt = vnp.asarray(rtol).astype(s.dtype)
    if rt.ndim:
        rt = rt[..., None]
    return rt * vnp.max(s, axis=-1, keepdims=True)


def pinv(a, rcond=None, hermitian: bool = False, *, rtol=None) -> Array:
    """Moore-Penrose pseudo-inverse of (..., m, n) from the SVD: singular values at most
    rtol * max(S) count as zero (rtol default max(m, n) * eps, NumPy 2's; rcond is the older
    name of the same). Differentiable through the SVD (distinct singular values).

    >>> import vkml.numpy as vnp
    >>> pinv(vnp.asarray([[2.0, 0.0], [0.0, 0.0]])).numpy().tolist()
    [[0.5, 0.0], [0.0, 0.0]]
    """
    a = _float("pinv", a)
    m, n = a.shape[-2:]
    if m * n == 0:
        return vnp.zeros(a.shape[:-2] + (n, m), a.dtype)
    tol = rtol if rtol is not None else rcond
    U, S, Vh = svd(a, full_matrices=False, hermitian=hermitian)
    big = S > _cutoff("pinv", S, tol, m, n)
    inv = vnp.where(big, 1.0 / vnp.where(big, S, 1.0), 0.0).astype(a.dtype)
    return vnp.matmul(_mT(Vh) * inv[..., None, :], _mT(U))


def lstsq(a, b, rcond=None):
    """Least-squares solution x of a @ x ~ b for a (m, n), b (m,) or (m, k), from the SVD,
    as NumPy's 4-tuple (x, residuals, rank, s). Singular values at most rcond * max(s)
    count as zero (rcond default eps * max(m, n)). residuals are the squared residual norms
    ||b - a x||^2 per column, always computed, as jax.numpy's default (NumPy returns an
    empty array when rank < n or m <= n); rank is an int32 array.

    >>> import vkml.numpy as vnp
    >>> x, res, rank, s = lstsq(vnp.asarray([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), vnp.asarray([1.0, 1.0, 2.0]))
    >>> x.numpy().round(5).tolist(), int(rank)
    ([1.0, 1.0], 2)
    """
    a = _float("lstsq", a)
    b = vnp.asarray(b)
    if not dt.is_float(b.dtype):
        b = b.astype(a.dtype)
    if a.ndim != 2:
        raise ShapeError(f"lstsq: a must be 2-d (m, n), got shape {a.shape}")
    if b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise ShapeError(f"lstsq: b must be (m,) or (m, k) with m = {a.shape[0]} (a is {a.shape}), "
                         f"got shape {b.shape}")
    if a.dtype != b.dtype:
        d = vnp.result_type(a, b)
        a, b = a.astype(d), b.astype(d)
    m, n = a.shape
    vec = b.ndim == 1
    B = b[:, None] if vec else b
    U, S, Vh = svd(a, full_matrices=False)
    big = S > _cutoff("lstsq", S, rcond, m, n)
    inv = vnp.where(big, 1.0 / vnp.where(big, S, 1.0), 0.0).astype(a.dtype)
    x = vnp.matmul(_mT(Vh), inv[:, None] * vnp.matmul(_mT(U), B))
    r = B - vnp.matmul(a, x)
    resid = vnp.sum(r * r, axis=0)
    rank = vnp.sum(big.astype(dt.int32))
    if vec:
        x, resid = x[:, 0], resid[0]
    return x, resid, rank, S


def matrix_rank(A, tol=None, hermitian: bool = False, *, rtol=None) -> Array:
    """The number of singular values above tol (absolute) or rtol * max(S) (default
    max(m, n) * eps), per matrix; a 1-d (or 0-d) input counts as rank 1 unless all zero.

    >>> import vkml.numpy as vnp
    >>> int(matrix_rank(vnp.asarray([[1.0, 2.0], [2.0, 4.0]])))
    1
    """
    A = vnp.asarray(A)
    if A.ndim < 2:
        A = A if dt.is_float(A.dtype) else A.astype(dt.float32)
        return vnp.any(A != 0).astype(dt.int32)
    A = _float("matrix_rank", A)
    m, n = A.shape[-2:]
    S = svd(A, compute_uv=False, hermitian=hermitian)
    if tol is not None:
        t = vnp.asarray(tol).astype(S.dtype)
        cut = t[..., None] if t.ndim else t
    else:
        cut = _cutoff("matrix_rank", S, rtol, m, n)
    return vnp.sum((S > cut).astype(dt.int32), axis=-1)


def cond(x, p=None) -> Array:
    """The condition number of (..., n, n) (or (..., m, n) for p None, 2, -2) in norm p:
    max(S) / min(S) for None and 2, min / max for -2, else norm(x, p) * norm(inv(x), p)
    with the inverse from the SVD (inf for singular x).

    >>> import vkml.numpy as vnp
    >>> float(cond(vnp.asarray([[2.0, 0.0], [0.0, 0.5]])))
    4.0
    """
    x = _float("cond", x)
    if p in (None, 2, -2):
        S = svd(x, compute_uv=False)
        hi, lo = vnp.max(S, axis=-1), vnp.min(S, axis=-1)
        return hi / lo if p != -2 else lo / hi
    if x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"cond: norm {p!r} needs square matrices, got shape {x.shape}")
    U, S, Vh = svd(x, full_matrices=False)
    xinv = vnp.matmul(_mT(Vh) / S[..., None, :], _mT(U))
    return norm(x, p, axis=(-2, -1)) * norm(xinv, p, axis=(-2, -1))


# --------------------------------------------------------------------------- norm


def _axes(name: str, axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    ax = (axis,) if isinstance(axis, (int, _np.integer)) else tuple(axis)
    out = []
    for a in ax:
        if isinstance(a, bool) or not isinstance(a, (int, _np.integer)):
            raise TypeError(f"{name}: axis must be an int or a tuple of ints, got {axis!r}")
        if not -ndim <= a < ndim:
            raise _np.exceptions.AxisError(int(a), ndim)
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: duplicate axes in {axis!r}")
    return tuple(out)


def _vector_norm(x: Array, ord, ax, keepdims: bool) -> Array:
    """The vector ord-norm over axis ax (an int, a tuple, or None: every element); also
    Tensor.norm's for orders other than 2."""
    ax_ = ax if ax is None or isinstance(ax, tuple) else (ax,)
    if ord is None or ord == 2:
        return vnp.sqrt(vnp.sum(x * x, axis=ax_, keepdims=keepdims))
    if ord == math.inf:
        return vnp.max(vnp.abs(x), axis=ax_, keepdims=keepdims)
    if ord == -math.inf:
        return vnp.min(vnp.abs(x), axis=ax_, keepdims=keepdims)
    if ord == 0:
        return vnp.sum((x != 0).astype(x.dtype), axis=ax_, keepdims=keepdims)
    if ord == 1:
        return vnp.sum(vnp.abs(x), axis=ax_, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(f"norm: invalid norm order {ord!r} for vectors")
    p = float(ord)
    return vnp.sum(vnp.abs(x) ** p, axis=ax_, keepdims=keepdims) ** (1.0 / p)


def _matrix_norm(x: Array, ord, r: int, c: int, keepdims: bool) -> Array:
    nd = x.ndim
    if ord in (None, "fro"):
        out = vnp.sqrt(vnp.sum(x * x, axis=(r, c), keepdims=True))
    elif ord == "nuc" or ord in (2, -2):
        rest = [i for i in range(nd) if i not in (r, c)]
        y = vnp.transpose(x, rest + [r, c])
        S = svd(y, compute_uv=False)
        v = vnp.sum(S, axis=-1) if ord == "nuc" else (vnp.max(S, axis=-1) if ord == 2 else vnp.min(S, axis=-1))
        # back to x's axes with r and c kept as size 1
        shape = [1 if i in (r, c) else x.shape[i] for i in range(nd)]
        out = vnp.reshape(v, shape)
    elif ord in (1, -1):
        cs = vnp.sum(vnp.abs(x), axis=r, keepdims=True)
        out = vnp.max(cs, axis=c, keepdims=True) if ord == 1 else vnp.min(cs, axis=c, keepdims=True)
    elif ord in (math.inf, -math.inf):
        rs = vnp.sum(vnp.abs(x), axis=c, keepdims=True)
        out = vnp.max(rs, axis=r, keepdims=True) if ord > 0 else vnp.min(rs, axis=r, keepdims=True)
    else:
        raise ValueError(f"norm: invalid norm order {ord!r} for matrices; valid: None, 'fro', "
                         f"'nuc', 1, -1, 2, -2, inf, -inf")
    if not keepdims:
        out = vnp.squeeze(out, axis=(r, c))
    return out


def norm(x, ord=None, axis=None, keepdims: bool = False) -> Array:
    """Vector or matrix norm, as NumPy's: axis an int (vector norms: None/2, inf, -inf, 0
    (the nonzero count), 1, any p), a pair (matrix norms: None/'fro', 'nuc', 1, -1, 2, -2,
    inf, -inf) or None (a 1-d array's vector norm, a 2-d array's matrix norm, and with
    ord None the 2-norm of everything flattened at any rank).

    >>> import vkml.numpy as vnp
    >>> float(norm(vnp.asarray([3.0, 4.0]))), float(norm(vnp.asarray([[1.0, -2.0], [3.0, 4.0]]), 1))
    (5.0, 6.0)
    """
    x = vnp.asarray(x)
    if not dt.is_float(x.dtype):
        x = x.astype(dt.float32)
    nd = x.ndim
    if axis is None:
        if ord is None:
            out = vnp.sqrt(vnp.sum(x * x))
            return vnp.reshape(out, (1,) * nd) if keepdims else out
        if nd == 1:
            return _vector_norm(x, ord, 0, keepdims)
        if nd == 2:
            return _matrix_norm(x, ord, 0, 1, keepdims)
        raise ValueError(f"norm: improper number of dimensions to norm: ord {ord!r} needs a 1-d or "
                         f"2-d array (or axis), got shape {x.shape}")
    ax = _axes("norm", axis, nd)
    if len(ax) == 1:
        return _vector_norm(x, ord, ax[0], keepdims)
    if len(ax) == 2:
        return _matrix_norm(x, ord, ax[0], ax[1], keepdims)
    raise ValueError(f"norm: improper number of dimensions to norm: axis {axis!r}")


# --------------------------------------------------------------------------- multi_dot


def _chain_order(dims: Sequence[int]) -> list[list[int]]:
    """The split points of the cheapest parenthesisation of a matrix chain (dims[i] x
    dims[i + 1] for matrix i), by the textbook dynamic programme (as NumPy's)."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


def multi_dot(arrays: Sequence, *, out=None) -> Array:
    """The product of a chain of matrices in its cheapest order (NumPy's multi_dot): the
    first may be 1-d (a row vector) and the last 1-d (a column vector); the rest 2-d.

    >>> import vkml.numpy as vnp
    >>> multi_dot([vnp.ones((2, 3)), vnp.ones((3, 4)), vnp.ones(4)]).numpy().tolist()
    [12.0, 12.0]
    """
    if out is not None:
        raise NotImplementedError("multi_dot: out= is not supported (vkml arrays are immutable)")
    xs = [vnp.asarray(a) for a in arrays]
    if len(xs) < 2:
        raise ValueError("multi_dot: expecting at least two arrays")
    first_vec, last_vec = xs[0].ndim == 1, xs[-1].ndim == 1
    if first_vec:
        xs[0] = xs[0][None, :]
    if last_vec:
        xs[-1] = xs[-1][:, None]
    for i, a in enumerate(xs):
        if a.ndim != 2:
            raise ShapeError(f"multi_dot: array {i} has shape {arrays[i].shape if hasattr(arrays[i], 'shape') else a.shape}; "
                             f"only the first and last may be 1-d, the others must be 2-d")
    for i in range(len(xs) - 1):
        if xs[i].shape[1] != xs[i + 1].shape[0]:
            raise ShapeError(f"multi_dot: shapes {xs[i].shape} and {xs[i + 1].shape} (arrays {i} and "
                             f"{i + 1}) are not aligned")
    dims = [xs[0].shape[0]] + [a.shape[1] for a in xs]
    split = _chain_order(dims)

    def prod(i: int, j: int) -> Array:
        if i == j:
            return xs[i]
        k = split[i][j]
        return vnp.matmul(prod(i, k), prod(k + 1, j))

    r = prod(0, len(xs) - 1)
    if first_vec and last_vec:
        return r[0, 0]
    if first_vec:
        return r[0]
    if last_vec:
        return r[:, 0]
    return r
