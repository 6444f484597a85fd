"""Prototype (issue 18): a round-robin (Brent-Luk) parallel Jacobi eigh written with
ordinary vkml operators, to measure whether rounds of data-parallel kernels beat the
registry's Eigh kernel on lavapipe. Not used by the library.

    python bench/tools/jacobi_rounds.py [--batch 16] [--n 64] [--sweeps 6] [--variant matmul]

Each round rotates the n/2 disjoint pairs (2k, 2k+1) at once and then applies one fixed
permutation of rows and columns (the round-robin tournament's step), so that after n - 1
rounds every pair has met once and the order is back to the identity. variant "matmul":
the round's rotation and permutation as one matrix G (two nonzeros per column, built
elementwise from c and s) and A <- G^T A G, V <- V G as three batched MatMuls; "gather":
the same as gathers (A[pi][:, pi] etc.) and elementwise sums. The loop is one fori_loop of
a round (a scan: one recorded body replayed). Prints wall and process CPU time beside the
registry's eigh and the errors against float64 LAPACK.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import vkml                      # noqa: E402
import vkml.numpy as vnp         # noqa: E402
from vkml import lax             # noqa: E402


def schedule(n: int) -> np.ndarray:
    """perm with new_layout[j] = layout[perm[j]]: the round-robin step on positions whose
    pairs are (2k, 2k+1); checked to meet every pair once in n - 1 rounds."""
    def layout(c):
        out = [0] * n
        for k in range(n // 2):
            out[2 * k], out[2 * k + 1] = c[k], c[n - 1 - k]
        return out
    c0 = list(range(n))
    pos = {p: i for i, p in enumerate(layout(c0))}
    perm = np.array([pos[p] for p in layout([c0[0], c0[-1]] + c0[1:-1])])
    L, seen = list(range(n)), set()
    for _ in range(n - 1):
        seen.update(frozenset((L[2 * k], L[2 * k + 1])) for k in range(n // 2))
        L = [L[perm[j]] for j in range(n)]
    assert len(seen) == n * (n - 1) // 2 and L == list(range(n))
    return perm


def _cs(app, aqq, apq):
    """Jacobi's rotation zeroing apq (Golub and Van Loan's sym.schur2)."""
    small = vnp.abs(apq) < 1e-30
    tau = (aqq - app) / (2 * vnp.where(small, 1.0, apq))
    big = vnp.abs(tau) > 1e15            # 1 + tau^2 overflows: t ~ 1 / (2 tau)
    tau_ = vnp.where(big, 1.0, tau)
    t = vnp.where(tau_ >= 0, 1.0, -1.0) / (vnp.abs(tau_) + vnp.sqrt(1 + tau_ * tau_))
    t = vnp.where(small, 0.0, vnp.where(big, 0.5 / vnp.where(big, tau, 1.0), t))
    c = 1 / vnp.sqrt(1 + t * t)
    return c, t * c


def make_round(n: int, dtype: str, variant: str):
    perm = schedule(n)
    if variant == "matmul":
        i, j = np.arange(n)[:, None], perm[None, :]
        blk = (i // 2) == (j // 2)
        Md = vnp.asarray((blk & (i % 2 == j % 2)).astype(dtype))
        Mo = vnp.asarray((blk & (i % 2 == 0) & (j % 2 == 1)).astype(dtype)
                         - (blk & (i % 2 == 1) & (j % 2 == 0)).astype(dtype))

        def rnd(_, st):
            A, V = st
            d = vnp.diagonal(A, axis1=-2, axis2=-1)
            c, s = _cs(d[..., 0::2], d[..., 1::2], vnp.diagonal(A[..., 0::2, 1::2], axis1=-2, axis2=-1))
            G = vnp.repeat(c, 2, axis=-1)[..., :, None] * Md + vnp.repeat(s, 2, axis=-1)[..., :, None] * Mo
            return vnp.swapaxes(G, -1, -2) @ A @ G, V @ G
        return rnd
    pi = vnp.asarray(perm.astype(np.int32))
    si = vnp.asarray((np.arange(n) ^ 1)[perm].astype(np.int32))
    sgn = vnp.asarray(np.where(np.arange(n) % 2 == 0, -1.0, 1.0)[perm].astype(dtype))
    ev, od = vnp.asarray(np.arange(0, n, 2).astype(np.int32)), vnp.asarray(np.arange(1, n, 2).astype(np.int32))
    half = vnp.asarray((perm // 2).astype(np.int32))

    def rnd(_, st):
        A, V = st
        c, s = _cs(A[..., ev, ev], A[..., od, od], A[..., ev, od])
        cp, sp = vnp.take(c, half, axis=-1), vnp.take(s, half, axis=-1) * sgn
        ci, sI, cj, sj = cp[..., :, None], sp[..., :, None], cp[..., None, :], sp[..., None, :]
        A = (ci * cj * A[..., pi[:, None], pi[None, :]] + ci * sj * A[..., pi[:, None], si[None, :]]
             + sI * cj * A[..., si[:, None], pi[None, :]] + sI * sj * A[..., si[:, None], si[None, :]])
        return A, cj * V[..., :, pi] + sj * V[..., :, si]
    return rnd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--sweeps", type=int, default=6)
    ap.add_argument("--variant", default="matmul", choices=("matmul", "gather"))
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.batch, a.n, a.n))
    s = ((x + x.transpose(0, 2, 1)) / 2).astype(np.float32)
    rnd = make_round(a.n, "float32", a.variant)

    def proto(m):
        V = vnp.broadcast_to(vnp.eye(a.n, dtype=m.dtype), m.shape) + 0 * m
        m, V = lax.fori_loop(0, a.sweeps * (a.n - 1), rnd, (m, V))
        return vnp.diagonal(m, axis1=-2, axis2=-1), V
    ref = np.linalg.eigvalsh(s.astype(np.float64))
    vs = vnp.asarray(s)
    for name, f in (("prototype", vkml.jit(proto)), ("registry eigh", vkml.jit(lambda m: tuple(vnp.linalg.eigh(m))))):
        f(vs)[0].block_until_ready()
        wall = cpu = float("inf")
        for _ in range(a.repeats):
            c0, t0 = time.process_time(), time.perf_counter()
            w, V = f(vs)
            w.block_until_ready(); V.block_until_ready()
            wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
        w, V = w.numpy().astype(np.float64), V.numpy().astype(np.float64)
        print(f"{name:14s} wall {wall * 1e3:8.1f} ms  cpu {cpu * 1e3:8.1f} ms  "
              f"eigenvalues {np.abs(np.sort(w, -1) - ref).max():.1e}  "
              f"V^T V - I {np.abs(np.swapaxes(V, -1, -2) @ V - np.eye(a.n)).max():.1e}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
