"""MatMul kernel time with the vec4 kernel's slab loop marked [[unroll]] or not
(`Profile.matmul_unroll_k`), per operand layout and shape, and the large MLP step's
products: python bench/tools/matmul_unroll.py"""
import numpy as np

import vkml
import vkml.numpy as vnp
from vkml.vulkan import device

rng = np.random.default_rng(0)


def kernel_us(f, *a, n=5):
    f.profile(*a)
    return min(sum(t for _, t in f.profile(*a)) for _ in range(n)) * 1e6


def main():
    cases = [(4096, 4096, 4096, lay) for lay in ("NN", "TN", "NT", "TT")]
    cases += [(1024, 1024, 1024, "NN"), (4096, 1024, 4096, "NN"), (4096, 4096, 1024, "NN"), (2048, 2048, 2048, "NN")]
    for m, k, n, lay in cases:
        a = rng.standard_normal((k, m) if lay[0] == "T" else (m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if lay[1] == "T" else (k, n)).astype(np.float32)
        va, vb = vnp.asarray(a), vnp.asarray(b)
        fn = {"NN": lambda p, q: p @ q, "TN": lambda p, q: p.T @ q,
              "NT": lambda p, q: p @ q.T, "TT": lambda p, q: p.T @ q.T}[lay]
        res, outs = {}, {}
        for u in (False, True, False, True):
            with device.using(matmul_unroll_k=u):
                f = vkml.jit(fn)
                outs[u] = np.asarray(f(va, vb))
                res.setdefault(u, []).append(kernel_us(f, va, vb))
        fl = 2.0 * m * n * k
        r0, r1 = min(res[False]), min(res[True])
        print(f"{m}x{k}x{n} {lay}: rolled {r0:9.1f} us ({fl / r0 / 1e6:5.1f} TF/s)  unrolled {r1:9.1f} us "
              f"({fl / r1 / 1e6:5.1f} TF/s)  same={np.array_equal(outs[False], outs[True])}", flush=True)


if __name__ == "__main__":
    main()
