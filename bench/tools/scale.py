"""The compiler at scale (vkml issue 16): vkml beside JAX (jax.jit on CPU), as ratios.

    /work/main/.venv/bin/python bench/tools/scale.py [--quick] [--case peak,first,graph,chain]

Run from the repository root (the script puts the root on sys.path, so it measures this
tree's vkml). Cases (default: all four, at the issue's sizes but for graph's kernel
count; --quick: smaller ones; --ns, --depth, --blocks, --ew, --variants, --length set
sizes). The default run took 8 minutes on the 2-core lavapipe VM, --quick 2:

peak   Planned peak of a training step: `vkml.jit(vkml.value_and_grad(loss)).lower(p, x)`
       `.arena_bytes` (planned intermediates) and `.peak_bytes`, in activations
       (batch*width*4 bytes), for a depth-n tanh MLP (batch 1024, width 64), n = 8, 32,
       128, 512, with no checkpointing, `vkml.checkpoint` per layer, and checkpointed
       segments of sqrt(n) layers; the fitted slope of log(arena) against log(n) per
       policy. JAX: `jax.jit(jax.value_and_grad(loss)).lower(..).compile()
       .memory_analysis().temp_size_in_bytes` of the same model, `jax.checkpoint` the
       same way.
first  First call of the depth-128 training step (value_and_grad + an SGD update,
       jitted), cold and warm, then the second call and the median of the next calls.
graph  A generated function of about 10,000 ops: a chain of 240 blocks, each on arrays
       of its own shape, with its own mix of elementwise ops, a MatMul with an
       activation, a reduction and a scalar carried to the next block (so fusion cannot
       collapse it, nor lavapipe's merging join blocks). Block b repeats block
       b % --variants: the default 60 compiles about 160 distinct kernels; --variants 0
       (every block its own) gives the issue's ~600, too many for the 2-core lavapipe VM:
       its cold process held 15-20 MB a kernel and was OOM-killed at 12 GB after 18
       minutes, so it is not the default.
       Prints the ops after simplification, kernels after fusion, dispatches and the
       kernels the process compiled (`len(runtime.get().kernels)`); cold and warm first
       call, the second call and the median of the next ones.
chain  A 20,000-op elementwise chain (tanh, *1.0001, +0.5 in turn) on 8 float32: the
       cold first call and the replay (median of many calls, each read back).

Every first call runs in a fresh subprocess. Cold: empty caches, i.e. a fresh
VKML_CACHE_DIR (vkml's SPIR-V and VkPipelineCache) and MESA_SHADER_CACHE_DIR (Mesa's
shader cache), and JAX without a persistent compilation cache. Warm: a second process on
the same cache directories; for JAX, two processes with `jax_compilation_cache_dir` set
(and `jax_persistent_cache_min_compile_time_secs` = `..._min_entry_size_bytes` = 0), the
second one timed. A first call is the wall time of the call including the read-back of
its result (tracing, compilation and one run), not the import or the device's start-up.
Ratios are vkml / JAX: above 1, vkml is slower (or plans more memory). Each process's
peak resident memory is reported too (lavapipe keeps megabytes per pipeline).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench.workloads import DEEP_BATCH as BATCH, DEEP_WIDTH as WIDTH  # noqa: E402
from bench.workloads import deep_mlp_data as mlp_data, deep_mlp_loss as mlp_loss  # noqa: E402

ACT = BATCH * WIDTH * 4


# --------------------------------------------------------------------------- models

# elementwise ops of the generated graph; each maps moderate values to moderate values
_UNARY = [
    lambda xp, x: xp.tanh(x),
    lambda xp, x: xp.sin(x),
    lambda xp, x: xp.cos(x),
    lambda xp, x: x * 0.75,
    lambda xp, x: x + 0.25,
    lambda xp, x: x - 0.5,
    lambda xp, x: xp.abs(x),
    lambda xp, x: xp.sqrt(xp.abs(x) + 1.0),
    lambda xp, x: xp.exp(-xp.abs(x)),
    lambda xp, x: xp.log1p(xp.abs(x)),
    lambda xp, x: xp.maximum(x, -0.5),
    lambda xp, x: xp.minimum(x, 0.5),
    lambda xp, x: x * xp.tanh(x),
    lambda xp, x: x / (xp.abs(x) + 1.0),
]
_ACT = [
    lambda xp, x: xp.tanh(x),
    lambda xp, x: xp.maximum(x, 0.0),
    lambda xp, x: x / (1.0 + xp.exp(-x)),
    lambda xp, x: xp.sin(x),
]


def graph_blocks(blocks: int, ew: int, variants: int = 0, seed: int = 0) -> list[dict]:
    """The generated graph's plan: per block its shapes (m, k) @ (k, c), the op indices of
    its two elementwise chains (ew ops each), its activation and its reduction. Block b
    repeats block b % variants (0: every block its own), so `variants` bounds the distinct
    kernels (about 2.5 per variant) whatever the number of ops."""
    import numpy as np
    rng = np.random.default_rng(seed)
    out = []
    for b in range(variants or blocks):
        # shapes vary per block; reductions over more than 16 elements stay kernels
        m, k, c = 20 + (b * 7) % 29, 17 + (b * 5) % 23, 18 + (b * 11) % 31
        out.append(dict(m=m, k=k, c=c,
                        pre=rng.integers(0, len(_UNARY), ew).tolist(),
                        post=rng.integers(0, len(_UNARY), ew).tolist(),
                        act=int(rng.integers(0, len(_ACT))), axis=int(rng.integers(0, 2)),
                        red=["sum", "max", "mean"][int(rng.integers(0, 3))]))
    return [out[b % len(out)] for b in range(blocks)]


def graph_data(plan):
    import numpy as np
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=(p["m"], p["k"])).astype(np.float32) for p in plan]
    ws = [(rng.normal(size=(p["k"], p["c"])) / math.sqrt(p["k"])).astype(np.float32) for p in plan]
    return xs, ws


def graph_fn(xp, plan):
    """f(xs, ws) -> scalar: the blocks of plan in a chain (each block adds the previous
    block's scalar, so no two blocks are independent)."""
    def f(xs, ws):
        carry = 0.0
        total = 0.0
        for p, x, w in zip(plan, xs, ws):
            h = x + carry
            for i in p["pre"]:
                h = _UNARY[i](xp, h)
            y = _ACT[p["act"]](xp, h @ w)
            for i in p["post"]:
                y = _UNARY[i](xp, y)
            r = getattr(xp, p["red"])(y, axis=p["axis"])
            carry = r.mean() * 0.1
            total = total + carry
        return total
    return f


def chain_fn(xp, length: int):
    """f(x): tanh, *1.0001, +0.5 in turn, length ops."""
    def f(x):
        for i in range(length):
            x = xp.tanh(x) if i % 3 == 0 else x * 1.0001 if i % 3 == 1 else x + 0.5
        return x
    return f

# --------------------------------------------------------------------------- children
# A child is this file run with --child JSON: it imports one framework, does one case's
# work and prints one line "RESULT {json}".

def _fw(name: str):
    """(xp, jit, value_and_grad, checkpoint, tree_map, to_device, ready, kernels) of a
    framework; kernels() is the process's compiled kernel count (vkml) or None."""
    import numpy as np
    if name == "vkml":
        sys.path.insert(0, str(ROOT))
        import vkml
        import vkml.numpy as vnp
        from vkml.tree_util import tree_map
        from vkml.vulkan import runtime
        return (vnp, vkml.jit, vkml.value_and_grad, vkml.checkpoint, tree_map,
                lambda a: tree_map(vnp.asarray, a),
                lambda out: tree_map(np.asarray, out),
                lambda: len(runtime.get().kernels))
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
    return (jnp, jax.jit, jax.value_and_grad, jax.checkpoint, jax.tree_util.tree_map,
            lambda a: jax.tree_util.tree_map(jnp.asarray, a),
            lambda out: jax.block_until_ready(out), lambda: None)


def _jax_cache(d: str) -> None:
    import jax
    jax.config.update("jax_compilation_cache_dir", d)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def child(job: dict) -> dict:
    out = _child(job)
    import resource
    out["maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def _child(job: dict) -> dict:
    fw = job["fw"]
    if fw == "jax" and job.get("jax_cache"):
        _jax_cache(job["jax_cache"])
    xp, jit, vg, ckpt, tree_map, to_dev, ready, kernels = _fw(fw)
    case = job["case"]

    if case == "peak":
        out = {}
        for n in job["ns"]:
            p_host, x_host = mlp_data(n)
            p, x = to_dev(p_host), to_dev(x_host)
            for pol in job["policies"]:
                t = time.perf_counter()
                f = jit(vg(mlp_loss(xp, ckpt, n, pol)))
                if fw == "vkml":
                    lo = f.lower(p, x)
                    r = dict(arena=lo.arena_bytes, peak=lo.peak_bytes)
                else:
                    ma = f.lower(p, x).compile().memory_analysis()
                    r = dict(arena=getattr(ma, "temp_size_in_bytes", None) if ma is not None else None)
                r["s"] = time.perf_counter() - t
                out[f"{n}/{pol}"] = r
        return out

    if case in ("first", "graph", "chain"):
        if case == "first":
            n = job["depth"]
            loss = mlp_loss(xp, ckpt, n, "none")

            def step(params, x):
                l, g = vg(loss)(params, x)
                return l, tree_map(lambda a, b: a - 0.01 * b, params, g)
            p_host, x_host = mlp_data(n)
            args = (to_dev(p_host), to_dev(x_host))
        elif case == "graph":
            plan = graph_blocks(job["blocks"], job["ew"], job["variants"])
            step = graph_fn(xp, plan)
            args = to_dev(graph_data(plan))
        else:
            import numpy as np
            step = chain_fn(xp, job["length"])
            args = (to_dev(np.linspace(-1, 1, job["size"], dtype=np.float32)),)
        f = jit(step)
        k0 = kernels()
        t = time.perf_counter()
        ready(f(*args))
        first = time.perf_counter() - t
        out = dict(first=first)
        if k0 is not None:
            out["compiled"] = kernels() - k0
            lo = f.lower(*args)
            out.update(ops=lo.op_count, kernels=lo.kernel_count, dispatches=lo.dispatch_count)
        elif job.get("count_ops"):
            import jax
            out["ops"] = len(jax.make_jaxpr(step)(*args).jaxpr.eqns)
        t = time.perf_counter()
        ready(f(*args))
        out["second"] = time.perf_counter() - t
        times, end = [], time.perf_counter() + job.get("replay_s", 1.0)
        while len(times) < job.get("replays", 10) and (time.perf_counter() < end or len(times) < 3):
            t = time.perf_counter()
            ready(f(*args))
            times.append(time.perf_counter() - t)
        out["steady"] = _median(times)
        out["steady_n"] = len(times)
        return out
    raise SystemExit(f"scale.py: unknown case {case!r}")


# --------------------------------------------------------------------------- parent

def spawn(job: dict, env_extra: dict) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", **env_extra)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    t = time.perf_counter()
    r = subprocess.run([sys.executable, __file__, "--child", json.dumps(job)], env=env,
                       capture_output=True, text=True, cwd=str(ROOT))
    wall = time.perf_counter() - t
    line = next((l for l in r.stdout.splitlines() if l.startswith("RESULT ")), None)
    if r.returncode != 0 or line is None:
        # reported in the table (rc -9: most likely the kernel's OOM killer), the run goes on
        tail = (r.stdout[-1000:] + r.stderr[-1500:]).strip()
        print(f"scale.py: child {job} failed (rc {r.returncode}) after {wall:.0f} s:\n{tail}", file=sys.stderr)
        return dict(error=f"rc {r.returncode}", process=wall)
    out = json.loads(line[len("RESULT "):])
    out["process"] = wall
    return out


def cold_warm(job: dict, tmp: str, label: str) -> dict:
    """{(fw, 'cold'|'warm'): result}: vkml cold then warm on fresh cache dirs; JAX without
    a persistent cache, then a process filling one and a second process reusing it."""
    res = {}
    vk = Path(tempfile.mkdtemp(prefix=f"{label}-vkml-", dir=tmp))
    env = dict(VKML_CACHE_DIR=str(vk / "spirv"), MESA_SHADER_CACHE_DIR=str(vk / "mesa"))
    res["vkml", "cold"] = spawn(dict(job, fw="vkml"), env)
    res["vkml", "warm"] = spawn(dict(job, fw="vkml"), env)
    jd = Path(tempfile.mkdtemp(prefix=f"{label}-jax-", dir=tmp))
    env = dict(MESA_SHADER_CACHE_DIR=str(jd / "mesa"))
    res["jax", "cold"] = spawn(dict(job, fw="jax", count_ops=True), env)
    res["jax", "fill"] = spawn(dict(job, fw="jax", jax_cache=str(jd / "xla")), env)
    res["jax", "warm"] = spawn(dict(job, fw="jax", jax_cache=str(jd / "xla")), env)
    return res


def fmt_b(b) -> str:
    return "n/a" if b is None else f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def fmt_t(s) -> str:
    if s is None:
        return "n/a"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.0f} us"


def ratio(a, b) -> str:
    return "n/a" if a is None or b is None or not b else f"{a / b:.2f}x"


class Table:
    def __init__(self):
        self.rows = []
        self.notes = []

    def row(self, case, what, v, j, r=None, fmt=fmt_t):
        self.rows.append((case, what, fmt(v), fmt(j), ratio(v, j) if r is None else r))

    def print(self):
        head = ("case", "measure", "vkml", "jax", "vkml/jax")
        w = [max(len(str(x[i])) for x in self.rows + [head]) for i in range(5)]
        line = lambda x: "| " + " | ".join(str(c).ljust(w[i]) for i, c in enumerate(x)) + " |"
        print(line(head))
        print("|" + "|".join("-" * (n + 2) for n in w) + "|")
        for r in self.rows:
            print(line(r))
        if self.notes:
            print()
            for n in self.notes:
                print("- " + n)


def slope(ns, ys):
    import numpy as np
    pts = [(n, y) for n, y in zip(ns, ys) if y]
    if len(pts) < 2:
        return None
    a, b = np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)
    return a


def case_peak(tab: Table, a, tmp) -> None:
    ns = a.ns or ([8, 32] if a.quick else [8, 32, 128, 512])
    pols = ["none", "layer", "sqrt"]
    job = dict(case="peak", ns=ns, policies=pols)
    env = dict(VKML_CACHE_DIR=str(Path(tmp) / "peak" / "spirv"), MESA_SHADER_CACHE_DIR=str(Path(tmp) / "peak" / "mesa"))
    res = {fw: spawn(dict(job, fw=fw), env) for fw in ("vkml", "jax")}
    get = lambda fw, n, pol, k: res[fw].get(f"{n}/{pol}", {}).get(k)
    act = lambda b: "n/a" if b is None else f"{b / ACT:.1f} act"
    f2 = lambda s: "n/a" if s is None else f"{s:.2f}"
    for pol in pols:
        for n in ns:
            pk = get("vkml", n, pol, "peak")
            tab.row("peak", f"depth {n}, ckpt {pol}: arena (vkml peak {act(pk)})",
                    get("vkml", n, pol, "arena"), get("jax", n, pol, "arena"), fmt=act)
        tab.rows.append(("peak", f"ckpt {pol}: slope of log arena vs log n",
                         *(f2(slope(ns, [get(fw, n, pol, "arena") for n in ns])) for fw in ("vkml", "jax")), ""))
    secs = {fw: sum(r["s"] for k, r in res[fw].items() if "/" in k) for fw in res}
    tab.notes.append(f"peak: 1 act = batch {BATCH} x width {WIDTH} x 4 bytes; vkml arena = Lowering.arena_bytes "
                     f"(peak_bytes adds arguments and results), jax = memory_analysis().temp_size_in_bytes; "
                     f"lowering (vkml) / compiling (jax) all of them: {secs['vkml']:.1f} s / {secs['jax']:.1f} s")
    _errors(tab, "peak", res.items())


def _errors(tab: Table, name: str, items) -> None:
    for k, r in items:
        if "error" in r:
            tab.notes.append(f"{name}: the {k} process failed ({r['error']}; rc -9 is most likely the OOM "
                             f"killer) after {r['process']:.0f} s")


def _first_rows(tab: Table, name: str, res: dict, steady_label: str = "steady (median)") -> None:
    g = lambda fw, mode, k: res[fw, mode].get(k)
    both = lambda mode, k: (g("vkml", mode, k), g("jax", mode, k))
    tab.row(name, "first call, cold", *both("cold", "first"))
    tab.row(name, "first call, warm (2nd process)", *both("warm", "first"))
    tab.row(name, "process wall, cold (imports+setup+call)", *both("cold", "process"))
    tab.row(name, "max RSS, cold process", *both("cold", "maxrss"), fmt=fmt_b)
    tab.row(name, "second call", *both("cold", "second"))
    tab.row(name, f"{steady_label} of {g('vkml', 'cold', 'steady_n')}/{g('jax', 'cold', 'steady_n')}",
            *both("cold", "steady"))
    tab.notes.append(f"{name}: jax first call while filling its persistent cache "
                     f"{fmt_t(g('jax', 'fill', 'first'))}; vkml kernels compiled by the first call: "
                     f"{g('vkml', 'cold', 'compiled')} cold, {g('vkml', 'warm', 'compiled')} warm "
                     f"(the same pipelines, created again from the SPIR-V and Mesa's caches)")
    _errors(tab, name, [(f"{fw} {mode}", r) for (fw, mode), r in res.items()])


def case_first(tab: Table, a, tmp) -> None:
    depth = a.depth or (32 if a.quick else 128)
    res = cold_warm(dict(case="first", depth=depth, replays=10, replay_s=2.0), tmp, "first")
    name = f"step depth {depth}"
    c = res["vkml", "cold"]
    tab.rows.append((name, "ops / kernels / dispatches (vkml)",
                     f"{c.get('ops')} / {c.get('kernels')} / {c.get('dispatches')}", "", ""))
    _first_rows(tab, name, res)


def case_graph(tab: Table, a, tmp) -> None:
    blocks, ew = a.blocks or (40 if a.quick else 240), a.ew
    variants = a.variants if a.variants is not None else (16 if a.quick else 60)
    res = cold_warm(dict(case="graph", blocks=blocks, ew=ew, variants=variants, replays=10, replay_s=2.0),
                    tmp, "graph")
    c = res["vkml", "cold"]
    name = f"graph {blocks} blocks ({variants or blocks} distinct)"
    tab.rows.append((name, "ops (vkml after simplify; jax jaxpr eqns)", str(c.get("ops")),
                     str(res["jax", "cold"].get("ops")), ""))
    tab.rows.append((name, "kernels after fusion / dispatches / compiled (vkml)",
                     f"{c.get('kernels')} / {c.get('dispatches')} / {c.get('compiled')}", "", ""))
    _first_rows(tab, name, res)


def case_chain(tab: Table, a, tmp) -> None:
    length = a.length or (2000 if a.quick else 20000)
    res = cold_warm(dict(case="chain", length=length, size=8, replays=500, replay_s=3.0), tmp, "chain")
    c = res["vkml", "cold"]
    name = f"chain {length} ops on 8 f32"
    tab.rows.append((name, "ops (jax: jaxpr eqns) / kernels / dispatches / compiled",
                     f"{c.get('ops')} / {c.get('kernels')} / {c.get('dispatches')} / {c.get('compiled')}",
                     str(res["jax", "cold"].get("ops")), ""))
    _first_rows(tab, name, res, "replay (median, read back)")


CASES = {"peak": case_peak, "first": case_first, "graph": case_graph, "chain": case_chain}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--case", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    ap.add_argument("--ns", type=lambda s: [int(v) for v in s.split(",")], help="peak: depths (8,32,128,512)")
    ap.add_argument("--depth", type=int, help="first: the step's depth (128)")
    ap.add_argument("--blocks", type=int, help="graph: blocks (240: about 10k ops)")
    ap.add_argument("--ew", type=int, default=10, help="graph: elementwise ops per chain of a block (10)")
    ap.add_argument("--variants", type=int, help="graph: distinct blocks (60: ~160 kernels compiled; "
                    "0: every block its own, ~600 kernels at 240 blocks, over 12 GB on lavapipe)")
    ap.add_argument("--length", type=int, help="chain: ops (20000)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print("RESULT " + json.dumps(child(json.loads(a.child))), flush=True)
        return
    cases = [c.strip() for c in a.case.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASES]
    if bad:
        raise SystemExit(f"scale.py: unknown case(s) {bad}; valid: {', '.join(CASES)}")
    tab = Table()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vkml-scale-") as tmp:
        for c in cases:
            CASES[c](tab, a, tmp)
    tab.notes.append(f"total {time.perf_counter() - t0:.0f} s{' (--quick)' if a.quick else ''}")
    tab.print()


if __name__ == "__main__":
    main()
