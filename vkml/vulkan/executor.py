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
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from ..trace import dtypes as dt
from ..trace.graph import Graph, Node
from ..trace.ops import LOOPS, OpKind, SPECS, loop_outputs
from ..trace.shapes import size_of
from . import fusion, merge, precompile
from .split_k import max_k, split_k
from .widen import widen
from .dispatch import CHECK_WORDS, Check, Dispatch, Loop, View, arm, barriers_before, raise_checks, view_of
from .kernels import TEXEL_BYTES, Kernel
from .lower import elementwise, fill
from .memory import ALIGN, MAX_ELEMENTS, Buffer
from .program import Program, pack
from .recording import Recording

__all__ = ["CHECK_WORDS", "Check", "Dispatch", "View", "arm", "barriers_before", "raise_checks",
           "view_of", "Recording", "LowerCtx", "Plan", "plan", "lower_graph", "Placeholder", "rebind",
           "Executor", "Lowered", "family"]


class LowerCtx:
    """What a kernel family's lowering function uses to emit work."""

    def __init__(self, rt, scratch: View | None = None, checks: list | None = None):
        self.rt = rt
        self.dev = rt.dev
        self.profile = rt.dev.profile
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

    def kernel(self, program: Program) -> Kernel:
        """The kernel of a program; compiled once `lower_graph` knows which kernels `merge`
        leaves standing, all of them together (`KernelCache.build_all`)."""
        return self.kernels.get(program, build=False)

    def dispatch(self, kernel: Kernel, meta: Mapping | Sequence[int], views: Sequence[View],
                 writes: Sequence[int] | None = None, groups: int | None = None,
                 threads: int | None = None, heads: int | None = None) -> None:
        """Queue a dispatch; give either workgroup count or thread count (rounded up).
        meta: the program's fields by name (`program.Meta.pack`) or ints packed already.
        writes: the views the kernel writes (default: its bindings not read-only).
        heads: the loop heads one invocation runs at most, counting every iteration of
        every loop (`Dispatch.heads`); without it the dispatch is never merged."""
        if groups is None:
            groups = -(-int(threads) // kernel.local_size)
        if groups <= 0:
            return
        assert len(views) == kernel.n_tensors, (kernel.name, len(views), kernel.n_tensors)
        lim = self.dev.max_storage_buffer_range
        if any(v.nbytes > lim for v in views):
            kernel = self._addressed(kernel, views)
        prog = kernel.program
        m = pack(prog, meta)
        if m.size and (m.max() > 2**31 - 1 or m.min() < -2**31):
            raise ValueError(f"{kernel.name}: an index or size exceeds the 32-bit range kernels use")
        w = prog.writes if writes is None else tuple(writes)
        self.dispatches.append(Dispatch(kernel, m.astype(np.int32), list(views), w, int(groups),
                                        heads=None if heads is None else int(heads)))

    def _addressed(self, kernel: Kernel, views: Sequence[View]) -> Kernel:
        """The kernel's variant reaching the views past one storage-buffer binding by
        address (`Program.addressed`); every other dispatch keeps its descriptors."""
        prog, lim = kernel.program, self.dev.max_storage_buffer_range
        tex = prog.texels
        big = [i for i, v in enumerate(views) if v.nbytes > lim and not (tex and tex[i] is not None)]
        if not big:
            return kernel
        for i in big:
            v = views[i]
            if not self.dev.buffer_address or v.size > MAX_ELEMENTS:
                # the allocator refuses such tensors first (`Allocator._check`)
                self.rt.allocator._check(v.nbytes, kernel.name, v.size)
                raise AssertionError(f"{kernel.name}: operand {i} of {v.nbytes:,} bytes exceeds one binding")
        return self.kernel(prog.addressed(big))


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

    loop_bytes: int = 0                              # loop bodies' own arenas, results, slots

    @property
    def peak_bytes(self) -> int:
        """Inputs + outputs + the arena (and the loop bodies' memory): every device byte
        the run touches at its peak."""
        return self.arena_bytes + self.output_bytes + self.input_bytes + self.loop_bytes


def scan_parts(graph: Graph) -> dict[int, dict[int, Node]]:
    """Scan node id -> {result index: its Part node}."""
    out: dict[int, dict[int, Node]] = {}
    for n in graph.nodes:
        if n.op is OpKind.Part:
            out.setdefault(n.inputs[0].id, {})[n.attrs["index"]] = n
    return out


def _scratch(g) -> int:
    sc = getattr(family(SPECS[g.node.op].kernel), "scratch_bytes", None) if g.node is not None else None
    if sc is None:
        return 0
    return sc(g.node) if g.prologue is None else sc(g.node, prologue=g.prologue)


def plan(graph: Graph, groups: list | None = None, profile=None, chunk: int | None = None) -> Plan:
    """First-fit liveness plan of the arena over the kernel schedule (`fusion.schedule`
    for profile, default the current device's): only values a kernel writes take space;
    a value lives from the step of its kernel to the last step reading it. chunk: no
    value crosses a multiple of it (the arena is then allocated as chunks of at most
    that many bytes, one device allocation each)."""
    if groups is None:
        groups = fusion.schedule(graph, profile=profile)
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
    parts = scan_parts(graph)
    live: list[tuple[int, int, int]] = []   # (offset, size, free_after_step)
    for t, g in enumerate(groups):
        n = g.out
        live = [r for r in live if r[2] >= t]
        if n.op is OpKind.Part:
            continue                          # placed with its Scan

        def place(size: int, until: int) -> int:
            live.sort()

            def whole(off: int) -> int:       # off, or the next chunk if size would cross one
                if chunk and size <= chunk and off // chunk != (off + size - 1) // chunk:
                    return (off // chunk + 1) * chunk
                return off
            off = whole(0)
            for o, s, _ in live:
                if o - off >= size:
                    break
                off = whole(max(off, o + s))
            live.append((off, size, until))
            p.arena_bytes = max(p.arena_bytes, off + size)
            return off

        if n.op in LOOPS:
            # a Scan (While) writes all its results at its own step; one nothing reads
            # still needs room while the loop runs
            for k, (shape, dtype) in enumerate(loop_outputs(n.op, n.attrs)):
                pn = parts.get(n.id, {}).get(k)
                nb = _round(size_of(shape) * dt.itemsize(dtype))
                if pn is not None and pn.id in outs:
                    p.output_bytes += _round(_nbytes(pn))
                elif pn is not None:
                    p.offsets[pn.id] = place(nb, last.get(pn.id, t))
                else:
                    p.scratch[(n.id, k)] = (place(nb, t), nb)
            continue
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

    def __init__(self, plan: Plan, dispatches: list, outputs: list, arena: list, held: list,
                 kernel_count: int | None = None, checks: list | None = None):
        self.plan, self.dispatches, self.outputs, self.arena, self.held = plan, dispatches, outputs, arena, held
        self.checks: list[Check] = checks or []     # device checks, read after each run
        # kernels after fusion, before `merge` ran independent ones as one dispatch
        self.kernel_count = len(dispatches) if kernel_count is None else kernel_count
        # the program with its large new merged kernels, not yet built (`merge.tiers`)
        self.final: list | None = None


def _lower_group(g, views: dict, out: View, ctx: LowerCtx) -> None:
    if g.node is None and g.region.code[g.region.out][0] == "const":
        # a constant alone: its value in meta, so one fill kernel serves every value
        fill.fill_view(ctx, out, g.region.code[g.region.out][2])
    elif g.node is None:
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
    def move(v):
        b = binding.get(v.region)
        return v if b is None else View(b.block.buffer, b.offset + v.offset, v.nbytes, id(b.block),
                                        v.shape, v.dtype)
    out = []
    for ds in dispatches:
        if isinstance(ds, Loop):
            out.append(ds.moved(move))
            continue
        views = []
        for v in ds.views:
            b = binding.get(v.region)
            if b is not None:
                v = View(b.block.buffer, b.offset + v.offset, v.nbytes, id(b.block), v.shape, v.dtype)
            views.append(v)
        out.append(replace(ds, views=views))
    return out


def lower_graph(rt, graph: Graph, inputs: Sequence[Buffer], output_alloc=None,
                later: bool = False) -> Lowered:
    """Plan the graph's kernel schedule, allocate its arena and output buffers, lower
    every group of the schedule to dispatches. output_alloc(nbytes, what) replaces the
    allocator for the outputs (jit lowers against Placeholders). later: the program will
    be called again, so its large new merged kernels may wait (`merge.tiers`: the
    Lowered's `final`)."""
    if len(inputs) != len(graph.inputs):
        raise ValueError(f"graph takes {len(graph.inputs)} inputs, got {len(inputs)}")
    # 16-bit floats: every family but the elementwise one computes them in float32
    graph = widen(graph, rt.dev.profile.fuse, rt.dev.profile.matmul_coop)
    # contractions longer than a driver's loop limit lets one kernel run, in chunks
    graph = split_k(graph, max_k(rt.dev.profile.loop_limit, rt.dev.subgroup_size))
    # no allocation holds more than `chunk`: a larger arena is several, each value in one
    chunk = min(rt.dev.max_allocation, rt.dev.max_buffer_size) // ALIGN * ALIGN
    p = plan(graph, profile=rt.dev.profile, chunk=chunk)
    # the arena is bound piecewise (one view per tensor), so only each tensor must be
    # one the device can hold (`Allocator._check`), not the arena as a whole
    for n in graph.nodes:
        if n.id in p.offsets or n.size > MAX_ELEMENTS:
            rt.allocator._check(_nbytes(n), SPECS[n.op].name, n.size)
    arena = [rt.allocator.alloc(min(chunk, p.arena_bytes - at), "intermediates", bound=False)
             for at in range(0, p.arena_bytes, chunk)]

    def in_arena(off: int, nbytes: int, shape, dtype) -> View:
        a = arena[off // chunk]
        return View(a.block.buffer, a.offset + off % chunk, nbytes, id(a.block), shape, dtype)
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
    parts = scan_parts(graph)

    def place(n: Node) -> View:
        if n.id in p.offsets:
            return in_arena(p.offsets[n.id], _nbytes(n), n.shape, n.dtype)
        b = (output_alloc or rt.allocator.alloc)(_nbytes(n), SPECS[n.op].name)
        results[n.id] = b
        return view_of(b, n.shape, n.dtype)
    for g in p.groups:
        n = g.out
        if n.op is OpKind.Part:
            continue                 # written by its Scan
        if n.op in LOOPS:
            outs_v = []
            for k, (shape, dtype) in enumerate(loop_outputs(n.op, n.attrs)):
                pn = parts.get(n.id, {}).get(k)
                if pn is not None:
                    views[pn.id] = place(pn)
                    outs_v.append(views[pn.id])
                else:
                    off, nb = p.scratch[(n.id, k)]
                    outs_v.append(in_arena(off, size_of(shape) * dt.itemsize(dtype), shape, dtype))
            low_loop = family("control").lower_scan if n.op is OpKind.Scan else family("control").lower_while
            loop = low_loop(rt, n, [views[i.id] for i in n.inputs], outs_v, checks, lower_graph)
            p.loop_bytes += sum(h.plan.peak_bytes - h.plan.input_bytes if isinstance(h, Lowered)
                                else h.nbytes for h in loop.held)
            dispatches.append(loop)
            continue
        v = place(n)
        views[n.id] = v
        if n.size == 0:
            continue
        scratch = None
        if n.id in p.scratch:
            off, sb = p.scratch[n.id]
            scratch = in_arena(off, sb, (sb // 4,), dt.int32)
        ctx = LowerCtx(rt, scratch, checks)
        _lower_group(g, views, v, ctx)
        dispatches.extend(ctx.dispatches)
    outs = [results[o.id] if o.id in results else held[o.id] for o in graph.outputs]
    n_kernels = len(dispatches)
    dispatches, final = merge.tiers(rt, dispatches, later=later)
    low = Lowered(p, build_dispatches(rt, dispatches), outs, arena, list(held.values()), n_kernels, checks)
    low.final = final
    return low


def build_dispatches(rt, dispatches: list) -> list:
    """dispatches with every kernel compiled (those not yet compiled together, on every
    core: `KernelCache.build_all`)."""
    kernels = [d for d in dispatches if not isinstance(d, Loop)]
    hints = ([precompile.texel_hint(d, TEXEL_BYTES) if d.kernel.texels else () for d in kernels]
             if precompile.wanted(rt.dev) else ())
    built = dict(zip(map(id, kernels), rt.kernels.build_all([d.kernel for d in kernels], hints)))
    return [d if isinstance(d, Loop) or d.kernel is built[id(d)] else
            replace(d, kernel=built[id(d)]) for d in dispatches]


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
