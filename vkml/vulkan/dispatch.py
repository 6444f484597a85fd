"""What a lowered program is made of: views of device memory, dispatches, device checks.

Shared by the lowering (`executor`), horizontal merging (`merge`) and the recording
(`recording`), so none of them imports another for its types.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from .kernels import Kernel
from .memory import Buffer


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
    # loop heads one invocation runs, at most; None: not known. lavapipe ends every loop of
    # an invocation past `Profile.loop_limit` heads in all, silently, so `merge` joins only
    # dispatches whose bounds it can add up
    heads: int | None = None


@dataclass
class Loop:
    """A Scan lowered: `body` (dispatches and inner Loops, recorded once) replayed
    `length` times in the same command buffer. Per step i (length-1 .. 0 when reverse)
    the `pre` copies run, then the body, then the `post` copies; a copy is (src, dst,
    src_stride, dst_stride) in bytes per step, so a copy reaches slice i of a stacked
    array while the body's own descriptors never change. `before` copies run once first
    (the initial carries). `views` and `writes` are what the loop reads and writes
    outside itself (hazards, merging); `held` keeps the body's buffers alive."""
    body: list
    length: int
    reverse: bool
    before: list
    pre: list
    post: list
    views: list
    writes: tuple
    held: list = field(default_factory=list)
    zero: tuple = ()

    def moved(self, move: Callable[[View], View]) -> "Loop":
        """The loop with every view (its body's too) replaced by move(view)."""
        body = [ds.moved(move) if isinstance(ds, Loop) else
                replace(ds, views=[move(v) for v in ds.views], zero=tuple(move(v) for v in ds.zero))
                for ds in self.body]
        cp = lambda cs: [(move(a), move(b), sa, sb) for a, b, sa, sb in cs]   # noqa: E731
        return Loop(body, self.length, self.reverse, cp(self.before), cp(self.pre), cp(self.post),
                    [move(v) for v in self.views], self.writes, self.held)


# A While's steps per submission after its first: a readback (submit and wait) costs about
# 0.3 ms on lavapipe, and a step past the loop's end is not skipped (it selects the carry
# it had), so a fixed chunk trades readbacks against idle steps. Doubling from 1 up to 32
# keeps both small: a loop of n steps costs about log2(n) + n / 32 readbacks and at most
# as many idle steps as it ran (none past 32).
WHILE_CHUNKS = (2, 4, 8, 16, 32)
# A loop whose predicate never fails would run forever (as JAX's does). vkml raises after
# this many steps (None: never; env VKML_WHILE_MAX_STEPS) and warns, once per loop, after
# WHILE_WARN_S seconds that a while_loop is still running.
WHILE_MAX_STEPS: int | None = int(os.environ.get("VKML_WHILE_MAX_STEPS", "0")) or None
WHILE_WARN_S = 10.0


@dataclass
class WhileLoop(Loop):
    """A While lowered: `body` is one gated step (its new carries selected where the
    predicate holds, `post` copying them over the carries and the step's any-lane
    predicate to the host-mapped `flag`). The recording runs `before` and one step
    inline, then ends its command buffer; the host reads `flag` and, while it is set,
    submits chunks of WHILE_CHUNKS steps (command buffers of their own, recorded once)."""
    flag: object = None

    def moved(self, move: Callable[[View], View]) -> "WhileLoop":
        lp = Loop.moved(self, move)
        return WhileLoop(lp.body, lp.length, lp.reverse, lp.before, lp.pre, lp.post, lp.views,
                         lp.writes, lp.held, lp.zero, self.flag)


def flat(items: Sequence) -> list:
    """The dispatches of items in recording order, each loop's body once."""
    out = []
    for ds in items:
        if isinstance(ds, Loop):
            out += flat(ds.body)
        else:
            out.append(ds)
    return out


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


