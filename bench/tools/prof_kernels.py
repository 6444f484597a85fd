"""Per-kernel device times (Jitted.profile) of the large MLP step and the chain, grouped by
kernel name: where a workload's time goes. Usage: python bench/tools/prof_kernels.py [mlp|chain|all|variants|sweep|shapes|sgsweep|mlpwall] [scale]"""
import collections
import os
import sys
from pathlib import Path

import numpy as np

import vkml
import vkml.numpy as vnp
from vkml import optim

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository, for bench
from bench.workloads import vkml_mlp_step  # noqa: E402   the step the bench times


def table(title, times):
    tot = sum(t for _, t in times)
    print(f"== {title}: {len(times)} kernels, {tot * 1e3:.3f} ms of kernel time")
    by = collections.defaultdict(lambda: [0.0, 0])
    for n, t in times:
        by[n][0] += t
        by[n][1] += 1
    for n, (t, c) in sorted(by.items(), key=lambda kv: -kv[1][0])[:25]:
        print(f"   {n:40s} x{c:3d} {t * 1e3:9.3f} ms  {100 * t / tot:5.1f}%")


def mlp_step(batch=4096, dims=(1024, 4096, 4096, 10), donate=False):
    """The bench's MLP training step (value_and_grad + SGD), jitted, and its arguments."""
    rng = np.random.default_rng(0)
    p = [(vnp.asarray((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)),
          vnp.asarray(np.zeros(b, np.float32))) for a, b in zip(dims[:-1], dims[1:])]
    x = vnp.asarray(rng.standard_normal((batch, dims[0])).astype(np.float32))
    y = vnp.asarray(rng.integers(0, dims[-1], batch).astype(np.int32))
    opt = optim.sgd(0.01)
    return vkml_mlp_step(opt, donate), (p, opt.init(p), x, y)


def mlp(batch=4096, dims=(1024, 4096, 4096, 10)):
    j, args = mlp_step(batch, dims)
    j.profile(*args)
    times = j.profile(*args)
    table(f"MLP step batch {batch}, {dims}", times)
    for n, t in times:
        print(f"      {n:40s} {t * 1e6:9.1f} us")


def chain(n):
    x = vnp.asarray(np.random.default_rng(0).random(n, dtype=np.float32))
    f = vkml.jit(lambda v: vnp.tanh(2 * v + 1) * vnp.exp(-v) + vnp.sqrt(v + 1) - v * v)
    f.profile(x)
    table(f"chain {n >> 20}M", f.profile(x))
    g = vkml.jit(lambda v: v + 1.0)
    g.profile(x)
    table(f"v + 1 {n >> 20}M", g.profile(x))


def chain_variants(n):
    """The chain kernel with other rounds per thread / workgroup sizes (GPU tuning)."""
    from vkml.vulkan.lower import elementwise as ew
    rounds, local = ew._rounds, ew._local_size
    x = vnp.asarray(np.random.default_rng(0).random(n, dtype=np.float32))
    for R in (1, 2, 4):
        for lx in (64, 128, 256, 512):
            ew._rounds = lambda nv, W, weight, R=R: R
            ew._local_size = lambda dev, threads, lx=lx: lx
            for name, fn in [("chain", lambda v: vnp.tanh(2 * v + 1) * vnp.exp(-v) + vnp.sqrt(v + 1) - v * v),
                             ("v+1", lambda v: v + 1.0)]:
                f = vkml.jit(fn)
                f.profile(x)
                t = min(sum(s for _, s in f.profile(x)) for _ in range(3))
                print(f"   R={R} lx={lx:4d} {name:6s} {t * 1e6:8.1f} us  {8 * n / t / 1e9:7.1f} GB/s")
    ew._rounds, ew._local_size = rounds, local


def matmul_sweep(n=4096):
    """Kernel time of an n^3 float32 matmul per shared-memory tiling (GPU tuning)."""
    from vkml.vulkan.lower import matmul as mm
    rng = np.random.default_rng(0)
    a = vnp.asarray(rng.standard_normal((n, n)).astype(np.float32))
    b = vnp.asarray(rng.standard_normal((n, n)).astype(np.float32))
    configs = [(16, 8, 128, 128, 16), (16, 8, 128, 128, 8), (8, 4, 64, 64, 8), (8, 8, 128, 128, 8)]
    if os.environ.get("VKML_SWEEP"):   # tm,tn,bm,bn,bk;... : other tilings to try
        configs = [tuple(int(v) for v in c.split(",")) for c in os.environ["VKML_SWEEP"].split(";")]
    from vkml.vulkan import device
    layout = sys.argv[2] if len(sys.argv) > 2 else "NN"
    prefetch = "prefetch" in sys.argv
    print(f"  {layout}, vec4={device.get().profile.matmul_vec4}, prefetch={prefetch}")
    for tm, tn, bm, bn, bk in configs:
      with device.using(matmul_tiling=mm.Tiling("shared", tm=tm, tn=tn, bm=bm, bn=bn, bk=bk),
                        matmul_prefetch=prefetch):
        f = vkml.jit({"NN": lambda p, q: p @ q, "AT": lambda p, q: p.T @ q,
                      "BT": lambda p, q: p @ q.T}[layout])
        try:
            f.profile(a, b)
            t = min(sum(s for _, s in f.profile(a, b)) for _ in range(3))
        except Exception as e:   # a tiling the device cannot take
            print(f"   {tm}x{tn} in {bm}x{bn}x{bk}: {type(e).__name__}: {e}")
            continue
        print(f"   {tm}x{tn} in {bm}x{bn}x{bk}: {t * 1e3:7.3f} ms  {2 * n ** 3 / t / 1e12:6.2f} TF/s")


def subgroup_sweep():
    """Wall time of float32 matmuls per subgroup tiling (CPU devices: lavapipe)."""
    import time
    from vkml.vulkan.lower import matmul as mm
    rng = np.random.default_rng(0)
    for m, k, n in [(256, 256, 256), (1024, 1024, 1024), (256, 256, 10)]:
        a = vnp.asarray(rng.standard_normal((m, k)).astype(np.float32))
        b = vnp.asarray(rng.standard_normal((k, n)).astype(np.float32))
        for tm, tn, wa, wb in [(32, 16, 2, 8), (64, 8, 2, 8), (128, 8, 2, 8), (64, 8, 4, 8),
                               (64, 12, 2, 4), (64, 4, 2, 4)]:
            mm.set_tiling(mm.Tiling("subgroup", tm=tm, tn=tn, wa=wa, wb=wb))
            f = vkml.jit(lambda p, q: p @ q)
            f(a, b)
            ts = []
            for _ in range(5):
                t0 = time.perf_counter()
                f(a, b)
                ts.append(time.perf_counter() - t0)
            t = min(ts)
            print(f"   {m}x{k}x{n} {tm}x{tn} wa={wa} wb={wb}: {t * 1e3:8.3f} ms  {2 * m * n * k / t / 1e9:6.1f} GF/s")
    mm.set_tiling(None)


def shape_sweep():
    """Kernel time of float32 matmuls of several shapes per shared-memory tiling (GPU
    tuning beyond 4096^3: 1024^3, and the MLP's n = 10 products)."""
    from vkml.vulkan.lower import matmul as mm
    rng = np.random.default_rng(0)
    configs = [None, (8, 4, 64, 64, 8), (4, 4, 32, 64, 8), (4, 4, 64, 32, 8), (4, 4, 32, 32, 8),
               (8, 4, 64, 32, 16), (4, 8, 32, 64, 16), (8, 8, 64, 64, 16), (16, 8, 128, 128, 16)]
    for (m, k, n), lay in [((1024, 1024, 1024), "NN"), ((4096, 4096, 10), "NN"), ((4096, 4096, 10), "AT"),
                           ((2048, 2048, 2048), "NN")]:
        a = vnp.asarray(rng.standard_normal((k, m) if lay == "AT" else (m, k)).astype(np.float32))
        b = vnp.asarray(rng.standard_normal((k, n)).astype(np.float32))
        for c in configs:
            mm.set_tiling(None if c is None else mm.Tiling("shared", tm=c[0], tn=c[1], bm=c[2], bn=c[3], bk=c[4]))
            f = vkml.jit(lambda p, q: (p.T if lay == "AT" else p) @ q)
            try:
                f.profile(a, b)
                t = min(sum(s for _, s in f.profile(a, b)) for _ in range(3))
            except Exception as e:
                print(f"   {m}x{k}x{n} {lay} {c}: {type(e).__name__}")
                continue
            print(f"   {m}x{k}x{n} {lay} {c or 'default'}: {t * 1e6:8.1f} us  {2 * m * n * k / t / 1e12:6.2f} TF/s")
    mm.set_tiling(None)


def mlp_wall(batch=4096, dims=(1024, 4096, 4096, 10)):
    """Wall time per jitted MLP step against its kernel time, and the recording cache."""
    import time
    j, (p, s, x, y) = mlp_step(batch, dims, donate=True)
    walls = []
    for _ in range(8):
        t0 = time.perf_counter()
        p, s, loss = j(p, s, x, y)
        walls.append(time.perf_counter() - t0)
    c = j._entry((p, s, x, y))[0][0]
    rec = c.recording
    t0 = time.perf_counter()
    rec.submit()
    sub = time.perf_counter() - t0
    print(f"== MLP wall per step {[round(w * 1e3, 2) for w in walls]} ms; recording alone {sub * 1e3:.2f} ms; "
          f"misses {c.misses} of {c.calls} calls, direct={c.direct}")

if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    scale = float(sys.argv[2]) if len(sys.argv) > 2 and what in ("chain", "variants", "mlp", "all") else 1.0
    if what in ("chain", "all"):
        chain(int((16 << 20) * scale))
    if what == "sweep":
        matmul_sweep()
    if what == "shapes":
        shape_sweep()
    if what == "sgsweep":
        subgroup_sweep()
    if what == "mlpwall":
        mlp_wall()
    if what in ("variants",):
        chain_variants(int((16 << 20) * scale))
    if what in ("mlp", "all"):
        mlp(int(4096 * scale)) if scale != 1.0 else mlp()
