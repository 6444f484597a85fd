"""Sorting on vkml against NumPy (and jax.numpy where it is importable): a sort of one
row of 1M float32, and top_k(k=8) over the rows of a 4096 x 4096 float32 matrix.

    python bench/tools/sort.py [--n 1048576] [--rows 4096] [--cols 4096] [--k 8]

vkml is timed warm and jitted (compiles in the warm-up calls), each call synchronised
(`block_until_ready`); NumPy's top_k is argpartition plus a sort of the k, its usual
idiom. Prints the best time of each and vkml's ratio to the others (> 1: vkml slower).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import vkml                      # noqa: E402
import vkml.numpy as vnp         # noqa: E402
from vkml.lax import top_k       # noqa: E402
from bench.timing import best_time   # noqa: E402


def np_top_k(x: np.ndarray, k: int):
    part = np.argpartition(-x, k - 1, axis=-1)[:, :k]
    vals = np.take_along_axis(x, part, -1)
    order = np.argsort(-vals, axis=-1, kind="stable")
    return np.take_along_axis(vals, order, -1), np.take_along_axis(part, order, -1)


def jax_runs(x1, x2, k):
    """(sort, top_k) callables on jax, or None where jax is not installed."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    a1, a2 = jnp.asarray(x1), jnp.asarray(x2)
    s = jax.jit(jnp.sort)
    t = jax.jit(lambda a: jax.lax.top_k(a, k))
    return (lambda: s(a1).block_until_ready(),
            lambda: jax.tree_util.tree_map(lambda v: v.block_until_ready(), t(a2)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--budget", type=float, default=20.0)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    x1 = rng.standard_normal(a.n).astype(np.float32)
    x2 = rng.standard_normal((a.rows, a.cols)).astype(np.float32)

    v1, v2 = vnp.asarray(x1), vnp.asarray(x2)
    vsort = vkml.jit(vnp.sort)
    vtop = vkml.jit(lambda m: top_k(m, a.k))
    # the results first: a benchmark of a wrong answer is no benchmark
    assert np.array_equal(vsort(v1).numpy(), np.sort(x1))
    got_v, got_i = vtop(v2)
    want_v, want_i = np_top_k(x2, a.k)
    assert np.array_equal(got_v.numpy(), want_v) and np.array_equal(got_i.numpy(), want_i)

    runs = {
        "sort 1M": {"vkml": lambda: vsort(v1).block_until_ready(), "numpy": lambda: np.sort(x1)},
        f"top_k k={a.k} {a.rows}x{a.cols}": {
            "vkml": lambda: [t.block_until_ready() for t in vtop(v2)],
            "numpy": lambda: np_top_k(x2, a.k)},
    }
    jr = jax_runs(x1, x2, a.k)
    if jr is not None:
        for (name, r), j in zip(runs.items(), jr):
            r["jax"] = j
    print(f"device: {vkml.vulkan.runtime.get().dev.name}")
    for name, r in runs.items():
        t = {fw: best_time(fn, a.repeats, 2, a.budget)[0] for fw, fn in r.items()}
        others = "  ".join(f"{fw} {s * 1e3:9.2f} ms  vkml/{fw} {t['vkml'] / s:6.2f}x"
                           for fw, s in t.items() if fw != "vkml")
        print(f"{name:28s} vkml {t['vkml'] * 1e3:9.2f} ms  {others}")


if __name__ == "__main__":
    main()
