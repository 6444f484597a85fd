"""First call of a graph with hundreds of new kernels: built serially or on every core.

    python bench/tools/compile_parallel.py [--steps 600] [--repeats 1] [--modes serial,parallel]

The graph is a chain of `steps` row-wise steps, each a different composition of three
elementwise functions (one fused region, a kernel of its own) followed by a row maximum,
so it has about `steps` unique kernels. Each case is a new process with empty caches
(vkml's SPIR-V and pipeline caches under a fresh VKML_CACHE_DIR, Mesa's shader cache under
a fresh MESA_SHADER_CACHE_DIR, NVIDIA's off) that jits the chain and times its first
call; `KernelCache.stats` says where the build time went (the rest of a first call is
mostly the driver's own compiling at a kernel's first dispatch: lavapipe's LLVM code).
Then a second process on each parallel case's caches. Modes: serial (VKML_BUILD_THREADS=1), parallel (one build thread
per core, the default), threads=N (N build threads).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, sys, time
sys.path.insert(0, '.')
import numpy as np
import vkml, vkml.numpy as vnp
from vkml.vulkan import runtime
steps = int(sys.argv[1])
UN = [vnp.tanh, vnp.exp, vnp.sin, vnp.cos, lambda a: a * a, vnp.abs, lambda a: a + 1.5,
      lambda a: a * 0.5, vnp.sqrt, lambda a: vnp.maximum(a, 0.1), lambda a: 1.0 / (a + 2.0), vnp.log1p]

def f(x):
    h = x
    for i in range(steps):
        a, b, c = UN[i % 12], UN[(i // 12) % 12], UN[(i // 144) % 12]
        g = c(b(a(vnp.abs(h) + 0.01)))
        h = g - g.max(axis=1, keepdims=True)
    return h

x = vnp.asarray(np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32))
jf = vkml.jit(f)
kc = runtime.get().kernels
t0 = time.perf_counter()
out = np.asarray(jf(x))
t1 = time.perf_counter()
st = kc.stats
print("CP " + json.dumps(dict(first=t1 - t0, kernels=len(kc), workers=kc.workers, out=float(out.sum()),
                              **{k: getattr(st, k) for k in st.__dataclass_fields__})))
"""

_MODES = {"serial": {"VKML_BUILD_THREADS": "1"}, "parallel": {}}


def run(env: dict, steps: int) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, str(steps)], env=env, capture_output=True, text=True)
    line = next((l for l in r.stdout.splitlines() if l.startswith("CP ")), None)
    if line is None:
        raise SystemExit(r.stdout[-2000:] + r.stderr[-4000:])
    return json.loads(line[3:])


def fresh(extra: dict) -> dict:
    d = tempfile.mkdtemp(prefix="vkml-cp-")
    return dict(os.environ, VKML_CACHE_DIR=d, MESA_SHADER_CACHE_DIR=os.path.join(d, "mesa"),
                __GL_SHADER_DISK_CACHE="0", **extra)


def show(label: str, r: dict) -> None:
    print(f"{label:<28} first call {r['first']:7.2f} s  building {r['build_s']:6.2f} s "
          f"({r['kernels']} kernels, {r['glslang']} glslang runs, {r['spirv_disk']} SPIR-V from disk, "
          f"{r['cache_hits']}/{r['feedback']} pipeline-cache hits reported, threads {r['workers']}; "
          f"summed over threads: SPIR-V {r['glslang_s']:.2f} s, creation {r['create_s']:.2f} s)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--modes", default="serial,parallel")
    a = ap.parse_args()
    outs = {}
    for rep in range(a.repeats):
        for mode in a.modes.split(","):
            env = fresh(_MODES[mode] if mode in _MODES else {"VKML_BUILD_THREADS": mode.split("=")[1]})
            r = run(env, a.steps)
            show(f"{mode} (fresh caches)", r)
            outs.setdefault(mode, []).append(r["out"])
            if mode != "serial" and rep == 0:
                show(f"  second process", run(env, a.steps))
    vals = {v for vs in outs.values() for v in vs}
    print("results agree across modes" if len(vals) == 1 else f"RESULTS DIFFER: {outs}")


if __name__ == "__main__":
    main()
