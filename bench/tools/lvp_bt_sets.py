"""A @ B^T against A @ B on lavapipe at K = 256 (tn*K*4 a multiple of 4096: every lane's
rows of B^T in one cache set unless the columns interleave, `matmul.interleave`) and K =
264 (no conflict), interleaved call by call. Usage: LP_NUM_THREADS=0 python
bench/tools/lvp_bt_sets.py"""
import time, numpy as np, vkml, vkml.numpy as vnp
rng = np.random.default_rng(0)
fs = {}
for K in (256, 264):
    for tb in (0, 1):
        a = vnp.asarray(rng.standard_normal((256, K)).astype(np.float32))
        b = vnp.asarray(rng.standard_normal((256, K) if tb else (K, 256)).astype(np.float32))
        f = vkml.jit(lambda p, q, tb=tb: p @ (q.T if tb else q)); f(a, b)
        fs[(K, "NT" if tb else "NN")] = (f, a, b)
best = {k: 1e9 for k in fs}
for _ in range(60):
    for k, (f, a, b) in fs.items():
        t0 = time.perf_counter(); f(a, b); best[k] = min(best[k], time.perf_counter() - t0)
for k, t in best.items(): print(k, f"{t*1e6:.0f} us  {t/(256*256*k[0]/16)*1e9:.3f} ns per pair")
