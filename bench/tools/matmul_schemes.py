"""The vec4 MatMul kernel's per-layout schemes (`tiling.VEC4_TILINGS`, `VEC4_SCHEMES`:
tiling, register prefetch, [[unroll]] on the slab loop, double-buffered slabs) against
the schemes before them (tiles 8x4 in 64x64x8 for A B, rolled loops, one shared slab),
kernel time per operand layout and shape, results compared bit for bit where the tiling
is the same: python bench/tools/matmul_schemes.py"""
import numpy as np

import vkml
import vkml.numpy as vnp
from vkml.vulkan import device
from vkml.vulkan.lower.matmul.tiling import VEC4_TILINGS, Tiling

BEFORE = {
    (False, False): (Tiling("shared", tm=8, tn=4, bm=64, bn=64, bk=8), False),
    (True, False): (Tiling("shared", tm=8, tn=4, bm=64, bn=64, bk=8), True),
    (False, True): (Tiling("shared", tm=16, tn=8, bm=128, bn=128, bk=16), True),
    (True, True): (Tiling("shared", tm=16, tn=8, bm=128, bn=128, bk=16), False),
}
rng = np.random.default_rng(0)


def kernel_us(f, *a, n=5):
    f.profile(*a)
    return min(sum(t for _, t in f.profile(*a)) for _ in range(n)) * 1e6


LAYOUTS = {"NN": lambda p, q: p @ q, "TN": lambda p, q: p.T @ q,
           "NT": lambda p, q: p @ q.T, "TT": lambda p, q: p.T @ q.T}


def operands(m: int, k: int, n: int, lay: str):
    """(A, B) float32 host operands of an m x k x n product in layout lay, their device
    arrays and the jitted product's function."""
    ta, tb = lay[0] == "T", lay[1] == "T"
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    return a, b, vnp.asarray(a), vnp.asarray(b), LAYOUTS[lay]


def main():
    cases = [(4096, 4096, 4096, lay) for lay in ("NN", "TN", "NT", "TT")]
    cases += [(1024, 1024, 1024, "NN"), (2048, 2048, 2048, "NN"), (4096, 1024, 4096, "NN"),
              (4096, 4096, 1024, "NN"), (4096, 4096, 1024, "NT"), (1024, 4096, 4096, "TN")]
    for m, k, n, lay in cases:
        ta, tb = lay[0] == "T", lay[1] == "T"
        a, b, va, vb, fn = operands(m, k, n, lay)
        t0, pf0 = BEFORE[(ta, tb)]
        res, outs = {"before": [], "now": []}, {}
        for _ in range(2):
            for name, kw in (("before", dict(matmul_tiling=t0, matmul_prefetch=pf0, matmul_unroll_k=False,
                                             matmul_double_buffer=False)), ("now", {})):
                with device.using(**kw):
                    f = vkml.jit(fn)
                    outs[name] = np.asarray(f(va, vb))
                    res[name].append(kernel_us(f, va, vb))
        fl = 2.0 * m * n * k
        r0, r1 = min(res["before"]), min(res["now"])
        err = float(np.max(np.abs(outs["now"] - outs["before"])) / np.max(np.abs(outs["before"])))
        print(f"{m}x{k}x{n} {lay}: before {r0:8.1f} us ({fl / r0 / 1e6:5.1f} TF/s)  now {r1:8.1f} us "
              f"({fl / r1 / 1e6:5.1f} TF/s)  x{r0 / r1:.2f}  rel diff {err:.1e}  now's tiling "
              f"{VEC4_TILINGS[(ta, tb)][0]}", flush=True)


if __name__ == "__main__":
    main()
