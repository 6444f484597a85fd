"""Factorisations and solves: numpy.linalg's and scipy.linalg's names over the registry's
Cholesky, TriangularSolve, Solve, LuPivots, LuPivotsToPermutation and Lu operators.

Every function takes a batch of matrices over any leading axes (one kernel dispatch for
the whole batch), float32 or float64 (integer and bool input becomes float32, as
jax.numpy's), and is differentiable in both modes as JAX's is: grad, jvp, vmap and jit go
through them, and so does nesting (the rules are built from these operators again).

Bad input raises ShapeError naming the function. Numerical failure is JAX's, not an
exception: a matrix that is not positive definite gives a Cholesky factor of nan, a
singular one gives inf or nan in solves, inverses and LU factors, det 0 and slogdet
(0, -inf).

>>> import vkml.numpy as vnp
>>> a = vnp.asarray([[4.0, 2.0], [2.0, 3.0]], "float64")
>>> cholesky(a).numpy().round(4).tolist()
[[2.0, 0.0], [1.0, 1.4142]]
>>> solve(a, vnp.asarray([2.0, 1.0])).numpy().round(4).tolist()
[0.5, 0.0]
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as _np

from .. import numpy as vnp
from ..array import Array, bind
from ..trace import dtypes as dt
from ..trace.ops import OpKind
from ..trace.shapes import ShapeError, broadcast_shapes

__all__ = ["cholesky", "solve", "inv", "det", "slogdet", "matrix_power", "SlogdetResult",
           "solve_triangular", "cho_factor", "cho_solve", "lu_factor", "lu_solve", "lu", "expm"]


# --------------------------------------------------------------------------- helpers

def _float(name: str, x: Any) -> Array:
    """x as float32 or float64: integers, bools and other floats become float32."""
    x = vnp.asarray(x)
    if x.dtype not in (dt.float32, dt.float64):
        if not dt.is_float(x.dtype) and x.dtype not in (dt.int32, dt.bool_):
            raise TypeError(f"{name}: dtype {x.dtype} is not supported")
        x = x.astype(dt.float32)
    return x


def _matrices(name: str, a: Any, what: str = "a") -> Array:
    """a as a float batch of square matrices (..., n, n), or ShapeError naming name."""
    a = _float(name, a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{name}: {what} must be a square matrix or a batch of them (..., n, n), "
                         f"got shape {a.shape}")
    return a


def _common(a: Array, b: Array) -> tuple[Array, Array]:
    """a and b in their promoted float dtype."""
    d = dt.float64 if dt.float64 in (a.dtype, b.dtype) else dt.float32
    return a.astype(d) if a.dtype != d else a, b.astype(d) if b.dtype != d else b


def _mT(x: Array) -> Array:
    return vnp.swapaxes(x, -1, -2)


def _rhs(name: str, a: Array, b: Any, vector: bool | None = None) -> tuple[Array, Array, bool]:
    """(a, b) broadcast over their batch dims, b as (..., n, k), and whether b was a vector
    (vector None: NumPy 2's rule, a vector when b.ndim == 1)."""
    b = _float(name, b)
    a, b = _common(a, b)
    n = a.shape[-1]
    vec = (b.ndim == 1) if vector is None else vector
    if b.ndim < 1 or (not vec and b.ndim < 2):
        raise ShapeError(f"{name}: b must be a vector (n,) or matrices (..., n, k), got shape {b.shape}")
    bm = vnp.expand_dims(b, -1) if vec else b
    if bm.shape[-2] != n:
        raise ShapeError(f"{name}: a of shape {a.shape} and b of shape {b.shape} do not match: b needs "
                         f"{n} rows ({'(n,)' if vec else '(..., n, k)'})")
    try:
        batch = broadcast_shapes(name, a.shape[:-2], bm.shape[:-2])
    except ShapeError:
        raise ShapeError(f"{name}: the batch dims of a {a.shape} and b {b.shape} do not broadcast") from None
    a = vnp.broadcast_to(a, batch + a.shape[-2:])
    bm = vnp.broadcast_to(bm, batch + bm.shape[-2:])
    return a, bm, vec


def _out(x: Array, vec: bool) -> Array:
    return x[..., 0] if vec else x


def _eye(n: int, like: Array) -> Array:
    return vnp.broadcast_to(vnp.eye(n, dtype=like.dtype), like.shape)


def _tri(name: str, x: Any, lower: bool) -> Array:
    return vnp.tril(x) if lower else vnp.triu(x)


def stop_gradient(x: Array) -> Array:
    # vkml.stop_gradient's node (vkml.autodiff imports vkml.numpy, which imports this module)
    return bind(OpKind.StopGradient, [x])


def _lu_parts(name: str, a: Array) -> tuple[Array, Array, Array]:
    """(packed LU, pivots, permutation) of a batch of square matrices."""
    piv = bind(OpKind.LuPivots, [stop_gradient(a)])
    perm = bind(OpKind.LuPivotsToPermutation, [piv])
    return bind(OpKind.Lu, [a, perm]), piv, perm


def _parity(piv: Array) -> Array:
    """+1 or -1 per matrix: the sign of the permutation that the interchanges make."""
    n = piv.shape[-1]
    swaps = vnp.sum((piv != vnp.arange(n, dtype=dt.int32)).astype(dt.int32), axis=-1)
    return 1 - 2 * (swaps % 2)


# --------------------------------------------------------------------------- numpy.linalg

def cholesky(a: Any, upper: bool = False) -> Array:
    """The Cholesky factor of each symmetric positive-definite matrix: lower L with
    L L^T = a (upper: U = L^T, U^T U = a). As jax.numpy's, a is symmetrised first,
    (a + a^T) / 2; one that is not positive definite gives a factor of nan.

    >>> import vkml.numpy as vnp
    >>> cholesky(vnp.asarray([[9.0, 3.0], [3.0, 5.0]])).numpy().round(5).tolist()  # GPUs: within an ulp
    [[3.0, 0.0], [1.0, 2.0]]
    """
    a = _matrices("cholesky", a)
    L = bind(OpKind.Cholesky, [a], symmetrize=True)
    return _mT(L) if upper else L


def solve(a: Any, b: Any) -> Array:
    """x with a @ x = b, by Gaussian elimination with partial pivoting. b is a vector (n,)
    when it is 1-d and a batch of matrices (..., n, k) otherwise (NumPy 2's rule); batch
    dims broadcast. A singular a gives inf or nan.

    >>> import vkml.numpy as vnp
    >>> solve(vnp.asarray([[2.0, 0.0], [0.0, 4.0]]), vnp.asarray([[2.0], [2.0]])).numpy().tolist()
    [[1.0], [0.5]]
    """
    a = _matrices("solve", a)
    a, bm, vec = _rhs("solve", a, b)
    return _out(bind(OpKind.Solve, [a, bm]), vec)


def inv(a: Any) -> Array:
    """The inverse of each square matrix (solve(a, I)); a singular one gives inf or nan.

    >>> import vkml.numpy as vnp
    >>> inv(vnp.asarray([[2.0, 0.0], [0.0, 4.0]])).numpy().tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    a = _matrices("inv", a)
    return bind(OpKind.Solve, [a, _eye(a.shape[-1], a)])


class SlogdetResult(NamedTuple):
    """slogdet's result, as numpy's: the sign and the log of the absolute determinant."""
    sign: Array
    logabsdet: Array


def slogdet(a: Any) -> SlogdetResult:
    """(sign, log|det a|) of each square matrix, from its LU factors; a singular one gives
    (0, -inf).

    >>> import vkml.numpy as vnp
    >>> s, l = slogdet(vnp.asarray([[0.0, 2.0], [3.0, 0.0]]))
    >>> float(s), round(float(l), 4)
    (-1.0, 1.7918)
    """
    a = _matrices("slogdet", a)
    F, piv, _ = _lu_parts("slogdet", a)
    d = vnp.diagonal(F, axis1=-2, axis2=-1)
    sign = vnp.prod(vnp.sign(stop_gradient(d)), axis=-1) * _parity(piv).astype(a.dtype)
    return SlogdetResult(sign, vnp.sum(vnp.log(vnp.abs(d)), axis=-1))


def det(a: Any) -> Array:
    """The determinant of each square matrix, from its LU factors.

    >>> import vkml.numpy as vnp
    >>> round(float(det(vnp.asarray([[1.0, 2.0], [3.0, 4.0]]))), 5)
    -2.0
    """
    a = _matrices("det", a)
    F, piv, _ = _lu_parts("det", a)
    d = vnp.diagonal(F, axis1=-2, axis2=-1)
    return vnp.prod(d, axis=-1) * _parity(piv).astype(a.dtype)


def matrix_power(a: Any, n: int) -> Array:
    """a to the integer power n (binary exponentiation by matmul; n < 0 powers the
    inverse, n = 0 gives the identity).

    >>> import vkml.numpy as vnp
    >>> matrix_power(vnp.asarray([[1.0, 1.0], [0.0, 1.0]]), -3).numpy().tolist()
    [[1.0, -3.0], [0.0, 1.0]]
    """
    if isinstance(n, bool) or not isinstance(n, (int, _np.integer)):
        raise TypeError(f"matrix_power: exponent must be an integer, got {n!r}")
    a = vnp.asarray(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"matrix_power: a must be a square matrix or a batch of them (..., n, n), "
                         f"got shape {a.shape}")
    n = int(n)
    if n == 0:
        return vnp.broadcast_to(vnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    if n < 0:
        a, n = inv(a), -n
    result = None
    while True:
        if n & 1:
            result = a if result is None else result @ a
        n >>= 1
        if not n:
            return result
        a = a @ a


# --------------------------------------------------------------------------- scipy.linalg

def _trans(name: str, trans) -> bool:
    if trans in (0, "N", "n"):
        return False
    if trans in (1, 2, "T", "C", "t", "c"):
        return True
    raise ValueError(f"{name}: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")


def solve_triangular(a: Any, b: Any, trans: int | str = 0, lower: bool = False,
                     unit_diagonal: bool = False, overwrite_b: bool = False,
                     check_finite: bool = True) -> Array:
    """x with op(a) x = b for triangular a (op(a) = a, or a^T for trans 1, 2, 'T', 'C'),
    reading only a's lower (`lower`) or upper triangle, its diagonal taken as ones with
    `unit_diagonal`. b is (..., n) when it has one dimension fewer than a, else
    (..., n, k); batch dims broadcast. A zero on the diagonal gives inf or nan.

    >>> import vkml.numpy as vnp
    >>> a = vnp.asarray([[2.0, 0.0], [1.0, 1.0]])
    >>> solve_triangular(a, vnp.asarray([2.0, 2.0]), lower=True).numpy().tolist()
    [1.0, 1.0]
    """
    a = _matrices("solve_triangular", a)
    b = _float("solve_triangular", b)
    a, bm, vec = _rhs("solve_triangular", a, b, vector=b.ndim == a.ndim - 1)
    x = bind(OpKind.TriangularSolve, [a, bm], lower=bool(lower), trans=_trans("solve_triangular", trans),
             unit=bool(unit_diagonal))
    return _out(x, vec)


def cho_factor(a: Any, lower: bool = False, overwrite_a: bool = False,
               check_finite: bool = True) -> tuple[Array, bool]:
    """(c, lower): the Cholesky factor of a (upper unless `lower`, the other triangle
    zero, as jax.scipy's) for cho_solve.

    >>> import vkml.numpy as vnp
    >>> c, low = cho_factor(vnp.asarray([[4.0, 2.0], [2.0, 2.0]]))
    >>> c.numpy().tolist(), low
    ([[2.0, 1.0], [0.0, 1.0]], False)
    """
    return cholesky(a, upper=not lower), bool(lower)


def cho_solve(c_and_lower: tuple, b: Any, overwrite_b: bool = False,
              check_finite: bool = True) -> Array:
    """x with a x = b from cho_factor(a) = (c, lower): two triangular solves. b is
    (..., n) when it has one dimension fewer than c, else (..., n, k).

    >>> import vkml.numpy as vnp
    >>> f = cho_factor(vnp.asarray([[4.0, 2.0], [2.0, 2.0]]))
    >>> cho_solve(f, vnp.asarray([2.0, 0.0])).numpy().tolist()
    [1.0, -1.0]
    """
    try:
        c, lower = c_and_lower
    except (TypeError, ValueError):
        raise TypeError("cho_solve: the first argument must be the pair (c, lower) that cho_factor "
                        "returns") from None
    c = _matrices("cho_solve", c, "c")
    b = _float("cho_solve", b)
    c, bm, vec = _rhs("cho_solve", c, b, vector=b.ndim == c.ndim - 1)
    lower = bool(lower)
    # a = L L^T (lower) or U^T U: first the factor that stands on the left, then its transpose
    y = bind(OpKind.TriangularSolve, [c, bm], lower=lower, trans=not lower, unit=False)
    x = bind(OpKind.TriangularSolve, [c, y], lower=lower, trans=lower, unit=False)
    return _out(x, vec)


def lu_factor(a: Any, overwrite_a: bool = False, check_finite: bool = True) -> tuple[Array, Array]:
    """(lu, piv): the packed LU factors of a (unit-lower L below the diagonal, U on and
    above it) and the row interchanges, 0-based int32 (row i was swapped with row
    piv[i]), as scipy's (partial pivoting, LAPACK's pivot choice). Square matrices only.

    >>> import vkml.numpy as vnp
    >>> lu_, piv = lu_factor(vnp.asarray([[1.0, 2.0], [3.0, 4.0]], "float64"))
    >>> lu_.numpy().round(4).tolist(), piv.numpy().tolist()
    ([[3.0, 4.0], [0.3333, 0.6667]], [1, 1])
    """
    a = _matrices("lu_factor", a)
    F, piv, _ = _lu_parts("lu_factor", a)
    return F, piv


def _perm_rows(x: Array, perm: Array) -> Array:
    """x[..., perm[..., i], :] for each batch entry."""
    return vnp.take_along_axis(x, vnp.broadcast_to(vnp.expand_dims(perm, -1), perm.shape + x.shape[-1:]), axis=-2)


def lu_solve(lu_and_piv: tuple, b: Any, trans: int | str = 0, overwrite_b: bool = False,
             check_finite: bool = True) -> Array:
    """x with a x = b (trans 1, 2, 'T', 'C': a^T x = b) from lu_factor(a) = (lu, piv). b is
    (..., n) when it has one dimension fewer than lu, else (..., n, k).

    >>> import vkml.numpy as vnp
    >>> f = lu_factor(vnp.asarray([[1.0, 2.0], [3.0, 4.0]]))
    >>> lu_solve(f, vnp.asarray([5.0, 6.0])).numpy().round(4).tolist()
    [-4.0, 4.5]
    """
    try:
        F, piv = lu_and_piv
    except (TypeError, ValueError):
        raise TypeError("lu_solve: the first argument must be the pair (lu, piv) that lu_factor "
                        "returns") from None
    F = _matrices("lu_solve", F, "lu")
    piv = vnp.asarray(piv)
    if piv.shape != F.shape[:-1] or piv.dtype != dt.int32:
        raise ShapeError(f"lu_solve: piv must be int32 of shape {F.shape[:-1]} for lu {F.shape}, got "
                         f"{piv.dtype}{list(piv.shape)}")
    b = _float("lu_solve", b)
    vec = b.ndim == F.ndim - 1
    F2, bm, vec = _rhs("lu_solve", F, b, vector=vec)
    perm = vnp.broadcast_to(bind(OpKind.LuPivotsToPermutation, [piv]), F2.shape[:-1])
    tri = lambda m, x, lower, tr, unit: bind(OpKind.TriangularSolve, [m, x], lower=lower,  # noqa: E731
                                            trans=tr, unit=unit)
    if not _trans("lu_solve", trans):
        y = tri(F2, _perm_rows(bm, perm), True, False, True)
        x = tri(F2, y, False, False, False)
    else:
        z = tri(F2, bm, False, True, False)
        w = tri(F2, z, True, True, True)
        x = _perm_rows(w, vnp.argsort(perm, axis=-1).astype(dt.int32))
    return _out(x, vec)


def lu(a: Any, permute_l: bool = False, overwrite_a: bool = False, check_finite: bool = True,
       p_indices: bool = False):
    """scipy.linalg.lu of square matrices: (p, l, u) with a = p @ l @ u; with p_indices p
    is the row indices with a = l[p] @ u; with permute_l (p @ l, u).

    >>> import vkml.numpy as vnp
    >>> p, l, u = lu(vnp.asarray([[1.0, 2.0], [3.0, 4.0]], "float64"))
    >>> p.numpy().tolist(), l.numpy().round(4).tolist(), u.numpy().round(4).tolist()
    ([[0.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [0.3333, 1.0]], [[3.0, 4.0], [0.0, 0.6667]])
    """
    a = _matrices("lu", a)
    F, piv, perm = _lu_parts("lu", a)
    n = a.shape[-1]
    eye = vnp.eye(n, dtype=a.dtype)
    L = vnp.tril(F, -1) + eye
    U = vnp.triu(F)
    inv_perm = vnp.argsort(perm, axis=-1).astype(dt.int32)
    if permute_l:
        return _perm_rows(L, inv_perm), U
    if p_indices:
        return inv_perm, L, U
    # p[perm[i], i] = 1: p's rows are the identity's in the inverse permutation's order
    P = _perm_rows(vnp.broadcast_to(eye, a.shape), inv_perm)
    return P, L, U


# Pade 13 coefficients and its 1-norm bound (Higham 2005, as scipy's and jax's expm)
_PADE13 = (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800.,
           129060195264000., 10559470521600., 670442572800., 33522128640., 1323241920.,
           40840800., 960960., 16380., 182., 1.)
_THETA13 = 5.371920351148152
MAX_SQUARINGS = 16


def expm(A: Any) -> Array:
    """The matrix exponential of each square matrix, by scaling and squaring with the
    degree-13 Pade approximant (Higham 2005): A / 2^s with s from A's 1-norm, then s
    squarings, done as MAX_SQUARINGS masked ones so that the graph does not depend on
    the values (as jax.scipy's; matrices with a 1-norm past 2^16 * 5.37 are not scaled
    enough). Differentiable through solve and matmul.

    >>> import vkml.numpy as vnp
    >>> expm(vnp.asarray([[0.0, 1.0], [0.0, 0.0]])).numpy().tolist()
    [[1.0, 1.0], [0.0, 1.0]]
    """
    A = _matrices("expm", A)
    n = A.shape[-1]
    norm = vnp.max(vnp.sum(vnp.abs(stop_gradient(A)), axis=-2), axis=-1)
    s = vnp.clip(vnp.ceil(vnp.log2(vnp.maximum(norm, 1e-30) / _THETA13)), 0, MAX_SQUARINGS)
    A = A / vnp.expand_dims(vnp.expand_dims(2.0 ** s, -1), -1).astype(A.dtype)
    b = _PADE13
    eye = _eye(n, A)
    A2 = A @ A
    A4 = A2 @ A2
    A6 = A4 @ A2
    U = A @ (A6 @ (b[13] * A6 + b[11] * A4 + b[9] * A2) + b[7] * A6 + b[5] * A4 + b[3] * A2 + b[1] * eye)
    V = A6 @ (b[12] * A6 + b[10] * A4 + b[8] * A2) + b[6] * A6 + b[4] * A4 + b[2] * A2 + b[0] * eye
    R = bind(OpKind.Solve, [V - U, V + U])
    for i in range(MAX_SQUARINGS):
        R = vnp.where(vnp.expand_dims(vnp.expand_dims(s > i, -1), -1), R @ R, R)
    return R
