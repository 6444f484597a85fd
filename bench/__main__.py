"""`python -m bench`: time the workloads on every available framework and print a table.

    python -m bench                          # all workloads, 5 timed runs each
    python -m bench --only=matmul --repeats=20
    python -m bench --size_scale=4           # 64M-element elementwise and sum
"""
from __future__ import annotations

import datetime
import gc

import numpy as np
from absl import app, flags

from . import frameworks, report
from .timing import best_time
from .workloads import WORKLOADS, Workload, to_numpy

FLAGS = flags.FLAGS
flags.DEFINE_list("only", [], f"workloads to run, comma-separated (default: all of "
                              f"{','.join(WORKLOADS)})")
flags.DEFINE_integer("repeats", 5, "timed runs per framework and workload (the best counts)")
flags.DEFINE_integer("warmup", 2, "untimed runs before timing (compilation, caches)")
flags.DEFINE_float("size_scale", 1.0, "multiplies the 16M-element sizes of the elementwise "
                                      "and sum workloads (4 gives 64M, for GPU devices)")


def measure(wl: Workload, fws: dict, repeats: int, warmup: int) -> report.Row:
    """Time one workload on each framework; note failures and disagreements with NumPy."""
    row = report.Row(wl.label, flops=wl.flops)
    results = {}
    for name, fw in fws.items():
        if not fw.available or name not in wl.setups:
            continue
        try:
            run = wl.setups[name](fw.module)
            results[name] = to_numpy(name, run())
            row.seconds[name] = best_time(run, repeats, warmup)
        except Exception as e:  # e.g. an operator not implemented yet: that cell is n/a
            first = (str(e).strip().splitlines() or [""])[0][:160]
            row.notes.append(f"{name} n/a: {type(e).__name__}: {first}")
            row.seconds.pop(name, None)
    ref = results.get("numpy")
    for name, got in results.items():
        if ref is not None and name != "numpy":
            if got.shape != ref.shape or not np.allclose(got, ref, rtol=wl.rtol, atol=wl.atol):
                err = np.abs(got.astype(np.float64) - ref).max() if got.shape == ref.shape else "shape"
                row.notes.append(f"{name} disagrees with numpy (max abs error {err})")
    gc.collect()
    return row


def main(argv) -> None:
    del argv
    unknown = [w for w in FLAGS.only if w not in WORKLOADS]
    if unknown:
        raise app.UsageError(f"--only: unknown workloads {unknown}; choose from {list(WORKLOADS)}")
    names = FLAGS.only or list(WORKLOADS)
    fws = frameworks.detect()
    vk = fws["vkml"]
    print(f"vkml bench  {datetime.datetime.now().isoformat(sep=' ', timespec='seconds')}")
    print(f"device: {vk.extra.get('device', 'unavailable: ' + vk.missing)}")
    print(f"host:   {frameworks.host()}")
    print("frameworks: " + ", ".join(
        f"{f.name} {f.version}".strip() + (f" ({', '.join(f'{k} {v}' for k, v in f.extra.items() if k != 'device')})"
                                           if any(k != 'device' for k in f.extra) else "")
        if f.available else f"{f.name} unavailable" for f in fws.values()))
    print(f"best of {FLAGS.repeats} after {FLAGS.warmup} warm-up runs, size_scale {FLAGS.size_scale:g}; "
          f"vkml eager: one submission per operator")
    print()
    rows = []
    for n in names:
        rows.append(measure(WORKLOADS[n](FLAGS.size_scale), fws, FLAGS.repeats, FLAGS.warmup))
    cols = [f.name for f in fws.values() if f.available]
    print(report.table(rows, cols))
    print("\nratios are vkml time / other time (above 1: vkml is slower)")
    for r in rows:
        for note in r.notes:
            print(f"  {r.label}: {note}")
    for f in fws.values():
        if not f.available:
            print(f"  {f.name} not compared: {f.missing.splitlines()[0] if f.missing else 'not importable'}")


if __name__ == "__main__":
    app.run(main)
