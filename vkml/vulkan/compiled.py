"""A compiled program: a graph lowered once, replayed by its recorded command buffers.

What `vkml.jit` keeps per traced signature and what an eager operator keeps per operator
and operand signature. It works on device buffers only: the caller turns its arrays into
buffers and the buffers it gets back into arrays (`vkml.array.run_compiled`).
"""
from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

from ..trace import dtypes as dt
from ..trace.graph import Graph
from ..trace.ops import OpKind
from . import runtime
from .dispatch import arm, raise_checks
from .executor import Placeholder, build_dispatches, lower_graph, rebind
from .memory import SMALL, Buffer
from .recording import Recording
from .transfer import CopyCommands

DIRECT_MIN = SMALL       # bytes from which an argument or result is bound, not copied
RECORDINGS_KEPT = 4      # bindings (recordings) kept per compiled program
# A program of at most this many dispatches is recorded again for new bindings however often
# they change (results kept alive call after call): recording a few dispatches costs the host
# less than copying large results costs the device, and an asynchronous call overlaps it with
# the device's work on the previous call
REBIND_DISPATCHES = 4


_background: list = []          # the one thread that builds programs' final kernels
_background_lock = threading.Lock()


def _later(fn, *args) -> Future:
    """fn(*args) on a background thread (one for the process: it waits on the kernel
    build pool anyway). Its work is joined at exit, as every ThreadPoolExecutor's is."""
    with _background_lock:
        if not _background:
            _background.append(ThreadPoolExecutor(1, thread_name_prefix="vkml-final"))
        return _background[0].submit(fn, *args)


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


class Compiled:
    """One graph lowered once against Placeholders for its arguments and results, and
    one command buffer recorded per binding of them.

    A large argument is bound where it lies and a large result is computed straight into
    a fresh buffer; each such binding gets its own recording, and the most recent few are
    kept. A steady loop binds the same buffers call after call (the allocator is first
    fit, so a result freed before the next call leaves its range to the next result), so
    it replays a recording with no copies. Small arguments are copied into input slots
    and small results out of output slots in the same submission, so that fresh scalars
    each call do not make new recordings. A program whose large buffers keep changing
    falls back to copying everything, through one recording.

    >>> import numpy as np
    >>> from vkml.trace.graph import Graph, Node, input_node
    >>> x = input_node((4,), "float32", 0)
    >>> c = Compiled(Graph([x], [Node(OpKind.Neg, [x], {})]))
    >>> rt = runtime.get()
    >>> (out,) = c.run([rt.upload(np.arange(4, dtype=np.float32))])
    >>> rt.download(out, 16).view(np.float32).tolist()
    [-0.0, -1.0, -2.0, -3.0]
    """

    def __init__(self, graph: Graph, copy_fallback: bool = True):
        self.exec_graph = graph
        rt = self.rt = runtime.get()
        rt.check_dtypes(graph)
        self.in_ph = [Placeholder(n.size * dt.itemsize(n.dtype)) for n in graph.inputs]
        out_ph: list = []

        def output(nbytes, what):
            rt.allocator._check(nbytes, what)
            out_ph.append(Placeholder(nbytes))
            return out_ph[-1]
        self.lowered = lower_graph(rt, graph, self.in_ph, output_alloc=output, later=True)
        self.final: Future | None = None             # the build of `lowered.final`
        self.input_pos = {n.id: i for i, n in enumerate(graph.inputs)}
        self.passthrough = {self.input_pos[o.id] for o in graph.outputs if o.id in self.input_pos}
        self.slots: dict[int, object] = {}          # id(placeholder) -> Buffer, made on first use
        self.recordings: OrderedDict = OrderedDict()
        self.base = None                            # the first recording: the others share its meta
        self.calls = self.misses = 0
        self.direct = True
        # eager operators keep binding (a new recording per binding): their operands are
        # fresh results each time, where copying would double the memory traffic
        self.copy_fallback = copy_fallback
        # what an out-of-memory error names: an eager operator (one node, no fallback) by name
        outs = graph.outputs
        self.what = outs[0].op.value if not copy_fallback and len(outs) == 1 else "jit output"
        self.ticket = 0                              # of the last submission of this program
        self.copiers: list[CopyCommands] = []       # made on first use, reused when idle
        self._taken: set = set()                     # those recorded for the call being made

    @property
    def plan(self):
        """The executor's memory plan of the program (`executor.Plan`)."""
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
        self.misses += 1
        rec = Recording(self.rt, rebind(self.lowered.dispatches, binding), like=self.base, replayed=True)
        self.base = self.base or rec
        self.recordings[key] = rec
        while len(self.recordings) > RECORDINGS_KEPT:
            self.recordings.popitem(last=False)
        if (self.copy_fallback and self.misses > 2 * RECORDINGS_KEPT and 2 * self.misses > self.calls
                and len(self.lowered.dispatches) > REBIND_DISPATCHES):
            self.direct = False        # bindings keep changing: copy instead of re-recording
        return rec

    def profile(self, bufs: Sequence[Buffer]) -> list[tuple[str, float]]:
        """Run once on bufs with every kernel timed alone: (kernel name, seconds)."""
        if not self.lowered.dispatches:
            return []
        rt = self.rt
        binding = {id(ph.block): b for b, ph in zip(bufs, self.in_ph)}
        for ph in self.lowered.outputs:
            if ph.block.buffer is None and id(ph.block) not in binding:
                binding[id(ph.block)] = rt.allocator.alloc(ph.nbytes, "jit output")
        with rt.dev.lock:      # the checks' words are shared with `run`
            rec = Recording(rt, rebind(self.lowered.dispatches, binding), like=self.base, profile=True)
            arm(self.lowered.checks)
            rec.submit()
            raise_checks(self.lowered.checks)
        return rec.kernel_times()

    def run(self, bufs: Sequence[Buffer], donated: set[int] | tuple = ()) -> list[Buffer | None]:
        """Bind or copy the arguments, run the recording, bind or copy the results: one
        submission. Returns one buffer per output; None for an output that is an input
        (the caller's argument) or a Const (its value)."""
        with self.rt.dev.lock:
            return self._run(bufs, donated)

    def _tier_up(self) -> None:
        """A program called again builds its final kernels in the background (`merge.tiers`)
        and runs them once they are built; until then, and if they fail to build, its
        first dispatches."""
        if self.final is None:
            if self.calls:
                self._start_final()
            return
        if not self.final.done():
            return
        self.lowered.final = None
        error = self.final.exception()
        if error is not None:    # the first dispatches compute the same: keep them
            warnings.warn(f"vkml: the merged kernels of a compiled program did not build "
                          f"({type(error).__name__}: {error}); it keeps running their parts",
                          RuntimeWarning, stacklevel=4)
            return
        self.lowered.dispatches = self.final.result()
        self.recordings.clear()
        self.base = None

    def _start_final(self) -> None:
        self.final = _later(build_dispatches, self.rt, self.lowered.final)

    def finish(self) -> None:
        """Wait for the final kernels' build (starting it if need be) and take them; raise
        its error, if it failed (`Jitted.lower` reports the program later calls run)."""
        if self.lowered.final is None:
            return
        with self.rt.dev.lock:
            if self.final is None:
                self._start_final()
        error = self.final.exception()          # waited for outside the lock
        if error is not None:
            raise error
        with self.rt.dev.lock:
            if self.lowered.final is not None:
                self._tier_up()

    def _run(self, bufs, donated) -> list:
        self._taken.clear()
        rt = self.rt
        if self.lowered.final is not None:
            self._tier_up()
        direct = self.direct
        self.calls += 1
        binding, key, copies = {}, [rt.allocator.epoch], []
        for b, ph in zip(bufs, self.in_ph):
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
            kept = {id(bufs[i]) for i in range(len(bufs)) if i not in donated or i in self.passthrough}
            for i in sorted(donated):
                b = bufs[i]
                if id(b) not in kept:
                    reuse.setdefault(b.nbytes, []).append(b)
                    kept.add(id(b))   # the same buffer donated twice: reuse it once
        outs, copies_out, fresh = [], [], {}
        for node, ph in zip(self.exec_graph.outputs, self.lowered.outputs):
            if node.id in self.input_pos or node.op is OpKind.Const:
                outs.append(None)
                continue
            n = ph.nbytes
            dst = fresh.get(id(ph))
            if dst is None and direct and n >= DIRECT_MIN:
                dst = fresh[id(ph)] = rt.allocator.alloc(n, self.what, device_only=True)
                binding[id(ph.block)] = dst
                key.append((dst.block, dst.offset))
            elif dst is None:
                s = self._slot(ph)
                binding[id(ph.block)] = s
                # a device check may raise after the copies ran: then no donated input may
                # hold a result
                dst = (reuse[n].pop() if reuse.get(n) and not self.lowered.checks
                       else rt.allocator.alloc(n, self.what, device_only=True))
                copies_out.append((s, dst, n))
                key.append(None)
            outs.append(dst)
        checks = self.lowered.checks
        # An asynchronous call returns before its submission finishes, so the host may not
        # copy its results afterwards, nor read arguments that earlier calls may still be
        # writing: then every copy is a transfer command of the submission. Device checks
        # (int32 overflow, `vkml.debug` index checks) are raised as the call's results are
        # produced, before any is returned: such a call waits.
        wait = not rt.asynchronous or bool(checks)
        # by memcpy only once the arguments' values are there, and the slots are not read
        # by an earlier call still running
        last = max([c[0].ticket for c in copies] + [self.ticket]) if copies else 0
        if last > rt.completed:
            rt.poll()
        if last <= rt.completed:
            in_fast, in_slow = _split_copies(copies)
        else:
            in_fast, in_slow = [], [c for c in copies if c[2]]
        if wait:
            out_fast, out_slow = _split_copies(copies_out)
        else:
            out_fast, out_slow = [], [c for c in copies_out if c[2]]
        _memcpy(in_fast)
        rec = self._recording(binding, tuple(key)) if self.lowered.dispatches else None
        before, after, copiers = [], [], []
        if in_slow:
            copier = self._copier()
            copiers.append(copier)
            before.append(copier.record(in_slow))
        if out_slow:
            copier = self._copier()
            copiers.append(copier)
            after.append(copier.record(out_slow))
        if rec is not None or before or after:
            if checks:
                arm(checks)
            # a program with while loops is several submissions (`Recording.run`)
            t = self.ticket = (rec.run(before, after, wait) if rec is not None
                               else rt.submit(before + after, wait=wait))
            for c in copiers:
                c.ticket = t
            for b in outs:
                if b is not None:
                    b.ticket = t
            if checks:
                raise_checks(checks)
        _memcpy(out_fast)
        return outs

    def _copier(self) -> CopyCommands:
        """A CopyCommands whose command buffer no running submission uses (it is
        re-recorded each call): one of those this program keeps, or a new one."""
        done = self.rt.poll()
        for c in self.copiers:
            if c.ticket <= done and c not in self._taken:
                self._taken.add(c)
                return c
        c = CopyCommands(self.rt)
        c.ticket = 0
        self.copiers.append(c)
        self._taken.add(c)
        return c
