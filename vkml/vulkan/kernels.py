"""Compiled kernels: shader module + pipeline per GLSL source, layouts per binding count.

Every kernel has the same interface: binding 0 is a read-only `int meta[]` (shapes,
strides, offsets and scalars of one dispatch), bindings 1..n are tensors. So one
descriptor set layout per arity serves every kernel. A kernel may read some tensors
through uniform texel buffers instead (`texel_binding`): lavapipe 22.3 reads a storage
buffer lane by lane with a bounds-check branch each, a texel fetch as one gather
(bench/tools/lvp_loads.py); those kernels get a layout per set of texel bindings.
"""
from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass

from . import compile as _compile
from .device import Device
from .vk import vk


HOIST_META = True   # tests turn it off to compare
# ... for kernels reading at least this many meta values: a streaming kernel reading a
# few (x + 1, a sum over 16M) ran slower with them hoisted (sum 2.4 -> 4.4 ms), where a
# small region reading eleven operands' layouts ran five times faster
HOIST_MIN = 8


def hoist_meta(body: str, min_reads: int | None = None) -> str:
    r"""body with main()'s reads of meta at literal indices done once, first thing.

    lavapipe loads a storage-buffer value at a uniform address as one scalar only while
    every invocation is known active; after a kernel's `if (i >= n) return;` it loads it
    lane by lane behind a bounds check, so each meta[k] cost a 16-iteration loop. A
    256 x 10 region reading eleven operands: 100 -> 10 us above a copy; the small MLP
    step's kernels, profiled on one thread (LP_NUM_THREADS=0) with this on and off in
    turn: 2.91 -> 2.72 ms, its cross-entropy gradient 80 -> 18 us. Only kernels reading
    at least min_reads (HOIST_MIN) values are rewritten. Reads at computed
    indices stay where they are; every literal index names a value of this dispatch's
    meta. GPUs load a uniform value once anyway, so only CPU devices rewrite.

    >>> hoist_meta("void main() {\n  if (g >= meta[0]) return;\n  o[g] = meta[3] * meta[0];\n}\n", 1)
    'void main() {\n  int meta_0 = meta[0], meta_3 = meta[3];\n  if (g >= meta_0) return;\n  o[g] = meta_3 * meta_0;\n}\n'
    """
    start = body.find("void main() {")
    if start < 0:
        return body
    head = start + len("void main() {")
    depth, end = 1, head
    while depth and end < len(body):
        depth += {"{": 1, "}": -1}.get(body[end], 0)
        end += 1
    main = body[head:end]
    ks = sorted({int(k) for k in _META.findall(main)})
    if len(ks) < (HOIST_MIN if min_reads is None else min_reads):
        return body
    main = _META.sub(lambda m: f"meta_{m.group(1)}", main)
    decl = "\n  int " + ", ".join(f"meta_{k} = meta[{k}]" for k in ks) + ";"
    return body[:head] + decl + main + body[end:]


_META = re.compile(r"\bmeta\[(\d+)\]")


@dataclass(frozen=True)
class Kernel:
    """A compiled compute pipeline for one generated GLSL source."""
    name: str
    source: str
    n_tensors: int
    local_size: int
    pipeline: object
    layout: object
    set_layout: object
    texels: tuple = ()    # per tensor binding: the VkFormat of its texel view, or None
    spec: tuple = ()      # specialisation constant values, by constant_id (0: local size)
    body: str = ""        # the generated body (after COMMON) it was made from

    @property
    def built(self) -> bool:
        """Whether the pipeline exists (a deferred kernel: `KernelCache.get(build=False)`)."""
        return self.pipeline is not None


# VkFormat of a float32 texel holding w elements (a w = 8 load is two 4-element texels)
TEXEL_FORMATS = {1: vk.VK_FORMAT_R32_SFLOAT, 2: vk.VK_FORMAT_R32G32_SFLOAT,
                 4: vk.VK_FORMAT_R32G32B32A32_SFLOAT, 8: vk.VK_FORMAT_R32G32B32A32_SFLOAT}
TEXEL_BYTES = {vk.VK_FORMAT_R32_SFLOAT: 4, vk.VK_FORMAT_R32G32_SFLOAT: 8,
               vk.VK_FORMAT_R32G32B32A32_SFLOAT: 16}


def texel_binding(i: int, name: str) -> str:
    """Declare tensor binding i as a float uniform texel buffer `name` (texelFetch)."""
    return f"layout(set = 0, binding = {i}) uniform samplerBuffer {name};\n"


COMMON = """#version 450
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
layout(local_size_x = ${LX}, local_size_y = 1, local_size_z = 1) in;
layout(std430, set = 0, binding = 0) readonly buffer Meta { int meta[]; };
// Grids larger than the device's per-dimension workgroup limit are folded into y.
uint gidx() { return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x; }
uint group_id() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }
// x / d for x < 2^31 as a multiply-high and a shift, (m, s) = kernels.divisor(d) from meta:
// integer division is a scalar loop over the lanes on lavapipe and ~20 instructions on a GPU
uint udiv(uint x, int m, int s) { uint hi, lo; umulExtended(x, uint(m), hi, lo); return s < 0 ? x : hi >> uint(s); }
"""


def divisor(d: int) -> tuple[int, int]:
    """(m, s) for `udiv` in the kernels: floor(x / d) = (x * m) >> (32 + s) for every
    0 <= x < 2^31 (Granlund & Montgomery: m = ceil(2^(31 + l) / d), l = ceil(log2 d),
    s = l - 1; m < 2^32 for d >= 2, and d = 1 is s = -1). m travels as an int32 bit pattern.

    >>> m, s = divisor(7)
    >>> all(((x * (m % 2**32)) >> (32 + s)) == x // 7 for x in (0, 6, 7, 2**31 - 1))
    True
    """
    if d < 1:
        raise ValueError(f"divisor: {d} is not a positive size")
    if d == 1:
        return 0, -1
    l = (d - 1).bit_length()
    m = -(-(1 << (31 + l)) // d)
    return (m - (1 << 32) if m >= 1 << 31 else m), l - 1


def binding(i: int, glsl_type: str, name: str, readonly: bool = False) -> str:
    """Declare tensor binding i as `name[]` of glsl_type."""
    ro = "readonly " if readonly else ""
    return f"layout(std430, set = 0, binding = {i}) {ro}buffer B{i}_{name} {{ {glsl_type} {name}[]; }};\n"


class KernelCache:
    """Pipelines by source hash; descriptor set layouts by tensor count."""

    def __init__(self, dev: Device):
        self.dev = dev
        self._kernels: dict[str, Kernel] = {}
        self._layouts: dict[int, tuple] = {}
        self._keep: list = []
        self.lock = threading.Lock()

    def layout(self, n_tensors: int, texels: tuple = ()):
        key = (n_tensors, tuple(f is not None for f in texels))
        if key not in self._layouts:
            d = self.dev.device
            kinds = [False] + list(key[1]) + [False] * (n_tensors - len(texels))
            binds = [vk.VkDescriptorSetLayoutBinding(
                binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER if t
                else vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=1,
                stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT) for i, t in enumerate(kinds)]
            dsl = vk.vkCreateDescriptorSetLayout(d, vk.VkDescriptorSetLayoutCreateInfo(pBindings=binds), None)
            pl = vk.vkCreatePipelineLayout(d, vk.VkPipelineLayoutCreateInfo(pSetLayouts=[dsl]), None)
            self._layouts[key] = (dsl, pl)
        return self._layouts[key]

    def get(self, name: str, body: str, n_tensors: int, local_size: int = 256,
            texels: tuple = (), spec: tuple = (), build: bool = True) -> Kernel:
        """The kernel for COMMON + body (body declares bindings 1..n_tensors and main);
        texels: per tensor binding, the VkFormat of a texel binding or None (storage).
        spec: int specialisation constants by constant_id: a kernel given them takes its
        workgroup size from constant 0 (= local_size) and its own from ids 1, 2, ...;
        one SPIR-V module then serves every value, one pipeline per set of values.
        build=False: a kernel not compiled yet, unless it already is (`build` compiles it
        later): lowering defers them on CPU devices, where `merge` may replace several
        with one, so that those are never compiled."""
        texels = tuple(texels) + (None,) * (n_tensors - len(texels)) if any(
            f is not None for f in texels) else ()
        hoist = HOIST_MIN if self.dev.is_cpu and HOIST_META else 0
        # keyed by the generated body: the rewrite below runs once per kernel, not per
        # lookup (an eager operator looks its kernels up at every call)
        h = hashlib.sha256((body + repr((local_size, texels, spec, hoist))).encode()).hexdigest()
        k = self._kernels.get(h)
        if k is not None:
            return k
        if not build:
            return Kernel(name, "", n_tensors, local_size, None, None, None, texels, spec, body)
        with self.lock:
            k = self._kernels.get(h)
            if k is not None:
                return k
            raw = body
            if hoist:
                body = hoist_meta(body)
            if spec:
                spec = (int(local_size),) + tuple(int(v) for v in spec)
                source = COMMON.replace("local_size_x = ${LX}", "local_size_x_id = 0") + body
            else:
                source = COMMON.replace("${LX}", str(local_size)) + body
            code = _compile.spirv(source, name)
            d = self.dev.device
            dsl, pl = self.layout(n_tensors, texels)
            sm = vk.vkCreateShaderModule(d, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None)
            # keep every nested struct alive until the call returns (the bindings free eagerly)
            stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=sm, pName="main")
            if spec:
                data = vk.ffi.new("int32_t[]", list(spec))
                info = vk.VkSpecializationInfo(
                    pMapEntries=[vk.VkSpecializationMapEntry(constantID=i, offset=4 * i, size=4)
                                 for i in range(len(spec))],
                    dataSize=4 * len(spec), pData=data)
                stage = vk.VkPipelineShaderStageCreateInfo(
                    stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=sm, pName="main", pSpecializationInfo=info)
            ci = vk.VkComputePipelineCreateInfo(stage=stage, layout=pl)
            try:
                pipe = vk.vkCreateComputePipelines(d, None, 1, [ci], None)[0]
            except vk.VkError as e:
                raise RuntimeError(
                    f"{name}: {self.dev.name}'s driver could not build this kernel "
                    f"({type(e).__name__}; {len(source.splitlines())} lines of GLSL, local size "
                    f"{local_size}). Drivers reject very large unrolled kernels: a smaller "
                    f"tiling (vkml.vulkan.lower.matmul.set_tiling) or the default one avoids it.") from e
            finally:
                del stage, ci
                if spec:
                    del info, data
                vk.vkDestroyShaderModule(d, sm, None)
            k = Kernel(name, source, n_tensors, local_size, pipe, pl, dsl, texels, spec, raw)
            self._kernels[h] = k
            return k

    def build(self, k: Kernel) -> Kernel:
        """k compiled (k itself if it is)."""
        return k if k.built else self.get(k.name, k.body, k.n_tensors, k.local_size, k.texels, k.spec)

    def __len__(self) -> int:
        return len(self._kernels)
