"""A first look at vkml: a few array operations and a gradient, timed on the chosen device.

    ./run demo            # or: python examples/demo.py --size 1000000
"""
import time

import numpy as np
from absl import app, flags

import vkml
import vkml.numpy as vnp
from vkml.vulkan import runtime

flags.DEFINE_integer("size", 1 << 20, "elements per vector")
FLAGS = flags.FLAGS


def timed(label, fn, reps=5):
    fn()  # compile and warm up
    t = time.perf_counter()
    for _ in range(reps):
        out = fn()
    np.asarray(out)
    dt = (time.perf_counter() - t) / reps
    print(f"  {label:<38s} {dt * 1e3:8.2f} ms")
    return out


def main(argv):
    rt = runtime.get()
    print(f"vkml {vkml.__version__} on {rt.dev.summary()}")
    print("devices:", "; ".join(map(str, vkml.devices())))
    n = FLAGS.size
    x = vnp.asarray(np.random.default_rng(0).uniform(0, 1, n).astype(np.float32))
    timed(f"tanh(2x+1)*exp(-x) on {n:,}", lambda: vnp.tanh(2.0 * x + 1.0) * vnp.exp(-x))
    timed(f"sum of {n:,}", lambda: x.sum())
    a = vnp.asarray(np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32))
    timed("matmul 256x256", lambda: a @ a)
    loss = lambda w: vnp.mean(vnp.tanh(a @ w) ** 2)
    w = vnp.ones((256, 8)) * 0.01
    g = timed("grad of mean(tanh(a @ w)^2)", lambda: vkml.grad(loss)(w))
    print(f"  |grad| = {float(vnp.sqrt((g * g).sum())):.6f}")


if __name__ == "__main__":
    app.run(main)
