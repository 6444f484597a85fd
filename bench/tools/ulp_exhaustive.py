"""Worst float32 error, in ulps against float64 math.erf/erfc, over every float of a range
(the suite's sweeps sample; this reads all of them). Usage:
python bench/tools/ulp_exhaustive.py [erf|erfc] [lo] [hi]   (both signs when lo < 0)"""
import math
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[2] / "tests" / "vulkan")]
from test_math import _run, _ulps  # noqa: E402

from vkml.trace.ops import OpKind  # noqa: E402

OPS = {"erf": (OpKind.Erf, math.erf), "erfc": (OpKind.Erfc, math.erfc)}


def worst(name: str, lo: float, hi: float) -> tuple[float, float]:
    op, fn = OPS[name]
    f = np.vectorize(fn, otypes=[np.float64])
    spans = [(1e-30, hi)] if lo > 0 else [(1e-30, -lo), (1e-30, hi)]
    best = (0.0, float("nan"))
    for k, (a, b) in enumerate(spans):
        sign = np.float32(-1 if (lo < 0 and k == 0) else 1)
        b0, b1 = int(np.float32(a).view(np.int32)), int(np.float32(b).view(np.int32))
        for s in range(b0, b1, 1 << 22):
            x = np.arange(s, min(s + (1 << 22), b1), dtype=np.int32).view(np.float32) * sign
            got, want = _run(op, x), f(x.astype(np.float64))
            ok = np.abs(want) >= np.finfo(np.float32).tiny
            e = _ulps(got[ok], want[ok].astype(np.longdouble), np.float32)
            if e.size and e.max() > best[0]:
                i = int(np.argmax(e))
                best = (float(e[i]), float(x[ok][i]))
    return best


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "erf"
    lo = float(sys.argv[2]) if len(sys.argv) > 2 else (1e-30 if name == "erf" else -6.0)
    hi = float(sys.argv[3]) if len(sys.argv) > 3 else (6.0 if name == "erf" else 10.1)
    e, x = worst(name, lo, hi)
    print(f"{name} float32 over every float of [{lo}, {hi}]: worst {e:.3f} ulp at x = {x!r}")
