"""Running a Graph: a liveness buffer plan, lowering to dispatches, one command buffer.

0. schedule: `fusion.schedule` groups the nodes into kernels (fused elementwise regions,
   opaque operators with fused prologues/epilogues); with fusion off, one per node.
1. plan: every value a kernel writes gets an offset in one arena by liveness over that
   schedule (first fit among ranges free at that step), so the arena's size is the planned
   peak and fused-away values take none; graph outputs get buffers of their own, inputs
   and constants are used where they are.
2. lower: each group turns into dispatches (kernel, meta ints, views): a region through
   `lower/elementwise.py:lower_region`, an operator through its kernel family.
3. record: one command buffer, a barrier only where a dispatch touches a range written
   (or read, for a write) since the last barrier; submit once; wait.
4. check: a kernel that can find an error the host must report (an int32 sum that does
   not fit int32, an out-of-range index under `vkml.debug.checks`) binds a device check
   (`LowerCtx.check`): a few host-mapped words it sets with atomics. The host zeroes them
   before each submission and reads them after the wait (`arm`, `raise_checks`), so the
   error is raised when the program's results are produced: at an eager operator's call,
   at a jitted call's return. A program without such kernels has no checks and pays nothing.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..trace import dtypes as dt
from ..trace.graph import Graph, Node
from ..trace.ops import OpKind, SPECS
from . import fusion, merge
from .kernels import Kernel
from .lower import elementwise
from .memory import ALIGN, Buffer
from .vk import vk


@dataclass(frozen=True)
class View:
    """A tensor's place on the device: buffer range plus shape and dtype (contiguous)."""
    vkbuf: object
    offset: int
    nbytes: int
    region: int          # identity of the underlying block, for hazard tracking
    shape: tuple
    dtype: np.dtype

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def sub(self, byte_offset: int, nbytes: int, shape: tuple, dtype=None) -> "View":
        return View(self.vkbuf, self.offset + byte_offset, nbytes, self.region, shape,
                    np.dtype(dtype or self.dtype))


def view_of(buf: Buffer, shape, dtype) -> View:
    return View(buf.block.buffer, buf.offset, buf.nbytes, id(buf.block), tuple(shape), np.dtype(dtype))


@dataclass
class Dispatch:
    kernel: Kernel
    meta: np.ndarray
    views: list
    writes: tuple         # indices into views that the kernel writes
    groups: int
    zero: tuple = ()      # views the recording fills with zeros first (`merge` counters)


CHECK_WORDS = 4      # int32 words of one device check: [flag, then what the kernel records]


@dataclass
class Check:
    """One device check of a lowered program: CHECK_WORDS host-mapped int32 words a kernel
    sets (word 0 non-zero: an error) and `error(words)`, the exception to raise then."""
    buf: Buffer
    error: Callable[[np.ndarray], BaseException]

    def words(self) -> np.ndarray:
        b = self.buf
        return b.block.mapped[b.offset:b.offset + 4 * CHECK_WORDS].view(np.int32)


def arm(checks: Sequence[Check]) -> None:
    """Zero the checks' words before a submission (host writes are visible to the
    submission that follows them)."""
    for c in checks:
        c.words()[:] = 0


def raise_checks(checks: Sequence[Check]) -> None:
    """After the submission's wait: raise the first check that a kernel set."""
    for c in checks:
        w = c.words()
        if w[0]:
            raise c.error(w.copy())


class LowerCtx:
    """What a kernel family's lowering function uses to emit work."""

    def __init__(self, rt, scratch: View | None = None, checks: list | None = None):
        self.rt = rt
        self.dev = rt.dev
        self.kernels = rt.kernels
        self.scratch = scratch
        self.dispatches: list[Dispatch] = []
        self.checks: list[Check] = [] if checks is None else checks

    def check(self, error: Callable[[np.ndarray], BaseException]) -> View:
        """A device check for a kernel to bind (as an `int` buffer it writes, with atomics):
        the host raises error(words) after the run when the kernel set words[0]."""
        buf = self.rt.allocator.alloc(4 * CHECK_WORDS, "device check", host=True)
        self.checks.append(Check(buf, error))
        return view_of(buf, (CHECK_WORDS,), dt.int32)

    def kernel(self, name: str, body: str, n_tensors: int, local_size: int = 256,
               texels: tuple = (), spec: tuple = ()) -> Kernel:
        # compiled once `lower_graph` knows which kernels `merge` leaves standing
        return self.kernels.get(name, body, n_tensors, local_size, texels, spec,
                                build=not merge.active(self.dev))

    def dispatch(self, kernel: Kernel, meta: Sequence[int], views: Sequence[View],
                 writes: Sequence[int] = (0,), groups: int | None = None, threads: int | None = None):
        """Queue a dispatch; give either workgroup count or thread count (rounded up)."""
        if groups is None:
            groups = -(-int(threads) // kernel.local_size)
        if groups <= 0:
            return
        assert len(views) == kernel.n_tensors, (kernel.name, len(views), kernel.n_tensors)
        m = np.asarray(list(meta) if not isinstance(meta, np.ndarray) else meta, dtype=np.int64)
        if m.size and (m.max() > 2**31 - 1 or m.min() < -2**31):
            raise ValueError(f"{kernel.name}: an index or size exceeds the 32-bit range kernels use")
        self.dispatches.append(Dispatch(kernel, m.astype(np.int32), list(views), tuple(writes), int(groups)))


# kernel family name (OpSpec.kernel) -> module in vkml.vulkan.lower
_FAMILIES: dict[str, object] = {}


def family(name: str):
    """The lowering module for a kernel family (imported on first use)."""
    mod = _FAMILIES.get(name)
    if mod is None:
        mod = importlib.import_module(f"vkml.vulkan.lower.{name}")
        _FAMILIES[name] = mod
    return mod


def _nbytes(n: Node) -> int:
    return n.size * dt.itemsize(n.dtype)


def _round(n: int) -> int:
    return (max(n, 4) + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class Plan:
    """Where each value lives while a graph runs."""
    offsets: dict = field(default_factory=dict)      # node id -> arena byte offset
    scratch: dict = field(default_factory=dict)      # node id -> (offset, bytes)
    arena_bytes: int = 0                             # the planned peak of intermediates
    output_bytes: int = 0
    input_bytes: int = 0
    groups: list = field(default_factory=list, repr=False)   # the kernel schedule planned over

    @property
    def peak_bytes(self) -> int:
        """Inputs + outputs + the arena: every device byte the run touches at its peak."""
        return self.arena_bytes + self.output_bytes + self.input_bytes


def _scratch(g) -> int:
    sc = getattr(family(SPECS[g.node.op].kernel), "scratch_bytes", None) if g.node is not None else None
    if sc is None:
        return 0
    return sc(g.node) if g.prologue is None else sc(g.node, prologue=g.prologue)


def plan(graph: Graph, groups: list | None = None) -> Plan:
    """First-fit liveness plan of the arena over the kernel schedule (`fusion.schedule`,
    fused unless fusion is off): only values a kernel writes take space; a value lives
    from the step of its kernel to the last step reading it."""
    if groups is None:
        groups = fusion.schedule(graph)
    last = {}
    for t, g in enumerate(groups):
        for i in g.reads:
            last[i.id] = t
    outs = {o.id for o in graph.outputs}
    p = Plan(groups=groups)
    seen_inputs = set()
    for n in graph.nodes:
        if n.op in (OpKind.Input, OpKind.Const) and n.id not in seen_inputs:
            p.input_bytes += _round(_nbytes(n))
            seen_inputs.add(n.id)
    live: list[tuple[int, int, int]] = []   # (offset, size, free_after_step)
    for t, g in enumerate(groups):
        n = g.out
        live = [r for r in live if r[2] >= t]

        def place(size: int, until: int) -> int:
            live.sort()
            off = 0
            for o, s, _ in live:
                if o - off >= size:
                    break
                off = max(off, o + s)
            live.append((off, size, until))
            p.arena_bytes = max(p.arena_bytes, off + size)
            return off

        sb = _scratch(g)
        if sb:
            p.scratch[n.id] = (place(_round(sb), t), sb)
        if n.id in outs:
            p.output_bytes += _round(_nbytes(n))
        else:
            p.offsets[n.id] = place(_round(_nbytes(n)), last.get(n.id, t))
    return p


class Lowered:
    """A graph lowered onto concrete buffers: the dispatches and where each output lives."""

    def __init__(self, plan: Plan, dispatches: list, outputs: list, arena: Buffer | None, held: list,
                 kernel_count: int | None = None, checks: list | None = None):
        self.plan, self.dispatches, self.outputs, self.arena, self.held = plan, dispatches, outputs, arena, held
        self.checks: list[Check] = checks or []     # device checks, read after each run
        # kernels after fusion, before `merge` ran independent ones as one dispatch
        self.kernel_count = len(dispatches) if kernel_count is None else kernel_count


def _lower_group(g, views: dict, out: View, ctx: LowerCtx) -> None:
    if g.node is None:
        elementwise.lower_region(g.region, [views[l.id] for l in g.region.leaves], out, ctx)
    elif g.prologue is not None or g.epilogue is not None:
        pro = None if g.prologue is None else (g.prologue, [views[l.id] for l in g.prologue.leaves])
        epi = None if g.epilogue is None else (
            g.epilogue, [None if l is g.node else views[l.id] for l in g.epilogue.leaves])
        if g.operands is not None:     # a MatMul's epilogue, its transposes folded or not
            family(SPECS[g.node.op].kernel).lower(g.node, [views[i.id] for i in g.operands], out, ctx,
                                                  transposed=g.transposed, epilogue=epi)
            return
        ins = [views[i.id] for i in g.node.inputs] if pro is None else [None]
        family(SPECS[g.node.op].kernel).lower(g.node, ins, out, ctx, prologue=pro, epilogue=epi)
    elif g.operands is not None:
        family(SPECS[g.node.op].kernel).lower(g.node, [views[i.id] for i in g.operands], out, ctx,
                                              transposed=g.transposed)
    else:
        family(SPECS[g.node.op].kernel).lower(g.node, [views[i.id] for i in g.node.inputs], out, ctx)


class Placeholder:
    """Stands in for a Buffer that a graph is lowered against before the real one is known
    (a jitted function's arguments and results): its views carry a region of their own,
    which `rebind` swaps for a real buffer's."""
    __slots__ = ("block", "offset", "nbytes", "capacity")

    class _Block:
        __slots__ = ("buffer", "mapped", "__weakref__")

        def __init__(self):
            self.buffer, self.mapped = None, None

    def __init__(self, nbytes: int):
        self.block, self.offset, self.nbytes, self.capacity = Placeholder._Block(), 0, nbytes, nbytes


def rebind(dispatches: list, binding: dict) -> list:
    """The dispatches with every view of a Placeholder moved onto its buffer.

    binding: id(placeholder.block) -> Buffer (or anything with block, offset)."""
    out = []
    for ds in dispatches:
        views = []
        for v in ds.views:
            b = binding.get(v.region)
            if b is not None:
                v = View(b.block.buffer, b.offset + v.offset, v.nbytes, id(b.block), v.shape, v.dtype)
            views.append(v)
        out.append(Dispatch(ds.kernel, ds.meta, views, ds.writes, ds.groups, ds.zero))
    return out


def lower_graph(rt, graph: Graph, inputs: Sequence[Buffer], output_alloc=None) -> Lowered:
    """Plan the graph's kernel schedule, allocate its arena and output buffers, lower
    every group of the schedule to dispatches. output_alloc(nbytes, what) replaces the
    allocator for the outputs (jit lowers against Placeholders)."""
    if len(inputs) != len(graph.inputs):
        raise ValueError(f"graph takes {len(graph.inputs)} inputs, got {len(inputs)}")
    p = plan(graph)
    # the arena is bound piecewise (one view per tensor), so only each tensor must fit
    # a storage-buffer binding, not the arena as a whole
    for n in graph.nodes:
        if n.id in p.offsets:
            rt.allocator._check(_nbytes(n), SPECS[n.op].name)
    arena = rt.allocator.alloc(p.arena_bytes, "intermediates", bound=False) if p.arena_bytes else None
    views: dict[int, View] = {}
    held: dict[int, Buffer] = {}
    for node, buf in zip(graph.inputs, inputs):
        views[node.id] = view_of(buf, node.shape, node.dtype)
        held[node.id] = buf
    for n in graph.nodes:
        if n.op is OpKind.Const and n.id not in views:
            buf = n.attrs["value"]._buf
            views[n.id] = view_of(buf, n.shape, n.dtype)
            held[n.id] = buf
        elif n.op is OpKind.Input and n.id not in views:
            raise ValueError(f"input {n} has no value")
    results: dict[int, Buffer] = {}
    dispatches: list[Dispatch] = []
    checks: list[Check] = []
    for g in p.groups:
        n = g.out
        if n.id in p.offsets:
            v = View(arena.block.buffer, arena.offset + p.offsets[n.id], _nbytes(n), id(arena.block),
                     n.shape, n.dtype)
        else:
            b = (output_alloc or rt.allocator.alloc)(_nbytes(n), SPECS[n.op].name)
            results[n.id] = b
            v = view_of(b, n.shape, n.dtype)
        views[n.id] = v
        if n.size == 0:
            continue
        scratch = None
        if n.id in p.scratch:
            off, sb = p.scratch[n.id]
            scratch = View(arena.block.buffer, arena.offset + off, sb, id(arena.block), (sb // 4,),
                           dt.int32)
        ctx = LowerCtx(rt, scratch, checks)
        _lower_group(g, views, v, ctx)
        dispatches.extend(ctx.dispatches)
    outs = [results[o.id] if o.id in results else held[o.id] for o in graph.outputs]
    n_kernels = len(dispatches)
    dispatches = [d if d.kernel.built else Dispatch(rt.kernels.build(d.kernel), d.meta, d.views, d.writes,
                                                    d.groups, d.zero)
                  for d in merge.merge(rt, dispatches)]
    return Lowered(p, dispatches, outs, arena, list(held.values()), n_kernels, checks)


def _check(result: int, what: str) -> None:
    if result != 0:
        raise RuntimeError(f"vkml: {what} failed with VkResult {result}")


def barriers_before(dispatches: list) -> list[bool]:
    """Per dispatch: does it need a barrier first? Yes where it reads or writes a byte
    range written since the last barrier, or writes one read since then."""
    def hit(a, bs):
        return any(a[0] == b[0] and a[1] < b[2] and b[1] < a[2] for b in bs)
    out, written, read = [], [], []
    for ds in dispatches:
        rr = [(v.region, v.offset, v.offset + v.nbytes) for v in ds.views]
        ws = [rr[i] for i in ds.writes]
        rs = [r for i, r in enumerate(rr) if i not in ds.writes]
        need = any(hit(r, written) for r in rs + ws) or any(hit(w, read) for w in ws)
        if need:
            written, read = [], []
        out.append(need)
        written += ws
        read += rs
    return out


_BARRIER_SRC = (vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT | vk.VK_ACCESS_HOST_WRITE_BIT)
_BARRIER_DST = (vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_READ_BIT
                | vk.VK_ACCESS_HOST_READ_BIT)


class Recording:
    """Dispatches bound to descriptor sets and recorded into one command buffer.

    Built once; `submit()` can run it again and again (jit replays it).
    """

    def __init__(self, rt, dispatches: list[Dispatch], like: "Recording | None" = None,
                 profile: bool = False, replayed: bool = False):
        self.rt = rt
        self.names = [ds.kernel.name for ds in dispatches]
        self.query_pool = None
        dev = rt.dev
        d = dev.device
        self.n_dispatches = len(dispatches)
        if like is not None:
            # the same dispatches on other buffers (jit rebinding): the same meta
            self.meta_buf, self.meta_host, offs, total = like.meta_buf, like.meta_host, like.meta_offs, like.meta_total
        else:
            align = max(dev.storage_alignment, 16) // 4
            offs, total = [], 0
            for ds in dispatches:
                offs.append(total)
                total += -(-max(ds.meta.size, 1) // align) * align
            # Every invocation reads its dispatch's meta, so it lives in device-local memory:
            # read from host memory (over PCIe on a discrete GPU) it capped a copy kernel on
            # the H200 at a tenth of its bandwidth. Where device memory is not mapped, it is
            # copied there from a host staging range.
            self.meta_buf = rt.allocator.alloc(total * 4, "meta")
            mb = self.meta_buf
            self.meta_host = mb if mb.block.mapped is not None else rt.allocator.alloc(total * 4, "meta", host=True)
            mh = self.meta_host
            mv = mh.block.mapped[mh.offset:mh.offset + total * 4].view(np.int32)
            for ds, o in zip(dispatches, offs):
                mv[o:o + ds.meta.size] = ds.meta
        self.meta_offs, self.meta_total = offs, total
        mb, mh = self.meta_buf, self.meta_host
        # A recording that is replayed (jit) uploads its meta once, now; a one-shot one
        # (an eager operator) copies it at the start of its own command buffer instead of
        # paying a submission for it. Recordings sharing meta share that upload.
        if like is not None:
            self.meta_in_cb = like.meta_in_cb
        else:
            self.meta_in_cb = mh is not mb and not replayed
            if mh is not mb and replayed:
                rt._copy(mh, mb, total * 4)
        n_bind = sum(len(ds.views) + 1 for ds in dispatches)
        n_texel = sum(f is not None for ds in dispatches for f in ds.kernel.texels)
        self._views = []
        # Raw cffi calls (the `vulkan` wrappers cost 15-25 us each on a GPU host, and an
        # eager operator makes a recording every time)
        ffi, lib, null = vk.ffi, vk.lib, vk.ffi.NULL
        n = len(dispatches)
        with dev.lock:
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
            if n:
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
                    # one write per run of storage bindings: a count past one binding
                    # continues into the next (same type and stage flags); one per texel
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
                        k += 1
                lib.vkUpdateDescriptorSets(d, nw, writes, 0, null)
            cbi = ffi.new("VkCommandBufferAllocateInfo*")
            cbi.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO
            cbi.commandPool, cbi.level, cbi.commandBufferCount = dev.command_pool, vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1
            self._cbs = ffi.new("VkCommandBuffer[1]")
            _check(lib.vkAllocateCommandBuffers(d, cbi, self._cbs), "vkAllocateCommandBuffers")
            cb = self.cb = self._cbs[0]
            bi = ffi.new("VkCommandBufferBeginInfo*")
            bi.sType = vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO
            lib.vkBeginCommandBuffer(cb, bi)
            if profile:
                # a timestamp before the first dispatch and after each, every dispatch
                # behind a barrier: each interval is one kernel alone
                self.query_pool = vk.vkCreateQueryPool(d, vk.VkQueryPoolCreateInfo(
                    queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=n + 1), None)
                lib.vkCmdResetQueryPool(cb, self.query_pool, 0, n + 1)
            for ds in dispatches:     # counters a dispatch counts from zero (`merge`)
                for v in ds.zero:
                    lib.vkCmdFillBuffer(cb, v.vkbuf, v.offset, v.nbytes, 0)
            if self.meta_in_cb:
                region = ffi.new("VkBufferCopy*")
                region.srcOffset, region.dstOffset, region.size = mh.offset, mb.offset, total * 4
                lib.vkCmdCopyBuffer(cb, mh.block.buffer, mb.block.buffer, 1, region)
            barrier = ffi.new("VkMemoryBarrier*")
            barrier.sType = vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER
            barrier.srcAccessMask, barrier.dstAccessMask = _BARRIER_SRC, _BARRIER_DST
            compute = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
            # writes of earlier submissions and of the host become visible here
            lib.vkCmdPipelineBarrier(cb, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | vk.VK_PIPELINE_STAGE_HOST_BIT,
                                     compute, 0, 1, barrier, 0, null, 0, null)
            self.barriers = 0
            maxx, maxy = dev.max_workgroup_count[0], dev.max_workgroup_count[1]
            if profile:
                lib.vkCmdWriteTimestamp(cb, compute, self.query_pool, 0)
            bind = vk.VK_PIPELINE_BIND_POINT_COMPUTE
            for q, (ds, hazard) in enumerate(zip(dispatches, barriers_before(dispatches))):
                if profile or hazard:
                    lib.vkCmdPipelineBarrier(cb, compute, compute, 0, 1, barrier, 0, null, 0, null)
                    self.barriers += 1
                lib.vkCmdBindPipeline(cb, bind, ds.kernel.pipeline)
                lib.vkCmdBindDescriptorSets(cb, bind, ds.kernel.layout, 0, 1, sets + q, 0, null)
                gx = min(ds.groups, maxx)
                gy = -(-ds.groups // gx)
                if gy > maxy:
                    raise ValueError(f"{ds.kernel.name}: {ds.groups} workgroups exceed the device grid")
                lib.vkCmdDispatch(cb, gx, gy, 1)
                if profile:
                    lib.vkCmdWriteTimestamp(cb, compute, self.query_pool, q + 1)
            # results become visible to the host and to later transfers
            lib.vkCmdPipelineBarrier(cb, compute, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | vk.VK_PIPELINE_STAGE_HOST_BIT,
                                     0, 1, barrier, 0, null, 0, null)
            _check(lib.vkEndCommandBuffer(cb), "vkEndCommandBuffer")

    def _texel_view(self, v: View, fmt: int, name: str):
        """A buffer view of v's whole texels, owned by this recording."""
        from .kernels import TEXEL_BYTES
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
        self.rt.submit([self.cb])

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
            d = self.rt.dev.device
            if self.query_pool is not None:
                vk.vkDestroyQueryPool(d, self.query_pool, None)
            self.rt.free_commands(self._cbs)
            vk.lib.vkDestroyDescriptorPool(d, self.pool, vk.ffi.NULL)
            for view in self._views:
                vk.vkDestroyBufferView(d, view, None)
        except Exception:
            pass


class Executor:
    """Runs graphs on one device."""

    def __init__(self, rt):
        self.rt = rt
        self.last_plan: Plan | None = None
        self.last_dispatch_count = 0
        self.last_kernel_count = 0      # before `merge`

    def run(self, graph: Graph, inputs: Sequence[Buffer]) -> list[Buffer]:
        """Execute graph with the given input buffers; returns one Buffer per output."""
        low = lower_graph(self.rt, graph, inputs)
        self.last_plan = low.plan
        self.last_dispatch_count = len(low.dispatches)
        self.last_kernel_count = low.kernel_count
        if low.dispatches:
            arm(low.checks)
            Recording(self.rt, low.dispatches).submit()
            raise_checks(low.checks)
        return low.outputs
