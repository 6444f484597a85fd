"""The process's Vulkan runtime: device, allocator, kernel cache, executor, transfers."""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from . import device as _device
from .executor import Executor
from .kernels import KernelCache
from .memory import Allocator, Buffer
from .vk import vk


class Runtime:
    """Everything vkml holds on its one Vulkan device."""

    def __init__(self):
        self.dev = _device.get()
        self.allocator = Allocator(self.dev)
        self.kernels = KernelCache(self.dev)
        self.executor = Executor(self)
        self._fence = vk.vkCreateFence(self.dev.device, vk.VkFenceCreateInfo(), None)
        self._fences = vk.ffi.new("VkFence[1]", [self._fence])
        # A GPU signals its fence tens of microseconds before a blocking wait wakes up, so
        # the host polls for a while first; on lavapipe it polls yielding the core to the
        # driver's threads, and without a yield blocks (a poll that keeps its core is slow)
        prof = self.dev.profile
        self._yield = os.sched_yield if prof.poll_yield else None
        self.spin_s = prof.poll_s
        self._copier = None
        self._dead_cbs: list = []     # command buffers to free under the device lock

    def free_commands(self, cbs) -> None:
        """Free command buffers (a cffi VkCommandBuffer[1]) of the device's command pool:
        now if this thread can take the device lock, else at the next submission. A
        finalizer runs on whichever thread the garbage collector does, and the pool must
        not be used by two threads at once; blocking on the lock there could deadlock
        against a thread that holds it and waits for the allocator's."""
        self._dead_cbs.append(cbs)
        if self.dev.lock.acquire(blocking=False):
            try:
                self._free_dead()
            finally:
                self.dev.lock.release()

    def _free_dead(self) -> None:
        while self._dead_cbs:
            vk.lib.vkFreeCommandBuffers(self.dev.device, self.dev.command_pool, 1, self._dead_cbs.pop())

    def submit(self, cbs: list) -> None:
        """Submit command buffers (run in order) and wait for them to finish (one fence,
        reused: every submission is waited for before the next, under the device lock)."""
        lib, ffi, d = vk.lib, vk.ffi, self.dev.device
        info = ffi.new("VkSubmitInfo*")
        info.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
        arr = ffi.new("VkCommandBuffer[]", cbs)
        info.commandBufferCount, info.pCommandBuffers = len(cbs), arr
        with self.dev.lock:
            if self._dead_cbs:
                self._free_dead()
            r = lib.vkQueueSubmit(self.dev.queue, 1, info, self._fence)
            if r != 0:
                raise RuntimeError(f"vkml: vkQueueSubmit failed with VkResult {r} on {self.dev.name}")
            if self.spin_s:
                end, give = time.perf_counter() + self.spin_s, self._yield
                while lib.vkGetFenceStatus(d, self._fence) == vk.VK_NOT_READY and time.perf_counter() < end:
                    if give:
                        give()
            r = lib.vkWaitForFences(d, 1, self._fences, vk.VK_TRUE, 2**63 - 1)
            if r != 0:
                raise RuntimeError(f"vkml: waiting for the device failed with VkResult {r} "
                                   f"(VK_ERROR_DEVICE_LOST is -4) on {self.dev.name}")
            lib.vkResetFences(d, 1, self._fences)

    def check_dtypes(self, graph) -> None:
        """DTypeError naming the op when a graph needs float64 on a device without it."""
        if self.dev.has_float64:
            return
        from ..trace.dtypes import DTypeError, float64
        for n in graph.nodes:
            if n.dtype == float64:
                raise DTypeError(f"{n.op.value}: float64 needs shaderFloat64, which {self.dev.name} "
                                 f"does not have; use float32")

    def run(self, graph, inputs):
        self.check_dtypes(graph)
        return self.executor.run(graph, inputs)

    def _copy(self, src: Buffer, dst: Buffer, n: int) -> None:
        """Copy n bytes from src to dst on the device and wait."""
        from .transfer import CopyCommands
        with self.dev.lock:
            if self._copier is None:
                self._copier = CopyCommands(self)
            self.submit([self._copier.record([(src, dst, n)])])

    def upload(self, raw: np.ndarray, what: str = "asarray") -> Buffer:
        """A new device buffer holding raw's bytes (raw is already in device representation)."""
        raw = np.ascontiguousarray(raw)
        if raw.dtype == np.float64 and not self.dev.has_float64:
            from ..trace.dtypes import DTypeError
            raise DTypeError(f"{what}: float64 needs shaderFloat64, which {self.dev.name} does not "
                             f"have; use float32")
        n = raw.nbytes
        buf = self.allocator.alloc(n, what)
        if n == 0:
            return buf
        src = raw.reshape(-1).view(np.uint8)
        if buf.block.mapped is not None:
            buf.block.mapped[buf.offset:buf.offset + n] = src
        else:
            st = self.allocator.alloc(n, "staging", host=True)
            st.block.mapped[st.offset:st.offset + n] = src
            self._copy(st, buf, n)
            st.release()
        return buf

    def download(self, buf: Buffer, nbytes: int | None = None) -> np.ndarray:
        """The buffer's bytes as a fresh uint8 array."""
        n = buf.nbytes if nbytes is None else nbytes
        if n == 0:
            return np.zeros(0, np.uint8)
        if buf.block.host_readable or (buf.block.mapped is not None and n <= 64):
            return buf.block.mapped[buf.offset:buf.offset + n].copy()
        st = self.allocator.alloc(n, "staging", host=True)
        self._copy(buf, st, n)
        out = st.block.mapped[st.offset:st.offset + n].copy()
        st.release()
        return out


_rt: Runtime | None = None
_lock = threading.Lock()


def get() -> Runtime:
    """The runtime, created on first use (this is when Vulkan is initialised)."""
    global _rt
    if _rt is None:
        with _lock:
            if _rt is None:
                _rt = Runtime()
    return _rt


def set_memory_limit(nbytes: int | None) -> None:
    """Let vkml hold at most nbytes of device memory (None: as much as the driver gives).

    An allocation past it raises `OutOfMemoryError` exactly as the driver running out
    would; $VKML_DEVICE_MEMORY_LIMIT ("512M", "2G") sets it at start-up.

    >>> set_memory_limit(None)
    """
    get().allocator.set_limit(nbytes)


def memory_stats() -> dict:
    """The allocator's counters (`Allocator.stats`): live_bytes, peak_bytes, block_bytes,
    blocks, limit.

    >>> sorted(memory_stats())
    ['block_bytes', 'blocks', 'limit', 'live_bytes', 'peak_bytes']
    """
    return get().allocator.stats()
