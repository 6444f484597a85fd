"""Device memory: large blocks, sub-allocated by first fit with coalescing free lists.

Each block is one VkDeviceMemory with one VkBuffer over all of it; a tensor is a range of
a block, bound to descriptors by (buffer, offset, range). Blocks prefer device-local
memory; where that memory is also host-visible (lavapipe, resizable-BAR GPUs) it is
mapped once and host transfers are plain memcpys, otherwise they go through a staging
block. Freed ranges return to their block's free list and are reused.

A tensor may be larger than a block (it gets a block of its own) and larger than one
storage-buffer binding (maxStorageBufferRange, 128 MiB on lavapipe): where the device
has buffer device addresses every block has one, and a kernel reaches such a view
through it (`program.Binding.address`). Then one tensor is limited by one allocation
(`Device.max_tensor_bytes`: maxMemoryAllocationSize, 2 GiB on lavapipe) and by the
2^31 - 1 elements 32-bit kernel indices reach (MAX_ELEMENTS: 8 GiB of float32), and
`Allocator._check` names the sizes when either is passed.
"""
from __future__ import annotations

import bisect
import collections
import gc
import os
import threading

import numpy as np

from .device import Device
from .vk import vk

BLOCK_SIZE = 64 << 20
MAPPED_BLOCK_SIZE = 4 << 20
SMALL = 1 << 16    # bytes below which a range is host-mapped device memory by default
ALIGN = 256

# uniform texel: a kernel may read an operand through a buffer view (`kernels.texel_binding`)
_USAGE = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
          | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT | vk.VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT)
_HOST = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
# the `vulkan` module leaves the core 1.2 names (and their KHR aliases) None; cffi has them
_ADDRESS_USAGE = vk.ffi.integer_const("VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT")
_ADDRESS_MEMORY = vk.ffi.integer_const("VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT")
# elements one tensor may hold: kernels index with 32-bit integers (signed in places,
# and SPIR-V reads an access chain's index as signed)
MAX_ELEMENTS = 2**31 - 1


def _bytes(n: int, other: int | None = None) -> str:
    """n bytes, exactly and in MiB; with `other`, "n ... exceeds other ..." wording's two
    sizes, each with as many MiB digits as it takes to tell them apart (a limit just
    exceeded must not print as equal to it: "128.0 MiB exceeds 128 MiB").

    >>> _bytes(2**27 + 20_000, 2**27)
    ('134,237,728 bytes (128.02 MiB)', '134,217,728 bytes (128.00 MiB)')
    >>> _bytes(2**32, 2**32 - 1)
    ('4,294,967,296 bytes (4096.000000 MiB)', '4,294,967,295 bytes (4095.999999 MiB)')
    >>> _bytes(2**27)
    '134,217,728 bytes (128 MiB)'
    """
    if other is None:
        return f"{n:,} bytes ({n / 2**20:g} MiB)"
    for digits in range(1, 8):   # 7 digits tell any two byte counts below 2^33 apart
        a, b = f"{n / 2**20:.{digits}f}", f"{other / 2**20:.{digits}f}"
        if a != b:
            break
    return f"{n:,} bytes ({a} MiB)", f"{other:,} bytes ({b} MiB)"


class OutOfMemoryError(MemoryError):
    """The device could not provide memory for an allocation (``vkml.OutOfMemoryError``).

    Raised where Vulkan reports VK_ERROR_OUT_OF_DEVICE_MEMORY or VK_ERROR_OUT_OF_HOST_MEMORY,
    and where an allocation would pass the memory limit (`set_memory_limit`,
    $VKML_DEVICE_MEMORY_LIMIT). The message names the bytes requested and the bytes
    available; `requested` and `available` hold them (available is None where unknown).
    Freeing arrays (dropping the last reference) gives their memory back, and vkml works
    as before.
    """

    def __init__(self, message: str, requested: int = 0, available: int | None = None):
        super().__init__(message)
        self.requested, self.available = requested, available


OutOfDeviceMemory = OutOfMemoryError     # the former name


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def parse_limit(text: str | None) -> int | None:
    """Bytes from a limit such as "512M", "2G", "1048576" (K, M, G: binary units); None
    for an empty or missing one.

    >>> parse_limit("256M"), parse_limit("1G"), parse_limit("4096"), parse_limit("")
    (268435456, 1073741824, 4096, None)
    """
    if not text:
        return None
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        n = int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        raise ValueError(f"VKML_DEVICE_MEMORY_LIMIT: {text!r} is not a size; give bytes, or a number "
                         f"with K, M or G (\"512M\")") from None
    if n < 0:
        raise ValueError(f"VKML_DEVICE_MEMORY_LIMIT: {text!r} is negative")
    return n


def _heap_bytes(dev: Device, type_index: int) -> int | None:
    try:
        mp = vk.vkGetPhysicalDeviceMemoryProperties(dev.physical)
        return int(mp.memoryHeaps[mp.memoryTypes[type_index].heapIndex].size)
    except Exception:
        return None


_OOM = (vk.VkErrorOutOfDeviceMemory, vk.VkErrorOutOfHostMemory)


def _round(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


# bytes of each live block's VkBuffer by id(block) (a View's region): what a texel view's
# buffer looks like to the driver (`precompile.texel_hint`)
BLOCK_BYTES: dict[int, int] = {}


class Block:
    """One VkDeviceMemory + VkBuffer, with a sorted free list of (offset, size)."""

    def __init__(self, dev: Device, size: int, host: bool, mapped: bool = False, in_use: int = 0):
        self.dev, self.size = dev, size
        BLOCK_BYTES[id(self)] = size
        d = dev.device
        # a view past one binding's range is reached by address (`program.Binding.address`);
        # every block can be, so that whether a view is reached so is the dispatch's choice
        addressed = dev.buffer_address
        try:
            self.buffer = vk.vkCreateBuffer(d, vk.VkBufferCreateInfo(
                size=size, usage=_USAGE | (_ADDRESS_USAGE if addressed else 0),
                sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
        except _OOM as e:
            raise OutOfMemoryError(f"vkml: could not allocate {_mib(size)} of device memory on "
                                   f"{dev.name} ({type(e).__name__})", size) from e
        req = vk.vkGetBufferMemoryRequirements(d, self.buffer)
        if host:
            t = dev.memory_type(req.memoryTypeBits, _HOST | vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
        elif mapped:
            t = dev.memory_type(req.memoryTypeBits, vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | _HOST,
                                fallback=vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
        else:
            t = dev.memory_type(req.memoryTypeBits, vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
        try:
            flags = vk.VkMemoryAllocateFlagsInfo(flags=_ADDRESS_MEMORY) if addressed else None
            self.memory = vk.vkAllocateMemory(d, vk.VkMemoryAllocateInfo(
                pNext=flags, allocationSize=req.size, memoryTypeIndex=t), None)
        except vk.VkError as e:
            vk.vkDestroyBuffer(d, self.buffer, None)
            if not isinstance(e, _OOM):
                raise RuntimeError(f"vkml: vkAllocateMemory of {_mib(size)} failed on {dev.name} "
                                   f"({type(e).__name__})") from e
            heap = _heap_bytes(dev, t)
            avail = None if heap is None else max(heap - in_use, 0)
            raise OutOfMemoryError(
                f"vkml: could not allocate {_mib(size)} of device memory on {dev.name} "
                f"({type(e).__name__}); vkml holds {_mib(in_use)}"
                + ("" if heap is None else f" of a {_bytes(heap)} heap, so at most {_bytes(avail)} is available"),
                size, avail) from e
        vk.vkBindBufferMemory(d, self.buffer, self.memory, 0)
        self.host_visible = dev.memory_types[t] & _HOST == _HOST
        # the host reads it at memory speed (a GPU's uncached BAR window it reads at PCIe
        # speed, tens of MB/s: such memory is written by the host, read back by transfers)
        self.host_readable = self.host_visible and (
            dev.profile.host_cached_reads or bool(dev.memory_types[t] & vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT))
        self.mapped = None
        if self.host_visible:
            ptr = vk.vkMapMemory(d, self.memory, 0, size, 0)
            self.mapped = np.frombuffer(ptr, np.uint8, size)
        self.free = [(0, size)]  # sorted by offset

    def alloc(self, n: int) -> int | None:
        for i, (off, sz) in enumerate(self.free):
            if sz >= n:
                if sz == n:
                    del self.free[i]
                else:
                    self.free[i] = (off + n, sz - n)
                return off
        return None

    def release(self, off: int, n: int) -> None:
        i = bisect.bisect_left(self.free, (off, 0))
        self.free.insert(i, (off, n))
        # coalesce with neighbours
        if i + 1 < len(self.free) and off + n == self.free[i + 1][0]:
            self.free[i] = (off, n + self.free[i + 1][1])
            del self.free[i + 1]
        if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == self.free[i][0]:
            self.free[i - 1] = (self.free[i - 1][0], self.free[i - 1][1] + self.free[i][1])
            del self.free[i]

    def destroy(self) -> None:
        BLOCK_BYTES.pop(id(self), None)
        d = self.dev.device
        if self.mapped is not None:
            vk.vkUnmapMemory(d, self.memory)
            self.mapped = None
        vk.vkDestroyBuffer(d, self.buffer, None)
        vk.vkFreeMemory(d, self.memory, None)


class Buffer:
    """A range of a block. Released to the allocator when garbage collected."""
    __slots__ = ("block", "offset", "nbytes", "capacity", "ticket", "_alloc", "__weakref__")

    def __init__(self, alloc: "Allocator", block: Block, offset: int, nbytes: int, capacity: int):
        self.block, self.offset, self.nbytes, self.capacity = block, offset, nbytes, capacity
        # the runtime's ticket of the submission that computes the contents (0: the host
        # wrote them): the host may read the range once that one has finished
        self.ticket = 0
        # __del__ rather than weakref.finalize: a jitted call makes and drops one Buffer per
        # result, and finalize's registry costs several microseconds per Buffer
        self._alloc = alloc

    @property
    def vk_buffer(self):
        return self.block.buffer

    def release(self) -> None:
        """Give the range back now (idempotent; garbage collection does it otherwise)."""
        a, self._alloc = self._alloc, None
        if a is not None:
            a._release(self.block, self.offset, self.capacity)

    def __del__(self):
        a = self._alloc
        if a is not None:
            self._alloc = None
            try:
                a._release(self.block, self.offset, self.capacity)
            except Exception:   # interpreter shutdown: the allocator may be half torn down
                pass

    def __repr__(self) -> str:
        return f"Buffer({self.nbytes} B at {self.offset})"


class Allocator:
    """Sub-allocates device ranges from large blocks and reuses freed ranges.

    >>> from vkml.vulkan import runtime
    >>> b = runtime.get().allocator.alloc(1000)
    >>> b.nbytes
    1000
    """

    def __init__(self, dev: Device, block_size: int = BLOCK_SIZE, small: int = SMALL):
        self.dev = dev
        self.block_size = block_size
        self.small = small
        self.blocks: list[Block] = []
        self.host_blocks: list[Block] = []
        self.mapped_blocks: list[Block] = []
        self.lock = threading.Lock()
        # Buffers are released by GC finalizers, which can run inside alloc() while the lock
        # is held; they only append here (atomic under the GIL) and alloc drains the list.
        self._pending: list[tuple] = []
        # Ranges released while submissions that may use them are still running (the
        # runtime's asynchronous calls): (ticket, block, offset, capacity), in ticket order,
        # given back by `retire` once that submission finishes, so the host never writes a
        # range a kernel is still reading. `busy` returns the newest unfinished ticket (0:
        # none); `poll` retires what has finished; `sync` waits for everything. The runtime
        # sets them; alone, an allocator frees at once.
        self._deferred: collections.deque = collections.deque()
        self.busy = lambda: 0
        self.poll = lambda: None
        self.sync = lambda: None
        self.live_bytes = 0
        self.peak_bytes = 0
        self.epoch = 0   # counts trims: a block made after one may reuse a freed block's id
        # bytes of device memory held in blocks, and the most they may reach (None: what the
        # driver gives): a block past the limit fails as an out-of-memory driver would
        self.block_bytes = 0
        self.limit: int | None = parse_limit(os.environ.get("VKML_DEVICE_MEMORY_LIMIT"))

    def _check(self, nbytes: int, what: str, elements: int | None = None) -> None:
        """ValueError naming the sizes where one tensor of nbytes (of `elements`, where
        known) cannot be: past the device's largest tensor (`Device.max_tensor_bytes`) or
        past the elements 32-bit kernel indices reach (MAX_ELEMENTS)."""
        dev = self.dev
        if elements is not None and elements > MAX_ELEMENTS:
            raise ValueError(
                f"{what}: {elements:,} elements ({_bytes(nbytes)}) exceed the {MAX_ELEMENTS:,} "
                f"(2^31 - 1) elements one tensor may hold: kernels index it with 32-bit integers. "
                f"Split it into smaller arrays.")
        limit = dev.max_tensor_bytes
        if nbytes <= limit:
            return
        sizes = _bytes(nbytes, limit)
        if dev.buffer_address or limit < dev.max_storage_buffer_range:
            name = "maxMemoryAllocationSize" if dev.max_allocation <= dev.max_buffer_size else "maxBufferSize"
            raise ValueError(
                f"{what}: {sizes[0]} exceeds this device's {name} of {sizes[1]} ({dev.name}); one "
                f"tensor must fit in one allocation. Split it into smaller arrays.")
        raise ValueError(
            f"{what}: {sizes[0]} exceeds this device's maxStorageBufferRange of {sizes[1]} "
            f"({dev.name}, without buffer device addresses); one tensor "
            f"must fit in one storage buffer binding. Split it into smaller arrays.")

    def alloc(self, nbytes: int, what: str = "allocation", host: bool = False,
              bound: bool = True, mapped: bool | None = None, device_only: bool = False) -> Buffer:
        """A range of at least nbytes (a zero-byte request still gets an aligned slot).

        bound: the range holds one tensor, so it must fit the device's largest tensor
        (`Device.max_tensor_bytes`); an arena of many tensors (bound piecewise) passes
        False and must fit one allocation.
        host: in host memory (staging). mapped: device-local memory the host can write
        (a GPU's BAR window) where there is such memory, so that the host reads and writes
        it by memcpy instead of a transfer submission; plain device memory where there is
        not. By default small ranges (scalars, small arrays, jit slots) are mapped.
        device_only: only later submissions write the range (a jitted call's result), so it
        may be one that a running submission still uses: submissions run in order.
        """
        if bound:
            self._check(nbytes, what)
        elif nbytes > min(self.dev.max_allocation, self.dev.max_buffer_size):
            sizes = _bytes(nbytes, min(self.dev.max_allocation, self.dev.max_buffer_size))
            raise ValueError(f"{what}: {sizes[0]} in one range exceeds this device's largest "
                             f"allocation, {sizes[1]} ({self.dev.name})")
        if mapped is None:
            mapped = nbytes < self.small and not host
        cap = _round(max(nbytes, 4))
        pool = self.host_blocks if host else self.mapped_blocks if mapped else self.blocks
        if self._deferred:
            self.poll()
        with self.lock:
            self._drain()
            got = self._fit(pool, cap)
            if got is None and self._deferred:
                if device_only:
                    got = self._reuse(pool, cap)
                    if got is not None:     # still counted in live_bytes
                        return Buffer(self, got[0], got[1], nbytes, got[2])
                size = max(self.block_size if not mapped else MAPPED_BLOCK_SIZE, _round(cap, 1 << 20))
                if self.limit is not None and self.block_bytes + size > self.limit:
                    # ranges that running submissions hold come back, rather than failing
                    self.sync()
                    self._drain()
                    got = self._fit(pool, cap)
            if got is not None:
                b, off = got
            else:
                # the BAR window may be as small as 256 MiB: take it in small blocks
                size = max(self.block_size if not mapped else MAPPED_BLOCK_SIZE, _round(cap, 1 << 20))
                try:
                    b = self._block(size, cap, host, mapped, what)
                except OutOfMemoryError:
                    if not mapped:
                        raise
                    pool = self.blocks      # the BAR window is full: plain device memory
                    b = self._block(max(self.block_size, _round(cap, 1 << 20)), cap, host, False, what)
                pool.append(b)
                off = b.alloc(cap)
            self.live_bytes += cap
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        return Buffer(self, b, off, nbytes, cap)

    @staticmethod
    def _fit(pool: list, cap: int):
        """(block, offset) of a free range of cap bytes in pool, or None."""
        for b in pool:
            off = b.alloc(cap)
            if off is not None:
                return b, off
        return None

    def _reuse(self, pool: list, cap: int):
        """(block, offset, capacity) of a deferred range of pool that fits cap bytes
        without wasting half of itself, taken out of the deferred ones; or None."""
        blocks = {id(b) for b in pool}
        for e in list(self._deferred):
            if id(e[1]) in blocks and cap <= e[3] <= 2 * cap:
                try:
                    self._deferred.remove(e)
                except ValueError:      # retired meanwhile: it is in _pending, not ours
                    continue
                return e[1], e[2], e[3]
        return None

    def _block(self, size: int, cap: int, host: bool, mapped: bool, what: str) -> Block:
        """A new block of size bytes (cap of them needed now), under the lock. When the
        driver or the limit refuses it: free blocks go back first, then a block of just
        cap bytes is tried, then OutOfMemoryError names the request and what is left."""
        need = _round(cap, 1 << 20)
        for attempt in range(3):
            if attempt == 1:
                self.sync()         # ranges waiting for running submissions come back
                gc.collect()        # arrays in unreachable cycles hold ranges too
                self._trim()
            size = size if attempt < 2 else min(size, need)
            try:
                if self.limit is not None and self.block_bytes + size > self.limit:
                    raise OutOfMemoryError("over the limit", size)
                b = Block(self.dev, size, host, mapped, self.block_bytes)
            except OutOfMemoryError as e:
                if attempt < 2:
                    continue
                if self.limit is not None and self.block_bytes + size > self.limit:
                    avail = max(self.limit - self.block_bytes, 0)
                    raise OutOfMemoryError(
                        f"{what}: out of device memory: {_bytes(cap)} requested, {_bytes(avail)} available "
                        f"under the memory limit of {_bytes(self.limit)} (set_memory_limit or "
                        f"VKML_DEVICE_MEMORY_LIMIT; {_mib(self.live_bytes)} in use by live arrays "
                        f"and recordings on {self.dev.name}). Free arrays (del) or use smaller ones.",
                        cap, avail) from None
                raise OutOfMemoryError(
                    f"{what}: out of device memory: {_bytes(cap)} requested; {e} "
                    f"({_mib(self.live_bytes)} in use by live arrays and recordings). Free arrays "
                    f"(del) or use smaller ones.", cap, e.available) from e
            self.block_bytes += size
            return b
        raise AssertionError("unreachable")

    def set_limit(self, nbytes: int | None) -> None:
        """At most nbytes of device memory in blocks from now on (None: no limit)."""
        if nbytes is not None and (not isinstance(nbytes, int) or nbytes < 0):
            raise ValueError(f"set_memory_limit: {nbytes!r} is not a byte count >= 0 (or None)")
        with self.lock:
            self.limit = nbytes

    def stats(self) -> dict:
        """live_bytes (ranges handed out), peak_bytes, block_bytes (device memory held),
        blocks (their count), limit."""
        self.sync()
        with self.lock:
            self._drain()
            n = len(self.blocks) + len(self.host_blocks) + len(self.mapped_blocks)
            return {"live_bytes": self.live_bytes, "peak_bytes": self.peak_bytes,
                    "block_bytes": self.block_bytes, "blocks": n, "limit": self.limit}

    def _release(self, block: Block, off: int, cap: int) -> None:
        t = self.busy()
        if t:
            self._deferred.append((t, block, off, cap))
            return
        self._pending.append((block, off, cap))
        if self.lock.acquire(blocking=False):
            try:
                self._drain()
            finally:
                self.lock.release()

    def retire(self, done: int) -> None:
        """Give back the deferred ranges of submissions up to ticket `done`, which have
        finished."""
        d = self._deferred
        try:
            while d and d[0][0] <= done:
                self._pending.append(d.popleft()[1:])
        except IndexError:      # another thread retired the last one first
            pass
        if self._pending and self.lock.acquire(blocking=False):
            try:
                self._drain()
            finally:
                self.lock.release()

    def _drain(self) -> None:
        while self._pending:
            block, off, cap = self._pending.pop()
            block.release(off, cap)
            self.live_bytes -= cap

    def trim(self) -> None:
        """Give completely free blocks back to the driver."""
        with self.lock:
            self._trim()

    def _trim(self) -> None:
        self._drain()
        self.epoch += 1
        for pool in (self.blocks, self.host_blocks, self.mapped_blocks):
            for b in [b for b in pool if b.free == [(0, b.size)]]:
                pool.remove(b)
                b.destroy()
                self.block_bytes -= b.size
