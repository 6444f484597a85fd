"""`python -m bench`: time every workload on vkml and every available target, print the
table (with vkml's ratios), a bandwidth and a matmul summary, and update bench/RESULTS.md.

    python -m bench                               # everything (size_scale 4 on a GPU device)
    python -m bench --only=matmul1024,chain_jit --repeats=20
    python -m bench --frameworks=numpy,torch-cuda --results=
"""
from __future__ import annotations

import datetime
import gc
import time
import subprocess
import sys
from pathlib import Path

import numpy as np
from absl import app, flags

from . import frameworks, report
from .timing import best_time
from .workloads import WORKLOADS, Workload

FLAGS = flags.FLAGS
flags.DEFINE_list("only", [], f"workloads to run (default: all of {','.join(WORKLOADS)})")
flags.DEFINE_list("skip", [], "workloads not to run")
flags.DEFINE_list("frameworks", [], "targets besides vkml (default: every available one of numpy, "
                                    "jax, torch, torch.compile, torch-cuda, torch.compile-cuda, jax-gpu)")
flags.DEFINE_integer("repeats", 100, "timed calls per target and workload at most (the best counts; "
                                    "the budget stops long workloads first, and on a shared VM the "
                                    "best of 20 calls of a millisecond step still varied by 30%)")
flags.DEFINE_integer("warmup", 2, "untimed calls first (compilation, caches)")
flags.DEFINE_integer("rounds", 4, "turns the targets of a row take, each timing up to repeats / rounds "
                                   "calls in budget / rounds seconds (the best of all counts)")
flags.DEFINE_float("settle", 0.2, "seconds of sleep before each turn")
flags.DEFINE_float("budget", 3.0, "seconds of calls per target and workload after which timing stops")
flags.DEFINE_float("size_scale", 0.0, "multiplies the 16M-element sizes (elementwise, copy, sum) and "
                                      "the conv batch; 0: 1 on a CPU device, 4 on a GPU")
flags.DEFINE_string("tree", "", "what to record as the source tree (default: git describe --dirty; "
                                 "a copy without .git records 'unknown')")
flags.DEFINE_string("results", str(Path(__file__).with_name("RESULTS.md")),
                    "Markdown file whose section for this device is rewritten ('' : none)")


def _parts(value) -> list[np.ndarray]:
    """A result as a list of float64 arrays, one per leaf (compared leaf by leaf)."""
    if isinstance(value, dict):
        value = [value[k] for k in sorted(value)]
    if isinstance(value, (tuple, list)):
        return [p for v in value for p in _parts(v)]
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return [np.asarray(value, dtype=np.float64).ravel()]


def _error(got: list, ref: list) -> float:
    """Largest leafwise max |got - ref| / max |ref|."""
    if len(got) != len(ref) or any(g.shape != r.shape for g, r in zip(got, ref)):
        return float("inf")
    return max((float(np.max(np.abs(g - r))) / max(float(np.max(np.abs(r))), 1e-30)
                if r.size else 0.0) for g, r in zip(got, ref))


def _first_line(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:150]}"


def measure(wl: Workload, targets: dict, cache: dict) -> report.Row:
    """Time wl on each target (others' times are shared within wl.group) and check every
    result against NumPy's. The targets take turns (`--rounds`), each keeping its best:
    this VM's speed drifts (after the 4096 matmul row both vkml's and JAX's small MLP
    steps ran 40-60% slower for a while), and timed one after another the first target
    of a row took the slow stretch alone."""
    row = report.Row(wl.label, flops=wl.flops, nbytes=wl.nbytes)
    entries, runs = {}, {}
    for name, t in targets.items():
        if not t.available:
            continue
        key = (wl.group, name)
        if name != "vkml" and key in cache:
            entries[name] = cache[key]
            continue
        setup = wl.vkml if name == "vkml" else wl.impls.get(t.kind)
        if setup is None:
            continue
        try:
            run = setup(t.module) if name == "vkml" else setup(t)
            if name == "vkml":    # a vkml call returns once queued: time it to its result
                run = (lambda r, sync: lambda: (r(), sync())[0])(run, t.sync)
            res = _parts(run())
            if name == "numpy":
                cache[(wl.group, "ref")] = res
            ref = cache.get((wl.group, "ref"))
            err = _error(res, ref) if ref is not None and name != "numpy" else 0.0
            del res
            runs[name] = (run, err)
            entries[name] = (float("inf"), err, 0, None)
        except Exception as e:   # an operator missing, a backend that cannot compile: n/a
            entries[name] = (None, 0.0, 0, _first_line(e))
    rounds = max(FLAGS.rounds, 1)
    for r in range(rounds):
        for name, (run, err) in list(runs.items()):
            # another library's worker threads spin a while after its calls (OpenBLAS
            # about 0.1 s): they would take cores from the next target's calls
            time.sleep(FLAGS.settle)
            try:
                secs, n = best_time(run, -(-FLAGS.repeats // rounds), FLAGS.warmup if r == 0 else 0,
                                    FLAGS.budget / rounds)
                best, _, done, _ = entries[name]
                entries[name] = (min(best, secs), err, done + n, None)
            except Exception as e:
                entries[name] = (None, 0.0, 0, _first_line(e))
                del runs[name]
    runs = None
    gc.collect()
    for name in targets:
        if name not in entries:
            continue
        if name != "vkml":
            cache[(wl.group, name)] = entries[name]
        secs, err, n, failure = entries[name]
        if failure:
            if not failure.startswith("NotImplementedError"):   # not a comparison this row makes
                row.notes.append(f"{name} n/a: {failure}")
            continue
        row.seconds[name] = secs
        if err > wl.tol:
            row.notes.append(f"{name} disagrees with numpy: max error {err:.2e} of the largest "
                             f"value (allowed {wl.tol:g})")
    return row


def _git() -> str:
    if FLAGS.tree:
        return FLAGS.tree
    try:
        rev = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                             text=True, cwd=Path(__file__).parent, timeout=10)
        return rev.stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def _fusion_state() -> str:
    try:
        from vkml.vulkan import device
        fuse = device.get().profile.fuse
    except (ImportError, AttributeError):
        return "kernel fusion on"
    return "kernel fusion on" if fuse else "kernel fusion off (VKML_FUSION=0)"


def summary(rows: dict, targets: dict) -> list[str]:
    """Bandwidth of vkml's elementwise work against a PyTorch copy on the same kind of device,
    and vkml's fp32 matmul 4096 against PyTorch's (cuBLAS with TF32 off on a GPU)."""
    gpu = targets["vkml"].extra.get("gpu")
    torch_name = "torch-cuda" if gpu else "torch"
    out = []

    def bw(r, name):
        s = r.seconds.get(name) if r else None
        return r.nbytes / s / 1e9 if s and r.nbytes else None
    copy_ref = bw(rows.get("copy"), torch_name)
    for key, what in (("chain_jit", "chain under vkml.jit"), ("chain", "chain eager"),
                      ("copy", "copy (one kernel)")):
        v = bw(rows.get(key), "vkml")
        if v is not None:
            rel = f", {100 * v / copy_ref:.0f}% of {torch_name} copy ({copy_ref:.1f} GB/s)" if copy_ref else ""
            out.append(f"vkml {what}: {v:.1f} GB/s counting 8 bytes per element{rel}")
    tc = rows.get("chain") and rows["chain"].seconds.get(torch_name)
    if tc:
        out.append(f"{torch_name} chain eager: {bw(rows['chain'], torch_name):.1f} GB/s")
    for key in ("matmul4096", "matmul1024"):
        r = rows.get(key)
        if r and r.seconds.get("vkml") and r.seconds.get(torch_name):
            v, t = r.flops / r.seconds["vkml"], r.flops / r.seconds[torch_name]
            lib = "cuBLAS fp32, TF32 off" if gpu else "PyTorch CPU BLAS"
            out.append(f"{key}: vkml {v / 1e12:.2f} TF/s vs {lib} {t / 1e12:.2f} TF/s "
                       f"({100 * v / t:.0f}%)")
    return out


def main(argv) -> None:
    del argv
    unknown = [w for w in FLAGS.only + FLAGS.skip if w not in WORKLOADS]
    if unknown:
        raise app.UsageError(f"unknown workloads {unknown}; choose from {list(WORKLOADS)}")
    names = [n for n in (FLAGS.only or list(WORKLOADS)) if n not in FLAGS.skip]
    targets = frameworks.detect(FLAGS.frameworks or None)
    vk = targets["vkml"]
    if not vk.available:
        raise SystemExit(f"vkml cannot run here: {vk.missing}")
    scale = FLAGS.size_scale or (4.0 if vk.extra.get("gpu") else 1.0)
    when = datetime.datetime.now().astimezone().isoformat(sep=" ", timespec="seconds")
    head = [f"date: {when}",
            f"device: {vk.extra['device']}",
            f"host: {frameworks.host()}",
            f"vkml {vk.version}, tree {_git()}, {_fusion_state()}",
            "targets: " + "; ".join(f"{t.name} {t.version} ({t.extra.get('device', '')})".replace(" ()", "")
                                    if t.available else f"{t.name} unavailable ({t.missing.splitlines()[0][:80]})"
                                    for t in targets.values() if t.name != "vkml"),
            f"best of up to {FLAGS.repeats} calls after {FLAGS.warmup} warm-up calls, at most "
            f"{FLAGS.budget:g} s of calls per cell, the targets of a row taking {FLAGS.rounds} turns; size_scale {scale:g}; python {sys.version.split()[0]}"]
    print("\n".join(head), flush=True)
    cache, rows = {}, {}
    for n in names:
        r = measure(WORKLOADS[n](scale), targets, cache)
        rows[n] = r
        print(f"  {r.label}: " + ", ".join(f"{k} {report.fmt_time(v)}" for k, v in r.seconds.items()),
              flush=True)
    cols = [t.name for t in targets.values() if t.available and any(t.name in r.seconds for r in rows.values())]
    body = list(rows.values())
    notes = [f"{r.label}: {note}" for r in body for note in r.notes]
    summ = summary(rows, targets)
    print()
    print(report.table(body, cols))
    print("\nratios are vkml time / other time (above 1: vkml is slower)")
    for line in summ + notes:
        print(f"  {line}")
    if FLAGS.results:
        md = "\n".join(f"- {h}" for h in head) + "\n\n" + report.markdown(body, cols)
        md += "\n\nRatios are vkml time / other time (above 1: vkml is slower).\n"
        if summ:
            md += "\n" + "\n".join(f"- {s}" for s in summ) + "\n"
        if notes:
            md += "\nNotes:\n" + "\n".join(f"- {s}" for s in notes) + "\n"
        report.merge_section(Path(FLAGS.results), vk.extra["device"], md)
        print(f"\nwrote the section for this device in {FLAGS.results}")


if __name__ == "__main__":
    app.run(main)
