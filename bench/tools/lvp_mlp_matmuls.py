"""Wall time of each MatMul of the small MLP step (batch 256, 64-256-256-10) alone, jitted,
with its operand layout (A^T, B^T), interleaved call by call, against a tiny product (the
fixed cost of a call). Usage: python bench/tools/lvp_mlp_matmuls.py"""
import sys, time, numpy as np, vkml, vkml.numpy as vnp
rng = np.random.default_rng(0)
shapes = [("fwd1", 256, 64, 256, 0, 0), ("fwd2", 256, 256, 256, 0, 0), ("fwd3", 256, 256, 10, 0, 0),
          ("dX3", 256, 10, 256, 0, 1), ("dW3", 256, 256, 10, 1, 0), ("dX2", 256, 256, 256, 0, 1),
          ("dW2", 256, 256, 256, 1, 0), ("dW1", 64, 256, 256, 1, 0), ("tiny", 8, 8, 8, 0, 0)]
fs = []
for name, m, k, n, ta, tb in shapes:
    a = vnp.asarray(rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32))
    b = vnp.asarray(rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32))
    f = vkml.jit(lambda p, q, ta=ta, tb=tb: (p.T if ta else p) @ (q.T if tb else q))
    f(a, b); fs.append((name, f, a, b, m, k, n))
best = {n: 1e9 for n, *_ in fs}
for _ in range(40):
    for name, f, a, b, *_ in fs:
        t0 = time.perf_counter(); f(a, b); best[name] = min(best[name], time.perf_counter() - t0)
tot = 0
for name, f, a, b, m, k, n in fs:
    t = best[name]; tot += t if name != "tiny" else 0
    print(f"{name:5s} {m}x{k}x{n}: {t*1e6:7.1f} us  {2*m*k*n/t/1e9:6.1f} GF/s")
print(f"sum {tot*1e6:.0f} us; minus 8 x tiny {(tot - 8*best['tiny'])*1e6:.0f} us")
