"""vkml's own cooperative-matrix MatMul kernel in its variants (tile order, direct stores,
fragment shape, tile), each timed alone by device timestamps at --n (issue 23).

    python bench/tools/coop_variants.py [--n 4096]
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    a = ap.parse_args()
    import vkml
    import vkml.numpy as vnp
    from vkml.vulkan.lower.matmul import coop
    n = a.n
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n)).astype(np.float16)
    B = rng.standard_normal((n, n)).astype(np.float16)
    want = (A.astype(np.float32) @ B.astype(np.float32)).astype(np.float16)
    x, y = vnp.asarray(A), vnp.asarray(B)
    base = coop.COOP_TILE
    tiles = {"128x128 w64x32": coop.Coop(128, 128, 32, 64, 32), "128x256 w64x64": coop.Coop(128, 256, 32, 64, 64),
             "256x128 w64x64": coop.Coop(256, 128, 32, 64, 64)}
    for (tn, tile), order_n, direct, lean in itertools.product(tiles.items(), (False, True), (False, True),
                                                              (False, True)):
        if not (order_n and direct) and (tn != "128x128 w64x32" or lean):
            continue
        coop.ORDER_N, coop.DIRECT_STORE, coop.LEAN, coop.COOP_TILE = order_n, direct, lean, tile
        coop.program.cache_clear()
        f = vkml.jit(lambda p, q: p @ q)
        got = np.asarray(f(x, y))
        bad = int(np.sum(got.view(np.uint16) != want.view(np.uint16)))
        s = min(sum(t for _, t in f.profile(x, y)) for _ in range(5))
        print(f"{tn} order_n={order_n:d} direct={direct:d} lean={lean:d}: {s * 1e3:.3f} ms "
              f"{2.0 * n ** 3 / s / 1e12:6.1f} TFLOP/s (results differing from NumPy's: {bad})", flush=True)
    coop.COOP_TILE = base


if __name__ == "__main__":
    main()
