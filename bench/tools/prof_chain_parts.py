"""Kernel time of the chain with one part left out at a time (which part costs what on
a GPU where the chain is compute-bound). Usage: python bench/tools/prof_chain_parts.py [scale]"""
import sys

import numpy as np

import vkml
import vkml.numpy as vnp

PARTS = {
    "chain": lambda v: vnp.tanh(2 * v + 1) * vnp.exp(-v) + vnp.sqrt(v + 1) - v * v,
    "no tanh": lambda v: (2 * v + 1) * vnp.exp(-v) + vnp.sqrt(v + 1) - v * v,
    "no exp": lambda v: vnp.tanh(2 * v + 1) * (-v) + vnp.sqrt(v + 1) - v * v,
    "no sqrt": lambda v: vnp.tanh(2 * v + 1) * vnp.exp(-v) + (v + 1) - v * v,
    "tanh only": lambda v: vnp.tanh(v),
    "exp only": lambda v: vnp.exp(v),
    "sqrt only": lambda v: vnp.sqrt(v),
    "v + 1": lambda v: v + 1.0,
}

if __name__ == "__main__":
    n = int((16 << 20) * (float(sys.argv[1]) if len(sys.argv) > 1 else 1.0))
    x = vnp.asarray(np.random.default_rng(0).random(n, dtype=np.float32))
    for name, fn in PARTS.items():
        f = vkml.jit(fn)
        f.profile(x)
        t = min(sum(s for _, s in f.profile(x)) for _ in range(5))
        print(f"   {name:10s} {t * 1e6:8.1f} us  {8 * n / t / 1e9:7.1f} GB/s")
