"""Cooperative-matrix (tensor-core) float16 matmul probe, outside vkml (issue 23, part 1).

Lists the device's VK_NV_cooperative_matrix shapes, then builds a shared-memory-staged
float16 x float16 -> float32 matmul through GL_NV_cooperative_matrix (the extension the
glslang 12 that this project runs with compiles; VK_KHR_cooperative_matrix needs glslang
13+) in several workgroup/warp tilings, checks each against NumPy and times it at 4096^3,
beside torch's float16 `a @ b` (cuBLAS) when torch with CUDA is there. Its winner is what
vkml's own kernel (`vulkan/lower/matmul/coop.py`) copies.

    python bench/tools/coop_probe.py [--n 4096] [--reps 20]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from typing import NamedTuple

import numpy as np
import vulkan as vk

HEAD = """#version 450
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = {WG}) in;
layout(std430, binding = 0) readonly buffer A {{ uvec4 a[]; }};
layout(std430, binding = 1) readonly buffer B {{ uvec4 b[]; }};
layout(std430, binding = 2) writeonly buffer C {{ float c[]; }};
layout(push_constant) uniform P {{ uint M; uint N; uint K; }} p;
"""


class Cfg(NamedTuple):
    """One kernel variant: workgroup tile BM x BN, slab depth BK, warp tile WM x WN."""
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    st: int = 1          # shared stages: 1 (two barriers a slab) or 2 (double-buffered, one)
    pad: int = 1         # uvec4 words of padding at each shared row's end (bank conflicts)
    swz: int = 0         # rasterisation: tile rows walked together (0: row after row)
    bt: bool = False     # B stored (N, K) (an "NT" product) rather than (K, N)
    mode: str = "full"   # full; smem: no global traffic (shared + MMA ceiling); regs: MMA only
    u2: bool = False     # the two-stage loop unrolled twice: buffer offsets constant
    fn: int = 16         # fragment N: 16 (16x16x16) or 8 (16x8x16, one mma.m16n8k16)
    el: str = "uvec4"    # shared arrays' element type: uvec4, uint or float16_t

    @property
    def wg(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn) * 32

    def smem(self) -> int:
        brows, bcols = (self.bn, self.bk) if self.bt else (self.bk, self.bn)
        return self.st * (self.bm * (self.bk // 8 + self.pad) + brows * (bcols // 8 + self.pad)) * 16

    def label(self) -> str:
        s = f"{self.bm}x{self.bn}x{self.bk} w{self.wm}x{self.wn} st{self.st}"
        for k, v in (("pad", self.pad != 1), ("swz", self.swz), ("bt", self.bt), ("u2", self.u2),
                     ("fn", self.fn != 16), ("el", self.el != "uvec4")):
            if v:
                s += f" {k}{getattr(self, k) if k in ('pad', 'swz', 'fn', 'el') else ''}"
        return s + ("" if self.mode == "full" else f" [{self.mode} only]")


def source(c: Cfg) -> str:
    BM, BN, BK, WM, WN, FN, WG = c.bm, c.bn, c.bk, c.wm, c.wn, c.fn, c.wg
    SA = BK // 8 + c.pad
    brows, bcols = (BN, BK) if c.bt else (BK, BN)
    SB = bcols // 8 + c.pad
    sa, sb = BM * SA, brows * SB
    na, nb = BM * BK // 8, BK * BN // 8
    assert na % WG == 0 and nb % WG == 0, c
    FA = "fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>"
    FB = f"fcoopmatNV<16, gl_ScopeSubgroup, 16, {FN}>"
    FC = f"fcoopmatNV<32, gl_ScopeSubgroup, 16, {FN}>"
    U = "[[unroll]] "
    I, J = WM // 16, WN // FN

    def fetch(k0: str) -> list[str]:
        b = (f"b[(n0 + e / {BK // 8}) * K8 + ({k0}) / 8 + e % {BK // 8}]" if c.bt else
             f"b[(({k0}) + e / {BN // 8}) * N8 + n0 / 8 + e % {BN // 8}]")
        return [f"{U}for (uint r = 0; r < {na // WG}; ++r) {{ uint e = t + r * {WG}; "
                f"ra[r] = a[(m0 + e / {BK // 8}) * K8 + ({k0}) / 8 + e % {BK // 8}]; }}",
                f"{U}for (uint r = 0; r < {nb // WG}; ++r) {{ uint e = t + r * {WG}; rb[r] = {b}; }}"]

    R = {"uvec4": 1, "uint": 4, "float16_t": 8}[c.el]     # shared elements per 16-byte word

    def put(arr: str, w: str, v: str) -> str:
        # store the 16-byte word v at word index w of a shared array of c.el
        if R == 1:
            return f"{arr}[{w}] = {v};"
        if R == 4:
            return f"{{ uint q = ({w}) * 4; " + " ".join(f"{arr}[q + {i}] = {v}.{x};" for i, x in enumerate("xyzw")) + " }"
        return (f"{{ uint q = ({w}) * 8; " + " ".join(
            f"f16vec2 h{i} = unpackFloat2x16({v}.{x}); {arr}[q + {2 * i}] = h{i}.x; {arr}[q + {2 * i + 1}] = h{i}.y;"
            for i, x in enumerate("xyzw")) + " }")

    def stash(s: str) -> list[str]:
        return [f"{U}for (uint r = 0; r < {na // WG}; ++r) {{ uint e = t + r * {WG}; "
                + put("As", f"({s}) * {sa} + (e / {BK // 8}) * {SA} + e % {BK // 8}", "ra[r]") + " }",
                f"{U}for (uint r = 0; r < {nb // WG}; ++r) {{ uint e = t + r * {WG}; "
                + put("Bs", f"({s}) * {sb} + (e / {bcols // 8}) * {SB} + e % {bcols // 8}", "rb[r]") + " }"]

    def loads(s: str) -> list[str]:
        bl = (f"coopMatLoadNV(fb[j], Bs, (({s}) * {sb} + (wn * {WN} + j * {FN}) * {SB} + kk / 8) * {R}, {SB * R}, true);"
              if c.bt else
              f"coopMatLoadNV(fb[j], Bs, (({s}) * {sb} + kk * {SB} + (wn * {WN} + j * {FN}) / 8) * {R}, {SB * R}, false);")
        return [f"{U}for (uint i = 0; i < {I}; ++i) "
                f"coopMatLoadNV(fa[i], As, (({s}) * {sa} + (wm * {WM} + i * 16) * {SA} + kk / 8) * {R}, {SA * R}, false);",
                f"{U}for (uint j = 0; j < {J}; ++j) {bl}"]

    mma = [f"{U}for (uint i = 0; i < {I}; ++i) {U}for (uint j = 0; j < {J}; ++j)",
           "  acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);"]

    def compute(s: str) -> list[str]:
        return ([f"{U}for (uint kk = 0; kk < {BK}; kk += 16) {{", f"  {FA} fa[{I}]; {FB} fb[{J}];"]
                + ["  " + x for x in loads(s) + mma] + ["}"])

    L = [HEAD.format(WG=WG), f"shared {c.el} As[{c.st * sa * R}];", f"shared {c.el} Bs[{c.st * sb * R}];",
         "void main() {",
         "uint K8 = p.K / 8, N8 = p.N / 8;",
         f"uint nx = p.N / {BN}, ny = p.M / {BM};"]
    if c.swz:   # groups of swz tile rows, walked column by column: operands stay in L2
        L += ["uint pid = gl_WorkGroupID.y * nx + gl_WorkGroupID.x;",
              f"uint width = {c.swz} * nx, first = (pid / width) * {c.swz};",
              f"uint gs = min(ny - first, {c.swz}u);",
              "uint tm = first + (pid % width) % gs, tn = (pid % width) / gs;"]
    else:
        L += ["uint tm = gl_WorkGroupID.y, tn = gl_WorkGroupID.x;"]
    L += [f"uint m0 = tm * {BM}, n0 = tn * {BN};",
          "uint t = gl_LocalInvocationID.x, warp = t / 32;",
          f"uint wm = warp % {BM // WM}, wn = warp / {BM // WM};",
          f"{FC} acc[{I}][{J}];",
          f"{U}for (uint i = 0; i < {I}; ++i) {U}for (uint j = 0; j < {J}; ++j) acc[i][j] = {FC}(0.0);",
          f"uvec4 ra[{na // WG}], rb[{nb // WG}];"]
    if c.mode == "regs":     # fragments loaded once, then MMAs alone
        L += ["uint kk = 0;", f"{FA} fa[{I}]; {FB} fb[{J}];"] + loads("0")
        L += ["for (uint k0 = 0; k0 < p.K; k0 += 16) {"] + ["  " + x for x in mma] + ["}"]
    elif c.mode == "smem":   # slabs read from shared memory, never refilled
        L += ["for (uint k0 = 0; k0 < p.K; k0 += " + str(BK) + ") {"]
        L += ["  " + x for x in compute("0")] + ["  barrier();", "}"]
    elif c.st == 1:
        L += fetch("0") + stash("0") + ["barrier();",
              f"for (uint k0 = 0; k0 < p.K; k0 += {BK}) {{", f"  bool more = k0 + {BK} < p.K;"]
        L += ["  if (more) {"] + ["    " + x for x in fetch(f"k0 + {BK}")] + ["  }"]
        L += ["  " + x for x in compute("0")]
        L += ["  barrier();", "  if (more) {"] + ["    " + x for x in stash("0")] + ["  }", "  barrier();", "}"]
    else:
        def body(s: str, nxt: str) -> list[str]:
            # reads stage s while stage nxt is refilled; the one barrier orders both
            return (["if (more) {"] + ["  " + x for x in fetch(f"k0 + {BK}")] + ["}"] + compute(s)
                    + ["if (more) {"] + ["  " + x for x in stash(nxt)] + ["}", "barrier();"])
        L += fetch("0") + stash("0") + ["barrier();"]
        if c.u2:
            L += [f"for (uint k0 = 0; k0 < p.K; k0 += {BK}) {{", f"  bool more = k0 + {BK} < p.K;"]
            L += ["  " + x for x in body("0", "1")]
            L += [f"  k0 += {BK}; if (k0 >= p.K) break;", f"  more = k0 + {BK} < p.K;"]
            L += ["  " + x for x in body("1", "0")] + ["}"]
        else:
            L += ["uint s = 0;", f"for (uint k0 = 0; k0 < p.K; k0 += {BK}) {{", f"  bool more = k0 + {BK} < p.K;"]
            L += ["  " + x for x in body("s", "s ^ 1u")] + ["  s ^= 1u;", "}"]
    L += [f"{U}for (uint i = 0; i < {I}; ++i) {U}for (uint j = 0; j < {J}; ++j)",
          f"  coopMatStoreNV(acc[i][j], c, (m0 + wm * {WM} + i * 16) * p.N + n0 + wn * {WN} + j * {FN}, p.N, false);",
          "}"]
    return "\n".join(L) + "\n"


C = Cfg
CONFIGS = [
    # the kernel vkml ran before (first and last: the clocks' drift shows)
    C(128, 128, 32, 64, 32),
    # ceilings: MMAs alone, and MMAs fed from shared memory without global traffic
    C(128, 128, 32, 64, 32, mode="regs"), C(128, 128, 32, 64, 32, mode="regs", fn=8),
    C(128, 128, 32, 64, 64, mode="regs"), C(128, 128, 32, 32, 32, mode="regs"),
    C(128, 128, 32, 64, 32, mode="smem"), C(128, 128, 32, 64, 32, mode="smem", bt=True),
    C(128, 128, 32, 64, 32, mode="smem", el="uint"), C(128, 128, 32, 64, 32, mode="smem", el="float16_t"),
    C(128, 128, 32, 64, 32, mode="smem", fn=8), C(128, 128, 32, 64, 32, mode="smem", fn=8, bt=True),
    C(128, 128, 32, 64, 64, mode="smem"), C(128, 128, 32, 64, 64, mode="smem", bt=True),
    C(128, 128, 32, 64, 64, mode="smem", fn=8), C(128, 256, 32, 64, 64, mode="smem", bt=True),
    C(128, 128, 32, 32, 64, mode="smem"), C(128, 128, 32, 64, 32, mode="smem", pad=2),
    # whole kernels
    C(128, 128, 32, 64, 32, fn=8), C(128, 128, 32, 64, 32, bt=True), C(128, 128, 32, 64, 32, bt=True, fn=8),
    C(128, 128, 32, 64, 32, el="uint"), C(128, 128, 32, 64, 32, el="float16_t"),
    C(128, 128, 32, 64, 32, el="uint", fn=8),
    C(128, 128, 32, 64, 64, fn=8), C(128, 128, 32, 64, 64, bt=True), C(128, 256, 32, 64, 64, fn=8),
    C(128, 256, 32, 64, 64, bt=True), C(256, 128, 32, 64, 64, fn=8),
    C(128, 128, 32, 32, 64, fn=8), C(128, 128, 32, 32, 64, st=2, u2=True, fn=8),
    C(128, 128, 32, 64, 32, st=2, u2=True, fn=8, bt=True), C(128, 128, 16, 64, 32, st=2, u2=True, fn=8),
    C(128, 256, 16, 64, 64, st=2, u2=True, fn=8), C(128, 128, 32, 64, 32, fn=8, swz=4),
    C(64, 128, 32, 32, 32, fn=8), C(128, 64, 32, 32, 32, fn=8), C(64, 64, 32, 32, 32, fn=8),
    C(128, 128, 32, 64, 32),
]
def spirv(src: str) -> bytes:
    d = tempfile.mkdtemp()
    open(f"{d}/k.comp", "w").write(src)
    r = subprocess.run(["glslangValidator", "--target-env", "vulkan1.2", "-V", f"{d}/k.comp", "-o",
                        f"{d}/k.spv"], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stdout + r.stderr)
    return open(f"{d}/k.spv", "rb").read()


class Dev:
    """One compute queue, a command buffer and a fence; coop: with VK_NV_cooperative_matrix
    and the 16-bit features its kernels need (and pipeline statistics where there are)."""

    def __init__(self, coop: bool = True):
        self.keep = []
        app = vk.VkApplicationInfo(apiVersion=vk.VK_MAKE_VERSION(1, 2, 0))
        self.inst = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)
        self.pd = vk.vkEnumeratePhysicalDevices(self.inst)[int(os.environ.get("VKML_DEVICE", 0))]
        props = vk.vkGetPhysicalDeviceProperties(self.pd)
        self.smem = props.limits.maxComputeSharedMemorySize
        print("device:", props.deviceName, " maxComputeSharedMemorySize:", self.smem)
        qf = next(i for i, q in enumerate(vk.vkGetPhysicalDeviceQueueFamilyProperties(self.pd))
                  if q.queueFlags & vk.VK_QUEUE_COMPUTE_BIT)
        qci = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=qf, pQueuePriorities=[1.0])
        self.stats = self.has_nv = False
        if coop:
            self._coop_device(qci)
        else:
            self.dev = vk.vkCreateDevice(self.pd, vk.VkDeviceCreateInfo(pQueueCreateInfos=[qci]), None)
        self.queue = vk.vkGetDeviceQueue(self.dev, qf, 0)
        self.mp = vk.vkGetPhysicalDeviceMemoryProperties(self.pd)
        self.cp = vk.vkCreateCommandPool(self.dev, vk.VkCommandPoolCreateInfo(
            queueFamilyIndex=qf, flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT), None)
        self.cb = vk.vkAllocateCommandBuffers(self.dev, vk.VkCommandBufferAllocateInfo(
            commandPool=self.cp, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
        self.fence = vk.vkCreateFence(self.dev, vk.VkFenceCreateInfo(), None)

    def _coop_device(self, qci) -> None:
        exts = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(self.pd, None)}
        # register counts and spills per pipeline, where the driver reports them
        self.stats = "VK_KHR_pipeline_executable_properties" in exts
        self.has_nv = "VK_NV_cooperative_matrix" in exts
        print("VK_NV_cooperative_matrix:", self.has_nv, " VK_KHR_cooperative_matrix:",
              "VK_KHR_cooperative_matrix" in exts, " VK_NV_cooperative_matrix2:",
              "VK_NV_cooperative_matrix2" in exts)
        if self.has_nv:
            get = vk.vkGetInstanceProcAddr(self.inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV")
            names = {getattr(vk, n): n for n in dir(vk) if n.startswith("VK_COMPONENT_TYPE_") and "RANGE" not in n}
            for p in get(self.pd):
                print(f"  NV shape M{p.MSize} N{p.NSize} K{p.KSize}  A {names.get(p.AType)} "
                      f"B {names.get(p.BType)} C {names.get(p.CType)} D {names.get(p.DType)}")
        coop = vk.VkPhysicalDeviceCooperativeMatrixFeaturesNV(cooperativeMatrix=True)
        f16 = vk.VkPhysicalDeviceShaderFloat16Int8Features(pNext=coop, shaderFloat16=True)
        s16 = vk.VkPhysicalDevice16BitStorageFeatures(pNext=f16, storageBuffer16BitAccess=True)
        mm = vk.VkPhysicalDeviceVulkanMemoryModelFeatures(pNext=s16, vulkanMemoryModel=True)
        self.keep += [coop, f16, s16, mm]
        head, names = mm, ["VK_NV_cooperative_matrix"]
        if self.stats:
            pe = vk.VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR(
                pNext=mm, pipelineExecutableInfo=True)
            self.keep.append(pe)
            head = pe
            names.append("VK_KHR_pipeline_executable_properties")
        try:
            self.dev = vk.vkCreateDevice(self.pd, vk.VkDeviceCreateInfo(
                pNext=head, pQueueCreateInfos=[qci], ppEnabledExtensionNames=names), None)
        except vk.VkError:   # statistics are a diagnostic: go without them
            self.stats = False
            self.dev = vk.vkCreateDevice(self.pd, vk.VkDeviceCreateInfo(
                pNext=mm, pQueueCreateInfos=[qci], ppEnabledExtensionNames=names[:1]), None)

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

    def statistics(self, pipe) -> str:
        """The driver's statistics of a pipeline (registers, spills...), where it has them."""
        if not self.stats:
            return ""
        try:
            props = vk.vkGetDeviceProcAddr(self.dev, "vkGetPipelineExecutablePropertiesKHR")
            stats = vk.vkGetDeviceProcAddr(self.dev, "vkGetPipelineExecutableStatisticsKHR")
            info = vk.VkPipelineInfoKHR(pipeline=pipe)
            out = []
            for i, _ in enumerate(list(props(self.dev, info))):
                ei = vk.VkPipelineExecutableInfoKHR(pipeline=pipe, executableIndex=i)
                for s in stats(self.dev, ei):
                    f = s.format
                    v = (s.value.b32 if f == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR else
                         s.value.i64 if f == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR else
                         s.value.u64 if f == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR else
                         round(s.value.f64, 2))
                    out.append(f"{s.name}={v}")
            return " ".join(out)
        except Exception as e:  # noqa: BLE001 (a diagnostic only)
            return f"(statistics: {type(e).__name__} {e})"

    def copy(self, src, dst, size):
        self.submit(lambda cb: vk.vkCmdCopyBuffer(cb, src, dst, 1, [vk.VkBufferCopy(0, 0, size)]))

    def upload(self, arr: np.ndarray, dst, stage) -> None:
        """arr's bytes into device buffer dst through the host-visible (buffer, memory) stage."""
        ptr = vk.vkMapMemory(self.dev, stage[1], 0, arr.nbytes, 0)
        np.frombuffer(ptr, np.uint8)[:arr.nbytes] = arr.view(np.uint8).ravel()
        vk.vkUnmapMemory(self.dev, stage[1])
        self.copy(stage[0], dst[0], arr.nbytes)

    def storage_set(self, ranges, push_bytes: int):
        """(pipeline layout, descriptor set) binding the (buffer, bytes) pairs `ranges` as
        storage buffers 0.. with push_bytes of push constants."""
        k = len(ranges)
        dsl = vk.vkCreateDescriptorSetLayout(self.dev, vk.VkDescriptorSetLayoutCreateInfo(pBindings=[
            vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                            descriptorCount=1, stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
            for i in range(k)]), None)
        pl = vk.vkCreatePipelineLayout(self.dev, vk.VkPipelineLayoutCreateInfo(pSetLayouts=[dsl], pPushConstantRanges=[
            vk.VkPushConstantRange(stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=push_bytes)]), None)
        pool = vk.vkCreateDescriptorPool(self.dev, vk.VkDescriptorPoolCreateInfo(maxSets=1, pPoolSizes=[
            vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=k)]), None)
        ds = vk.vkAllocateDescriptorSets(self.dev, vk.VkDescriptorSetAllocateInfo(
            descriptorPool=pool, pSetLayouts=[dsl]))[0]
        infos = [vk.VkDescriptorBufferInfo(buffer=b, offset=0, range=sz) for b, sz in ranges]
        writes = [vk.VkWriteDescriptorSet(dstSet=ds, dstBinding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                          pBufferInfo=[infos[i]]) for i in range(k)]
        vk.vkUpdateDescriptorSets(self.dev, k, writes, 0, None)
        return pl, ds

    def pipeline(self, code: bytes, pl):
        """(pipeline, its create info, seconds the driver took to build it)."""
        sm = vk.vkCreateShaderModule(self.dev, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None)
        stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=sm, pName="main")
        flags = vk.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR if self.stats else 0
        ci = vk.VkComputePipelineCreateInfo(stage=stage, layout=pl, flags=flags)
        t0 = time.perf_counter()
        pipe = vk.vkCreateComputePipelines(self.dev, None, 1, [ci], None)[0]
        self.keep += [sm, stage]
        return pipe, ci, time.perf_counter() - t0


def recorder(pipe, pl, ds, pc, push_bytes: int, groups: tuple):
    """rec(reps): a function recording reps dispatches of pipe over groups (x, y)."""
    def rec(reps):
        def r(cb):
            vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipe)
            vk.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, [ds], 0, None)
            vk.vkCmdPushConstants(cb, pl, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, pc)
            for _ in range(reps):
                vk.vkCmdDispatch(cb, groups[0], groups[1], 1)
        return r
    return rec


def warm_up(d, rec, reps: int, seconds: float = 1.5) -> None:
    """Run rec(reps) for a while first: the clocks rise under load."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        d.submit(rec(reps))


def machine_code(d, ci, label: str, out: str) -> None:
    """Writes the driver's machine code for a pipeline to out/, where the pipeline cache
    carries it as an ELF image that nvdisasm reads, and prints its instruction mix."""
    import collections
    import re
    import shutil
    cache = vk.vkCreatePipelineCache(d.dev, vk.VkPipelineCacheCreateInfo(), None)
    pipe = vk.vkCreateComputePipelines(d.dev, cache, 1, [ci], None)[0]
    size = vk.ffi.new("size_t*")
    vk.lib.vkGetPipelineCacheData(d.dev, cache, size, vk.ffi.NULL)
    buf = vk.ffi.new("char[]", size[0])
    vk.lib.vkGetPipelineCacheData(d.dev, cache, size, buf)
    blob = bytes(vk.ffi.buffer(buf, size[0]))
    vk.vkDestroyPipeline(d.dev, pipe, None)
    name = re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_")
    at = blob.find(b"\x7fELF")
    print(f"  [{label}] pipeline cache {len(blob)} bytes, ELF at {at}")
    if at < 0:
        open(f"{out}/{name}.cache", "wb").write(blob)
        return
    shoff = int.from_bytes(blob[at + 0x28:at + 0x30], "little")
    n = shoff + int.from_bytes(blob[at + 0x3A:at + 0x3C], "little") * int.from_bytes(blob[at + 0x3C:at + 0x3E], "little")
    path = f"/tmp/{name}.elf"
    open(path, "wb").write(blob[at:at + n])
    text = ""
    for tool in (["cuobjdump", "-sass", path], ["nvdisasm", "-c", path]):
        if shutil.which(tool[0]):
            r = subprocess.run(tool, capture_output=True, text=True)
            text = r.stdout if r.returncode == 0 and r.stdout.strip() else text
            if not text:
                print("   ", tool[0], "failed:", (r.stderr or r.stdout)[:300])
        if text:
            break
    if not text:
        open(f"{out}/{name}.elf", "wb").write(blob[at:at + n])
        return
    open(f"{out}/{name}.sass", "w").write(text)
    ops = collections.Counter()
    for line in text.splitlines():
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops[m.group(1)] += 1
    print("   ", " ".join(f"{k}:{v}" for k, v in ops.most_common(40)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default="", help="comma-separated indices into CONFIGS")
    ap.add_argument("--list", action="store_true", help="print CONFIGS with their indices")
    ap.add_argument("--sass", default="", help="indices into CONFIGS whose machine code to dump")
    ap.add_argument("--out", default="/tmp", help="folder for the machine code")
    a = ap.parse_args()
    n = a.n
    if a.list:
        for i, c in enumerate(CONFIGS):
            print(i, c.label())
        return
    d = Dev()
    if not d.has_nv:
        raise SystemExit("no VK_NV_cooperative_matrix on this device")
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n)).astype(np.float16)
    B = rng.standard_normal((n, n)).astype(np.float16)
    want = A.astype(np.float32) @ B.astype(np.float32)
    DL, HV = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, (vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
                                                      | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)
    ab, bb, cbuf = d.alloc(n * n * 2, DL), d.alloc(n * n * 2, DL), d.alloc(n * n * 4, DL)
    st = d.alloc(n * n * 4, HV)
    for arr, dst in ((A, ab), (B, bb)):
        d.upload(arr, dst, st)
    pl, ds = d.storage_set([(ab[0], n * n * 2), (bb[0], n * n * 2), (cbuf[0], n * n * 4)], 12)
    pc = vk.ffi.new("uint32_t[3]", [n, n, n])
    flops = 2.0 * n ** 3
    want_bt = None
    best = None
    idx = range(len(CONFIGS)) if not a.only else [int(k) for k in a.only.split(",")]
    sass = {int(k) for k in a.sass.split(",") if k}
    warm = False
    for ix in idx:
        cfg = CONFIGS[ix]
        if n % cfg.bm or n % cfg.bn or n % cfg.bk:
            continue
        if cfg.smem() > d.smem:
            print(f"{cfg.label()}: skipped, {cfg.smem()} bytes of shared memory")
            continue
        try:
            code = spirv(source(cfg))
        except RuntimeError as e:
            print(cfg.label(), "compile failed:", str(e)[:400])
            continue
        pipe, ci, build = d.pipeline(code, pl)
        rec = recorder(pipe, pl, ds, pc, 12, (n // cfg.bn, n // cfg.bm))
        if not warm:
            warm_up(d, rec, a.reps)
            warm = True
        d.submit(rec(1))
        err = float("nan")
        if cfg.mode == "full":
            d.copy(cbuf[0], st[0], n * n * 4)
            ptr = vk.vkMapMemory(d.dev, st[1], 0, n * n * 4, 0)
            got = np.frombuffer(ptr, np.float32).reshape(n, n).copy()
            vk.vkUnmapMemory(d.dev, st[1])
            if cfg.bt and want_bt is None:
                want_bt = A.astype(np.float32) @ B.astype(np.float32).T
            ref = want_bt if cfg.bt else want
            err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        d.submit(rec(a.reps))
        dt = min(d.submit(rec(a.reps)) for _ in range(5)) / a.reps
        tf = flops / dt / 1e12
        print(f"{cfg.label():44s} wg{cfg.wg:4d} smem{cfg.smem():6d}: {dt * 1e3:.3f} ms {tf:6.1f} TFLOP/s "
              f"err {err:.1e} build {build:.2f}s {d.statistics(pipe)}", flush=True)
        if ix in sass:
            try:
                machine_code(d, ci, cfg.label(), a.out)
            except Exception as e:  # noqa: BLE001 (a diagnostic only)
                print("  machine code:", type(e).__name__, e)
        if cfg.mode == "full" and err < 1e-2 and (best is None or tf > best[1]):
            best = (cfg.label(), tf)
    print("best:", best)
    try:
        import torch
        if torch.cuda.is_available():
            ta = torch.tensor(A, device="cuda")
            tb = torch.tensor(B, device="cuda")
            for _ in range(3):
                ta @ tb
            torch.cuda.synchronize()
            ts = []
            for _ in range(3):
                t = time.perf_counter()
                for _ in range(a.reps):
                    ta @ tb
                torch.cuda.synchronize()
                ts.append((time.perf_counter() - t) / a.reps)
            tt = flops / min(ts) / 1e12
            print(f"torch float16 a @ b: {min(ts) * 1e3:.3f} ms {tt:.1f} TFLOP/s; best vkml coop / cuBLAS: "
                  f"{(best[1] / tt if best else 0):.2f}")
            tb32 = torch.tensor(B.astype(np.float32), device="cuda")
            ta32 = torch.tensor(A.astype(np.float32), device="cuda")
            torch.backends.cuda.matmul.allow_tf32 = False
            ta32 @ tb32
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(a.reps):
                ta32 @ tb32
            torch.cuda.synchronize()
            print(f"torch float32 (TF32 off): {flops / ((time.perf_counter() - t) / a.reps) / 1e12:.1f} TFLOP/s")
    except ImportError:
        print("torch: not installed")


if __name__ == "__main__":
    main()
