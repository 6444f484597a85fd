"""A K = 10 product (the small MLP's g @ W^T), jitted, with B and B^T, best of 60 calls.
Run it at two commits (or with matmul.TAIL_CHUNK off) to compare. Usage:
LP_NUM_THREADS=0 TAG=name python bench/tools/lvp_small_k.py"""
import time, numpy as np, vkml, vkml.numpy as vnp, os
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
