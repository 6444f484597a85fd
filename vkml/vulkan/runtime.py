"""The process's Vulkan runtime: device, allocator, kernel cache, executor, transfers."""
from __future__ import annotations

import collections
import os
import threading
import time

import numpy as np

from . import device as _device
from .executor import Executor
from .kernels import KernelCache
from .memory import Allocator, Buffer
from .vk import vk

MAX_IN_FLIGHT = 4      # submissions running at once before the next one waits


class Runtime:
    """Everything vkml holds on its one Vulkan device."""

    def __init__(self):
        self.dev = _device.get()
        self.allocator = Allocator(self.dev)
        self.kernels = KernelCache(self.dev)
        self.executor = Executor(self)
        # Submissions are numbered (tickets) and each has a fence; they finish in order,
        # since every command buffer starts behind a barrier on all earlier commands.
        # `submitted` and `completed` are the newest ticket handed out and known finished.
        self.submitted = self.completed = 0
        self._inflight: collections.deque = collections.deque()   # (ticket, VkFence[1])
        self._spare_fences: list = []
        self._graveyard: collections.deque = collections.deque()  # (ticket, destroy())
        self._q_lock = threading.RLock()
        # $VKML_ASYNC=0: every call waits for the device before it returns (as vkml did
        # before asynchronous calls; a debugging aid: an error shows at its own call)
        self.asynchronous = os.environ.get("VKML_ASYNC", "1") != "0"
        a = self.allocator
        a.busy, a.poll, a.sync = self._busy, self.poll, self.wait
        # A GPU signals its fence tens of microseconds before a blocking wait wakes up, so
        # the host polls for a while first; on lavapipe it polls yielding the core to the
        # driver's threads, and without a yield blocks (a poll that keeps its core is slow)
        prof = self.dev.profile
        self._yield = os.sched_yield if prof.poll_yield else None
        self.spin_s = prof.poll_s
        self._copier = None

    def free_commands(self, cbs) -> None:
        """Free command buffers (a cffi VkCommandBuffer[1]) of the device's command pool
        once no running submission can use them (`defer`). A finalizer runs on whichever
        thread the garbage collector does, and the pool must not be used by two threads at
        once; blocking on the device lock there could deadlock against a thread that holds
        it and waits for the allocator's, so `defer` never blocks on it."""
        d, pool = self.dev.device, self.dev.command_pool
        self.defer(lambda: vk.lib.vkFreeCommandBuffers(d, pool, 1, cbs))

    def _busy(self) -> int:
        """The newest unfinished ticket, 0 when the device is idle."""
        return self.submitted if self.submitted > self.completed else 0

    def submit(self, cbs: list, wait: bool = True) -> int:
        """Submit command buffers (run in order, after everything submitted before) and
        return their ticket; with wait, return once they have finished.

        At most MAX_IN_FLIGHT submissions run at once: a further one first waits for the
        oldest, so the host cannot run arbitrarily far ahead of the device."""
        lib, ffi = vk.lib, vk.ffi
        info = ffi.new("VkSubmitInfo*")
        info.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
        arr = ffi.new("VkCommandBuffer[]", cbs)
        info.commandBufferCount, info.pCommandBuffers = len(cbs), arr
        with self.dev.lock:
            if len(self._inflight) >= MAX_IN_FLIGHT:
                self.wait(self._inflight[0][0])
            fence = self._spare_fences.pop() if self._spare_fences else ffi.new(
                "VkFence[1]", [vk.vkCreateFence(self.dev.device, vk.VkFenceCreateInfo(), None)])
            r = lib.vkQueueSubmit(self.dev.queue, 1, info, fence[0])
            if r != 0:
                self._spare_fences.append(fence)
                raise RuntimeError(f"vkml: vkQueueSubmit failed with VkResult {r} on {self.dev.name}")
            with self._q_lock:
                self.submitted += 1
                t = self.submitted
                self._inflight.append((t, fence))
        if wait:
            self.wait(t)
        return t

    def poll(self) -> int:
        """Retire the submissions that have finished, without waiting; the newest
        finished ticket."""
        self._retire(None)
        return self.completed

    def wait(self, ticket: int | None = None) -> None:
        """Wait until submission `ticket` (None: every submission so far) has finished."""
        self._retire(self.submitted if ticket is None else ticket)

    def _retire(self, upto: int | None) -> None:
        lib, d = vk.lib, self.dev.device
        with self._q_lock:
            while self._inflight:
                t, fence = self._inflight[0]
                if lib.vkGetFenceStatus(d, fence[0]) != vk.VK_SUCCESS:
                    if upto is None or t > upto:
                        break
                    self._wait_fence(fence)
                self._inflight.popleft()
                lib.vkResetFences(d, 1, fence)
                self._spare_fences.append(fence)
                self.completed = t
        self.allocator.retire(self.completed)
        if self._graveyard:
            self._bury()

    def _wait_fence(self, fence) -> None:
        # A GPU signals its fence tens of microseconds before a blocking wait wakes up, so
        # the host polls for a while first (see __init__)
        lib, d = vk.lib, self.dev.device
        if self.spin_s:
            end, give = time.perf_counter() + self.spin_s, self._yield
            while lib.vkGetFenceStatus(d, fence[0]) == vk.VK_NOT_READY and time.perf_counter() < end:
                if give:
                    give()
        r = lib.vkWaitForFences(d, 1, fence, vk.VK_TRUE, 2**63 - 1)
        if r != 0:
            raise RuntimeError(f"vkml: waiting for the device failed with VkResult {r} "
                               f"(VK_ERROR_DEVICE_LOST is -4) on {self.dev.name}")

    def defer(self, destroy) -> None:
        """Call destroy() once every submission so far has finished (now, if they have):
        for the Vulkan objects a running submission may still use (command buffers,
        descriptor pools). Like free_commands, it runs only where this thread can take the
        device lock, else at a later retirement."""
        if self._busy():
            self._graveyard.append((self.submitted, destroy))
            return
        self._graveyard.append((0, destroy))
        self._bury()

    def _bury(self) -> None:
        if not self.dev.lock.acquire(blocking=False):
            return
        try:
            g = self._graveyard
            while g and g[0][0] <= self.completed:
                _, destroy = g.popleft()
                try:
                    destroy()
                except Exception:
                    pass
        finally:
            self.dev.lock.release()

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
        self.wait()     # whatever computes it may still be running
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
