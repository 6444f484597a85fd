"""Compiled kernels: shader module + pipeline per rendered `Program`, layouts per binding count.

Every kernel has the same interface: binding 0 is a read-only `int meta[]` (shapes,
strides, offsets and scalars of one dispatch), bindings 1..n are tensors. So one
descriptor set layout per arity serves every kernel. A kernel may read some tensors
through uniform texel buffers instead (`program.Binding.texel`): lavapipe reads a
storage buffer lane by lane with a bounds-check branch each, a texel fetch as one gather
(bench/tools/lvp_loads.py); those kernels get a layout per set of texel bindings.
"""
from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import compile as _compile
from .device import Device
from .program import Program
from .vk import vk


@dataclass(frozen=True)
class Kernel:
    """A compiled compute pipeline for one program (pipeline None: not compiled yet)."""
    program: Program
    pipeline: object = None
    layout: object = None
    set_layout: object = None
    source: str = ""

    @property
    def name(self) -> str:
        return self.program.name

    @property
    def n_tensors(self) -> int:
        return self.program.n_tensors

    @property
    def local_size(self) -> int:
        return self.program.local_size

    @property
    def texels(self) -> tuple:
        return self.program.texels

    @property
    def spec(self) -> tuple:
        return self.program.spec

    @property
    def built(self) -> bool:
        """Whether the pipeline exists (a deferred kernel: `KernelCache.get(build=False)`)."""
        return self.pipeline is not None


# VkFormat of a float32 texel holding w elements (a w = 8 load is two 4-element texels)
TEXEL_FORMATS = {1: vk.VK_FORMAT_R32_SFLOAT, 2: vk.VK_FORMAT_R32G32_SFLOAT,
                 4: vk.VK_FORMAT_R32G32B32A32_SFLOAT, 8: vk.VK_FORMAT_R32G32B32A32_SFLOAT}
TEXEL_BYTES = {vk.VK_FORMAT_R32_SFLOAT: 4, vk.VK_FORMAT_R32G32_SFLOAT: 8,
               vk.VK_FORMAT_R32G32B32A32_SFLOAT: 16}


def texel_format(dev, v, w: int, on: bool | None = None):
    """The texel format a device reads float32 view v through, w elements per load (None:
    a storage buffer), where its profile reads float32 operands as texels (`on` overrides
    `profile.texels`). The view must start on a texel boundary (tensors lie 256 bytes
    apart) and hold whole texels within the device's limit."""
    if not ((dev.profile.texels if on is None else on) and v.dtype == np.float32):
        return None
    fmt = TEXEL_FORMATS[w]
    tb = TEXEL_BYTES[fmt]
    if v.offset % max(dev.texel_alignment, tb) or v.nbytes < tb or v.nbytes // tb > dev.max_texels:
        return None
    return fmt


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


class PipelineCache:
    """A VkPipelineCache kept on disk across processes, so a second process creates the
    pipelines of kernels an earlier one built from the driver's cached binaries instead of
    compiling their SPIR-V again (the SPIR-V itself is cached by `compile`).

    One file per device and driver build ($VKML_CACHE_DIR or ~/.cache/vkml/spirv, under
    pipelines/, named by vendor, device and the driver's pipelineCacheUUID); the driver
    checks the data's header too and ignores data it cannot use. Written at exit and by
    `save` when pipelines were added, atomically (parallel test workers replace it whole).
    VKML_PIPELINE_CACHE=0 turns it off.
    """

    def __init__(self, dev: Device):
        self.dev = dev
        self.handle = None
        self.dirty = False
        self.path: Path | None = None
        if os.environ.get("VKML_PIPELINE_CACHE", "1").strip().lower() in ("0", "false", "off", "no"):
            return
        self.path = _compile.cache_dir() / "pipelines" / f"{dev.pipeline_cache_id}.bin"
        try:
            data = self.path.read_bytes()
        except OSError:
            data = b""
        ffi, lib = vk.ffi, vk.lib
        info = ffi.new("VkPipelineCacheCreateInfo*")
        info.sType = vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO
        buf = ffi.from_buffer(data) if data else ffi.NULL
        info.initialDataSize, info.pInitialData = len(data), buf
        out = ffi.new("VkPipelineCache*")
        if lib.vkCreatePipelineCache(dev.device, info, ffi.NULL, out) != 0:
            # data the driver refuses outright: start empty
            info.initialDataSize, info.pInitialData = 0, ffi.NULL
            if lib.vkCreatePipelineCache(dev.device, info, ffi.NULL, out) != 0:
                return
        self.handle = out[0]
        atexit.register(self.save)

    def data(self) -> bytes:
        """The cache's current contents as the driver serialises them."""
        if self.handle is None:
            return b""
        ffi, lib = vk.ffi, vk.lib
        n = ffi.new("size_t*")
        if lib.vkGetPipelineCacheData(self.dev.device, self.handle, n, ffi.NULL) != 0 or not n[0]:
            return b""
        out = ffi.new("char[]", n[0])
        if lib.vkGetPipelineCacheData(self.dev.device, self.handle, n, out) != 0:
            return b""
        return ffi.buffer(out, n[0])[:]

    def save(self) -> None:
        """Write the cache to its file if pipelines were added since the last write."""
        if self.handle is None or not self.dirty or self.path is None:
            return
        try:
            data = self.data()
            if not data:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, self.path)
            self.dirty = False
        except OSError:
            pass      # a read-only or full cache directory costs only the speed-up


class KernelCache:
    """Pipelines by source hash; descriptor set layouts by tensor count."""

    def __init__(self, dev: Device):
        self.dev = dev
        self._kernels: dict[str, Kernel] = {}
        self._by_program: dict[int, tuple] = {}
        self._layouts: dict[int, tuple] = {}
        self._keep: list = []
        self.lock = threading.Lock()
        self.pipelines = PipelineCache(dev)

    def layout(self, n_tensors: int, texels: tuple = (), push: int = 0):
        """(descriptor set layout, pipeline layout) of kernels binding n_tensors after meta,
        those where texels says so as texel buffers, and reading push bytes of push
        constants (the addresses of `program.Binding.address` bindings)."""
        key = (n_tensors, tuple(f is not None for f in texels), push)
        if key not in self._layouts:
            d = self.dev.device
            kinds = [False] + list(key[1]) + [False] * (n_tensors - len(texels))
            binds = [vk.VkDescriptorSetLayoutBinding(
                binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER if t
                else vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=1,
                stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT) for i, t in enumerate(kinds)]
            dsl = vk.vkCreateDescriptorSetLayout(d, vk.VkDescriptorSetLayoutCreateInfo(pBindings=binds), None)
            ranges = [vk.VkPushConstantRange(stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=push)
                      ] if push else None
            pl = vk.vkCreatePipelineLayout(d, vk.VkPipelineLayoutCreateInfo(
                pSetLayouts=[dsl], pPushConstantRanges=ranges), None)
            self._layouts[key] = (dsl, pl)
        return self._layouts[key]

    def get(self, program: Program, build: bool = True) -> Kernel:
        """The kernel for program. build=False: a kernel not compiled yet, unless it
        already is (`build` compiles it later): lowering defers them where `merge` may
        replace several with one, so that those are never compiled. A program with
        specialisation constants takes its workgroup size from constant 0 and its own
        from ids 1, 2, ...: one SPIR-V module serves every value, one pipeline per set."""
        hoist = self.dev.profile.hoist_meta
        # keyed by the program object first: an eager operator looks its kernels up at
        # every call, and its family hands back the same program for the same layout
        k = self._by_program.get(id(program))
        if k is not None and k[0] is program and k[1] == hoist:
            return k[2]
        h = program.key(hoist)
        k = self._kernels.get(h)
        if k is None and not build:
            return Kernel(program)
        if k is None:
            k = self._build(program, h, hoist)
        if len(self._by_program) > 8192:
            self._by_program.clear()
        self._by_program[id(program)] = (program, hoist, k)
        return k

    def _build(self, program: Program, h: str, hoist: int) -> Kernel:
        with self.lock:
            k = self._kernels.get(h)
            if k is not None:
                return k
            name, source, spec = program.name, program.render(hoist), program.spec
            if program.push_bytes > self.dev.max_push_constants:
                raise ValueError(
                    f"{name}: {len(program.addresses)} operands larger than one storage-buffer binding "
                    f"({self.dev.max_storage_buffer_range:,} bytes) need {program.push_bytes} bytes of "
                    f"addresses, more than {self.dev.name}'s {self.dev.max_push_constants} bytes of push "
                    f"constants. Split the computation into smaller arrays.")
            code = _compile.spirv(source, name)
            d = self.dev.device
            dsl, pl = self.layout(program.n_tensors, program.texels, program.push_bytes)
            sm = vk.vkCreateShaderModule(d, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None)
            # keep every nested struct alive until the call returns (the bindings free eagerly)
            stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=sm, pName="main")
            if spec:
                spec = (int(program.local_size),) + tuple(int(v) for v in spec)
                data = vk.ffi.new("int32_t[]", list(spec))
                info = vk.VkSpecializationInfo(
                    pMapEntries=[vk.VkSpecializationMapEntry(constantID=i, offset=4 * i, size=4)
                                 for i in range(len(spec))],
                    dataSize=4 * len(spec), pData=data)
                stage = vk.VkPipelineShaderStageCreateInfo(
                    stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=sm, pName="main", pSpecializationInfo=info)
            ci = vk.VkComputePipelineCreateInfo(stage=stage, layout=pl)
            try:
                pipe = vk.vkCreateComputePipelines(d, self.pipelines.handle, 1, [ci], None)[0]
                self.pipelines.dirty = True
            except vk.VkError as e:
                raise RuntimeError(
                    f"{name}: {self.dev.name}'s driver could not build this kernel "
                    f"({type(e).__name__}; {len(source.splitlines())} lines of GLSL, local size "
                    f"{program.local_size}). Drivers reject very large unrolled kernels: a smaller "
                    f"tiling (vkml.vulkan.lower.matmul.set_tiling) or the default one avoids it.") from e
            finally:
                del stage, ci
                if spec:
                    del info, data
                vk.vkDestroyShaderModule(d, sm, None)
            k = Kernel(program, pipe, pl, dsl, source)
            self._kernels[h] = k
            return k

    def build(self, k: Kernel) -> Kernel:
        """k compiled (k itself if it is)."""
        return k if k.built else self.get(k.program)

    def __len__(self) -> int:
        return len(self._kernels)
