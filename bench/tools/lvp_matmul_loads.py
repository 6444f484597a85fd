"""Where a lavapipe MatMul subgroup kernel spends its time: the same kernel with its A
or B loads (or both) replaced by register values. Usage: python bench/tools/lvp_matmul_loads.py"""
import re, time, numpy as np, vkml, vkml.numpy as vnp
from vkml.vulkan.lower import matmul as mm
orig = mm._subgroup_source.__wrapped__
mode = {"v": None}
def patched(t, T, rank, S, ta=False, tb=False, epi=None):
    src, local = orig(t, T, rank, S, ta, tb, epi)
    if mode["v"] in ("noA", "none"):
        src = re.sub(r"= A\[ar(\d+) \+ k0 / (\d+) \+ lane\];", r"= uint64_t(k0 + lane + \1);", src)
    if mode["v"] in ("noB", "none"):
        src = re.sub(r"= B\[bc(\d+) \+ \(k0 \+ (\d+)\) \* Nw\];", r"= u64vec4(uint64_t(k0 + \2 + \1));", src)
    return src, local
mm._subgroup_source = patched
rng = np.random.default_rng(0)
def best(fn, n=10):
    fn(); ws = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ws.append(time.perf_counter() - t0)
    return min(ws) * 1e6
for n in (256, 1024):
    a = vnp.asarray(rng.standard_normal((n, n)).astype(np.float32)); b = vnp.asarray(rng.standard_normal((n, n)).astype(np.float32))
    for m in ("full", "noA", "noB", "none"):
        mode["v"] = m
        f = vkml.jit(lambda p, q: p @ q)
        t = best(lambda: f(a, b))
        print(n, m, round(t), "us", round(2 * n**3 / t / 1e3, 1), "GF/s", flush=True)
