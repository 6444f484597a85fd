import cProfile, pstats, time, io, sys
import numpy as np
import vkml, vkml.numpy as vnp
from vkml.vulkan import runtime

def t(f, n=10):
    f(); f()
    best = 1e9
    for _ in range(n):
        t0 = time.perf_counter(); f(); best = min(best, time.perf_counter() - t0)
    return best

def prof(name, f, n=20):
    f(); f()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(n): f()
    pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
    print("=====", name); print(s.getvalue()[:5000])

N = 64 << 20
x = vnp.asarray(np.random.default_rng(0).random(N, dtype=np.float32))
chain = vkml.jit(lambda v: vnp.tanh(2 * v + 1) * vnp.exp(-v) + vnp.sqrt(v + 1) - v * v)
print("copy eager 64M", t(lambda: vnp.copy(x)))
print("chain jit 64M", t(lambda: chain(x)))
small = vnp.asarray(np.ones(8, np.float32))
def f200(v):
    for i in range(100):
        v = vnp.sin(v) * 1.0001
    return v
j200 = vkml.jit(f200)
print("200 jit tiny", t(lambda: j200(small), 50))
print("1 eager tiny", t(lambda: vnp.sin(small), 20))
c = chain._entry((x,))[0][0]
print("chain recording alone", t(lambda: c.recording.submit()))
prof("copy eager", lambda: vnp.copy(x))
prof("chain jit", lambda: chain(x))
prof("eager tiny", lambda: vnp.sin(small))
prof("200 jit tiny", lambda: j200(small))
