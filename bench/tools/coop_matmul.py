"""vkml's float16 MatMul (tensor cores where the device has cooperative matrices) beside its
float32 one and torch's (`a @ b` on CUDA, cuBLAS) in the same run (issue 23, part 1).

    python bench/tools/coop_matmul.py [--sizes 1024,4096] [--reps 20]

Per size: TFLOP/s of a jitted `x @ y` in float16 and float32 (best of 3 rounds of --reps
calls in a row, then one wait), the float16 kernels alone (one profiled call, device
timestamps), torch float16 and float32 (TF32 off), and the ratios.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _rate(run, sync, n: int, reps: int) -> float:
    run()
    sync()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            r = run()
        sync(r)
        best = min(best, (time.perf_counter() - t) / reps)
    return 2.0 * n ** 3 / best / 1e12


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,4096")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--lean", choices=("default", "all", "none"), default="default",
                    help="which coop tiles take the one-path kernel (coop.LEAN)")
    a = ap.parse_args()
    from vkml.vulkan.lower.matmul import coop
    if a.lean != "default":
        coop.LEAN = ({tuple(t[:5]) for t in (coop.COOP_TILE, coop.COOP_MID, coop.COOP_SMALL)}
                     if a.lean == "all" else set())
    import vkml
    import vkml.numpy as vnp
    from vkml.vulkan import runtime
    rt = runtime.get()
    print(f"device: {rt.dev.name}; tensor cores (matmul_coop): {rt.dev.profile.matmul_coop}")
    try:
        import torch
        cuda = torch.cuda.is_available()
        torch.backends.cuda.matmul.allow_tf32 = False
    except ImportError:
        torch, cuda = None, False
    # the device's clocks rise under load: a second of products first
    w = vnp.ones((2048, 2048), dtype=vnp.float32)
    g = vkml.jit(lambda x: x @ x)
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:
        g(w).block_until_ready()
    for n in (int(s) for s in a.sizes.split(",")):
        rng = np.random.default_rng(0)
        A = rng.standard_normal((n, n)).astype(np.float32)
        B = rng.standard_normal((n, n)).astype(np.float32)
        row = [f"{n}^3"]
        f = vkml.jit(lambda x, y: x @ y)
        for d in (np.float16, np.float32):
            x, y = vnp.asarray(A.astype(d)), vnp.asarray(B.astype(d))
            row.append(_rate(lambda: f(x, y), lambda r=None: rt.wait(), n, a.reps))
        if cuda:
            for d in (torch.float16, torch.float32):
                x = torch.tensor(A, device="cuda").to(d)
                y = torch.tensor(B, device="cuda").to(d)
                row.append(_rate(lambda: x @ y, lambda r=None: torch.cuda.synchronize(), n, a.reps))
        prof = f.profile(vnp.asarray(A.astype(np.float16)), vnp.asarray(B.astype(np.float16)))
        names = [k for k, _ in prof]
        kern = 2.0 * n ** 3 / sum(s for _, s in prof) / 1e12     # the kernels alone (timestamps)
        line = (f"{row[0]:>7s}: vkml f16 {row[1]:7.1f} TF/s (kernel alone {kern:.1f}; {'+'.join(names)}), "
                f"vkml f32 {row[2]:6.1f}")
        if cuda:
            line += (f", torch f16 {row[3]:7.1f}, torch f32 {row[4]:6.1f}; vkml/torch f16 {row[1] / row[3]:.0%}, "
                     f"f32 {row[2] / row[4]:.0%}")
        print(line)


if __name__ == "__main__":
    main()
