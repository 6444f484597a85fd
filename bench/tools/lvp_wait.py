"""The small MLP step (the bench's mlp_small, jitted) and a batched Cholesky (64 float32
32x32; one kernel of four workgroups, on both of lavapipe's threads) per way of waiting
for a submission, interleaved call by call in one process so that the VM's drift hits each
alike: poll the fence yielding the core for up to S seconds then block (what lavapipe's
profile does, `Profile.poll_s`), or block at once. Usage:
python bench/tools/lvp_wait.py [calls] [S ...]"""
import sys, time
sys.path.insert(0, "bench/tools"); sys.path.insert(0, ".")
import numpy as np
import prof_kernels as pk
import vkml, vkml.numpy as vnp, vkml.numpy.linalg as vla
from vkml.vulkan import runtime as _rt
j, (p, s, x, y) = pk.mlp_step(256, (64, 256, 256, 10), donate=True)
rng = np.random.default_rng(0)
a = rng.standard_normal((64, 32, 32)).astype(np.float32)
A = vnp.asarray(a @ a.transpose(0, 2, 1) + 32 * np.eye(32, dtype=np.float32))
chol = vkml.jit(vla.cholesky)
rt = _rt.get()
for _ in range(3):
    p, s, l = j(p, s, x, y)
    chol(A).block_until_ready()
calls = int(sys.argv[1]) if len(sys.argv) > 1 else 300
polls = [float(v) for v in sys.argv[2:]] or [0.05, 0.002, 0.0]
res = {(w, S): [] for w in ("mlp step", "cholesky") for S in polls}
for _ in range(calls):
    for S in polls:
        rt.spin_s = S
        t0 = time.perf_counter(); p, s, l = j(p, s, x, y); l.block_until_ready()
        res[("mlp step", S)].append(time.perf_counter() - t0)
        t0 = time.perf_counter(); chol(A).block_until_ready()
        res[("cholesky", S)].append(time.perf_counter() - t0)
for (w, S), ts in res.items():
    ts.sort(); n = len(ts)
    print(f"{w:9s} poll {S * 1e3:5.1f} ms: best {ts[0]*1e6:6.0f} us  p25 {ts[n//4]*1e6:6.0f}  median {ts[n//2]*1e6:6.0f}")
