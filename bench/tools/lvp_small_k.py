"""A K = 10 product (the small MLP's g @ W^T), jitted, with B and B^T, best of 60 calls.
Run it at two commits, or with the tail chunk off (TAIL=0: the profile's matmul_tail_chunk),
to compare. Usage: LP_NUM_THREADS=0 TAG=name [TAIL=0] python bench/tools/lvp_small_k.py"""
import dataclasses, time, numpy as np, vkml, vkml.numpy as vnp, os
from vkml.vulkan import device
if os.environ.get("TAIL") == "0":   # the step-by-step remainder loop instead of one masked chunk
    dev = device.get()
    dev.profile = dataclasses.replace(dev.profile, matmul_tail_chunk=False)
rng = np.random.default_rng(0)
a = vnp.asarray(rng.standard_normal((256, 10)).astype(np.float32))
w = vnp.asarray(rng.standard_normal((256, 10)).astype(np.float32))
b = vnp.asarray(rng.standard_normal((10, 256)).astype(np.float32))
f = vkml.jit(lambda x, y: x @ y.T); f(a, w)
g = vkml.jit(lambda x, y: x @ y); g(a, b)
t1, t2 = [], []
for _ in range(60):
    t0 = time.perf_counter(); f(a, w); t1.append(time.perf_counter() - t0)
    t0 = time.perf_counter(); g(a, b); t2.append(time.perf_counter() - t0)
print(os.environ.get("TAG"), f"K=10 B^T {min(t1)*1e6:.0f} us   K=10 B {min(t2)*1e6:.0f} us")
