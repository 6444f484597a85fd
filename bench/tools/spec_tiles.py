"""MatMul kernel time with tiles as specialisation constants against tiles baked into the
source (the profile's matmul_spec_tiles), per operand layout, dtype and shape, or per MatMul of the
bench's large MLP step: the GPU kernels must not lose by it.
Usage: python bench/tools/spec_tiles.py [first case index | mlp]"""
import numpy as np

import vkml
import vkml.numpy as vnp
from vkml.vulkan import device

rng = np.random.default_rng(0)


def kernel_us(f, *a, n=5):
    f.profile(*a)
    return min(sum(t for _, t in f.profile(*a)) for _ in range(n)) * 1e6


def main(skip: int = 0):
    cases = [(4096, 4096, 4096, np.float32, lay) for lay in ("NN", "TN", "NT", "TT")]
    cases += [(1024, 1024, 1024, np.float32, "NN"), (4096, 4096, 10, np.float32, "NN"),
              (1001, 1003, 1005, np.float32, "NN"), (1024, 1024, 1024, np.float64, "NN"),
              (2048, 2048, 2048, np.int32, "NN")]
    for m, k, n, dtype, lay in cases[skip:]:
        a = rng.standard_normal((k, m) if lay[0] == "T" else (m, k)).astype(dtype)
        b = rng.standard_normal((n, k) if lay[1] == "T" else (k, n)).astype(dtype)
        va, vb = vnp.asarray(a), vnp.asarray(b)
        fn = {"NN": lambda p, q: p @ q, "TN": lambda p, q: p.T @ q,
              "NT": lambda p, q: p @ q.T, "TT": lambda p, q: p.T @ q.T}[lay]
        res, outs = {}, {}
        for spec in (True, False):
            with device.using(matmul_spec_tiles=spec):
                f = vkml.jit(fn)
                outs[spec] = np.asarray(vnp.sum(f(va, vb).astype(vnp.float64)))
                res[spec] = kernel_us(f, va, vb)
        same = np.array_equal(outs[True], outs[False])
        print(f"{m}x{k}x{n} {np.dtype(dtype).name} {lay}: spec {res[True]:9.1f} us  source {res[False]:9.1f} us  "
              f"ratio {res[True] / res[False]:.3f}  same sum={same}", flush=True)


def mlp():
    """Per-kernel times of the large MLP step (a MatMul with a mask epilogue once kept a
    16x8 register tile in memory on the H200)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import prof_kernels as pk
    res, names = {}, None
    for spec in (True, False):
        with device.using(matmul_spec_tiles=spec):
            j, args = pk.mlp_step()
            j.profile(*args)
            res[spec] = min((j.profile(*args) for _ in range(2)), key=lambda r: sum(t for _, t in r))
            if spec:
                names = [(d.kernel.name, d.kernel.spec) for d in j._entry(args)[0][0].lowered.dispatches]
    for (n, t1), (_, t0), (_, sp) in zip(res[True], res[False], names):
        if n.startswith("MatMul"):
            print(f"{n:24s} spec {t1 * 1e6:9.1f} us  source {t0 * 1e6:9.1f} us  constants {sp}")


if __name__ == "__main__":
    import sys
    if len(sys.argv) > 1 and sys.argv[1] == "mlp":
        mlp()
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
