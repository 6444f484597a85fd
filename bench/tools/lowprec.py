"""float16 and bfloat16 against float32 on vkml, beside NumPy and jax.numpy (issue 21): an
elementwise chain and a sum over 16M elements, and a 1024 x 1024 MatMul.

    python bench/tools/lowprec.py [--n 16777216] [--m 1024] [--repeats 5]

The chain is relu((x * 1.5 + 0.5) * x - 0.25): one fused kernel, four cheap operators per
element, so its time is memory traffic plus the 16-bit conversions (vkml computes 16-bit
elementwise operators in float32; a fused chain rounds once, at its store). The sum and the MatMul
read 16-bit operands through the float32 kernels (`vulkan/widen.py`: converted in,
float32 accumulation, rounded once out). vkml is timed warm and jitted, each call
synchronised; NumPy has no bfloat16 arithmetic of its own (ml_dtypes' is elementwise
Python-level casting), so its row is float32 and float16. Prints the best time of each
and the ratio of each 16-bit time to the same framework's float32 time.
"""
from __future__ import annotations

import argparse
import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import vkml                      # noqa: E402
import vkml.numpy as vnp         # noqa: E402
from bench.timing import best_time   # noqa: E402

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def chain(np_like):
    return lambda x: np_like.maximum((x * 1.5 + 0.5) * x - 0.25, 0)


def vkml_runs(x, a, b, d):
    vx, va, vb = vnp.asarray(x.astype(d)), vnp.asarray(a.astype(d)), vnp.asarray(b.astype(d))
    c, s, m = vkml.jit(chain(vnp)), vkml.jit(lambda x: x.sum()), vkml.jit(lambda a, b: a @ b)
    return {"chain": lambda: c(vx).block_until_ready(), "sum": lambda: s(vx).block_until_ready(),
            "matmul": lambda: m(va, vb).block_until_ready()}


def numpy_runs(x, a, b, d):
    if d is ml_dtypes.bfloat16:
        return None
    nx, na, nb = x.astype(d), a.astype(d), b.astype(d)
    f = chain(np)
    return {"chain": lambda: f(nx), "sum": lambda: nx.sum(), "matmul": lambda: na @ nb}


def jax_runs(x, a, b, d):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jd = {np.float32: jnp.float32, np.float16: jnp.float16, ml_dtypes.bfloat16: jnp.bfloat16}[d]
    jx, ja, jb = jnp.asarray(x, jd), jnp.asarray(a, jd), jnp.asarray(b, jd)
    c, s, m = jax.jit(chain(jnp)), jax.jit(lambda x: x.sum()), jax.jit(lambda a, b: a @ b)
    return {"chain": lambda: c(jx).block_until_ready(), "sum": lambda: s(jx).block_until_ready(),
            "matmul": lambda: m(ja, jb).block_until_ready()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 24)
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--frameworks", default="vkml,numpy,jax")
    o = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, o.n).astype(np.float32)
    a = rng.standard_normal((o.m, o.m)).astype(np.float32)
    b = rng.standard_normal((o.m, o.m)).astype(np.float32)
    # the results first: a benchmark of a wrong answer is no benchmark
    for name, d in DTYPES.items():
        xs = x[:4096].astype(d)
        got = np.asarray(vkml.jit(chain(vnp))(vnp.asarray(xs)))
        xf = xs.astype(np.float32)     # a fused chain: float32 intermediates, rounded once at the store
        want = np.maximum((xf * np.float32(1.5) + np.float32(0.5)) * xf - np.float32(0.25), 0).astype(d)
        assert np.array_equal(got.view(np.uint16 if d is not np.float32 else np.uint32),
                              want.view(np.uint16 if d is not np.float32 else np.uint32)), name
    makers = {"vkml": vkml_runs, "numpy": numpy_runs, "jax": jax_runs}
    times: dict = {}
    for fw in o.frameworks.split(","):
        for name, d in DTYPES.items():
            runs = makers[fw](x, a, b, d)
            if runs is None:
                continue
            for w, run in runs.items():
                times[(fw, name, w)] = best_time(run, o.repeats, 2, o.budget)[0]
            del runs
    print(f"device: {vkml.vulkan.runtime.get().dev.name}; n = {o.n:,}, matmul {o.m}^3")
    print(f"{'workload':8} {'framework':9} " + " ".join(f"{n:>10}" for n in DTYPES)
          + "   f16/f32  bf16/f32")
    for w in ("chain", "sum", "matmul"):
        for fw in o.frameworks.split(","):
            row = [times.get((fw, n, w)) for n in DTYPES]
            if row[0] is None:
                continue
            cells = " ".join(f"{t * 1e3:8.2f}ms" if t is not None else f"{'-':>10}" for t in row)
            ratios = " ".join(f"{t / row[0]:9.2f}" if t is not None else f"{'-':>9}" for t in row[1:])
            print(f"{w:8} {fw:9} {cells}  {ratios}")
    for w in ("chain", "sum", "matmul"):
        if ("jax", "float32", w) in times:
            r = " ".join(f"{n} {times[('vkml', n, w)] / times[('jax', n, w)]:.2f}x" for n in DTYPES
                         if ("jax", n, w) in times)
            print(f"vkml / jax, {w}: {r}")


if __name__ == "__main__":
    main()
