"""Wall time of a jitted program of n independent one-workgroup kernels on lavapipe, so
the cost of one more dispatch shows: compare LP_NUM_THREADS=0 (kernels run on the queue
thread) with the default (worker threads woken for every dispatch); then the same
programs with independent kernels merged into few dispatches (`vkml/vulkan/merge.py`).
Usage: LP_NUM_THREADS=0 python bench/tools/lvp_dispatch.py; python bench/tools/lvp_dispatch.py"""
import time

import numpy as np

import vkml
import vkml.numpy as vnp
from vkml.vulkan import merge


def main():
    xs = [vnp.asarray(np.random.default_rng(i).random(256, dtype=np.float32)) for i in range(40)]
    for merged in (False, True):
        for n in (1, 10, 20, 40):
            if merged:
                f = vkml.jit(lambda *a, n=n: [vnp.sum(v) for v in a[:n]])
            else:
                with merge.disabled():      # one dispatch per kernel: what a dispatch costs
                    f = vkml.jit(lambda *a, n=n: [vnp.sum(v) for v in a[:n]])
                    f.lower(*xs)
            f(*xs)
            ts = []
            for _ in range(200):
                t0 = time.perf_counter()
                f(*xs)
                ts.append(time.perf_counter() - t0)
            ts.sort()
            lo = f.lower(*xs)
            print(f"{n:3d} kernels in {lo.dispatch_count:2d} dispatches: best {ts[0] * 1e6:6.0f} us, "
                  f"median {ts[100] * 1e6:6.0f} us")


if __name__ == "__main__":
    main()
