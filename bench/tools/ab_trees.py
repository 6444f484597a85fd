"""vkml's benchmark workloads on two source trees, taking turns: which one is faster?

    python bench/tools/ab_trees.py OLD_TREE NEW_TREE [--rounds 4] [--only chain,sum]

Each turn runs every workload of one tree in a fresh process (its own kernels, its own
caches; the SPIR-V disk cache is shared, so only the first turn compiles GLSL) and keeps
the best time of a few calls; the trees alternate for `rounds` turns each, so a slow
stretch of a shared VM falls on both. Prints per workload the best time of each tree and
new / old. Refactors of the kernel layer are checked with it (bench/RESULTS.md).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

_CHILD = r"""
import json, sys
sys.path.insert(0, '.')
import vkml.numpy as vnp
from bench.timing import best_time
from bench.workloads import WORKLOADS
out = {}
for name in sys.argv[1].split(','):
    wl = WORKLOADS[name](1.0)
    run = wl.vkml(vnp)
    out[name] = best_time(run, int(sys.argv[2]), 2, float(sys.argv[3]))[0]
print('AB' + json.dumps(out))
"""


def turn(tree: str, names: list[str], repeats: int, budget: float) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, ",".join(names), str(repeats), str(budget)],
                       cwd=tree, capture_output=True, text=True)
    line = next((l for l in r.stdout.splitlines() if l.startswith("AB")), None)
    if line is None:
        raise SystemExit(f"{tree}: no result\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return json.loads(line[2:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--budget", type=float, default=2.0)
    ap.add_argument("--only", default="chain,chain_jit,copy,sum,matmul1024,conv2d,conv2d_jit,"
                                      "mlp_small,replay,ops200_eager")
    a = ap.parse_args()
    names = a.only.split(",")
    best = {a.old: {}, a.new: {}}
    for r in range(a.rounds):
        for tree in ((a.old, a.new) if r % 2 == 0 else (a.new, a.old)):
            for k, v in turn(tree, names, a.repeats, a.budget).items():
                best[tree][k] = min(best[tree].get(k, float("inf")), v)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"{'workload':14s} {'old ms':>10s} {'new ms':>10s} {'new/old':>8s}")
    for k in names:
        o, n = best[a.old][k], best[a.new][k]
        print(f"{k:14s} {o * 1e3:10.3f} {n * 1e3:10.3f} {n / o:8.3f}")


if __name__ == "__main__":
    main()
