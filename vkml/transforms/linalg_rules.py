"""Reverse-mode rules of the linear-algebra operators, from forward operators only.

Each is the transpose of JAX's JVP for the operator (so forward mode, which vkml gets by
transposing the VJP, is JAX's too), and each is written with the operators themselves:
a solve's cotangent is another solve, Cholesky's and Lu's are triangular solves with
their own factors. Every operator used has a rule, so the rules nest (hessian of a
function of slogdet, grad of grad through cholesky and cho_solve).

Conventions: a matrix operand's cotangent has the operand's shape; the parts of an
operand an operator does not read (Cholesky's upper triangle, TriangularSolve's other
triangle and, with `unit`, its diagonal) get zero cotangent.

>>> sorted(k.value for k in RULES)
['Cholesky', 'Lu', 'Solve', 'TriangularSolve']
"""
from __future__ import annotations

import numpy as np

from ..trace import dtypes as dt
from ..trace.ops import OpKind as K
from .expr import E, cast, full, op, reshape, where


def mT(x: E) -> E:
    return x.mT


def _index_grid(n: int) -> tuple[E, E]:
    """Row and column indices (n, 1) and (1, n) as int32."""
    i = op(K.Arange, n=n, start=0, step=1, dtype=dt.int32)
    return reshape(i, (n, 1)), reshape(i, (1, n))


def band(x: E, lower: bool, k: int = 0) -> E:
    """x's lower triangle from diagonal k (j - i <= k), or its upper one (j - i >= k);
    zeros elsewhere. (tril(x, k) / triu(x, k) of the last two axes.)"""
    n, m = x.shape[-2], x.shape[-1]
    r = reshape(op(K.Arange, n=n, start=0, step=1, dtype=dt.int32), (n, 1))
    c = reshape(op(K.Arange, n=m, start=-k, step=1, dtype=dt.int32), (1, m))
    keep = op(K.LessEqual, c, r) if lower else op(K.GreaterEqual, c, r)
    return where(keep, x, 0.0)


def eye_like(x: E) -> E:
    n = x.shape[-1]
    r, c = _index_grid(n)
    return where(op(K.Equal, r, c), full((), 1.0, x.dtype), full((), 0.0, x.dtype))


def trsolve(a: E, b: E, lower: bool, trans: bool = False, unit: bool = False) -> E:
    return op(K.TriangularSolve, a, b, lower=lower, trans=trans, unit=unit)


def _read_mask(x: E, lower: bool, unit: bool) -> E:
    """x on the part of a triangular operand the solve reads."""
    return band(x, lower, -1 if unit else 0) if lower else band(x, False, 1 if unit else 0)


def _triangular_solve(n, g, a, b):
    """X = op(A)^-1 B: B's cotangent is op(A)^-T g, a solve with the same triangle; A's is
    -B' X^T (op(A) = A) or -X B'^T (op(A) = A^T), on the triangle the solve reads."""
    lo, tr, un = n.attrs["lower"], n.attrs["trans"], n.attrs["unit"]
    x = E(n)
    gb = trsolve(a, g, lo, not tr, un)
    ga = -(x @ mT(gb)) if tr else -(gb @ mT(x))
    return _read_mask(ga, lo, un), gb


def _solve(n, g, a, b):
    """X = A^-1 B: B's cotangent is A^-T g (the solve itself), A's is -B' X^T."""
    gb = op(K.Solve, mT(a), g)
    return -(gb @ mT(E(n))), gb


def _phi(x: E) -> E:
    """The lower triangle with the diagonal halved (the Cholesky JVP's Phi)."""
    return (band(x, True, -1) + band(x, True, 0)) * 0.5


def _cholesky(n, g, a):
    """JAX's JVP dL = L Phi(L^-1 dS L^-T), S the symmetric matrix the lower triangle
    names, transposed: with G = L^-T Phi(L^T g) L^-1, S's cotangent is sym(G) and the
    lower triangle's is G + G^T below the diagonal, G's own diagonal on it."""
    L = E(n)
    P = _phi(mT(L) @ g)
    M = trsolve(L, P, True, True)             # L^-T P
    Gt = trsolve(L, mT(M), True, True)        # (M L^-1)^T = L^-T M^T
    G = mT(Gt)
    g_low = band(G + Gt, True, -1) + band(band(G, True, 0), False, 0)
    # symmetrize: x enters as (x + x^T) / 2, whose adjoint is itself
    return ((g_low + mT(g_low)) * 0.5,) if n.attrs["symmetrize"] else (g_low,)


def _lu(n, g, a, perm):
    """Lu(a, perm) = packed L, U with a[perm] = L U; JAX's JVP (lau = L^-1 dA_p U^-1,
    dL = L tril(lau, -1), dU = triu(lau) U) transposed: dA_p's cotangent is
    L^-T (tril(L^T gL, -1) + triu(gU U^T)) U^-T, and a's is that with its rows put back
    where perm took them (a scatter of rows)."""
    F = E(n)
    N = F.shape[-1]
    L = band(F, True, -1) + eye_like(F)
    U = band(F, False, 0)
    gl, gu = band(g, True, -1), band(g, False, 0)
    M = band(mT(L) @ gl, True, -1) + band(gu @ mT(U), False, 0)
    Y = trsolve(F, M, True, True, True)           # L^-T M
    Xt = trsolve(F, mT(Y), False, False, False)    # (Y U^-T)^T = U^-1 Y^T
    gp = mT(Xt)
    return _unpermute_rows(gp, perm, N), None


def _unpermute_rows(x: E, perm: E, n: int) -> E:
    """y with y[..., perm[..., i], :] = x[..., i, :] (perm a permutation of each batch
    entry's rows), as one ScatterAdd over the flattened batch."""
    lead = x.shape[:-2]
    B = int(np.prod(lead, dtype=np.int64)) if lead else 1
    k = x.shape[-1]
    base = reshape(op(K.Arange, n=B, start=0, step=n, dtype=dt.int32), (B, 1))
    idx = reshape(op(K.Add, reshape(perm, (B, n)), base), (B * n,))
    y = op(K.ScatterAdd, reshape(x, (B * n, k)), idx, axis=0, size=B * n)
    return reshape(y, x.shape)


RULES = {
    K.Cholesky: _cholesky,
    K.TriangularSolve: _triangular_solve,
    K.Solve: _solve,
    K.Lu: _lu,
}


# --------------------------------------------------------------------------- batching

def _batch_all(ctx, n, ins, bat):
    """Every operand with the batch in front (the operators take any leading batch)."""
    return ctx.op(n.op, *[ctx.materialize(x, b) for x, b in zip(ins, bat)], **n.attrs)


BATCH_RULES = {k: _batch_all for k in (K.Cholesky, K.TriangularSolve, K.Solve, K.LuPivots,
                                       K.LuPivotsToPermutation, K.Lu)}
