"""Dispatches bound to descriptor sets and recorded into one command buffer."""
from __future__ import annotations

import numpy as np

import time
import warnings

from . import dispatch as _dispatch
from .dispatch import Dispatch, Loop, View, WhileLoop, barriers_before, flat
from .kernels import TEXEL_BYTES
from .vk import vk


def _check(result: int, what: str) -> None:
    if result != 0:
        raise RuntimeError(f"vkml: {what} failed with VkResult {result}")


_BARRIER_SRC = (vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT | vk.VK_ACCESS_HOST_WRITE_BIT)
_BARRIER_DST = (vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_READ_BIT
                | vk.VK_ACCESS_HOST_READ_BIT)


class _WhileRun:
    """A WhileLoop's place between two command buffers of a recording: while its flag is
    set, submit its chunks (`dispatch.WHILE_CHUNKS` steps each) and wait."""

    def __init__(self, loop: WhileLoop, chunks: list):
        self.loop, self.chunks = loop, chunks      # [(steps, command buffer)]

    def _go(self) -> bool:
        f = self.loop.flag
        return bool(f.block.mapped[f.offset:f.offset + f.nbytes].any())

    def run(self, rt) -> None:
        steps, j, t0, warned = 1, 0, time.perf_counter(), False
        while self._go():
            limit = _dispatch.WHILE_MAX_STEPS
            if limit is not None and steps >= limit:
                raise RuntimeError(f"while_loop: cond_fun still holds after {steps} steps, the limit "
                                   f"vkml.vulkan.dispatch.WHILE_MAX_STEPS (env VKML_WHILE_MAX_STEPS) "
                                   f"sets; a loop whose predicate never fails would run forever")
            k, cb = self.chunks[j]
            rt.submit([cb], wait=True)
            steps += k
            j = min(j + 1, len(self.chunks) - 1)
            if not warned and time.perf_counter() - t0 > _dispatch.WHILE_WARN_S:
                warned = True
                warnings.warn(f"while_loop: still running after {steps} steps and "
                              f"{time.perf_counter() - t0:.0f} s: does its cond_fun ever become false? "
                              f"(vkml.vulkan.dispatch.WHILE_MAX_STEPS bounds it)", RuntimeWarning,
                              stacklevel=2)


class Recording:
    """Dispatches bound to descriptor sets and recorded into one command buffer (or, for
    a program with while loops, several: `segments`, command buffers between which the
    host reads each loop's predicate).

    Built once; `submit()` can run it again and again (jit replays it).
    """

    def __init__(self, rt, dispatches: list[Dispatch], like: "Recording | None" = None,
                 profile: bool = False, replayed: bool = False):
        self.rt = rt
        # a loop's body is bound once and recorded once per step (`dispatch.Loop`)
        items, dispatches = dispatches, flat(dispatches)
        self.names = [ds.kernel.name for ds in dispatches]
        self.query_pool = None
        self.n_dispatches = len(dispatches)
        self.replayed = replayed
        self._views = []
        self._place_meta(dispatches, like, replayed)
        # Raw cffi calls: the `vulkan` wrappers cost tens of microseconds each on a GPU
        # host, and an eager operator makes a recording every time
        with rt.dev.lock:
            sets = self._bind(dispatches)
            self._record(items, dispatches, sets, profile)

    def _place_meta(self, dispatches: list, like, replayed: bool) -> None:
        """Every dispatch's meta at its offset in one buffer (or like's, which holds the
        same meta: jit rebinding the same dispatches to other buffers)."""
        rt, dev = self.rt, self.rt.dev
        if like is not None:
            self.meta_buf, self.meta_host = like.meta_buf, like.meta_host
            self.meta_offs, self.meta_total, self.meta_in_cb = like.meta_offs, like.meta_total, like.meta_in_cb
            return
        align = max(dev.storage_alignment, 16) // 4
        offs, total = [], 0
        for ds in dispatches:
            offs.append(total)
            total += -(-max(ds.meta.size, 1) // align) * align
        # Every invocation reads its dispatch's meta, so it lives in device-local memory:
        # read from host memory (over PCIe on a discrete GPU) it capped a copy kernel's
        # bandwidth. Where device memory is not mapped, it is copied there from a host
        # staging range.
        mb = self.meta_buf = rt.allocator.alloc(total * 4, "meta")
        mh = self.meta_host = mb if mb.block.mapped is not None else rt.allocator.alloc(total * 4, "meta", host=True)
        mv = mh.block.mapped[mh.offset:mh.offset + total * 4].view(np.int32)
        for ds, o in zip(dispatches, offs):
            mv[o:o + ds.meta.size] = ds.meta
        self.meta_offs, self.meta_total = offs, total
        # A recording that is replayed (jit) uploads its meta once, now; a one-shot one
        # (an eager operator) copies it at the start of its own command buffer instead of
        # paying a submission for it. Recordings sharing meta share that upload.
        self.meta_in_cb = mh is not mb and not replayed
        if mh is not mb and replayed:
            rt._copy(mh, mb, total * 4)

    def _bind(self, dispatches: list):
        """One descriptor set per dispatch, in a pool of this recording's: meta at binding
        0, the views after it (storage buffers or texel views)."""
        ffi, lib, null = vk.ffi, vk.lib, vk.ffi.NULL
        d = self.rt.dev.device
        mb, offs = self.meta_buf, self.meta_offs
        limit = self.rt.dev.max_storage_buffer_range
        n = len(dispatches)
        n_bind = sum(len(ds.views) + 1 for ds in dispatches)
        n_texel = sum(f is not None for ds in dispatches for f in ds.kernel.texels)
        size = ffi.new("VkDescriptorPoolSize[2]")
        size[0].type, size[0].descriptorCount = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, max(n_bind - n_texel, 1)
        size[1].type, size[1].descriptorCount = vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, max(n_texel, 1)
        pci = ffi.new("VkDescriptorPoolCreateInfo*")
        pci.sType = vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO
        pci.maxSets, pci.poolSizeCount, pci.pPoolSizes = max(n, 1), 2 if n_texel else 1, size
        pool = ffi.new("VkDescriptorPool*")
        _check(lib.vkCreateDescriptorPool(d, pci, null, pool), "vkCreateDescriptorPool")
        self.pool = pool[0]
        sets = ffi.new("VkDescriptorSet[]", max(n, 1))
        if not n:
            return sets
        layouts = ffi.new("VkDescriptorSetLayout[]", [ds.kernel.set_layout for ds in dispatches])
        ai = ffi.new("VkDescriptorSetAllocateInfo*")
        ai.sType = vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO
        ai.descriptorPool, ai.descriptorSetCount, ai.pSetLayouts = self.pool, n, layouts
        _check(lib.vkAllocateDescriptorSets(d, ai, sets), "vkAllocateDescriptorSets")
        infos = ffi.new("VkDescriptorBufferInfo[]", n_bind)
        texel_views = ffi.new("VkBufferView[]", max(n_texel, 1))
        writes = ffi.new("VkWriteDescriptorSet[]", n + 2 * n_texel)
        k = nw = nt = 0
        for i, (ds, o) in enumerate(zip(dispatches, offs)):
            # one write per run of storage bindings: a count past one binding continues
            # into the next (same type and stage flags); one per texel
            w = None
            for j in range(len(ds.views) + 1):
                fmt = ds.kernel.texels[j - 1] if j and ds.kernel.texels else None
                if fmt is not None:
                    w, v = writes[nw], ds.views[j - 1]
                    nw += 1
                    w.sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
                    w.dstSet, w.dstBinding, w.dstArrayElement = sets[i], j, 0
                    w.descriptorCount = 1
                    w.descriptorType = vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
                    texel_views[nt] = self._texel_view(v, fmt, ds.kernel.name)
                    w.pTexelBufferView = texel_views + nt
                    nt += 1
                    w = None
                    k += 1
                    continue
                if w is None:
                    w = writes[nw]
                    nw += 1
                    w.sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
                    w.dstSet, w.dstBinding, w.dstArrayElement = sets[i], j, 0
                    w.descriptorCount = 0
                    w.descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
                    w.pBufferInfo = infos + k
                w.descriptorCount += 1
                inf = infos[k]
                if j == 0:
                    inf.buffer, inf.offset, inf.range = mb.block.buffer, mb.offset + o * 4, max(ds.meta.size, 1) * 4
                else:
                    v = ds.views[j - 1]
                    inf.buffer, inf.offset, inf.range = v.vkbuf, v.offset, max(v.nbytes, 4)
                    if inf.range > limit and ds.kernel.program.bindings[j - 1].address:
                        # reached by address (`program.Binding.address`): the kernel does not
                        # read the descriptor, which must still be valid
                        inf.range = limit
                k += 1
        lib.vkUpdateDescriptorSets(d, nw, writes, 0, null)
        return sets

    def _record(self, items: list, dispatches: list, sets, profile: bool) -> None:
        """The command buffer: zeroed counters, the meta copy (one-shot recordings), then
        every dispatch, behind a barrier only where it meets a hazard (`barriers_before`);
        with profile, every dispatch alone between timestamps (a loop's body timed in
        its first step only)."""
        ffi, lib, null = vk.ffi, vk.lib, vk.ffi.NULL
        dev = self.rt.dev
        d = dev.device
        n = len(dispatches)
        cbi = ffi.new("VkCommandBufferAllocateInfo*")
        cbi.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO
        cbi.commandPool, cbi.level, cbi.commandBufferCount = dev.command_pool, vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1
        bi = ffi.new("VkCommandBufferBeginInfo*")
        bi.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO
        # a replayed recording may be submitted again before its last submission finished
        # (asynchronous jit calls)
        bi.flags = vk.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT if self.replayed else 0
        self._all_cbs = []

        def begin():
            arr = ffi.new("VkCommandBuffer[1]")
            _check(lib.vkAllocateCommandBuffers(d, cbi, arr), "vkAllocateCommandBuffers")
            self._all_cbs.append(arr)
            lib.vkBeginCommandBuffer(arr[0], bi)
            return arr[0]
        cb = self.cb = begin()
        self._cbs = self._all_cbs[0]
        self.segments: list = []
        chunks: dict[int, list] = {}      # id(WhileLoop) -> its chunk command buffers
        if profile:
            # a timestamp before the first dispatch and after each, every dispatch behind
            # a barrier: each interval is one kernel alone
            self.query_pool = vk.vkCreateQueryPool(d, vk.VkQueryPoolCreateInfo(
                queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=n + 1), None)
            lib.vkCmdResetQueryPool(cb, self.query_pool, 0, n + 1)
        for ds in dispatches:     # counters a dispatch counts from zero (`merge`)
            for v in ds.zero:
                lib.vkCmdFillBuffer(cb, v.vkbuf, v.offset, v.nbytes, 0)
        if self.meta_in_cb:
            mb, mh = self.meta_buf, self.meta_host
            region = ffi.new("VkBufferCopy*")
            region.srcOffset, region.dstOffset, region.size = mh.offset, mb.offset, self.meta_total * 4
            lib.vkCmdCopyBuffer(cb, mh.block.buffer, mb.block.buffer, 1, region)
        barrier = ffi.new("VkMemoryBarrier*")
        barrier.sType = vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER
        barrier.srcAccessMask, barrier.dstAccessMask = _BARRIER_SRC, _BARRIER_DST
        compute = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
        host = vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | vk.VK_PIPELINE_STAGE_HOST_BIT

        def opening():
            # writes of earlier submissions and of the host become visible here
            lib.vkCmdPipelineBarrier(cb, host, compute, 0, 1, barrier, 0, null, 0, null)

        def closing():
            # results become visible to the host and to later transfers
            lib.vkCmdPipelineBarrier(cb, compute | vk.VK_PIPELINE_STAGE_TRANSFER_BIT, host,
                                     0, 1, barrier, 0, null, 0, null)
        opening()
        self.barriers = 0
        maxx, maxy = dev.max_workgroup_count[0], dev.max_workgroup_count[1]
        if profile:
            lib.vkCmdWriteTimestamp(cb, compute, self.query_pool, 0)
        bind = vk.VK_PIPELINE_BIND_POINT_COMPUTE
        index = {id(ds): q for q, ds in enumerate(dispatches)}
        every = vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT
        region = ffi.new("VkBufferCopy*")

        hazards: dict[int, list] = {}      # per item list: barriers_before, computed once

        def plain(cs):
            return [(src.vkbuf, dst.vkbuf, src.offset, dst.offset, ss, dd, dd or dst.nbytes)
                    for src, dst, ss, dd in cs]

        def copies(cs, i):
            for sb, db, so, do, ss, dd, n in cs:
                region.srcOffset, region.dstOffset, region.size = so + i * ss, do + i * dd, n
                lib.vkCmdCopyBuffer(cb, sb, db, 1, region)

        def full():
            lib.vkCmdPipelineBarrier(cb, every, every, 0, 1, barrier, 0, null, 0, null)
            self.barriers += 1

        def overlap(a, b):
            return a.region == b.region and a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes

        def loop(lp: Loop, stamp: bool) -> None:
            """before; then per step: pre copies, the body, post copies. A step's post
            copies and the next step's pre copies share one barrier interval unless a
            pre copy reads what a post copy writes (a carry saved as a step output)."""
            zero = [v for ds in flat(lp.body) for v in ds.zero]
            split = any(overlap(a, b) for p_ in lp.pre for q in lp.post
                        for a, b in ((p_[0], q[1]), (p_[1], q[0]), (p_[1], q[1])))
            pre, post, T = plain(lp.pre), plain(lp.post), lp.length
            step = (lambda t: T - 1 - t) if lp.reverse else (lambda t: t)

            def start(t):
                for v in zero:
                    lib.vkCmdFillBuffer(cb, v.vkbuf, v.offset, v.nbytes, 0)
                copies(pre, step(t))
            full()
            copies(plain(lp.before), 0)
            if profile and stamp and not T:     # a loop of no steps: its kernels take no time
                for ds in flat(lp.body):
                    lib.vkCmdWriteTimestamp(cb, compute, self.query_pool, index[id(ds)] + 1)
            if T:
                full()
                start(0)
            for t in range(T):
                full()
                emit(lp.body, stamp and t == 0)
                full()
                copies(post, step(t))
                if t + 1 < T:
                    if split:
                        full()
                    start(t + 1)
            full()
            for v in zero:          # counters left as later dispatches expect them
                lib.vkCmdFillBuffer(cb, v.vkbuf, v.offset, v.nbytes, 0)
            full()

        def while_step(lp: WhileLoop, stamp: bool) -> None:
            for v in (v for ds in flat(lp.body) for v in ds.zero):
                lib.vkCmdFillBuffer(cb, v.vkbuf, v.offset, v.nbytes, 0)
            full()
            emit(lp.body, stamp)
            full()
            copies(plain(lp.post), 0)

        def while_(lp: WhileLoop, stamp: bool) -> None:
            """before and one step here; then this command buffer ends, the host reads
            the flag and runs chunks while it holds (`_WhileRun`), and a new one begins."""
            nonlocal cb
            full()
            copies(plain(lp.before), 0)
            while_step(lp, stamp)
            full()
            closing()
            _check(lib.vkEndCommandBuffer(cb), "vkEndCommandBuffer")
            run = chunks.get(id(lp))
            if run is None:
                outer, made = cb, []
                for k in _dispatch.WHILE_CHUNKS:
                    cb = begin()
                    opening()
                    for _ in range(k):
                        while_step(lp, False)
                    full()
                    closing()
                    _check(lib.vkEndCommandBuffer(cb), "vkEndCommandBuffer")
                    made.append((k, cb))
                cb = outer
                run = chunks[id(lp)] = _WhileRun(lp, made)
            self.segments += [cb, run]
            cb = begin()
            opening()

        def emit(items: list, stamp: bool) -> None:
            hz = hazards.get(id(items))
            if hz is None:
                hz = hazards[id(items)] = barriers_before(items)
            for ds, hazard in zip(items, hz):
                if isinstance(ds, WhileLoop):
                    while_(ds, stamp)
                    continue
                if isinstance(ds, Loop):
                    loop(ds, stamp)
                    continue
                q = index[id(ds)]
                if (profile and stamp) or hazard:
                    lib.vkCmdPipelineBarrier(cb, compute, compute, 0, 1, barrier, 0, null, 0, null)
                    self.barriers += 1
                lib.vkCmdBindPipeline(cb, bind, ds.kernel.pipeline)
                lib.vkCmdBindDescriptorSets(cb, bind, ds.kernel.layout, 0, 1, sets + q, 0, null)
                if ds.kernel.program.push_bytes:
                    self._push_addresses(cb, ds)
                gx = min(ds.groups, maxx)
                gy = -(-ds.groups // gx)
                if gy > maxy:
                    raise ValueError(f"{ds.kernel.name}: {ds.groups} workgroups exceed the device grid")
                lib.vkCmdDispatch(cb, gx, gy, 1)
                if profile and stamp:
                    lib.vkCmdWriteTimestamp(cb, compute, self.query_pool, q + 1)
        emit(items, True)
        # results become visible to the host and to later transfers
        lib.vkCmdPipelineBarrier(cb, compute, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | vk.VK_PIPELINE_STAGE_HOST_BIT,
                                 0, 1, barrier, 0, null, 0, null)
        _check(lib.vkEndCommandBuffer(cb), "vkEndCommandBuffer")
        self.segments.append(cb)
        if len(self.segments) > 1:
            self.cb = None          # several submissions: `run`
        # the nested recorders refer to each other (and to self) through their cells:
        # break that cycle so a dropped recording is freed at once, not at the next gc
        emit = loop = while_ = while_step = begin = None

    def _push_addresses(self, cb, ds: Dispatch) -> None:
        """Push the device addresses of a dispatch's bindings reached by address, in
        binding order (`program.Binding.address`)."""
        ffi, lib = vk.ffi, vk.lib
        prog = ds.kernel.program
        info = ffi.new("VkBufferDeviceAddressInfo*")
        info.sType = vk.VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO
        addrs = []
        for i in prog.addresses:
            v = ds.views[i]
            info.buffer = v.vkbuf
            a = lib.vkGetBufferDeviceAddress(self.rt.dev.device, info)
            if not a or (a + v.offset) % 16:
                raise AssertionError(f"{prog.name}: operand {i} by address at {a:#x} + {v.offset} is not "
                                     f"16-byte aligned, or its buffer has no address (a lowering bug)")
            addrs.append(a + v.offset)
        data = ffi.new("uint64_t[]", addrs)
        lib.vkCmdPushConstants(cb, ds.kernel.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, prog.push_bytes, data)

    def _texel_view(self, v: View, fmt: int, name: str):
        """A buffer view of v's whole texels, owned by this recording."""
        tb = TEXEL_BYTES[fmt]
        if v.offset % max(self.rt.dev.texel_alignment, tb) or v.nbytes < tb:
            raise AssertionError(f"{name}: a texel operand at byte offset {v.offset} ({v.nbytes} bytes) "
                                 f"is not aligned to {self.rt.dev.texel_alignment} (a lowering bug)")
        view = vk.vkCreateBufferView(self.rt.dev.device, vk.VkBufferViewCreateInfo(
            buffer=v.vkbuf, format=fmt, offset=v.offset, range=v.nbytes // tb * tb), None)
        self._views.append(view)
        return view

    def submit(self) -> None:
        """Run the recording and wait."""
        self.run([], [], True)

    def run(self, before: list, after: list, wait: bool = True) -> int:
        """Submit command buffers `before`, the recording, then `after`; the ticket of the
        last submission. With while loops, every submission but the last waits (the host
        reads a loop's predicate between them)."""
        rt, segs = self.rt, self.segments
        if len(segs) == 1:
            return rt.submit(before + [segs[0]] + after, wait=wait)
        rt.submit(before + [segs[0]], wait=True)
        t = 0
        for i in range(1, len(segs), 2):
            segs[i].run(rt)
            last = i + 2 >= len(segs)
            t = rt.submit([segs[i + 1]] + (after if last else []), wait=wait or not last)
        return t

    def kernel_times(self) -> list[tuple[str, float]]:
        """(kernel name, seconds) per dispatch of the last submission of a recording made
        with profile=True, each kernel timed alone (behind a barrier)."""
        if self.query_pool is None:
            raise ValueError("kernel_times: this recording was not made with profile=True")
        n = self.n_dispatches + 1
        data = vk.ffi.new("uint64_t[]", n)
        vk.vkGetQueryPoolResults(self.rt.dev.device, self.query_pool, 0, n, 8 * n, data, 8,
                                 vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        tick = self.rt.dev.timestamp_period * 1e-9
        return [(name, (data[i + 1] - data[i]) * tick) for i, name in enumerate(self.names)]

    def __del__(self):
        try:
            rt = self.rt
            d, qp, pool, views = rt.dev.device, self.query_pool, self.pool, self._views
        except Exception:
            return

        def destroy():    # once no running submission can use them
            if qp is not None:
                vk.vkDestroyQueryPool(d, qp, None)
            vk.lib.vkDestroyDescriptorPool(d, pool, vk.ffi.NULL)
            for view in views:
                vk.vkDestroyBufferView(d, view, None)
        try:
            for cbs in self._all_cbs:
                rt.free_commands(cbs)
            rt.defer(destroy)
        except Exception:
            pass


