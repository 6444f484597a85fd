"""What reaching a view by buffer address costs against a storage-buffer descriptor.

    python bench/tools/big_bindings.py [--mib 64] [--reps 7]

A jitted negation of a float32 array of --mib MiB, timed per call (best and median of
--reps after a warm-up): once as every small kernel runs (descriptors; lavapipe reads
the operand as texels), once with the device's binding range lowered to 4 KiB so that
every storage view, the result here, is reached by address (`program.Binding.address`),
as a view past maxStorageBufferRange is. Both with the vector path (8 elements a thread)
and without it (one element a thread, where lavapipe reads the operand by address too
when its texels would pass maxTexelBufferElements; here the texels still fit). The last
line times the same negation on a 1 GiB array (addressed because it is that large).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

sys.path.insert(0, ".")
import vkml  # noqa: E402
import vkml.numpy as vnp  # noqa: E402
from vkml.vulkan import device, runtime  # noqa: E402


def bench(n: int, addressed: bool, vectorize: bool, reps: int) -> tuple[float, float]:
    dev = runtime.get().dev
    x = vnp.asarray(np.ones(n, np.float32))
    old = dev.max_storage_buffer_range
    if addressed:
        dev.max_storage_buffer_range = 4096
    try:
        with device.using(vectorize=vectorize):
            f = vkml.jit(lambda x: -x)
            f(x)                   # trace, compile, record
            ts = []
            for _ in range(reps):
                t = time.perf_counter()
                y = f(x)
                ts.append(time.perf_counter() - t)
                del y
    finally:
        dev.max_storage_buffer_range = old
    ts.sort()
    return ts[0], ts[len(ts) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    print(runtime.get().dev.summary())
    n = a.mib << 18
    for vec in (True, False):
        for addr in (False, True):
            best, med = bench(n, addr, vec, a.reps)
            print(f"{a.mib} MiB neg, vector path {'on ' if vec else 'off'}, "
                  f"{'by address ' if addr else 'descriptors'}: best {best * 1e3:.1f} ms, median {med * 1e3:.1f} ms")
    best, med = bench(1 << 28, False, True, 3)
    print(f"1024 MiB neg, vector path on, by address: best {best * 1e3:.1f} ms, median {med * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
