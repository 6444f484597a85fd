"""Kernel time of the vec4 MatMul kernel under candidate schemes (tiling, register
prefetch, [[unroll]] slab loop, double-buffered slabs) per operand layout and shape, beside
the default scheme and torch's cuBLAS where torch has CUDA, to choose `tiling.VEC4_TILINGS`
and `VEC4_SCHEMES` from: python bench/tools/matmul_sweep.py [--defaults] [layout ...]
(--defaults: only the default scheme, at every shape for every layout)"""
import sys
import time

import numpy as np

import vkml
from vkml.vulkan import device
from vkml.vulkan.lower.matmul.tiling import Tiling, vec4_fits
from matmul_schemes import LAYOUTS, operands

T = Tiling
# (tiling, prefetch, unroll, double); double implies prefetch inside the kernel.
CANDIDATES = [
    (T("shared", tm=8, tn=4, bm=64, bn=64, bk=8), False, False, False),
    (T("shared", tm=8, tn=4, bm=64, bn=64, bk=8), True, True, True),
    (T("shared", tm=8, tn=8, bm=64, bn=128, bk=16), True, False, False),
    (T("shared", tm=8, tn=8, bm=64, bn=128, bk=16), True, True, False),
    (T("shared", tm=8, tn=8, bm=64, bn=128, bk=16), True, False, True),
    (T("shared", tm=8, tn=8, bm=64, bn=128, bk=16), True, True, True),
    (T("shared", tm=8, tn=8, bm=128, bn=64, bk=16), True, True, True),
    (T("shared", tm=8, tn=8, bm=128, bn=128, bk=8), True, True, True),
    (T("shared", tm=8, tn=8, bm=128, bn=128, bk=16), True, True, True),
    (T("shared", tm=16, tn=8, bm=128, bn=128, bk=16), True, False, False),
    (T("shared", tm=16, tn=8, bm=128, bn=128, bk=16), True, True, False),
    (T("shared", tm=16, tn=8, bm=128, bn=128, bk=16), True, True, True),
    (T("shared", tm=8, tn=16, bm=128, bn=128, bk=16), True, True, True),
    (T("shared", tm=4, tn=8, bm=64, bn=64, bk=16), True, True, True),
]


def kernel_us(f, *a, n=4):
    f.profile(*a)
    return min(sum(t for _, t in f.profile(*a)) for _ in range(n)) * 1e6


def torch_us(lay, a, b):
    try:
        import torch
        if not torch.cuda.is_available():
            return None
    except ImportError:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    fn = LAYOUTS[lay]
    best = None
    for _ in range(5):
        fn(ta, tb)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(5):
            fn(ta, tb)
        e1.record()
        torch.cuda.synchronize()
        t = e0.elapsed_time(e1) / 5 * 1e3
        best = t if best is None else min(best, t)
    return best


def main(layouts, defaults=False):
    cases = [(4096, 4096, 4096, lay) for lay in layouts]
    for lay in layouts if defaults else [l for l in layouts if l == "NN"]:
        cases += [(1024, 1024, 1024, lay), (2048, 2048, 2048, lay), (4096, 1024, 4096, lay)]
    for m, k, n, lay in cases:
        ta, tb = lay[0] == "T", lay[1] == "T"
        a, b, va, vb, fn = operands(m, k, n, lay)
        fl = 2.0 * m * n * k
        tu = torch_us(lay, a, b)
        f = vkml.jit(fn)
        ref = np.asarray(f(va, vb))
        d = kernel_us(f, va, vb)
        head = f"{m}x{k}x{n} {lay}: default {d:8.1f} us ({fl / d / 1e6:5.1f} TF/s)"
        if tu:
            head += f"  cuBLAS {tu:8.1f} us ({fl / tu / 1e6:5.1f} TF/s)  default/cuBLAS {tu / d:.0%}"
        print(head, flush=True)
        scale = float(np.max(np.abs(ref)))
        for t, pf, un, db in [] if defaults else CANDIDATES:
            if not vec4_fits(t, "float", m, n, k, ta, tb):
                continue
            t0 = time.perf_counter()
            try:
                with device.using(matmul_tiling=t, matmul_prefetch=pf, matmul_unroll_k=un,
                                  matmul_double_buffer=db):
                    g = vkml.jit(fn)
                    out = np.asarray(g(va, vb))
                    us = kernel_us(g, va, vb)
            except Exception as e:  # noqa: BLE001 - a sweep reports a failing scheme and goes on
                print(f"   {t} pf={pf} unroll={un} double={db}: {type(e).__name__}: {e}"[:300], flush=True)
                continue
            err = float(np.max(np.abs(out - ref))) / scale
            line = (f"   {t.tm:2d}x{t.tn:<2d} in {t.bm:3d}x{t.bn:3d}x{t.bk:<2d} pf={pf:d} unroll={un:d} "
                    f"double={db:d}: {us:8.1f} us ({fl / us / 1e6:5.1f} TF/s) x{d / us:.2f} of default")
            if tu:
                line += f"  {tu / us:.0%} of cuBLAS"
            print(line + f"  err {err:.0e}  ({time.perf_counter() - t0:.1f} s)", flush=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--defaults"]
    main(args or ["NN", "TN", "NT", "TT"], defaults="--defaults" in sys.argv[1:])
