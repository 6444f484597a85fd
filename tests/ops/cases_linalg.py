"""Cases for the linalg family against NumPy float64 oracles.

Shapes cover 1x1 matrices, a batch over two leading axes, an empty batch, matrices whose
working set fits shared memory and ones that do not (the same kernels in device memory:
`lower.linalg.shared_fits`), and inputs that are a movement's result (a transposed batch).
LuPivots' inputs are a permutation of a dominant diagonal plus noise, so the pivot of every
step is clear in float32 as in float64 and the interchanges compare exactly.
"""
from __future__ import annotations

import numpy as np

import vkml.numpy as vnp
from vkml.array import bind
from vkml.trace.ops import OpKind as K

from .cases import RNG, Case, tol


def spd(shape, dtype):
    n = shape[-1]
    m = RNG.normal(size=shape)
    return (m @ np.swapaxes(m, -1, -2) / n + np.eye(n)).astype(dtype)


def well(shape, dtype):
    """Matrices near 2 I: well conditioned, as is either triangle."""
    n = shape[-1]
    return (RNG.uniform(-1, 1, shape) / np.sqrt(n) + 2 * np.eye(n)).astype(dtype)


def dominant_perm(shape, dtype):
    """Rows of a dominant diagonal in a random order per matrix, plus noise."""
    n = shape[-1]
    batch = shape[:-2]
    out = np.empty(shape)
    for idx in np.ndindex(*batch):
        out[idx] = (8 * np.eye(n) + RNG.uniform(-1, 1, (n, n)))[RNG.permutation(n)]
    return out.astype(dtype)


def cholesky_ref(x):
    s = np.tril(x) + np.swapaxes(np.tril(x, -1), -1, -2)
    return np.linalg.cholesky(s)


def tri_ref(lower, trans, unit):
    def ref(a, b):
        m = np.tril(a) if lower else np.triu(a)
        if unit:
            n = a.shape[-1]
            m = m * (1 - np.eye(n)) + np.eye(n)
        if trans:
            m = np.swapaxes(m, -1, -2)
        return np.linalg.solve(m, b)
    return ref


def lu_pivots_ref(a):
    """getrf's interchanges by Gaussian elimination in float64 (first largest |pivot|)."""
    a = np.array(a, np.float64)
    n = a.shape[-1]
    piv = np.zeros(a.shape[:-1], np.int32)
    for idx in np.ndindex(*a.shape[:-2]):
        m = a[idx].copy()
        for j in range(n):
            p = j + int(np.argmax(np.abs(m[j:, j])))
            piv[idx + (j,)] = p
            m[[j, p]] = m[[p, j]]
            if m[j, j] != 0:
                f = m[j + 1:, j] / m[j, j]
                m[j + 1:, j:] -= f[:, None] * m[j, j:]
    return piv


def perm_ref(piv):
    piv = np.asarray(piv)
    n = piv.shape[-1]
    out = np.empty(piv.shape, np.int32)
    for idx in np.ndindex(*piv.shape[:-1]):
        p = list(range(n))
        for j in range(n):
            q = int(piv[idx + (j,)])
            p[j], p[q] = p[q], p[j]
        out[idx] = p
    return out


def lu_ref(a, perm):
    """Packed LU without pivoting of a[perm]."""
    a = np.take_along_axis(np.array(a, np.float64), np.asarray(perm)[..., None].astype(np.int64), -2)
    n = a.shape[-1]
    for j in range(n):
        a[..., j + 1:, j] /= a[..., j:j + 1, j]
        a[..., j + 1:, j + 1:] -= a[..., j + 1:, j:j + 1] * a[..., j:j + 1, j + 1:]
    return a


def random_pivots(shape):
    n = shape[-1]
    return (np.arange(n) + (RNG.random(shape) * (n - np.arange(n))).astype(np.int64)).astype(np.int32)


CASES: list[Case] = []
T_ = lambda x: x.swapaxes(-1, -2) if isinstance(x, np.ndarray) else vnp.swapaxes(x, -1, -2)  # noqa: E731

for d in (np.float32, np.float64):
    r, a_ = tol(d, 2e-4, 2e-5, 1e-10, 1e-11)
    for name, shape in [("1x1", (1, 1)), ("batch", (2, 3, 5, 5)), ("empty-batch", (0, 4, 4)),
                        ("32", (4, 32, 32)), ("device-memory", (2, 70, 70))]:
        CASES.append(Case(K.Cholesky, f"{name}-{np.dtype(d)}", lambda x: bind(K.Cholesky, [x], symmetrize=False),
                          cholesky_ref, [spd(shape, d)], rtol=r, atol=a_))
        # symmetrize: both triangles read, (x + x^T) / 2 factored (the upper one differs)
        CASES.append(Case(K.Cholesky, f"symmetrize-{name}-{np.dtype(d)}",
                          lambda x: bind(K.Cholesky, [x], symmetrize=True),
                          lambda x: cholesky_ref((x + T_(x)) / 2),
                          [spd(shape, d) + np.triu(RNG.uniform(-0.2, 0.2, shape), 1).astype(d)], rtol=r, atol=a_))
        n = shape[-1]
        rhs = RNG.uniform(-1, 1, shape[:-1] + (3,)).astype(d)
        CASES.append(Case(K.Solve, f"{name}-{np.dtype(d)}", lambda x, y: bind(K.Solve, [x, y]),
                          np.linalg.solve, [RNG.uniform(-1, 1, shape).astype(d) + 2 * np.eye(n, dtype=d), rhs],
                          rtol=r * 10, atol=a_ * 10))
        CASES.append(Case(K.LuPivots, f"{name}-{np.dtype(d)}", lambda x: bind(K.LuPivots, [x]),
                          lu_pivots_ref, [dominant_perm(shape, d)], exact=True))
        x = dominant_perm(shape, d)
        CASES.append(Case(K.Lu, f"{name}-{np.dtype(d)}", lambda x, p: bind(K.Lu, [x, p]), lu_ref,
                          [x, perm_ref(lu_pivots_ref(x))], rtol=r, atol=a_))
    for lower in (True, False):
        for trans in (True, False):
            for unit in (True, False):
                tag = f"{'lower' if lower else 'upper'}{'-T' if trans else ''}{'-unit' if unit else ''}-{np.dtype(d)}"
                CASES.append(Case(K.TriangularSolve, tag,
                                  lambda x, y, lo=lower, tr=trans, un=unit: bind(
                                      K.TriangularSolve, [x, y], lower=lo, trans=tr, unit=un),
                                  tri_ref(lower, trans, unit),
                                  [well((2, 6, 6), d), RNG.uniform(-1, 1, (2, 6, 4)).astype(d)], rtol=r, atol=a_))
    # a 1x1 system, a large one whose [A | B] is in device memory, a transposed operand
    CASES.append(Case(K.Solve, f"1x1-k1-{np.dtype(d)}", lambda x, y: bind(K.Solve, [x, y]), np.linalg.solve,
                      [np.array([[[0.5]]], d), np.array([[[2.0]]], d)], rtol=r, atol=a_))
    CASES.append(Case(K.Solve, f"device-memory-k30-{np.dtype(d)}", lambda x, y: bind(K.Solve, [x, y]),
                      np.linalg.solve, [well((2, 50, 50), d), RNG.uniform(-1, 1, (2, 50, 30)).astype(d)],
                      rtol=r * 10, atol=a_ * 10))
    CASES.append(Case(K.Solve, f"of-T-{np.dtype(d)}", lambda x, y: bind(K.Solve, [T_(x), y]),
                      lambda x, y: np.linalg.solve(T_(x), y),
                      [well((3, 7, 7), d), RNG.uniform(-1, 1, (3, 7, 2)).astype(d)], rtol=r, atol=a_))
    CASES.append(Case(K.Cholesky, f"of-T-{np.dtype(d)}", lambda x: bind(K.Cholesky, [T_(x)], symmetrize=False),
                      lambda x: cholesky_ref(T_(x)), [spd((2, 6, 6), d)], rtol=r, atol=a_))
    CASES.append(Case(K.TriangularSolve, f"of-T-{np.dtype(d)}",
                      lambda x, y: bind(K.TriangularSolve, [T_(x), y], lower=True, trans=False, unit=False),
                      lambda x, y: tri_ref(True, False, False)(T_(x), y),
                      [well((2, 6, 6), d), RNG.uniform(-1, 1, (2, 6, 1)).astype(d)], rtol=r, atol=a_))
    # not positive definite: the whole factor is nan (JAX's)
    CASES.append(Case(K.Cholesky, f"not-pd-{np.dtype(d)}", lambda x: bind(K.Cholesky, [x], symmetrize=False),
                      lambda x: np.stack([np.full((2, 2), np.nan), cholesky_ref(x[1])]),
                      [np.array([[[1.0, 2.0], [2.0, 1.0]], [[4.0, 2.0], [2.0, 5.0]]], d)], rtol=r, atol=a_))

for name, shape in [("1", (1,)), ("batch", (2, 3, 7)), ("empty", (0, 5)), ("long", (3, 300))]:
    CASES.append(Case(K.LuPivotsToPermutation, name, lambda p: bind(K.LuPivotsToPermutation, [p]),
                      perm_ref, [random_pivots(shape)], exact=True))
