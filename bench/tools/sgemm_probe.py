"""float32 SIMT matmul probe, outside vkml (issue 23: fp32 matmul 4096 at 80% of cuBLAS with
TF32 off).

Builds C = A @ B (row-major, M = N = K = n, every size a multiple of the tile) in several
shared-memory schemes, checks each against NumPy and times it, beside torch's float32
`a @ b` with TF32 off when torch with CUDA is there. What it varies: the workgroup tile,
the register tile, the slab depth, whether the slab loop is unrolled (`[[unroll]]`),
whether slabs are double-buffered (one barrier a slab, the next slab's global loads in
flight during this one's arithmetic), padding of the transposed A slab, vec4 stores.

    python bench/tools/sgemm_probe.py [--n 4096] [--reps 20] [--only 0,3]
"""
from __future__ import annotations

import argparse
import time
from typing import NamedTuple

import numpy as np
import vulkan as vk

import coop_probe   # noqa: E402  (run from bench/tools or with it on the path)
from coop_probe import spirv   # noqa: E402


class Cfg(NamedTuple):
    bm: int = 64
    bn: int = 64
    bk: int = 8
    tm: int = 8
    tn: int = 4
    unroll: bool = False
    db: bool = False       # double-buffered slabs
    pad: int = 0           # floats of padding per transposed-A slab row
    vstore: bool = False   # vec4 stores of C
    checks: bool = False   # bounds checks on every load and store (as vkml's kernel)

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def label(self) -> str:
        f = [n for n in ("unroll", "db", "vstore", "checks") if getattr(self, n)]
        return (f"{self.bm}x{self.bn}x{self.bk} t{self.tm}x{self.tn}" + (f" pad{self.pad}" if self.pad else "")
                + (" " + "+".join(f) if f else ""))


CONFIGS = [
    Cfg(checks=True),                                   # vkml's default NN tiling, as it is
    Cfg(unroll=True, checks=True),
    Cfg(unroll=True),
    Cfg(unroll=True, db=True),
    Cfg(unroll=True, db=True, vstore=True),
    Cfg(unroll=True, db=True, pad=4, vstore=True),
    Cfg(128, 128, 8, 8, 8, unroll=True),
    Cfg(128, 128, 8, 8, 8, unroll=True, db=True, vstore=True),
    Cfg(128, 128, 8, 8, 8, unroll=True, db=True, pad=4, vstore=True),
    Cfg(128, 128, 16, 8, 8, unroll=True, db=True, vstore=True),
    Cfg(128, 128, 16, 8, 8, unroll=True, db=True, pad=4, vstore=True),
    Cfg(128, 64, 8, 8, 8, unroll=True, db=True, vstore=True),
    Cfg(128, 64, 16, 8, 8, unroll=True, db=True, vstore=True),
    Cfg(64, 128, 16, 8, 8, unroll=True, db=True, vstore=True),
    Cfg(128, 128, 8, 16, 8, unroll=True, db=True, vstore=True),
    Cfg(128, 256, 8, 16, 8, unroll=True, db=True, vstore=True),
    Cfg(128, 128, 16, 8, 8, unroll=True, db=True, vstore=True, checks=True),
]


def source(c: Cfg) -> str:
    TX, TY = c.bn // c.tn, c.bm // c.tm
    T = c.threads
    QA, QB, K4 = c.bm // 4, c.bn // 4, c.bk // 4
    RA, RB = c.bm * c.bk // 4 // T, c.bn * c.bk // 4 // T
    assert RA * T * 4 == c.bm * c.bk and RB * T * 4 == c.bn * c.bk, c
    AROW = c.bm + c.pad                     # floats per k row of the transposed A slab
    NB = 2 if c.db else 1
    U = "[[unroll]] " if c.unroll else ""
    L = ["#version 450", "#extension GL_EXT_control_flow_attributes : require",
         f"layout(local_size_x = {T}) in;",
         "layout(std430, binding = 0) readonly buffer A_ { vec4 A[]; };",
         "layout(std430, binding = 1) readonly buffer B_ { vec4 B[]; };",
         "layout(std430, binding = 2) writeonly buffer C_ { float C[]; };",
         "layout(std430, binding = 2) writeonly buffer C4_ { vec4 C4[]; };",
         "layout(push_constant) uniform P { int M; int N; int K; } p;",
         f"shared float As[{NB * c.bk * AROW}];", f"shared vec4 Bs[{NB * c.bk * QB}];",
         "void main() {",
         "int M = p.M, N = p.N, K = p.K;",
         f"int tid = int(gl_LocalInvocationID.x); int tx = tid % {TX}; int ty = tid / {TX};",
         f"int m0 = int(gl_WorkGroupID.y) * {c.bm}; int n0 = int(gl_WorkGroupID.x) * {c.bn};"]
    L += [f"float acc_{i}_{j} = 0.0;" for i in range(c.tm) for j in range(c.tn)]
    L += [f"vec4 pa{r}; vec4 pb{r};" for r in range(max(RA, RB))]

    def load(k0: str) -> list[str]:
        out = []
        for r in range(RA):
            chk = f"(gm < M && gk < K) ? A[(gm * K + gk) >> 2] : vec4(0.0)" if c.checks else "A[(gm * K + gk) >> 2]"
            out.append(f"{{ int e = tid + {r * T}; int gm = m0 + e / {K4}; int gk = {k0} + (e % {K4}) * 4; pa{r} = {chk}; }}")
        for r in range(RB):
            chk = f"(gn < N && gk < K) ? B[(gk * N + gn) >> 2] : vec4(0.0)" if c.checks else "B[(gk * N + gn) >> 2]"
            out.append(f"{{ int e = tid + {r * T}; int gk = {k0} + e / {QB}; int gn = n0 + (e % {QB}) * 4; pb{r} = {chk}; }}")
        return out

    def store(buf: str) -> list[str]:
        out = []
        for r in range(RA):
            out.append(f"{{ int e = tid + {r * T}; int mm = e / {K4}; int kq = e % {K4};")
            out += [f"  As[{buf} * {c.bk * AROW} + (kq * 4 + {q}) * {AROW} + mm] = pa{r}[{q}];" for q in range(4)]
            out.append("}")
        for r in range(RB):
            out.append(f"Bs[{buf} * {c.bk * QB} + tid + {r * T}] = pb{r};")
        return out

    def compute(buf: str) -> list[str]:
        out = [f"{U}for (int kk = 0; kk < {c.bk}; ++kk) {{"]
        for g in range(c.tm // 4):
            base = f"{buf} * {c.bk * AROW} + kk * {AROW} + ({g * TY} + ty) * 4"
            out.append(f"  vec4 a{g} = vec4(As[{base}], As[{base} + 1], As[{base} + 2], As[{base} + 3]);")
        out += [f"  vec4 b{h} = Bs[{buf} * {c.bk * QB} + kk * {QB} + {h * TX} + tx];" for h in range(c.tn // 4)]
        out += [f"  acc_{i}_{j} = fma(a{i // 4}[{i % 4}], b{j // 4}[{j % 4}], acc_{i}_{j});"
                for i in range(c.tm) for j in range(c.tn)]
        out.append("}")
        return out

    if c.db:
        L += load("0") + store("0") + ["barrier();", "int cur = 0;",
                                       f"for (int k0 = 0; k0 < K; k0 += {c.bk}) {{",
                                       f"  bool more = k0 + {c.bk} < K;", "  if (more) {"]
        L += ["    " + x for x in load(f"(k0 + {c.bk})")] + ["  }"]
        L += ["  " + x for x in compute("cur")]
        L += ["  if (more) {"] + ["    " + x for x in store("(cur ^ 1)")] + ["  }", "  barrier();", "  cur ^= 1;", "}"]
    else:
        L += [f"for (int k0 = 0; k0 < K; k0 += {c.bk}) {{"] + ["  " + x for x in load("k0") + store("0")]
        L += ["  barrier();"] + ["  " + x for x in compute("0")] + ["  barrier();", "}"]
    for i in range(c.tm):
        r = f"(m0 + ({(i // 4) * TY} + ty) * 4 + {i % 4})"
        for h in range(c.tn // 4):
            col = f"(n0 + ({h * TX} + tx) * 4)"
            vals = [f"acc_{i}_{h * 4 + q}" for q in range(4)]
            if c.vstore:
                st = f"C4[({r} * N + {col}) >> 2] = vec4({', '.join(vals)});"
                L.append(f"if ({r} < M && {col} < N) {st}" if c.checks else st)
            else:
                for q in range(4):
                    st = f"C[{r} * N + {col} + {q}] = {vals[q]};"
                    L.append(f"if ({r} < M && {col} + {q} < N) {st}" if c.checks else st)
    L.append("}")
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default="")
    ap.add_argument("--show", type=int, default=-1, help="print the GLSL of one config and stop")
    a = ap.parse_args()
    if a.show >= 0:
        print(source(CONFIGS[a.show]))
        return
    n = a.n
    d = coop_probe.Dev(coop=False)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n)).astype(np.float32)
    B = rng.standard_normal((n, n)).astype(np.float32)
    want = A.astype(np.float64) @ B.astype(np.float64)
    DL, HV = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, (vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
                                                      | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)
    nb = n * n * 4
    ab, bb, cbuf, st = d.alloc(nb, DL), d.alloc(nb, DL), d.alloc(nb, DL), d.alloc(nb, HV)
    for arr, dst in ((A, ab), (B, bb)):
        d.upload(arr, dst, st)
    pl, ds = d.storage_set([(x[0], nb) for x in (ab, bb, cbuf)], 12)
    pc = vk.ffi.new("uint32_t[3]", [n, n, n])
    flops = 2.0 * n ** 3
    idx = range(len(CONFIGS)) if not a.only else [int(k) for k in a.only.split(",")]
    warm = False
    for ix in idx:
        cfg = CONFIGS[ix]
        if n % cfg.bm or n % cfg.bn or n % cfg.bk:
            continue
        try:
            code = spirv(source(cfg))
        except RuntimeError as e:
            print(cfg.label(), "compile failed:", str(e)[:600])
            continue
        pipe, _, build = d.pipeline(code, pl)
        rec = coop_probe.recorder(pipe, pl, ds, pc, 12, (n // cfg.bn, n // cfg.bm))
        if not warm:
            coop_probe.warm_up(d, rec, a.reps)
            warm = True
        d.submit(rec(1))
        d.copy(cbuf[0], st[0], nb)
        ptr = vk.vkMapMemory(d.dev, st[1], 0, nb, 0)
        got = np.frombuffer(ptr, np.float32).reshape(n, n).copy()
        vk.vkUnmapMemory(d.dev, st[1])
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        d.submit(rec(a.reps))
        dt = min(d.submit(rec(a.reps)) for _ in range(5)) / a.reps
        print(f"{ix:2d} {cfg.label():44s} wg{cfg.threads:4d}: {dt * 1e3:.3f} ms {flops / dt / 1e12:6.2f} TFLOP/s "
              f"err {err:.1e} build {build:.2f}s", flush=True)
    try:
        import torch
        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = False
            ta, tb = torch.tensor(A, device="cuda"), torch.tensor(B, device="cuda")
            for _ in range(5):
                ta @ tb
            torch.cuda.synchronize()
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(a.reps):
                    ta @ tb
                torch.cuda.synchronize()
                best = min(best, (time.perf_counter() - t0) / a.reps)
            print(f"torch float32 a @ b (TF32 off): {best * 1e3:.3f} ms {flops / best / 1e12:6.2f} TFLOP/s")
    except ImportError:
        pass


if __name__ == "__main__":
    main()
