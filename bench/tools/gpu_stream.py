"""Streaming kernels on a GPU: kernel time and call time of vkml's chain, copy and sum beside
torch CUDA and torch.compile (issue 23: the chain within 1.0x torch.compile and at 90% of
copy bandwidth).

For each workload: `Jitted.profile`'s device time (vkml) or CUDA events around 20 calls
(torch), the best blocked call, 20 calls in a row that keep their results, and the host
time per call of those 20 before their sync (for vkml it includes the waits for the
oldest of `runtime.MAX_IN_FLIGHT` submissions, so it is not host work alone).

    python bench/tools/gpu_stream.py [--n 67108864] [--variants]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import vkml
import vkml.numpy as vnp
from vkml import lazy
from vkml.vulkan import runtime


def _best(fn, sync, reps=30):
    fn(), sync()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


ENQUEUE: dict = {}    # workload -> host seconds per call of the kept calls, before the sync


def _row(n_calls, fn, sync, name=""):
    fn(), sync()
    best = enq = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        keep = [fn() for _ in range(n_calls)]
        t1 = time.perf_counter()
        sync()
        best = min(best, (time.perf_counter() - t) / n_calls)
        enq = min(enq, (t1 - t) / n_calls)
        del keep
    ENQUEUE[name] = enq
    return best


def chain(v, np_=vnp):
    return np_.tanh(2 * v + 1) * np_.exp(-v) + np_.sqrt(v + 1) - v * v


def vkml_rows(n):
    x = vnp.asarray(np.random.default_rng(0).random(n, dtype=np.float32))
    sync = lambda: (lazy.flush(), runtime.get().wait())   # noqa: E731
    out = {}
    for name, f in [("chain", vkml.jit(chain)), ("v + 1", vkml.jit(lambda v: v + 1.0)),
                    ("sum", vkml.jit(lambda v: vnp.sum(v)))]:
        f(x)
        kern = min(sum(s for _, s in f.profile(x)) for _ in range(3))
        out[name] = (kern, _best(lambda: f(x), sync), _row(20, lambda: f(x), sync, name))
    out["copy eager"] = (float("nan"), _best(lambda: vnp.copy(x), sync), _row(20, lambda: vnp.copy(x), sync, "copy eager"))
    return out


def torch_rows(n):
    import torch
    x = torch.rand(n, device="cuda")
    sync = torch.cuda.synchronize

    def events(fn):
        fn(), sync()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        best = float("inf")
        for _ in range(3):
            a.record()
            for _ in range(20):
                fn()
            b.record()
            sync()
            best = min(best, a.elapsed_time(b) / 20 / 1e3)
        return best
    out = {}
    comp = torch.compile(lambda v: chain(v, torch))
    for name, f in [("chain", lambda: chain(x, torch)), ("chain compile", lambda: comp(x)),
                    ("copy", lambda: x.clone()), ("sum", lambda: x.sum())]:
        out[name] = (events(f), _best(f, sync), _row(20, f, sync, "t " + name))
    return out


def variants(n):
    """The chain and the copy with other rounds per thread and workgroup sizes (kernel time)."""
    from vkml.vulkan.lower import elementwise as ew
    rounds, local = ew._rounds, ew._local_size
    x = vnp.asarray(np.random.default_rng(0).random(n, dtype=np.float32))
    for R in (1, 2, 4, 8):
        for lx in (128, 256, 512, 1024):
            ew._rounds = lambda nv, W, weight, R=R: R
            ew._local_size = lambda dev, threads, lx=lx: lx
            for name, fn in [("chain", chain), ("v + 1", lambda v: v + 1.0)]:
                f = vkml.jit(fn)
                f(x)
                t = min(sum(s for _, s in f.profile(x)) for _ in range(3))
                print(f"   R={R} lx={lx:4d} {name:6s} {t * 1e6:8.1f} us  {8 * n / t / 1e9:7.1f} GB/s", flush=True)
    ew._rounds, ew._local_size = rounds, local


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64 << 20)
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()
    print(f"device: {runtime.get().dev.name}  n = {a.n}")
    print(f"{'workload':16s} {'kernel us':>10s} {'blocked us':>11s} {'20 kept us':>11s} {'GB/s (kernel)':>14s} {'enqueue us':>11s}")
    rows = vkml_rows(a.n)
    for k, (kern, blk, row) in rows.items():
        gb = (4 if k == "sum" else 8) * a.n / kern / 1e9 if kern > 0 else float("nan")
        print(f"vkml {k:11s} {kern * 1e6:10.1f} {blk * 1e6:11.1f} {row * 1e6:11.1f} {gb:14.1f} "
              f"{ENQUEUE[k] * 1e6:11.1f}", flush=True)
    if not a.no_torch:
        for k, (kern, blk, row) in torch_rows(a.n).items():
            gb = (4 if k == "sum" else 8) * a.n / kern / 1e9 if kern > 0 else float("nan")
            print(f"torch {k:14s} {kern * 1e6:10.1f} {blk * 1e6:11.1f} {row * 1e6:11.1f} {gb:14.1f} "
                  f"{ENQUEUE['t ' + k] * 1e6:11.1f}", flush=True)
    if a.variants:
        variants(a.n)


if __name__ == "__main__":
    main()
