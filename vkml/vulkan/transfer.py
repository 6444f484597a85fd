"""Buffer-to-buffer copies recorded per call, through the raw cffi entry points.

The `vulkan` package's wrappers cost tens of microseconds a call on a GPU host (argument
conversion in Python); a jitted call that copies a few small arguments and results would spend
most of its time there. CopyCommands keeps one command buffer and the structures it
needs, and re-records it with direct `lib` calls: a few microseconds per call.
"""
from __future__ import annotations

from .vk import vk

_STAGE_ALL = vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT
_WRITES = vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_HOST_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT
_USES = (vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT | vk.VK_ACCESS_HOST_READ_BIT
         | vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT)


def _barrier():
    b = vk.ffi.new("VkMemoryBarrier*")
    b.sType = vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER
    b.srcAccessMask = _WRITES
    b.dstAccessMask = _USES
    return b


class CopyCommands:
    """One reusable command buffer of buffer copies, fenced by full barriers on both
    sides so it can go before or after a recording in the same submission.

    >>> import numpy as np
    >>> from vkml.vulkan import runtime
    >>> rt = runtime.get()
    >>> a, b = rt.upload(np.arange(4, dtype=np.float32)), rt.allocator.alloc(16)
    >>> copies = CopyCommands(rt)      # keep it: its command buffer dies with it
    >>> ticket = rt.submit([copies.record([(a, b, 16)])])
    >>> rt.download(b).view(np.float32).tolist()
    [0.0, 1.0, 2.0, 3.0]
    """

    def __init__(self, rt):
        self.rt = rt
        with rt.dev.lock:     # the command pool is used by one thread at a time
            self.cb = vk.vkAllocateCommandBuffers(rt.dev.device, vk.VkCommandBufferAllocateInfo(
                commandPool=rt.dev.command_pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                commandBufferCount=1))[0]
        self._begin = vk.ffi.new("VkCommandBufferBeginInfo*")
        self._begin.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO
        self._begin.flags = vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT
        self._barrier = _barrier()
        self._region = vk.ffi.new("VkBufferCopy*")

    def record(self, pairs) -> object:
        """Re-record the command buffer with the (src Buffer, dst Buffer, nbytes) copies
        and return it (valid until the next record, and while this object lives)."""
        lib, cb, null = vk.lib, self.cb, vk.ffi.NULL
        lib.vkResetCommandBuffer(cb, 0)
        lib.vkBeginCommandBuffer(cb, self._begin)
        lib.vkCmdPipelineBarrier(cb, _STAGE_ALL, _STAGE_ALL, 0, 1, self._barrier, 0, null, 0, null)
        r = self._region
        for src, dst, n in pairs:
            r.srcOffset, r.dstOffset, r.size = src.offset, dst.offset, n
            lib.vkCmdCopyBuffer(cb, src.block.buffer, dst.block.buffer, 1, r)
        lib.vkCmdPipelineBarrier(cb, _STAGE_ALL, _STAGE_ALL | vk.VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                                 self._barrier, 0, null, 0, null)
        if lib.vkEndCommandBuffer(cb) != 0:
            raise RuntimeError("vkml: recording buffer copies failed")
        return cb

    def __del__(self):
        try:
            cbs = vk.ffi.new("VkCommandBuffer[1]", [self.cb])
            self.rt.free_commands(cbs)
        except Exception:
            pass
