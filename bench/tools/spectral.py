"""The spectral decompositions on vkml against NumPy and jax.numpy (CPU) in one run: eigh
and svd of a batch of 16 float32 64 x 64 matrices (issue 18's case), and qr of the same
batch (reduced).

    python bench/tools/spectral.py [--batch 16] [--n 64] [--dtype float32]

vkml is jitted and timed warm (the first calls compile), each call synchronised; JAX is
jitted on its CPU backend (LAPACK, batched); NumPy loops over the batch inside LAPACK
(np.linalg on a stacked array). Results are checked first (eigenvalues, singular values,
|R| against NumPy). Prints the best wall time of each and vkml's ratio to the others
(> 1: vkml slower), then the same for CPU time (the process's, lavapipe's worker threads
included): on a shared 2-core VM wall times are noisy, and the CPU time says what the work
costs whatever else runs.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import vkml                      # noqa: E402
import vkml.numpy as vnp         # noqa: E402
import time                       # noqa: E402

from bench.timing import best_time   # noqa: E402


def best_cpu(run, repeats: int, budget_s: float) -> float:
    """The least process CPU time of a warm call (after best_time's warm-up)."""
    best, spent = float("inf"), 0.0
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        run()
        best = min(best, time.process_time() - c0)
        spent += time.perf_counter() - t0
        if spent > budget_s:
            break
    return best


def _sync(t):
    return [x.block_until_ready() for x in (t if isinstance(t, tuple) else (t,))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--budget", type=float, default=10.0)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.batch, a.n, a.n)).astype(a.dtype)
    s = ((x + np.swapaxes(x, -1, -2)) / 2).astype(a.dtype)
    vs, vx = vnp.asarray(s), vnp.asarray(x)
    la = vnp.linalg
    v_eigh = vkml.jit(lambda m: tuple(la.eigh(m)))
    v_svd = vkml.jit(lambda m: tuple(la.svd(m, full_matrices=False)))
    v_qr = vkml.jit(lambda m: tuple(la.qr(m)))
    tol = 1e-3 if a.dtype == "float32" else 1e-10
    assert np.abs(v_eigh(vs)[0].numpy() - np.linalg.eigvalsh(s.astype(np.float64))).max() < tol * a.n
    assert np.abs(v_svd(vx)[1].numpy() - np.linalg.svd(x.astype(np.float64), compute_uv=False)).max() < tol * a.n
    assert np.abs(np.abs(v_qr(vx)[1].numpy()) - np.abs(np.linalg.qr(x.astype(np.float64))[1])).max() < tol * a.n
    runs = {
        "eigh": {"vkml": lambda: _sync(v_eigh(vs)), "numpy": lambda: np.linalg.eigh(s)},
        "svd": {"vkml": lambda: _sync(v_svd(vx)), "numpy": lambda: np.linalg.svd(x, full_matrices=False)},
        "qr": {"vkml": lambda: _sync(v_qr(vx)), "numpy": lambda: np.linalg.qr(x)},
    }
    try:
        import jax
        import jax.numpy as jnp
        js, jx = jnp.asarray(s), jnp.asarray(x)
        j_eigh, j_svd, j_qr = jax.jit(jnp.linalg.eigh), jax.jit(lambda m: jnp.linalg.svd(m, full_matrices=False)), \
            jax.jit(jnp.linalg.qr)
        bl = lambda t: jax.tree_util.tree_map(lambda v: v.block_until_ready(), t)   # noqa: E731
        runs["eigh"]["jax"] = lambda: bl(j_eigh(js))
        runs["svd"]["jax"] = lambda: bl(j_svd(jx))
        runs["qr"]["jax"] = lambda: bl(j_qr(jx))
    except ImportError:
        pass
    print(f"device: {vkml.vulkan.runtime.get().dev.name}; {a.batch} x {a.n}x{a.n} {a.dtype}")
    for name, r in runs.items():
        t = {fw: best_time(fn, a.repeats, 2, a.budget)[0] for fw, fn in r.items()}
        c = {fw: best_cpu(fn, 3, a.budget) for fw, fn in r.items()}
        for what, d in (("wall", t), ("cpu", c)):
            others = "  ".join(f"{fw} {sec * 1e3:9.2f} ms  vkml/{fw} {d['vkml'] / sec:6.2f}x"
                               for fw, sec in d.items() if fw != "vkml")
            print(f"{name:5s} {what:4s} vkml {d['vkml'] * 1e3:9.2f} ms  {others}")


if __name__ == "__main__":
    main()
