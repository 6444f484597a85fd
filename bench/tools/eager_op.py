"""Host cost of one eager operator on a small tensor (vkml issue 20), vkml beside torch.

    /work/main/.venv/bin/python bench/tools/eager_op.py [--n 3000]

Run from the repository root (it puts the root on sys.path, so it measures this tree's
vkml). Per case, the median of --n calls on 8 float32 (after warm-up), with vkml's
laziness on (`vkml.lazy.ENABLED`: the operator records a node, a later read runs it) and
off (each operator submits its single-operator program), and torch's CPU eager operator in
the same run. "chain" is eight dependent operators and one read of the result, per operator.
The VM is shared: compare figures within one run.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _median(run, n: int, warm: int = 200) -> float:
    for _ in range(warm):
        run()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        run()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _cases(vnp, x, y, t, w):
    def chain():
        v = x
        for _ in range(8):
            v = v * 1.5 + y
        v.block_until_ready()
    return {
        "x + y": lambda: x + y,
        "x * 2": lambda: x * 2,
        "exp(x)": lambda: vnp.exp(x),
        "Tensor t + t": lambda: t + t,
        "Tensor t.relu()": lambda: t.relu(),
        "Tensor w * w (grad)": lambda: w * w,
        "chain (per op)": (chain, 16),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=3000)
    a = p.parse_args()
    import vkml
    import vkml.lazy
    import vkml.numpy as vnp

    h = np.linspace(0.5, 1.0, 8, dtype=np.float32)
    x, y = vnp.asarray(h), vnp.asarray(h[::-1].copy())
    t = vkml.Tensor(h)
    w = vkml.Tensor(h, requires_grad=True)
    cases = _cases(vnp, x, y, t, w)
    res = {}
    default = vkml.lazy.ENABLED
    for lazy in (True, False):
        vkml.lazy.ENABLED = lazy
        for name, c in cases.items():
            f, k = c if isinstance(c, tuple) else (c, 1)
            res[name, lazy] = _median(f, max(a.n // k, 50)) / k
    vkml.lazy.ENABLED = default
    try:
        import torch
        torch.set_num_threads(1)
        xt, yt = torch.from_numpy(h), torch.from_numpy(h[::-1].copy())
        wt = torch.from_numpy(h.copy()).requires_grad_(True)

        def tchain():
            v = xt
            for _ in range(8):
                v = v * 1.5 + yt
            v[0].item()
        tc = {"x + y": lambda: xt + yt, "x * 2": lambda: xt * 2, "exp(x)": lambda: torch.exp(xt),
              "Tensor t + t": lambda: xt + xt, "Tensor t.relu()": lambda: xt.relu(),
              "Tensor w * w (grad)": lambda: wt * wt, "chain (per op)": (tchain, 16)}
        for name, c in tc.items():
            f, k = c if isinstance(c, tuple) else (c, 1)
            res[name, "torch"] = _median(f, max(a.n // k, 50)) / k
    except ImportError:
        pass
    print(f"host cost of one eager operator, 8 float32 (median of {a.n}; us)")
    print(f"  {'case':22s} {'vkml lazy':>10s} {'vkml off':>10s} {'torch':>8s} {'lazy/torch':>10s}")
    for name in cases:
        tt = res.get((name, "torch"))
        lz, off = res[name, True], res[name, False]
        print(f"  {name:22s} {lz * 1e6:10.1f} {off * 1e6:10.1f} "
              f"{(tt or float('nan')) * 1e6:8.1f} {lz / tt if tt else float('nan'):10.1f}")


if __name__ == "__main__":
    main()
