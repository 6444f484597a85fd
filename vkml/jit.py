"""Where tracing, transforms and the Vulkan executor meet.

`execute` runs a Graph on concrete arrays; `inline` re-emits a Graph into the active
trace (how a transform's result composes with an enclosing transform); `call_graph`
picks between the two. Transforms produce Graphs and finish with `call_graph`.
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Callable, Sequence

from .array import Array, bind
from .debug import checks_enabled
from .trace import dtypes as dt
from .trace import tracer
from .trace.tracer import _stack
from .trace.graph import Graph
from .trace.ops import OpKind
from .tree_util import tree_flatten, tree_unflatten
from .vulkan import runtime as _runtime
from .vulkan.memory import SMALL
from .vulkan.transfer import CopyCommands


def _mode() -> tuple:
    """What a compiled program depends on besides its graph: index checks on or off, and
    the device profile it is lowered for."""
    return checks_enabled(), _runtime.get().dev.profile


def execute(graph: Graph, args: Sequence[Array]) -> list[Array]:
    """Run graph on the device with concrete args; returns concrete outputs."""
    from .transforms.simplify import simplify
    from .vulkan import runtime
    rt = runtime.get()
    if len(graph.nodes) > len(graph.inputs) + 1:
        graph = simplify(graph, for_execution=True)
    bufs = rt.run(graph, [a._buf for a in args])
    return [Array._concrete(b, o.shape, o.dtype) for b, o in zip(bufs, graph.outputs)]


def inline(graph: Graph, args: Sequence[Array]) -> list[Array]:
    """Re-emit graph's nodes into the active trace, with its inputs bound to args."""
    env: dict[int, Array] = {}
    for node, a in zip(graph.inputs, args):
        env[node.id] = a
    for n in graph.nodes:
        if n.id in env:
            continue
        if n.op is OpKind.Const:
            env[n.id] = n.attrs["value"]
        else:
            env[n.id] = bind(n.op, [env[i.id] for i in n.inputs], _tag=n.tag, **n.attrs)
    return [env[o.id] for o in graph.outputs]


def call_graph(graph: Graph, args: Sequence[Array]) -> list[Array]:
    """Inline into the active trace if there is one, else run on the device."""
    if tracer.current() is not None or any(a._trace is not None for a in args):
        if tracer.current() is None:
            raise tracer.LeakedTracerError("a traced value was passed to a transform outside its trace")
        return inline(graph, args)
    return execute(graph, args)


def trace_flat(f: Callable, args: Sequence, tag=None):
    """Trace f(*args) with every array leaf as an input.

    Returns (graph, out_treedef, captured): the graph's inputs are the flattened args in
    order, then one input per captured outer value (listed in `captured`).
    """
    from . import numpy as vnp
    leaves, treedef = tree_flatten(list(args))
    leaves = [vnp.asarray(l) for l in leaves]
    with tracer.Trace(tag) as t:
        tr = [Array._traced(t, t.new_input(l.shape, l.dtype)) for l in leaves]
        out = f(*tree_unflatten(treedef, tr))
        out_leaves, out_tree = tree_flatten(out)
        out_leaves = [vnp.asarray(o) for o in out_leaves]
        nodes = [t.lift(o) for o in out_leaves]
    graph = t.graph(nodes)
    # nodes the reverse walk must see even if no output reaches them (custom_vjp residuals)
    graph.keep = [t.lift(v) for v in getattr(t, "keep", [])]
    return graph, out_tree, list(t.captured), leaves


def make_graph(f: Callable, *args) -> Graph:
    """The Graph f traces to on args (for inspection).

    >>> import vkml, vkml.numpy as vnp
    >>> print(vkml.make_graph(lambda x: vnp.sin(x) * 2.0, vnp.ones(3)))  # doctest: +ELLIPSIS
    graph(%...):
      %... = Sin(%...) : float32[3]
      %... = Full(shape=(), dtype=float32) : float32[]
      %... = Mul(%..., %...) : float32[3]
      return %...
    """
    return trace_flat(f, args)[0]


# --------------------------------------------------------------------------- jit

class DonatedArrayError(RuntimeError):
    """An array donated to a jitted call was used afterwards."""


class _DonatedBuffer:
    """Stands in for the device buffer of an array donated to a jitted call: any use of the
    array reaches for its buffer, and that raises DonatedArrayError instead of reading
    memory that now holds a result."""
    __slots__ = ("_shape", "_dtype")

    def __init__(self, shape, dtype):
        self._shape, self._dtype = shape, dtype

    def __getattr__(self, name):
        raise DonatedArrayError(
            f"jit: this array ({self._dtype}{list(self._shape)}) was donated to a jitted call "
            f"(donate_argnums) and its memory now holds that call's results; it can no longer "
            f"be read or passed anywhere. Use the call's outputs, or do not donate it.")

    def __bool__(self):
        return True


def _is_donated(a) -> bool:
    return isinstance(getattr(a, "_buf", None), _DonatedBuffer)


def _split_copies(pairs) -> tuple[list, list]:
    """(memcpy, transfer) parts of (src Buffer, dst Buffer, nbytes) copies: memcpy where
    both ends are mapped and the source is cached host memory (lavapipe: all of it);
    transfer commands for the rest (a GPU's mapped BAR window reads at PCIe speed, uncached)."""
    fast, slow = [], []
    for src, dst, n in pairs:
        if n == 0:
            continue
        if src.block.host_readable and dst.block.mapped is not None:
            fast.append((src, dst, n))
        else:
            slow.append((src, dst, n))
    return fast, slow


def _memcpy(pairs) -> None:
    for src, dst, n in pairs:
        dst.block.mapped[dst.offset:dst.offset + n] = src.block.mapped[src.offset:src.offset + n]


DIRECT_MIN = SMALL       # bytes from which an argument or result is bound, not copied
RECORDINGS_KEPT = 4      # bindings (recordings) kept per compiled signature
# signatures kept per jitted function, least recently used dropped (it traces again): each
# holds its arena, slots and recordings, so a function called on ever new shapes would
# otherwise grow without bound (about 5 KB of device memory per small signature)
SIGNATURES_KEPT = 256


class Compiled:
    """One traced signature: the graph lowered once against Placeholders for its
    arguments and results, and one command buffer recorded per binding of them.

    A large argument is bound where it lies and a large result is computed straight into
    a fresh buffer; each such binding gets its own recording, and the most recent few are
    kept. A steady loop binds the same buffers call after call (the allocator is first
    fit, so a result freed before the next call leaves its range to the next result), so
    it replays a recording with no copies. Small arguments are copied into input slots
    and small results out of output slots in the same submission, so that fresh scalars
    each call do not make new recordings. A signature whose large buffers keep changing
    falls back to copying everything, through one recording.
    """

    def __init__(self, graph: Graph, exec_graph: Graph, copy_fallback: bool = True):
        from .vulkan import runtime
        from .vulkan.executor import Placeholder, lower_graph
        self.graph = graph              # for inlining into an enclosing trace (keeps StopGradient)
        self.exec_graph = exec_graph
        rt = self.rt = runtime.get()
        rt.check_dtypes(exec_graph)
        self.in_ph = [Placeholder(n.size * dt.itemsize(n.dtype)) for n in exec_graph.inputs]
        out_ph: list = []

        def output(nbytes, what):
            rt.allocator._check(nbytes, what)
            out_ph.append(Placeholder(nbytes))
            return out_ph[-1]
        self.lowered = lower_graph(rt, exec_graph, self.in_ph, output_alloc=output)
        self.input_pos = {n.id: i for i, n in enumerate(exec_graph.inputs)}
        self.passthrough = {self.input_pos[o.id] for o in exec_graph.outputs if o.id in self.input_pos}
        self.slots: dict[int, object] = {}          # id(placeholder) -> Buffer, made on first use
        self.recordings: OrderedDict = OrderedDict()
        self.base = None                            # the first recording: the others share its meta
        self.calls = self.misses = 0
        self.direct = True
        # eager operators keep binding (a new recording per binding): their operands are
        # fresh results each time, where copying would double the memory traffic
        self.copy_fallback = copy_fallback
        # what an out-of-memory error names: an eager operator (one node, no fallback) by name
        outs = exec_graph.outputs
        self.what = outs[0].op.value if not copy_fallback and len(outs) == 1 else "jit output"
        self.copy_in = self.copy_out = None         # CopyCommands, made on first use

    @property
    def plan(self):
        return self.lowered.plan

    @property
    def recording(self):
        """The most recently used recording (None for a graph with no kernels)."""
        if not self.lowered.dispatches:
            return None
        if not self.recordings:
            self._recording(self._slot_binding(), ("slots",))
        return next(reversed(self.recordings.values()))

    def _slot(self, ph):
        s = self.slots.get(id(ph))
        if s is None:
            # small ones are host-mapped device memory where there is such (allocator
            # default), so a call copies them by memcpy
            s = self.slots[id(ph)] = self.rt.allocator.alloc(ph.nbytes, "jit slot")
        return s

    def _slot_binding(self) -> dict:
        return {id(ph.block): self._slot(ph) for ph in self.in_ph + list(self.lowered.outputs)
                if ph.block.buffer is None}

    def _recording(self, binding: dict, key):
        rec = self.recordings.get(key)
        if rec is not None:
            self.recordings.move_to_end(key)
            return rec
        from .vulkan.executor import Recording, rebind
        self.misses += 1
        rec = Recording(self.rt, rebind(self.lowered.dispatches, binding), like=self.base, replayed=True)
        self.base = self.base or rec
        self.recordings[key] = rec
        while len(self.recordings) > RECORDINGS_KEPT:
            self.recordings.popitem(last=False)
        if self.copy_fallback and self.misses > 2 * RECORDINGS_KEPT and 2 * self.misses > self.calls:
            self.direct = False        # bindings keep changing: copy instead of re-recording
        return rec

    def profile(self, leaves: Sequence[Array]) -> list[tuple[str, float]]:
        """Run once on leaves with every kernel timed alone: (kernel name, seconds)."""
        from .vulkan.executor import Recording, arm, raise_checks, rebind
        if not self.lowered.dispatches:
            return []
        rt = self.rt
        binding = {id(ph.block): a._buf for a, ph in zip(leaves, self.in_ph)}
        for ph in self.lowered.outputs:
            if ph.block.buffer is None and id(ph.block) not in binding:
                binding[id(ph.block)] = rt.allocator.alloc(ph.nbytes, "jit output")
        with rt.dev.lock:      # the checks' words are shared with `run`
            rec = Recording(rt, rebind(self.lowered.dispatches, binding), like=self.base, profile=True)
            arm(self.lowered.checks)
            rec.submit()
            raise_checks(self.lowered.checks)
        return rec.kernel_times()

    def run(self, leaves: Sequence[Array], donated: set[int]) -> list[Array]:
        """Bind or copy the arguments, run the recording, bind or copy the results: one
        submission."""
        with self.rt.dev.lock:
            return self._run(leaves, donated)

    def _run(self, leaves, donated) -> list[Array]:
        rt = self.rt
        direct = self.direct
        self.calls += 1
        binding, key, copies = {}, [rt.allocator.epoch], []
        for a, ph in zip(leaves, self.in_ph):
            b = a._buf
            if direct and ph.nbytes >= DIRECT_MIN:
                binding[id(ph.block)] = b
                key.append((b.block, b.offset))
            else:
                s = self._slot(ph)
                binding[id(ph.block)] = s
                copies.append((b, s, ph.nbytes))
                key.append(None)
        # nbytes -> donated buffers free to take a copied result. Not one that is an
        # output itself (an input returned unchanged) or that also arrives undonated.
        reuse: dict = {}
        if donated:
            kept = {id(leaves[i]._buf) for i in range(len(leaves)) if i not in donated or i in self.passthrough}
            for i in sorted(donated):
                b = leaves[i]._buf
                if id(b) not in kept:
                    reuse.setdefault(b.nbytes, []).append(b)
                    kept.add(id(b))   # the same buffer donated twice: reuse it once
        outs, copies_out, fresh = [], [], {}
        for node, ph in zip(self.exec_graph.outputs, self.lowered.outputs):
            if node.id in self.input_pos:
                outs.append(leaves[self.input_pos[node.id]])
                continue
            if node.op is OpKind.Const:
                outs.append(node.attrs["value"])
                continue
            n = ph.nbytes
            dst = fresh.get(id(ph))
            if dst is None and direct and n >= DIRECT_MIN:
                dst = fresh[id(ph)] = rt.allocator.alloc(n, self.what)
                binding[id(ph.block)] = dst
                key.append((dst.block, dst.offset))
            elif dst is None:
                s = self._slot(ph)
                binding[id(ph.block)] = s
                # a device check may raise after the copies ran: then no donated input may
                # hold a result
                dst = (reuse[n].pop() if reuse.get(n) and not self.lowered.checks
                       else rt.allocator.alloc(n, self.what))
                copies_out.append((s, dst, n))
                key.append(None)
            outs.append(Array._concrete(dst, node.shape, node.dtype))
        in_fast, in_slow = _split_copies(copies)
        out_fast, out_slow = _split_copies(copies_out)
        _memcpy(in_fast)
        rec = self._recording(binding, tuple(key)) if self.lowered.dispatches else None
        cbs = []
        if in_slow:
            self.copy_in = self.copy_in or CopyCommands(rt)
            cbs.append(self.copy_in.record(in_slow))
        if rec is not None:
            cbs.append(rec.cb)
        if out_slow:
            self.copy_out = self.copy_out or CopyCommands(rt)
            cbs.append(self.copy_out.record(out_slow))
        if cbs:
            checks = self.lowered.checks
            if checks:
                # device checks (int32 overflow, `vkml.debug` index checks): raised as the
                # call's results are produced, before any is returned
                from .vulkan.executor import arm, raise_checks
                arm(checks)
                rt.submit(cbs)
                raise_checks(checks)
            else:
                rt.submit(cbs)
        _memcpy(out_fast)
        return outs


class Lowering:
    """What `jitted.lower(*args)` reports about a compiled signature: ops after
    simplification, kernels after fusion, dispatches after CPU devices merged
    independent kernels (`vulkan.merge`), barriers, planned peak bytes.

    >>> import vkml, vkml.numpy as vnp
    >>> lo = vkml.jit(lambda x: (vnp.exp(x).sum(), vnp.tanh(x) * 2.0)).lower(vnp.ones(8))
    >>> (lo.kernel_count, lo.dispatch_count <= lo.kernel_count)
    (2, True)
    """

    def __init__(self, c: Compiled):
        self.graph = c.exec_graph
        self.op_count = c.exec_graph.op_count()
        self.kernel_count = c.lowered.kernel_count
        self.dispatch_count = len(c.lowered.dispatches)
        self.peak_bytes = c.plan.peak_bytes
        self.arena_bytes = c.plan.arena_bytes
        from .vulkan.executor import barriers_before
        self.barrier_count = sum(barriers_before(c.lowered.dispatches))

    def __repr__(self):
        return (f"Lowering(ops={self.op_count}, kernels={self.kernel_count}, dispatches={self.dispatch_count}, "
                f"barriers={self.barrier_count}, peak_bytes={self.peak_bytes})")


class Jitted:
    """A function compiled per input signature (see `jit`)."""

    def __init__(self, f: Callable, static_argnums=(), donate_argnums=()):
        functools.update_wrapper(self, f)
        self.f = f
        self.static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        self.donate_argnums = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
        self.cache: OrderedDict = OrderedDict()     # bounded: SIGNATURES_KEPT
        self.trace_count = 0
        # (shape, dtype) per argument -> (Compiled, out_tree), for calls whose arguments are
        # all concrete Arrays, without static or donated ones: such a call
        # skips splitting, flattening and keying the pytree (a few microseconds of Python)
        self._plain: dict | None = {} if not (self.static_argnums or self.donate_argnums) else None

    def _split(self, args):
        n = len(args)
        static = tuple(a % n for a in self.static_argnums if -n <= a < n)
        dyn = [a for i, a in enumerate(args) if i not in static]
        key_static = []
        for i in static:
            try:
                hash(args[i])
            except TypeError:
                raise TypeError(f"jit: static argument {i} of type {type(args[i]).__name__} is not "
                                f"hashable; static arguments key the compilation cache") from None
            key_static.append((i, args[i]))
        return static, dyn, tuple(key_static)

    def _trace(self, args, static, dyn):
        def flat_f(*dyn_args):
            it = iter(dyn_args)
            full = [args[i] if i in static else next(it) for i in range(len(args))]
            return self.f(*full)
        self.trace_count += 1
        return trace_flat(flat_f, dyn)

    def _entry(self, args, split=None, flat=None):
        from . import numpy as vnp
        from .transforms.simplify import simplify
        static, dyn, key_static = split or self._split(args)
        leaves, treedef = flat or tree_flatten(dyn)
        leaves = [l if type(l) is Array else vnp.asarray(l) for l in leaves]
        # traced with `vkml.debug` index checks or without, lowered for one device
        # profile or another: different programs
        key = (treedef, tuple((l.shape, l.dtype) for l in leaves), key_static, _mode())
        entry = self.cache.get(key)
        if entry is None:
            graph, out_tree, captured, _ = self._trace(args, static, dyn)
            if captured:
                raise AssertionError("jit: eager trace captured outer tracers")
            g = simplify(graph)
            entry = (Compiled(g, simplify(g, for_execution=True)), out_tree)
            self.cache[key] = entry
            while len(self.cache) > SIGNATURES_KEPT:
                self.cache.popitem(last=False)
        else:
            self.cache.move_to_end(key)
        return entry, leaves, dyn, static

    def __call__(self, *args):
        plain = self._plain
        if plain is not None:
            key = []
            for a in args:
                if type(a) is not Array or a._trace is not None:
                    break
                key.append((a.shape, a.dtype))
            else:
                hit = plain.get((_mode(), tuple(key)))
                if hit is not None and not _stack():
                    for a in args:
                        if type(a._buf) is _DonatedBuffer:
                            getattr(a._buf, "nbytes")   # raises DonatedArrayError
                    return tree_unflatten(hit[1], hit[0].run(args, ()))
        return self._call(args)

    def _call(self, args):
        split = self._split(args)
        static, dyn, _ = split
        flat = tree_flatten(dyn)
        leaves = flat[0]
        if tracer.current() is not None or any(getattr(l, "_trace", None) is not None for l in leaves):
            # inside another transform, jit is the identity on the program: tracing f into
            # the enclosing trace keeps everything it records there (custom_vjp regions
            # and their residuals, checkpoint tags)
            self.trace_count += 1
            return self.f(*args)
        (compiled, out_tree), leaves, dyn, _ = self._entry(args, split, flat)
        if self._plain is not None and all(type(a) is Array for a in args):
            plain = self._plain
            plain[(_mode(), tuple((a.shape, a.dtype) for a in args))] = (compiled, out_tree)
            while len(plain) > SIGNATURES_KEPT:   # oldest first (a hit here does not reorder)
                plain.pop(next(iter(plain)), None)
        for l in leaves:
            if _is_donated(l):
                getattr(l._buf, "nbytes")   # raises DonatedArrayError, naming the array
        donated = set()
        if self.donate_argnums:
            pos = 0
            dyn_index = [i for i in range(len(args)) if i not in static]
            for i, sub in zip(dyn_index, flat[1].children):    # one subtree per argument
                n = sub.num_leaves
                if i in self.donate_argnums or (i - len(args)) in self.donate_argnums:
                    donated.update(range(pos, pos + n))
                pos += n
        if donated:   # an array also passed undonated in the same call is not given up
            undonated = {id(l._buf) for i, l in enumerate(leaves) if i not in donated}
            donated = {i for i in donated if id(leaves[i]._buf) not in undonated}
        res = compiled.run(leaves, donated)
        for i in donated:
            if all(r is not leaves[i] for r in res):
                leaves[i]._buf = _DonatedBuffer(leaves[i].shape, leaves[i].dtype)
        return tree_unflatten(out_tree, res)

    def profile(self, *args) -> list[tuple[str, float]]:
        """Compile for these arguments (if needed), run once with each kernel timed alone
        by device timestamps, and return (kernel name, seconds) per dispatch in order.

        >>> import vkml, vkml.numpy as vnp
        >>> f = vkml.jit(lambda x: (vnp.exp(x) @ x).sum())
        >>> times = f.profile(vnp.ones((64, 64)))
        >>> [name.split("_")[0] for name, s in times][:2], all(s >= 0 for _, s in times)
        (['Exp', 'MatMul'], True)
        """
        (compiled, _), leaves, _, _ = self._entry(args)
        return compiled.profile(leaves)

    def lower(self, *args) -> Lowering:
        """Compile for these arguments (if needed) and report op, kernel and dispatch counts
        and peak bytes (`Lowering`)."""
        return Lowering(self._entry(args)[0][0])


def jit(f: Callable | None = None, static_argnums=(), donate_argnums=()):
    """Compile f per input signature; later calls replay a recorded command buffer.

    The signature is the pytree structure, shapes and dtypes of the arguments plus the
    values of static arguments. A call with a new signature traces again. Inside another
    transform, a jitted function is traced into the enclosing graph.

    >>> import vkml, vkml.numpy as vnp
    >>> f = vkml.jit(lambda x, y: vnp.tanh(x) * y)
    >>> [round(v, 4) for v in f(vnp.ones(3), 2.0).numpy().tolist()]
    [1.5232, 1.5232, 1.5232]
    """
    if f is None:
        return functools.partial(jit, static_argnums=static_argnums, donate_argnums=donate_argnums)
    return Jitted(f, static_argnums, donate_argnums)
