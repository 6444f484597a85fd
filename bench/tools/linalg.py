"""Factorisations and solves on vkml beside NumPy and jax.numpy (where importable): solve
and cholesky of a batch of float32 32x32 matrices and of one 512x512 (issue 18).

    python bench/tools/linalg.py [--batch 64] [--n 32] [--big 512] [--only solve]

vkml is jitted and timed warm, each call synchronised (`block_until_ready`); solve has a
matrix right-hand side of 32 columns (the batch) or one column (the 512 system), and a
vector-rhs batched solve too. Prints the best time of each and vkml's ratio to the others
(> 1: vkml slower).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import vkml                      # noqa: E402
import vkml.numpy as vnp         # noqa: E402
import vkml.numpy.linalg as vla  # noqa: E402
from bench.timing import best_time   # noqa: E402


def cases(batch: int, n: int, big: int) -> dict:
    rng = np.random.default_rng(0)

    def spd(*shape):
        m = rng.standard_normal(shape)
        return (m @ np.swapaxes(m, -1, -2) / shape[-1] + np.eye(shape[-1])).astype(np.float32)

    def gen(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1]) + 2 * np.eye(shape[-1])).astype(np.float32)

    return {
        f"solve {batch}x{n}x{n} rhs {n}": ("solve", gen(batch, n, n), rng.standard_normal((batch, n, n)).astype(np.float32)),
        f"solve {batch}x{n}x{n} rhs vec": ("solve", gen(batch, n, n), rng.standard_normal((batch, n, 1)).astype(np.float32)),
        f"cholesky {batch}x{n}x{n}": ("cholesky", spd(batch, n, n), None),
        f"solve {big}x{big} rhs vec": ("solve", gen(big, big), rng.standard_normal((big, 1)).astype(np.float32)),
        f"cholesky {big}x{big}": ("cholesky", spd(big, big), None),
    }


def jax_fn(kind: str):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    f = jax.jit(jnp.linalg.solve if kind == "solve" else jnp.linalg.cholesky)
    return lambda *xs: f(*xs).block_until_ready(), jnp.asarray


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--big", type=int, default=512)
    ap.add_argument("--only", default="")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--budget", type=float, default=10.0)
    a = ap.parse_args()
    print(f"device: {vkml.vulkan.runtime.get().dev.name}")
    for name, (kind, x, y) in cases(a.batch, a.n, a.big).items():
        if a.only and a.only not in name:
            continue
        args = (x,) if y is None else (x, y)
        npf = np.linalg.solve if kind == "solve" else np.linalg.cholesky
        vf = vkml.jit(vla.solve if kind == "solve" else vla.cholesky)
        vargs = [vnp.asarray(t) for t in args]
        want = npf(*[t.astype(np.float64) for t in args])
        got = vf(*vargs).numpy()
        err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
        assert err < 1e-3, (name, err)      # a benchmark of a wrong answer is no benchmark
        runs = {"vkml": lambda: vf(*vargs).block_until_ready(), "numpy": lambda: npf(*args)}
        j = jax_fn(kind)
        if j is not None:
            jf, conv = j
            jargs = [conv(t) for t in args]
            runs["jax"] = lambda: jf(*jargs)
        t = {fw: best_time(fn, a.repeats, 2, a.budget)[0] for fw, fn in runs.items()}
        others = "  ".join(f"{fw} {s * 1e3:8.3f} ms  vkml/{fw} {t['vkml'] / s:6.2f}x"
                           for fw, s in t.items() if fw != "vkml")
        print(f"{name:26s} vkml {t['vkml'] * 1e3:8.3f} ms  {others}", flush=True)


if __name__ == "__main__":
    main()
