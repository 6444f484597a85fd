"""Compiling new kernels on every core before their first dispatch (lavapipe).

lavapipe creates a compute pipeline without compiling its shader: llvmpipe compiles it
with LLVM at the pipeline's first dispatch, on the device queue's one thread, so a first
call with a hundred new kernels compiles them one after another (bench/RESULTS.md, issue
16: most of a 10k-op graph's cold first call). A dispatch of zero workgroups compiles the
shader as well and runs no invocation, and llvmpipe stores the machine code in Mesa's disk
cache, which every VkDevice of the physical device reads. So each thread of the kernel
build pool (`KernelCache.build_all`) keeps a helper VkDevice of its own, created with the
real device's features (the same SPIR-V then gives the same shader and cache key),
creates each new kernel's pipeline there too and dispatches it with zero workgroups: the
helpers' queue threads compile in parallel, and the program's first dispatch on the real
device reads the machine code from the disk cache. Nothing a helper does touches the
real device or any result; a kernel the helper could not compile, or whose machine code
is not in the cache in time, is compiled at its first dispatch as before.

The machine code must be what the real dispatch asks for: llvmpipe keys a shader's
variant also by each texel buffer it reads, by whether the VkBuffer's size is a power of
two and by a byte of the view's size: a helper's 64 KiB views hit the cache where 256-byte
ones missed (bench/RESULTS.md). Inferred, not read in Mesa's source: Mesa 22.3 keys by
`last_level` of the view's texture union, which for a buffer view holds bits 8-15 of its
size. So the helper's dispatch binds views with the same two properties as the kernel's
first dispatch (`texel_hint`).

It runs only where it can pay (`wanted`): on lavapipe, for a batch of new kernels built on
the pool, for kernels whose SPIR-V this process compiled (one read from vkml's SPIR-V cache
was most likely dispatched, and so cached by Mesa, by an earlier process), with Mesa's
cache on. VKML_PRECOMPILE=0 turns it off.
"""
from __future__ import annotations

import os
import threading

from .descriptors import binding_kinds, create_layouts
from .memory import BLOCK_BYTES
from .vk import vk

_BYTES = 1 << 17         # a helper's buffers: one of a power-of-two size, one not
_local = threading.local()
_failed: set = set()        # devices whose helper could not be made: not tried again


def wanted(dev) -> bool:
    """Whether new kernels of dev are compiled on helper devices first.

    >>> from types import SimpleNamespace as NS
    >>> wanted(NS(driver="nvidia")), wanted(NS(driver="lavapipe", device_info=None))
    (False, False)
    """
    if getattr(dev, "driver", None) != "lavapipe" or getattr(dev, "device_info", None) is None:
        return False
    if os.environ.get("VKML_PRECOMPILE", "1").strip().lower() in ("0", "false", "off", "no"):
        return False
    off = os.environ.get("MESA_SHADER_CACHE_DISABLE", os.environ.get("MESA_GLSL_CACHE_DISABLE", ""))
    return off.strip().lower() not in ("1", "true", "yes") and id(dev) not in _failed


def texel_hint(ds, texel_bytes: dict) -> tuple:
    """Per texel binding of dispatch ds: (format, whether bits 8-15 of its view's size are
    zero, whether its buffer's size is a power of two). A view of a buffer not made yet (a
    jitted call's argument) is taken to lie in a power-of-two block (`memory.BLOCK_SIZE`).
    texel_bytes: bytes of a texel by format (`kernels.TEXEL_BYTES`).

    >>> from types import SimpleNamespace as NS
    >>> ds = NS(kernel=NS(texels=(None, 100)), views=[NS(nbytes=64), NS(nbytes=1 << 16, region=-1)])
    >>> texel_hint(ds, {100: 4})
    ((100, True, True),)
    """
    out = []
    for f, v in zip(ds.kernel.texels or (), ds.views):
        if f is None:
            continue
        tb = texel_bytes.get(f, 4)
        size = v.nbytes // tb * tb
        block = BLOCK_BYTES.get(v.region, 1 << 26)
        out.append((f, (size >> 8) & 0xFF == 0, block & (block - 1) == 0))
    return tuple(out)


def compile_on_helper(dev, code: bytes, program, make_pipeline, hint: tuple = ()) -> bool:
    """Compile program's SPIR-V `code` on this thread's helper device of dev (made on
    first use): its pipeline (`make_pipeline(device, module, layout)`) dispatched with
    zero workgroups, its texel bindings as `hint` says (`texel_hint`; the defaults where
    it says nothing). False where no helper could be made or the helper refused it."""
    helpers = getattr(_local, "helpers", None)
    if helpers is None:
        helpers = _local.helpers = {}
    h = helpers.get(id(dev))
    if h is None:
        try:
            h = helpers[id(dev)] = _Helper(dev)
        except Exception:       # a driver that refuses a second device: compile as before
            _failed.add(id(dev))
            return False
    try:
        h.compile(code, program, make_pipeline, hint)
        return True
    except Exception:
        return False


class _Helper:
    """A second VkDevice on the same physical device, with its own queue (and so its own
    lavapipe queue thread), a small buffer and the descriptor layouts it has needed."""

    def __init__(self, dev):
        self.dev = dev
        info, keep = dev.device_info()
        d = self.device = vk.vkCreateDevice(dev.physical, info, None)
        del keep
        self.queue = vk.vkGetDeviceQueue(d, dev.queue_family, 0)
        self.pool = vk.vkCreateCommandPool(d, vk.VkCommandPoolCreateInfo(
            queueFamilyIndex=dev.queue_family, flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT), None)
        usage = vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT
        self.buffers, self.memory = {}, []       # power of two or not -> VkBuffer
        for pot, size in ((True, _BYTES), (False, _BYTES + 4096)):
            b = self.buffers[pot] = vk.vkCreateBuffer(d, vk.VkBufferCreateInfo(
                size=size, usage=usage, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
            req = vk.vkGetBufferMemoryRequirements(d, b)
            kind = next(i for i in range(32) if req.memoryTypeBits >> i & 1)
            m = vk.vkAllocateMemory(d, vk.VkMemoryAllocateInfo(allocationSize=req.size, memoryTypeIndex=kind),
                                    None)
            vk.vkBindBufferMemory(d, b, m, 0)
            self.memory.append(m)
        self.buffer = self.buffers[True]
        self.fence = vk.vkCreateFence(d, vk.VkFenceCreateInfo(), None)
        self.views: dict[tuple, object] = {}     # (format, byte zero, power of two) -> buffer view
        self.layouts: dict[tuple, tuple] = {}    # binding kinds, push bytes -> layouts

    def _view(self, fmt: int, zero: bool = True, pot: bool = True):
        """A texel view whose size has bits 8-15 zero (or not) of a buffer whose size is a
        power of two (or not)."""
        key = (fmt, zero, pot)
        v = self.views.get(key)
        if v is None:
            v = self.views[key] = vk.vkCreateBufferView(self.device, vk.VkBufferViewCreateInfo(
                buffer=self.buffers[pot], format=fmt, offset=0, range=1 << 16 if zero else 256), None)
        return v

    def _layout(self, kinds: tuple, push: int) -> tuple:
        key = (kinds, push)
        if key not in self.layouts:
            self.layouts[key] = create_layouts(self.device, kinds, push)
        return self.layouts[key]

    def compile(self, code: bytes, program, make_pipeline, hint: tuple = ()) -> None:
        ffi, lib, d = vk.ffi, vk.lib, self.device
        texels = tuple(program.texels)
        formats = [None] + list(texels) + [None] * (program.n_tensors - len(texels))
        kinds = binding_kinds(program.n_tensors, texels)
        dsl, pl = self._layout(kinds, program.push_bytes)
        smi = ffi.new("VkShaderModuleCreateInfo*")
        smi.sType = vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO
        words = ffi.from_buffer(code)
        smi.codeSize, smi.pCode = len(code), ffi.cast("uint32_t*", words)
        sm = ffi.new("VkShaderModule*")
        if lib.vkCreateShaderModule(d, smi, ffi.NULL, sm) != 0:
            raise RuntimeError("shader module refused")
        pipeline = pool = None
        cb = ffi.new("VkCommandBuffer[1]")
        try:
            pipeline = make_pipeline(d, sm[0], pl)
            n_texel = sum(kinds)
            sizes = [vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                             descriptorCount=len(kinds) - n_texel)]
            if n_texel:
                sizes.append(vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER,
                                                     descriptorCount=n_texel))
            pool = vk.vkCreateDescriptorPool(d, vk.VkDescriptorPoolCreateInfo(maxSets=1, pPoolSizes=sizes), None)
            ds = vk.vkAllocateDescriptorSets(d, vk.VkDescriptorSetAllocateInfo(
                descriptorPool=pool, pSetLayouts=[dsl]))[0]
            keep, writes = [], []      # nested structs stay referenced until the call returns
            hints = iter(hint)
            for i, f in enumerate(formats):
                if f is None:
                    info = vk.VkDescriptorBufferInfo(buffer=self.buffer, offset=0, range=_BYTES)
                    keep.append(info)
                    writes.append(vk.VkWriteDescriptorSet(
                        dstSet=ds, dstBinding=i, descriptorCount=1,
                        descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, pBufferInfo=[info]))
                else:
                    writes.append(vk.VkWriteDescriptorSet(
                        dstSet=ds, dstBinding=i, descriptorCount=1,
                        descriptorType=vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER,
                        pTexelBufferView=[self._view(*next(hints, (f, True, True)))]))
            vk.vkUpdateDescriptorSets(d, len(writes), writes, 0, None)
            cbi = ffi.new("VkCommandBufferAllocateInfo*")
            cbi.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO
            cbi.commandPool, cbi.level, cbi.commandBufferCount = self.pool, vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1
            if lib.vkAllocateCommandBuffers(d, cbi, cb) != 0:
                raise RuntimeError("command buffer refused")
            bi = ffi.new("VkCommandBufferBeginInfo*")
            bi.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO
            bi.flags = vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT
            lib.vkBeginCommandBuffer(cb[0], bi)
            bind = vk.VK_PIPELINE_BIND_POINT_COMPUTE
            lib.vkCmdBindPipeline(cb[0], bind, pipeline)
            sets = ffi.new("VkDescriptorSet[1]", [ds])
            lib.vkCmdBindDescriptorSets(cb[0], bind, pl, 0, 1, sets, 0, ffi.NULL)
            if program.push_bytes:
                zeros = ffi.new("char[]", program.push_bytes)
                lib.vkCmdPushConstants(cb[0], pl, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, program.push_bytes, zeros)
            lib.vkCmdDispatch(cb[0], 0, 0, 1)        # compiles the shader, runs nothing
            lib.vkEndCommandBuffer(cb[0])
            si = ffi.new("VkSubmitInfo*")
            si.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
            si.commandBufferCount, si.pCommandBuffers = 1, cb
            fences = ffi.new("VkFence[1]", [self.fence])
            if lib.vkQueueSubmit(self.queue, 1, si, self.fence) != 0:
                raise RuntimeError("submission refused")
            lib.vkWaitForFences(d, 1, fences, 1, 2 ** 64 - 1)
            lib.vkResetFences(d, 1, fences)
        finally:
            if cb[0] != ffi.NULL:
                lib.vkFreeCommandBuffers(d, self.pool, 1, cb)
            if pool is not None:
                vk.vkDestroyDescriptorPool(d, pool, None)
            if pipeline is not None:
                lib.vkDestroyPipeline(d, pipeline, ffi.NULL)
            lib.vkDestroyShaderModule(d, sm[0], ffi.NULL)
