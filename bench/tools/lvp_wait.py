"""The small MLP step (the bench's mlp_small, jitted) per way of waiting for a submission,
interleaved call by call in one process so that the VM's drift hits each alike: poll the
fence yielding the core (what a CPU device does, runtime.CPU_POLL_S), block in
vkWaitForFences, or poll without yielding. Usage: python bench/tools/lvp_wait.py [calls]"""
import sys, time
sys.path.insert(0, "bench/tools"); sys.path.insert(0, ".")
import prof_kernels as pk
from vkml.vulkan import runtime as _rt
j, (p, s, x, y) = pk.mlp_step(256, (64, 256, 256, 10), donate=True)
rt = _rt.get()
for _ in range(3): p, s, l = j(p, s, x, y)
modes = {"poll": (_rt.CPU_POLL_S, rt._yield), "block": (0.0, None), "spin-noyield": (_rt.CPU_POLL_S, None)}
res = {m: [] for m in modes}
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 300):
    for m, (sp, y_) in modes.items():
        rt.spin_s, rt._yield = sp, y_
        t0 = time.perf_counter(); p, s, l = j(p, s, x, y); res[m].append(time.perf_counter() - t0)
for m, ts in res.items():
    ts.sort(); n = len(ts)
    print(f"{m:13s} best {ts[0]*1e6:.0f} us  p25 {ts[n//4]*1e6:.0f}  median {ts[n//2]*1e6:.0f}")
