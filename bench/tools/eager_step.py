"""The PyTorch face at jit speed (vkml issue 20): the digits CNN's training step written
PyTorch-style (`zero_grad(); loss.backward(); opt.step()` on `vkml.Tensor` parameters)
against the same step under `vkml.jit`, and beside PyTorch eager when it is installed.

    /work/main/.venv/bin/python bench/tools/eager_step.py [--steps 30] [--batch 64]

Run from the repository root (it puts the root on sys.path, so it measures this tree's
vkml). Each figure is the median of --steps steps after 5 warm-up steps (the eager one's
first backward plans its program; later ones replay it from the tape-structure cache).
Then --dist jit and eager steps interleaved: the median and p90 of each and of their
per-pair ratio, and what each eager step's lazy flushes did. Also the host cost of one eager operator on a small tensor (median of many `x + y` on 8
float32), beside torch's.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _median(run, n: int, warm: int = 5) -> float:
    for _ in range(warm):
        run()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        run()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--dist", type=int, default=50, help="interleaved jit/eager step pairs")
    a = p.parse_args()
    import vkml
    import vkml.nn.functional as F
    from vkml import optim, random
    from vkml.tree_util import tree_leaves, tree_map
    from examples.digits import load_digits, make_model

    xtr, ytr, _, _ = load_digits(0)
    x, y = xtr[:a.batch], ytr[:a.batch]
    xd, yd = vkml.numpy.asarray(x), vkml.numpy.asarray(y)

    # jitted functional step
    model = make_model(16, random.key(0))
    opt = optim.adam(1e-3)
    state = opt.init(model)

    @vkml.jit
    def step(m, s, x, y):
        loss, g = vkml.value_and_grad(lambda m: F.cross_entropy(m(x), y))(m)
        u, s = opt.update(g, s, m)
        return optim.apply_updates(m, u), s, loss
    box = [model, state]

    def jit_step():
        box[0], box[1], loss = step(box[0], box[1], xd, yd)
        loss.item()
    t_jit = _median(jit_step, a.steps)

    # PyTorch-style eager step on Tensor parameters
    tm = tree_map(lambda v: vkml.Tensor(v, requires_grad=True), make_model(16, random.key(0)))
    topt = optim.Adam(tree_leaves(tm), lr=1e-3)

    def eager_step():
        topt.zero_grad()
        loss = F.cross_entropy(tm(xd), yd)
        loss.backward()
        topt.step()
        loss.item()
    from vkml import tensor as vt
    import vkml.lazy as lz
    before = dict(vt._BACKWARD_STATS)
    t_eager = _median(eager_step, a.steps)
    plans = vt._BACKWARD_STATS["plans"] - before["plans"]

    # the distribution: jit and eager steps interleaved (the shared VM's load drifts over
    # seconds, so two medians taken one after the other can differ 2x), with what each
    # eager step's flushes did (replayed a cached program, stepped operator by operator,
    # compiled) and whether its backward planned
    tj, te, ratios, per = [], [], [], []
    for _ in range(a.dist):
        t0 = time.perf_counter(); jit_step(); t1 = time.perf_counter()
        s0, b0 = dict(lz.stats), dict(vt._BACKWARD_STATS)
        eager_step(); t2 = time.perf_counter()
        tj.append(t1 - t0); te.append(t2 - t1); ratios.append((t2 - t1) / (t1 - t0))
        per.append(tuple(lz.stats[k] - s0[k] for k in ("replayed", "stepped", "compiled"))
                   + (vt._BACKWARD_STATS["plans"] - b0["plans"],))

    def q(v, f):
        v = sorted(v)
        return v[min(len(v) - 1, int(f * len(v)))]

    s8 = vkml.Tensor(np.ones(8, np.float32))
    t_op = _median(lambda: s8 + s8, 2000, warm=50)
    print(f"digits CNN step, batch {a.batch}, Adam (median of {a.steps}):")
    print(f"  vkml.jit            {t_jit * 1e3:8.2f} ms")
    print(f"  vkml eager backward {t_eager * 1e3:8.2f} ms   eager/jit {t_eager / t_jit:5.2f}x   "
          f"backward plans: {plans} for {a.steps + 5} steps")
    print(f"host cost of one eager op (x + y, 8 f32): vkml {t_op * 1e6:7.1f} us")
    print(f"interleaved, {a.dist} pairs: jit median {q(tj, .5) * 1e3:.1f} p90 {q(tj, .9) * 1e3:.1f} ms; "
          f"eager median {q(te, .5) * 1e3:.1f} p90 {q(te, .9) * 1e3:.1f} ms; eager/jit per pair "
          f"median {q(ratios, .5):.2f}x p90 {q(ratios, .9):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f})")
    kinds = {}
    for r in per:
        kinds[r] = kinds.get(r, 0) + 1
    print("  eager steps by (flushes replayed, stepped, compiled, backward plans): "
          + ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])))
    try:
        import torch
    except ImportError:
        print("  torch: not installed")
        return
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(512, 64),
        torch.nn.ReLU(), torch.nn.Linear(64, 10))
    o = torch.optim.Adam(net.parameters(), lr=1e-3)
    xt, yt = torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y.astype(np.int64))

    def torch_step():
        o.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(xt), yt)
        loss.backward()
        o.step()
        loss.item()
    t_torch = _median(torch_step, a.steps)
    a8 = torch.ones(8)
    t_top = _median(lambda: a8 + a8, 2000, warm=50)
    print(f"  torch eager         {t_torch * 1e3:8.2f} ms   vkml eager/torch {t_eager / t_torch:5.2f}x")
    print(f"host cost of one eager op: torch {t_top * 1e6:7.1f} us   vkml/torch {t_op / t_top:5.1f}x")


if __name__ == "__main__":
    main()
