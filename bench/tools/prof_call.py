"""cProfile of jitted calls (the host side of a call): the MLP step and the chain."""
import cProfile
import io
import pstats
import sys

import numpy as np

import vkml
import vkml.numpy as vnp
from vkml import optim
from vkml.nn import functional as F


def prof(name, f, n=10):
    f(); f()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        f()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    print("=====", name)
    print(s.getvalue()[:3500])


def mlp_step(batch, dims):
    rng = np.random.default_rng(0)
    p = [(vnp.asarray((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)),
          vnp.asarray(np.zeros(b, np.float32))) for a, b in zip(dims[:-1], dims[1:])]
    x = vnp.asarray(rng.standard_normal((batch, dims[0])).astype(np.float32))
    y = vnp.asarray(rng.integers(0, dims[-1], batch).astype(np.int32))
    opt = optim.sgd(0.01)

    def loss_fn(p, xb, yb):
        h = xb
        for k, (w, b) in enumerate(p):
            h = h @ w + b
            if k < len(p) - 1:
                h = F.relu(h)
        return F.cross_entropy(h, yb)

    def step(p, s, xb, yb):
        loss, g = vkml.value_and_grad(loss_fn)(p, xb, yb)
        upd, s = opt.update(g, s, p)
        return optim.apply_updates(p, upd), s, loss
    j = vkml.jit(step, donate_argnums=(0, 1))
    st = {"p": p, "s": opt.init(p)}

    def run():
        st["p"], st["s"], loss = j(st["p"], st["s"], x, y)
        return loss
    return run


if __name__ == "__main__":
    big = len(sys.argv) > 1 and sys.argv[1] == "big"
    prof("mlp", mlp_step(4096, (1024, 4096, 4096, 10)) if big else mlp_step(256, (64, 256, 256, 10)))
