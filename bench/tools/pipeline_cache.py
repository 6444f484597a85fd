"""First-call time of a fresh process, with and without vkml's persistent pipeline cache.

    python bench/tools/pipeline_cache.py [--cache-dir DIR]

Each case is a new process that jits the bench's small MLP step and a few eager
operators and reports how long the first calls took. The SPIR-V is cached on disk in every
case (a warm-up process fills both caches first), so the difference is pipeline creation:
from the driver's cached binaries (kernels.PipelineCache) or compiled again
(VKML_PIPELINE_CACHE=0). NVIDIA's own shader disk cache is turned off
(__GL_SHADER_DISK_CACHE=0) so that only vkml's cache is measured; Mesa keeps its own.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

_CHILD = r"""
import sys, time
sys.path.insert(0, '.')
t0 = time.perf_counter()
import numpy as np
import vkml, vkml.numpy as vnp
from vkml import optim
from bench.workloads import vkml_mlp_step
rng = np.random.default_rng(0)
p = [(vnp.asarray(rng.standard_normal((a, b)).astype(np.float32)), vnp.asarray(np.zeros(b, np.float32)))
     for a, b in ((64, 256), (256, 256), (256, 10))]
x = vnp.asarray(rng.standard_normal((256, 64)).astype(np.float32))
y = vnp.asarray(rng.integers(0, 10, 256).astype(np.int32))
opt = optim.sgd(0.01)
t1 = time.perf_counter()
out = vkml_mlp_step(opt, donate=False)(p, opt.init(p), x, y)
z = vnp.tanh(x) @ x.T + vnp.sum(x, axis=0).reshape(1, -1)[:, :1]
float(vnp.max(z))
t2 = time.perf_counter()
print(f"PC {t2 - t1:.3f} {t1 - t0:.3f}")
"""


def run(env: dict) -> float:
    r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True)
    line = next((l for l in r.stdout.splitlines() if l.startswith("PC ")), None)
    if line is None:
        raise SystemExit(r.stdout[-2000:] + r.stderr[-4000:])
    return float(line.split()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", default="")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    d = a.cache_dir or tempfile.mkdtemp(prefix="vkml-pc-")
    env = dict(os.environ, VKML_CACHE_DIR=d, __GL_SHADER_DISK_CACHE="0")
    print(f"warm-up (fills the SPIR-V and pipeline caches): {run(env):.3f} s")
    on = [run(env) for _ in range(a.repeats)]
    off = [run(dict(env, VKML_PIPELINE_CACHE="0")) for _ in range(a.repeats)]
    print(f"first calls, pipeline cache on:  best {min(on):.3f} s of {on}")
    print(f"first calls, pipeline cache off: best {min(off):.3f} s of {off}")


if __name__ == "__main__":
    main()
