"""Run a bench/tools script's workload, then write every anonymous executable mapping of
this process (lavapipe's LLVM-compiled kernels) to /tmp/jit_<address>.bin, so that a
`perf record` of the same run can be read instruction by instruction:

    perf record -F 5000 -o /tmp/p.data python bench/tools/lvp_jit_dump.py 256 256 256 1000
    perf script -i /tmp/p.data -F ip     # sample addresses; bucket them per mapping
    objdump -D -b binary -m i386:x86-64 /tmp/jit_<address>.bin

(how the MatMul kernel was found to issue vmulps + vaddps per multiply-add: llvmpipe
lowers fma, and to spend its time in per-lane storage-buffer loops before texels).
Usage: python bench/tools/lvp_jit_dump.py M K N calls"""
import sys
import time

import numpy as np

import vkml
import vkml.numpy as vnp


def dump() -> list[str]:
    out = []
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            parts = line.split()
            if "x" in parts[1] and len(parts) < 6:        # executable, no backing file
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                mem.seek(lo)
                path = f"/tmp/jit_{lo:x}.bin"
                with open(path, "wb") as f:
                    f.write(mem.read(hi - lo))
                out.append(f"{path} ({hi - lo} bytes at {lo:#x})")
    return out


if __name__ == "__main__":
    m, k, n, calls = (int(v) for v in sys.argv[1:5]) if len(sys.argv) > 4 else (256, 256, 256, 1000)
    rng = np.random.default_rng(0)
    a = vnp.asarray(rng.standard_normal((m, k)).astype(np.float32))
    b = vnp.asarray(rng.standard_normal((k, n)).astype(np.float32))
    f = vkml.jit(lambda p, q: p @ q)
    f(a, b)
    t0 = time.perf_counter()
    for _ in range(calls):
        f(a, b)
    print(f"{(time.perf_counter() - t0) / calls * 1e6:.1f} us per call")
    print("\n".join(dump()))
