"""An LSTM written the JAX way: the recurrence is `vkml.lax.scan`, so the cell is traced
once whatever the sequence length, and a jitted training step over T steps is one
submission that replays the cell's dispatches T times.

    python examples/lstm_scan.py --steps 300 --length 40 --hidden 32

The task: read a sequence of random numbers and output, at every step, the number seen
`delay` steps before (zero before that), which a network can only do by remembering. A
model that has learned nothing predicts 0 and scores the inputs' variance (1.0).
"""
from __future__ import annotations

import math
import time

import numpy as np

import vkml
import vkml.numpy as vnp
from vkml import lax, optim, random


def init_params(key, n_in: int, hidden: int, n_out: int, dtype=vnp.float32) -> dict:
    """torch's LSTM initialisation (uniform in +-1/sqrt(hidden)), gates i, f, g, o."""
    k = random.split(key, 4)
    b = 1.0 / math.sqrt(hidden)
    u = lambda kk, shape: random.uniform(kk, shape, dtype, minval=-b, maxval=b)  # noqa: E731
    return {"w_x": u(k[0], (n_in, 4 * hidden)), "w_h": u(k[1], (hidden, 4 * hidden)),
            "b": u(k[2], (4 * hidden,)), "w_out": u(k[3], (hidden, n_out)),
            "b_out": vnp.zeros((n_out,), dtype)}


def cell(p: dict, carry, gx):
    """One LSTM step from the input's projection gx (batch, 4 hidden)."""
    h, c = carry
    g = gx + h @ p["w_h"]
    i, f, gg, o = vnp.split(g, 4, axis=-1)
    c = vkml.nn.functional.sigmoid(f) * c + vkml.nn.functional.sigmoid(i) * vnp.tanh(gg)
    h = vkml.nn.functional.sigmoid(o) * vnp.tanh(c)
    return (h, c), h


def lstm(p: dict, xs, remat: str | None = None, unroll: int = 1):
    """Hidden states (T, batch, hidden) of the LSTM over xs (T, batch, n_in): the input
    projections of all steps are one matmul, the recurrence one scan.

    >>> p = init_params(random.key(0), 2, 8, 1)
    >>> lstm(p, vnp.ones((5, 3, 2))).shape
    (5, 3, 8)
    """
    T, B = xs.shape[:2]
    H = p["w_h"].shape[0]
    gx = xs @ p["w_x"] + p["b"]
    zeros = vnp.zeros((B, H), xs.dtype)
    return lax.scan(lambda c, g: cell(p, c, g), (zeros, zeros), gx, remat=remat, unroll=unroll)[1]


def lstm_unrolled(p: dict, xs):
    """The same network with the recurrence a Python loop (the reference)."""
    gx = xs @ p["w_x"] + p["b"]
    B, H = xs.shape[1], p["w_h"].shape[0]
    carry = (vnp.zeros((B, H), xs.dtype), vnp.zeros((B, H), xs.dtype))
    hs = []
    for t in range(xs.shape[0]):
        carry, h = cell(p, carry, gx[t])
        hs.append(h)
    return vnp.stack(hs)


def loss(p: dict, xs, ys, remat: str | None = None):
    out = lstm(p, xs, remat) @ p["w_out"] + p["b_out"]
    return ((out - ys) ** 2).mean()


def batch(rng: np.random.Generator, length: int, size: int, delay: int):
    """Inputs (T, B, 1) and targets: each input `delay` steps late."""
    x = rng.normal(size=(length, size, 1)).astype(np.float32)
    y = np.zeros_like(x)
    y[delay:] = x[:-delay]
    return vnp.asarray(x), vnp.asarray(y)


def make_step(opt, remat: str | None = None):
    """The jitted training step: loss, gradient through the scan, Adam update."""
    @vkml.jit
    def step(p, s, xs, ys):
        v, g = vkml.value_and_grad(loss)(p, xs, ys, remat)
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s, v
    return step


def train(steps: int = 300, length: int = 40, hidden: int = 32, batch_size: int = 32, delay: int = 2,
          lr: float = 1e-2, seed: int = 0, remat: str | None = None, log=print) -> tuple[dict, list]:
    """Train on fresh batches; returns (params, losses)."""
    rng = np.random.default_rng(seed)
    p = init_params(random.key(seed), 1, hidden, 1)
    opt = optim.adam(lr)
    s = opt.init(p)
    step = make_step(opt, remat)
    losses = []
    t0 = time.perf_counter()
    for i in range(steps):
        xs, ys = batch(rng, length, batch_size, delay)
        p, s, v = step(p, s, xs, ys)
        if i % 50 == 0 or i == steps - 1:
            losses.append(float(v))
            log(f"step {i:4d}  loss {losses[-1]:.4f}  ({time.perf_counter() - t0:.1f} s)")
    return p, losses


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--length", type=int, default=40)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--delay", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--remat", choices=["sqrt"], default=None)
    a = ap.parse_args()
    train(a.steps, a.length, a.hidden, a.batch_size, a.delay, a.lr, remat=a.remat)
