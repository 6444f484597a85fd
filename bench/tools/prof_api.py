"""Time spent per Vulkan API call (wraps every vk.vk* function), for an eager op and a jit call."""
import collections, time
import numpy as np
import vulkan as vkmod
import vkml, vkml.numpy as vnp

T = collections.defaultdict(float); C = collections.Counter()
for name in dir(vkmod):
    if name.startswith("vk") and callable(getattr(vkmod, name)):
        f = getattr(vkmod, name)
        def w(*a, _f=f, _n=name, **k):
            t0 = time.perf_counter()
            try:
                return _f(*a, **k)
            finally:
                T[_n] += time.perf_counter() - t0; C[_n] += 1
        setattr(vkmod, name, w)

def report(title, f, n=20):
    f(); f()
    T.clear(); C.clear()
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    tot = (time.perf_counter() - t0) / n
    print(f"== {title}: {tot*1e6:.0f} us per call")
    for k, v in sorted(T.items(), key=lambda kv: -kv[1])[:10]:
        print(f"   {k:34s} {v / n * 1e6:8.1f} us/call  x{C[k] / n:.1f}")

small = vnp.asarray(np.ones(8, np.float32))
report("eager sin tiny", lambda: vnp.sin(small))
j = vkml.jit(lambda v: vnp.sin(v) * 2.0)
report("jit tiny", lambda: j(small))
for N in (1 << 20, 16 << 20, 64 << 20):
    x = vnp.asarray(np.random.default_rng(0).random(N, dtype=np.float32))
    chain = vkml.jit(lambda v: vnp.tanh(2 * v + 1) * vnp.exp(-v) + vnp.sqrt(v + 1) - v * v)
    chain(x)
    c = chain._entry((x,))[0][0]
    report(f"chain recording alone N={N >> 20}M", lambda: c.recording.submit())
    report(f"copy eager N={N >> 20}M", lambda: vnp.copy(x))
