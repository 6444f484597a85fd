import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import prof_kernels as pk
from vkml.vulkan.lower import matmul as mm
res = {}
for spec in (True, False):
    mm.SPEC_TILES = spec
    j, args = pk.mlp_step()
    j.profile(*args)
    res[spec] = min((j.profile(*args) for _ in range(2)), key=lambda r: sum(t for _, t in r))
    c = j._entry(args)[0][0]
    res[(spec, "k")] = [(d.kernel.name, d.kernel.spec, [tuple(v.shape) for v in d.views][:4]) for d in c.lowered.dispatches]
for (n, t1), (_, t0), info in zip(res[True], res[False], res[(True, "k")]):
    if t1 > 50e-6 or t0 > 50e-6:
        print(f"{n:24s} spec {t1*1e6:9.1f} source {t0*1e6:9.1f}  {info[1]} {info[2]}")
