"""vkml.lax.scan beside jax.lax.scan (and a NumPy loop): a jitted LSTM (hidden 128, batch
32) over T steps, and the planned memory of a gradient through a checkpointed scan.

    python bench/tools/scan.py [--hidden 128] [--batch 32] [--lengths 50 500] [--grad] [--unrolled]

1. first call: a fresh process per framework and T traces, compiles and runs the jitted
   forward pass (and with --grad the value_and_grad) once; the on-disk kernel caches are
   warmed by a throwaway process per T first (the kernels outside the loop, such as the
   input projection of all T steps, have shapes of their own per T), so the ratio
   T=500 / T=50 is what the loop's length costs the first call: host work and the run.
2. steady step: the best of a few warm calls, in this process, beside jax.jit(lax.scan)
   and the same recurrence as a NumPy loop.
3. memory: planned peak bytes of value_and_grad through a scan carrying 4096 floats for
   T steps, every step's carry saved vs `remat="sqrt"`.
Timings on a shared 2-core VM are noisy: compare within one run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def data(T: int, batch: int, hidden: int, n_in: int = 32):
    rng = np.random.default_rng(0)
    b = 1.0 / np.sqrt(hidden)
    p = {"w_x": rng.uniform(-b, b, (n_in, 4 * hidden)), "w_h": rng.uniform(-b, b, (hidden, 4 * hidden)),
         "b": rng.uniform(-b, b, (4 * hidden,)), "w_out": rng.uniform(-b, b, (hidden, 1)),
         "b_out": np.zeros(1)}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    xs = rng.normal(size=(T, batch, n_in)).astype(np.float32)
    ys = rng.normal(size=(T, batch, 1)).astype(np.float32)
    return p, xs, ys


def vkml_fns(grad: bool, unrolled: bool = False):
    import vkml
    import vkml.numpy as vnp
    import lstm_scan
    if unrolled:      # the recurrence as a Python loop: T copies of the cell in the graph
        def loss(p, xs, ys):
            return (((lstm_scan.lstm_unrolled(p, xs) @ p["w_out"] + p["b_out"]) - ys) ** 2).mean()
        f = vkml.jit(vkml.value_and_grad(loss) if grad else loss)
        return f, vnp.asarray, (lambda r: r[0].block_until_ready()) if grad else (lambda r: r.block_until_ready())
    if grad:
        f = vkml.jit(vkml.value_and_grad(lstm_scan.loss))
        return f, vnp.asarray, lambda r: r[0].block_until_ready()
    f = vkml.jit(lambda p, xs, ys: lstm_scan.loss(p, xs, ys))
    return f, vnp.asarray, lambda r: r.block_until_ready()


def jax_fns(grad: bool):
    import jax
    import jax.numpy as jnp

    def cell(p, carry, gx):
        h, c = carry
        g = gx + h @ p["w_h"]
        i, f, gg, o = jnp.split(g, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(gg)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    def loss(p, xs, ys):
        gx = xs @ p["w_x"] + p["b"]
        z = jnp.zeros((xs.shape[1], p["w_h"].shape[0]), xs.dtype)
        hs = jax.lax.scan(lambda c, g: cell(p, c, g), (z, z), gx)[1]
        return (((hs @ p["w_out"] + p["b_out"]) - ys) ** 2).mean()
    f = jax.jit(jax.value_and_grad(loss) if grad else loss)
    return f, jnp.asarray, lambda r: jax.block_until_ready(r)


def np_loop(p, xs, ys):
    def sig(v):
        return 1.0 / (1.0 + np.exp(-v))
    gx = xs @ p["w_x"] + p["b"]
    B, H = xs.shape[1], p["w_h"].shape[0]
    h, c = np.zeros((B, H), np.float32), np.zeros((B, H), np.float32)
    hs = []
    for t in range(xs.shape[0]):
        g = gx[t] + h @ p["w_h"]
        i, f, gg, o = np.split(g, 4, axis=-1)
        c = sig(f) * c + sig(i) * np.tanh(gg)
        h = sig(o) * np.tanh(c)
        hs.append(h)
    return (((np.stack(hs) @ p["w_out"] + p["b_out"]) - ys) ** 2).mean()


def first_call(framework: str, T: int, batch: int, hidden: int, grad: bool) -> tuple[float, float]:
    """Seconds of the first call (trace, compile, record, run) in this fresh process, and
    of the second (the run alone)."""
    f, asarray, block = (jax_fns(grad) if framework == "jax" else vkml_fns(grad, framework == "unrolled"))
    p, xs, ys = data(T, batch, hidden)
    args = ({k: asarray(v) for k, v in p.items()}, asarray(xs), asarray(ys))
    block(args[1] * 1)          # the device (and the framework) up before the clock
    t0 = time.perf_counter()
    block(f(*args))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    block(f(*args))
    return first, time.perf_counter() - t0


def _child(framework: str, T: int, a) -> tuple[float, float]:
    cmd = [sys.executable, __file__, "--child", framework, str(T), "--batch", str(a.batch),
           "--hidden", str(a.hidden)] + (["--grad"] if a.grad else [])
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["s"]


def peak_bytes(n: int, remat) -> int:
    import vkml
    import vkml.numpy as vnp
    from vkml import lax

    def f(s, p):
        return lax.scan(lambda c, _: (vnp.sin(c) * p, None), s, None, length=n, remat=remat)[0].sum()
    return vkml.jit(vkml.grad(f)).lower(vnp.ones(4096), vnp.asarray(0.9)).peak_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lengths", type=int, nargs="+", default=[50, 500])
    ap.add_argument("--grad", action="store_true", help="value_and_grad instead of the forward pass")
    ap.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--no-first", action="store_true", help="skip the first-call processes")
    ap.add_argument("--unrolled", action="store_true",
                    help="also the first call of vkml's Python-loop LSTM at the first length")
    a = ap.parse_args()
    if a.child:
        print(json.dumps({"s": first_call(a.child[0], int(a.child[1]), a.batch, a.hidden, a.grad)}))
        return
    try:
        import jax  # noqa: F401
        frameworks = ["vkml", "jax"]
    except ImportError:
        frameworks = ["vkml"]
    what = "value_and_grad" if a.grad else "forward"
    print(f"LSTM hidden {a.hidden}, batch {a.batch}, {what}")
    if not a.no_first:
        for fw in frameworks:
            for T in a.lengths:                # warm the on-disk caches (kernel shapes
                _child(fw, T, a)               # outside the loop depend on T)
            both = {T: _child(fw, T, a) for T in a.lengths}
            times = {T: f for T, (f, _) in both.items()}
            t0 = times[a.lengths[0]]
            print(f"first call {fw:5s}: " + ", ".join(f"T={T} {s:.3f} s" for T, s in times.items())
                  + f"  (T={a.lengths[-1]} / T={a.lengths[0]}: {times[a.lengths[-1]] / t0:.2f}x);"
                  + " first minus second call: " + ", ".join(f"T={T} {f - s:.3f} s" for T, (f, s) in both.items()))
    if a.unrolled:
        T = a.lengths[0]
        _child("unrolled", T, a)
        f, s = _child("unrolled", T, a)
        print(f"first call vkml, the recurrence a Python loop: T={T} {f:.3f} s (second call {s:.3f} s)")
    from bench.timing import best_time
    for T in a.lengths:
        p, xs, ys = data(T, a.batch, a.hidden)
        row = {}
        for fw in frameworks:
            f, asarray, block = (vkml_fns if fw == "vkml" else jax_fns)(a.grad)
            args = ({k: asarray(v) for k, v in p.items()}, asarray(xs), asarray(ys))
            row[fw] = best_time(lambda: block(f(*args)), repeats=5, budget_s=10.0)[0]
        if not a.grad:
            row["numpy"] = best_time(lambda: np_loop(p, xs, ys), repeats=3, budget_s=5.0)[0]
        ratios = "  ".join(f"vkml/{k} {row['vkml'] / v:.2f}x" for k, v in row.items() if k != "vkml")
        print(f"steady T={T:4d}: " + "  ".join(f"{k} {v * 1e3:8.2f} ms" for k, v in row.items()) + "  " + ratios)
    for n in (16, 64, 256, 1024):
        full, root = peak_bytes(n, None), peak_bytes(n, "sqrt")
        print(f"planned peak, grad through a scan of T={n:4d} (4096-float carry): every carry "
              f"{full / 2**20:6.2f} MiB, remat='sqrt' {root / 2**20:6.2f} MiB")


if __name__ == "__main__":
    main()
