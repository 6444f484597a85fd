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

from coop_probe import spirv   # noqa: E402  (run from bench/tools or with it on the path)


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


class Dev:
    """One compute queue, a command buffer and a fence (no extensions)."""

    def __init__(self):
        app = vk.VkApplicationInfo(apiVersion=vk.VK_MAKE_VERSION(1, 2, 0))
        self.inst = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)
        self.pd = vk.vkEnumeratePhysicalDevices(self.inst)[0]
        props = vk.vkGetPhysicalDeviceProperties(self.pd)
        print("device:", props.deviceName)
        qf = next(i for i, q in enumerate(vk.vkGetPhysicalDeviceQueueFamilyProperties(self.pd))
                  if q.queueFlags & vk.VK_QUEUE_COMPUTE_BIT)
        qci = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=qf, pQueuePriorities=[1.0])
        self.dev = vk.vkCreateDevice(self.pd, vk.VkDeviceCreateInfo(pQueueCreateInfos=[qci]), None)
        self.queue = vk.vkGetDeviceQueue(self.dev, qf, 0)
        self.mp = vk.vkGetPhysicalDeviceMemoryProperties(self.pd)
        self.cp = vk.vkCreateCommandPool(self.dev, vk.VkCommandPoolCreateInfo(
            queueFamilyIndex=qf, flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT), None)
        self.cb = vk.vkAllocateCommandBuffers(self.dev, vk.VkCommandBufferAllocateInfo(
            commandPool=self.cp, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
        self.fence = vk.vkCreateFence(self.dev, vk.VkFenceCreateInfo(), None)

    def alloc(self, size, flags):
        usage = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
                 | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
        b = vk.vkCreateBuffer(self.dev, vk.VkBufferCreateInfo(size=size, usage=usage,
                                                              sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
        req = vk.vkGetBufferMemoryRequirements(self.dev, b)
        t = next(i for i in range(self.mp.memoryTypeCount) if req.memoryTypeBits >> i & 1
                 and self.mp.memoryTypes[i].propertyFlags & flags == flags)
        m = vk.vkAllocateMemory(self.dev, vk.VkMemoryAllocateInfo(allocationSize=req.size, memoryTypeIndex=t), None)
        vk.vkBindBufferMemory(self.dev, b, m, 0)
        return b, m

    def submit(self, record) -> float:
        cb = self.cb
        vk.vkResetCommandBuffer(cb, 0)
        vk.vkBeginCommandBuffer(cb, vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        record(cb)
        vk.vkEndCommandBuffer(cb)
        t = time.perf_counter()
        vk.vkQueueSubmit(self.queue, 1, [vk.VkSubmitInfo(pCommandBuffers=[cb])], self.fence)
        vk.vkWaitForFences(self.dev, 1, [self.fence], vk.VK_TRUE, 10**12)
        vk.vkResetFences(self.dev, 1, [self.fence])
        return time.perf_counter() - t

    def copy(self, src, dst, size):
        self.submit(lambda cb: vk.vkCmdCopyBuffer(cb, src, dst, 1, [vk.VkBufferCopy(0, 0, size)]))


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
    d = Dev()
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n)).astype(np.float32)
    B = rng.standard_normal((n, n)).astype(np.float32)
    want = A.astype(np.float64) @ B.astype(np.float64)
    DL, HV = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, (vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
                                                      | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)
    nb = n * n * 4
    ab, bb, cbuf, st = d.alloc(nb, DL), d.alloc(nb, DL), d.alloc(nb, DL), d.alloc(nb, HV)
    for arr, dst in ((A, ab), (B, bb)):
        ptr = vk.vkMapMemory(d.dev, st[1], 0, nb, 0)
        np.frombuffer(ptr, np.uint8)[:] = arr.view(np.uint8).ravel()
        vk.vkUnmapMemory(d.dev, st[1])
        d.copy(st[0], dst[0], nb)
    dsl = vk.vkCreateDescriptorSetLayout(d.dev, vk.VkDescriptorSetLayoutCreateInfo(pBindings=[
        vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                        descriptorCount=1, stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
        for i in range(3)]), None)
    pl = vk.vkCreatePipelineLayout(d.dev, vk.VkPipelineLayoutCreateInfo(pSetLayouts=[dsl], pPushConstantRanges=[
        vk.VkPushConstantRange(stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=12)]), None)
    pool = vk.vkCreateDescriptorPool(d.dev, vk.VkDescriptorPoolCreateInfo(maxSets=1, pPoolSizes=[
        vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=3)]), None)
    ds = vk.vkAllocateDescriptorSets(d.dev, vk.VkDescriptorSetAllocateInfo(descriptorPool=pool, pSetLayouts=[dsl]))[0]
    infos = [vk.VkDescriptorBufferInfo(buffer=x[0], offset=0, range=nb) for x in (ab, bb, cbuf)]
    writes = [vk.VkWriteDescriptorSet(dstSet=ds, dstBinding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      pBufferInfo=[infos[i]]) for i in range(3)]
    vk.vkUpdateDescriptorSets(d.dev, 3, writes, 0, None)
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
        sm = vk.vkCreateShaderModule(d.dev, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None)
        stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=sm, pName="main")
        ci = vk.VkComputePipelineCreateInfo(stage=stage, layout=pl)
        t0 = time.perf_counter()
        pipe = vk.vkCreateComputePipelines(d.dev, None, 1, [ci], None)[0]
        build = time.perf_counter() - t0

        def rec(reps, cfg=cfg, pipe=pipe):
            def r(cb):
                vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipe)
                vk.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, [ds], 0, None)
                vk.vkCmdPushConstants(cb, pl, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, 12, pc)
                for _ in range(reps):
                    vk.vkCmdDispatch(cb, n // cfg.bn, n // cfg.bm, 1)
            return r
        if not warm:   # the clocks rise under load
            end = time.perf_counter() + 1.5
            while time.perf_counter() < end:
                d.submit(rec(a.reps))
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
