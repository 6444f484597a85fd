"""NumPy breadth (vkml issue 17): composed functions against what they are made of, and the
sort family, beside NumPy and jax.numpy (CPU) in one run, as ratios.

    /work/main/.venv/bin/python bench/tools/breadth.py [--only tan,einsum,sort,topk] [--n 16M]

Run from the repository root (the script puts the root on sys.path, so it measures this
tree's vkml). Every vkml figure is a warm `vkml.jit` call (best of several, the result read
back to the host so the device has finished); JAX's is a warm `jax.jit` call with
`block_until_ready`; NumPy's the plain call.

tan     `vnp.tan(x)` on 16M float32 against `vnp.sin(x) / vnp.cos(x)` written by hand (goal: at
        most 1.2x), with jnp.tan and np.tan beside.
einsum  `einsum('bij,bjk->bik')` of two float32 operands (64 x 256 x 256 @ 256) and
        `einsum('ij,jk->ik')` at 1024 against the same `matmul` (goal: at most 1.1x).
sort    `vnp.sort` of 1M float32 (one row), beside jnp.sort and np.sort.
topk    `vkml.lax.top_k(x, 8)` on 4096 x 4096 float32, beside jax.lax.top_k and NumPy's
        argpartition-then-sort of the last axis.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.timing import best_time  # noqa: E402


def _size(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KM" else s) * mult)


def _jax():
    try:
        import jax
        jax.config.update("jax_platforms", "cpu")
        return jax
    except ImportError:
        return None


def _time(run, repeats=10) -> float:
    return best_time(run, repeats=repeats, warmup=2, budget_s=5.0)[0]


def _vk(f, *args):
    """A warm jitted vkml call, read back (so the device has finished)."""
    import vkml
    g = vkml.jit(f)
    dev = [vkml.numpy.asarray(a) for a in args]

    def run():
        out = g(*dev)
        for o in (out if isinstance(out, tuple) else (out,)):
            o.block_until_ready() if hasattr(o, "block_until_ready") else np.asarray(o)
        return out
    return run


def _jx(jax, f, *args):
    g = jax.jit(f)
    dev = [jax.device_put(a) for a in args]
    return lambda: jax.block_until_ready(g(*dev))


def row(name: str, times: dict[str, float], base: str) -> None:
    cells = "  ".join(f"{k} {v * 1e3:9.3f} ms" for k, v in times.items())
    ratios = "  ".join(f"{base}/{k} {times[base] / v:5.2f}x" for k, v in times.items() if k != base)
    print(f"{name:28s} {cells}   {ratios}")


def case_tan(n: int, jax) -> None:
    import vkml.numpy as vnp
    x = np.random.default_rng(0).uniform(-1.5, 1.5, n).astype(np.float32)
    t = {"vkml tan": _time(_vk(vnp.tan, x)),
         "vkml sin/cos": _time(_vk(lambda a: vnp.sin(a) / vnp.cos(a), x)),
         "numpy": _time(lambda: np.tan(x))}
    if jax:
        t["jax"] = _time(_jx(jax, jax.numpy.tan, x))
    row(f"tan {n} f32", t, "vkml tan")


def case_einsum(jax) -> None:
    import vkml.numpy as vnp
    R = np.random.default_rng(1)
    for spec, a, b in [("bij,bjk->bik", R.random((64, 256, 256), np.float32),
                        R.random((64, 256, 256), np.float32)),
                       ("ij,jk->ik", R.random((1024, 1024), np.float32),
                        R.random((1024, 1024), np.float32))]:
        t = {"vkml einsum": _time(_vk(lambda x, y: vnp.einsum(spec, x, y), a, b)),
             "vkml matmul": _time(_vk(vnp.matmul, a, b)),
             "numpy": _time(lambda: np.einsum(spec, a, b, optimize=True))}
        if jax:
            t["jax"] = _time(_jx(jax, lambda x, y: jax.numpy.einsum(spec, x, y), a, b))
        row(f"einsum {spec}", t, "vkml einsum")


def case_sort(n: int, jax) -> None:
    import vkml.numpy as vnp
    x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    t = {"vkml sort": _time(_vk(vnp.sort, x), repeats=5), "numpy": _time(lambda: np.sort(x))}
    if jax:
        t["jax"] = _time(_jx(jax, jax.numpy.sort, x), repeats=5)
    row(f"sort {n} f32", t, "vkml sort")


def case_topk(jax) -> None:
    import vkml.lax
    x = np.random.default_rng(3).standard_normal((4096, 4096)).astype(np.float32)

    def np_topk():
        i = np.argpartition(-x, 8, axis=-1)[:, :8]
        v = np.take_along_axis(x, i, -1)
        o = np.argsort(-v, axis=-1, kind="stable")
        return np.take_along_axis(v, o, -1), np.take_along_axis(i, o, -1)
    t = {"vkml top_k": _time(_vk(lambda a: vkml.lax.top_k(a, 8), x), repeats=5),
         "numpy": _time(np_topk, repeats=5)}
    if jax:
        t["jax"] = _time(_jx(jax, lambda a: jax.lax.top_k(a, 8), x), repeats=5)
    row("top_k 4096x4096 k=8 f32", t, "vkml top_k")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="tan,einsum,sort,topk")
    p.add_argument("--n", default="16M", help="tan's element count")
    p.add_argument("--sort-n", default="1M", help="sort's element count")
    a = p.parse_args()
    jax = _jax()
    from vkml.vulkan import runtime
    print(f"device: {runtime.get().dev.name}   jax: {jax.__version__ if jax else 'absent'}"
          f"   LP_NUM_THREADS={os.environ.get('LP_NUM_THREADS', '')}")
    cases = {"tan": lambda: case_tan(_size(a.n), jax), "einsum": lambda: case_einsum(jax),
             "sort": lambda: case_sort(_size(a.sort_n), jax), "topk": lambda: case_topk(jax)}
    for c in a.only.split(","):
        cases[c]()


if __name__ == "__main__":
    main()
