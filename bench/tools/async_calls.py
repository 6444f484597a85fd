"""Asynchronous calls (vkml issue 23, part 0): back-to-back throughput of jitted calls that
keep their results, and a training loop's step time, with vkml's calls asynchronous (the
default) and synchronous ($VKML_ASYNC=0, set here per figure), beside JAX (whose dispatch is
asynchronous too) and PyTorch eager in the same run (on CUDA where torch has it).

    /work/main/.venv/bin/python bench/tools/async_calls.py [--n 16] [--calls 20] [--only vkml]

Run from the repository root (it measures this tree's vkml). Figures per call, best of
--repeats rounds: "blocked" is one call waited for alone; "kept" is --calls calls in a row
whose results are all kept (`rs.append(f(x))`), then one wait; "loop" is --calls steps of
an MLP's SGD step (batch 256, 784-512-512-10, float32), each feeding the next, then one
wait.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

DIMS = (784, 512, 512, 10)
BATCH = 256
LR = 0.01


def _best(run, repeats: int) -> float:
    run()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t)
    return best


def _chain(m, v):
    return m.tanh(m.sin(v) * 1.5 + m.cos(v) * 0.5) * 2.0 - 0.25


def _mlp_data(seed: int = 0):
    rng = np.random.default_rng(seed)
    params = [(rng.standard_normal((a, b)).astype(np.float32) / np.sqrt(a), np.zeros(b, np.float32))
              for a, b in zip(DIMS[:-1], DIMS[1:])]
    x = rng.standard_normal((BATCH, DIMS[0])).astype(np.float32)
    y = np.eye(DIMS[-1], dtype=np.float32)[rng.integers(0, DIMS[-1], BATCH)]
    return params, x, y


def _loss(m, params, x, y, relu, logsumexp):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = relu(h)
    return m.mean(logsumexp(h) - m.sum(h * y, axis=1))


def vkml_figures(n: int, calls: int, repeats: int) -> dict:
    import vkml
    import vkml.numpy as vnp
    from vkml.vulkan import runtime
    rt = runtime.get()
    out = {}
    for mode in ("async", "sync"):
        rt.asynchronous = mode == "async"
        for size, tag in ((n, "chain"), (8, "tiny")):
            x = vnp.asarray(np.linspace(-2, 2, size, dtype=np.float32))
            f = vkml.jit(lambda v: _chain(vnp, v))
            out[f"{tag} blocked ({mode})"] = _best(lambda: f(x).block_until_ready(), repeats)

            def kept():
                rs = [f(x) for _ in range(calls)]
                rs[-1].block_until_ready()
            out[f"{tag} kept ({mode})"] = _best(kept, repeats) / calls
        p0, xn, yn = _mlp_data()
        lse = lambda h: vnp.log(vnp.sum(vnp.exp(h - vnp.max(h, axis=1, keepdims=True)), axis=1)) \
            + vnp.max(h, axis=1)
        loss = lambda p, a, b: _loss(vnp, p, a, b, lambda h: vnp.maximum(h, 0.0), lse)

        @vkml.jit
        def step(p, a, b):
            lv, g = vkml.value_and_grad(loss)(p, a, b)
            return [(w - LR * gw, c - LR * gc) for (w, c), (gw, gc) in zip(p, g)], lv
        st = {"p": [(vnp.asarray(w), vnp.asarray(b)) for w, b in p0]}
        xv, yv = vnp.asarray(xn), vnp.asarray(yn)

        def loop():
            for _ in range(calls):
                st["p"], lv = step(st["p"], xv, yv)
            lv.block_until_ready()
        out[f"mlp loop ({mode})"] = _best(loop, repeats) / calls
    rt.asynchronous = True
    return out


def jax_figures(n: int, calls: int, repeats: int) -> dict:
    import jax
    import jax.numpy as jnp
    out = {}
    for size, tag in ((n, "chain"), (8, "tiny")):
        x = jnp.asarray(np.linspace(-2, 2, size, dtype=np.float32))
        f = jax.jit(lambda v: _chain(jnp, v))
        out[f"{tag} blocked"] = _best(lambda: f(x).block_until_ready(), repeats)

        def kept():
            rs = [f(x) for _ in range(calls)]
            rs[-1].block_until_ready()
        out[f"{tag} kept"] = _best(kept, repeats) / calls
    p0, xn, yn = _mlp_data()
    loss = lambda p, a, b: _loss(jnp, p, a, b, jax.nn.relu, lambda h: jax.nn.logsumexp(h, axis=1))

    @jax.jit
    def step(p, a, b):
        lv, g = jax.value_and_grad(loss)(p, a, b)
        return [(w - LR * gw, c - LR * gc) for (w, c), (gw, gc) in zip(p, g)], lv
    st = {"p": [(jnp.asarray(w), jnp.asarray(b)) for w, b in p0]}
    xj, yj = jnp.asarray(xn), jnp.asarray(yn)

    def loop():
        for _ in range(calls):
            st["p"], lv = step(st["p"], xj, yj)
        lv.block_until_ready()
    out["mlp loop"] = _best(loop, repeats) / calls
    return out


def torch_figures(n: int, calls: int, repeats: int) -> dict:
    import torch
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    out = {}
    for size, tag in ((n, "chain"), (8, "tiny")):
        x = torch.linspace(-2, 2, size, device=dev)

        def blocked():
            _chain(torch, x)
            sync()

        def kept():
            rs = [_chain(torch, x) for _ in range(calls)]
            sync()
            return rs
        out[f"{tag} blocked"] = _best(blocked, repeats)
        out[f"{tag} kept"] = _best(kept, repeats) / calls
    p0, xn, yn = _mlp_data()
    ps = [(torch.tensor(w, dtype=torch.float32, device=dev, requires_grad=True),
           torch.tensor(b, dtype=torch.float32, device=dev, requires_grad=True)) for w, b in p0]
    xt, yt = (torch.tensor(xn, dtype=torch.float32, device=dev),
              torch.tensor(yn, dtype=torch.float32, device=dev))
    loss = lambda p: _loss(torch, p, xt, yt, torch.relu, lambda h: torch.logsumexp(h, dim=1))

    def loop():
        for _ in range(calls):
            lv = loss(ps)
            gs = torch.autograd.grad(lv, [t for wb in ps for t in wb])
            with torch.no_grad():
                for t, g in zip([t for wb in ps for t in wb], gs):
                    t -= LR * g
        sync()
    out["mlp loop"] = _best(loop, repeats) / calls
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=float, default=16, help="chain elements, in Mi (default 16)")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="vkml,jax,torch")
    a = ap.parse_args()
    n = int(a.n * (1 << 20))
    only = a.only.split(",")
    res = {"vkml": vkml_figures(n, a.calls, a.repeats)}
    for name, fn in (("jax", jax_figures), ("torch", torch_figures)):
        if name in only:
            try:
                res[name] = fn(n, a.calls, a.repeats)
            except ImportError as e:
                print(f"{name}: not installed ({e})")
    from vkml.vulkan import runtime
    print(f"device: {runtime.get().dev.name}; chain of {a.n:g}Mi float32, {a.calls} calls")
    print(f"{'figure (ms per call)':28s} {'vkml async':>11s} {'vkml sync':>10s}"
          + "".join(f" {k:>9s} {'ratio':>6s}" for k in res if k != "vkml"))
    v = res["vkml"]
    for fig in ("chain blocked", "chain kept", "tiny blocked", "tiny kept", "mlp loop"):
        va, vs = v[f"{fig} (async)"], v[f"{fig} (sync)"]
        row = f"{fig:28s} {va * 1e3:11.3f} {vs * 1e3:10.3f}"
        for k, r in res.items():
            if k != "vkml":
                row += f" {r[fig] * 1e3:9.3f} {va / r[fig]:6.2f}x"
        print(row)


if __name__ == "__main__":
    main()
