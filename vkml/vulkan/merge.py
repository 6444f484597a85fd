"""Horizontal fusion on CPU devices: dispatches that need no barrier between them, run as
one dispatch of one generated kernel.

lavapipe runs the dispatches of a command buffer one after another and wakes its worker
threads for each, a cost beyond the kernel itself that a small kernel notices
(`bench/tools/lvp_dispatch.py` measures it). A training step's backward pass has, per layer, a weight gradient, an input
gradient and a bias sum that only read what the layer before produced; as one dispatch
they also share the workers, where a one-workgroup sum left a core idle. A GPU overlaps
such dispatches anyway (no barrier between them), so only CPU devices merge.

A merged kernel holds each part's program (`program.merged`) with its global names
prefixed (`h<p>_`), its bindings numbered after the previous parts' and its meta read
at its offset into the concatenated meta. Every workgroup of it runs the same share of
every part, one part after another (`_sets` says why not one part per workgroup). The workgroup size is the
smallest of the parts'; a part with a larger one runs each of its workgroups as several
(its invocation index rebuilt from them), which is exact for kernels whose invocations
meet only through subgroup operations: a part that uses shared memory, barriers or
subgroup ids keeps its own size or stays a dispatch of its own (`Program.barriers`,
`Program.subgroups`). Every fixed meta read is done first thing in main(), where
lavapipe loads a uniform value once. The test suite runs merged on lavapipe;
tests/vulkan/test_merge.py compares merged and unmerged bits.

Dynamic dispatches: lavapipe also splits a dispatch's workgroups into one fixed share per
worker thread, so on a VM whose vCPUs are time-shared one slowed vCPU stretches every
dispatch (the small MLP step ran almost twice as long in such stretches). A merged or
single kernel of subgroup-sized workgroups with more units than workers instead runs one
workgroup per worker, each taking the next unit from an atomic counter that the
recording zeroes first (`Dispatch.zero`), so a fast core takes more units
(bench/RESULTS.md has the measurements).

Only runs the schedule already puts side by side merge: the memory plan reuses ranges
in schedule order, so moving independent work next to other work would mostly meet a
range it must wait for.

Only dispatches touching at most MAX_BYTES each are merged: a long kernel does not
notice the cost of a dispatch, and keeping it alone keeps its own meta reads where they were.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .dispatch import Dispatch, View, barriers_before
from .program import Program, merged

MAX_BYTES = 8 << 20     # bytes a dispatch's tensors span, at most, to be merged
TINY = 64 << 10         # ... and where all touch at most this, one workgroup may run them
SLOTS = 256             # counters one program's dynamic dispatches may use
_off = [0]              # `disabled` depth


@dataclass
class _Part:
    ds: Dispatch
    program: Program

    @property
    def rigid(self) -> bool:     # shared memory or barriers: its own workgroup size only
        return self.program.barriers

    @property
    def subgroups(self) -> bool:
        return self.program.subgroups


def _part(ds) -> _Part | None:
    p: Program = ds.kernel.program
    if not p.mergeable or sum(v.nbytes for v in ds.views) > MAX_BYTES:
        return None
    return _Part(ds, p)


def _fits(dev, parts: list, extra: int = 0) -> bool:
    storage = 1 + extra + sum(1 for p in parts for i in range(p.ds.kernel.n_tensors)
                              if not p.ds.kernel.texels or p.ds.kernel.texels[i] is None)
    texel = sum(p.ds.kernel.n_tensors for p in parts) + 1 + extra - storage
    return (storage <= dev.max_storage_buffers and texel <= dev.max_sampled
            and storage + texel <= dev.max_resources)


def _sets(parts: list, S: int, dev, workers: int) -> list[tuple[list, int, int]]:
    """Parts in sets that can share a kernel, as (parts, L, G): workgroups of L (the
    smallest size; every other a multiple of it, rigid parts at L only, and a part split
    into smaller workgroups only where its subgroups stay whole) and G of them, each
    running count / G of every part's (count in workgroups of L). G is one of the counts,
    at least `workers` (lavapipe's threads) unless every part is tiny (TINY: one
    workgroup may then run it all), the one that divides the most counts (then the one
    nearest `workers`, then the largest); a set takes the parts whose count it divides. Every workgroup then does the
    same work and runs all of it: lavapipe runs both sides of an if under a lane mask, so a kernel branching to one part per
    workgroup ran every part's straight-line code in every workgroup (the small MLP step
    slower than unmerged), and it hands each worker thread one contiguous share of the
    workgroups. Within the descriptor limits; single parts come back as sets of one."""
    def alone(p):
        return ([p], p.ds.kernel.local_size, p.ds.groups)
    if len(parts) < 2:
        return [alone(p) for p in parts]
    L = min(p.ds.kernel.local_size for p in parts)
    ok, singles = [], []
    for p in parts:
        l = p.ds.kernel.local_size
        split = l != L
        if l % L or (split and p.rigid) or (split and p.subgroups and L % S):
            singles.append(alone(p))
        else:
            ok.append((p.ds.groups * (l // L), p))
    sets = []
    while ok:
        counts = sorted({c for c, _ in ok})
        tiny = all(sum(v.nbytes for v in p.ds.views) <= TINY for _, p in ok)
        # too little work to spread: fewer workgroups than workers may run it all
        cands = counts if tiny else [c for c in counts if c >= workers] or counts[-1:]
        G = max(cands, key=lambda g: (sum(c % g == 0 for c, _ in ok), min(g, workers), g))
        take = [p for c, p in ok if c % G == 0]
        ok = [(c, p) for c, p in ok if c % G]
        if len(take) < 2:             # no two parts share a count: each alone
            sets += [alone(p) for p in take] + [alone(p) for _, p in ok]
            break
        cur = []
        for p in take:
            if cur and not _fits(dev, cur + [p]):
                sets.append((cur, L, G))
                cur = []
            cur.append(p)
        sets.append((cur, L, G))
    return sets + singles


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run the enclosed code with every kernel its own dispatch (comparisons, tests).

    >>> with disabled():
    ...     pass
    """
    _off[0] += 1
    try:
        yield
    finally:
        _off[0] -= 1


def _counter(rt, slot: int) -> View:
    """A zeroed-per-recording uint counter view for a dynamic dispatch: slot `slot` of one
    buffer (a distinct range per dispatch, so no two dispatches conflict)."""
    buf = getattr(rt, "_merge_counters", None)
    stride = rt.dev.storage_alignment
    if buf is None:
        buf = rt._merge_counters = rt.allocator.alloc(SLOTS * stride, "merge counters", mapped=False)
    return View(buf.block.buffer, buf.offset + slot * stride, 4, id(buf.block), (1,), np.dtype(np.uint32))


def active(profile) -> bool:
    """Whether dispatches under profile are merged (and so their kernels compiled late)."""
    return profile.merge and not _off[0]


def merge(rt, dispatches: list) -> list:
    """dispatches with each run that needs no barrier inside merged as far as allowed, and
    dispatches of subgroup-sized workgroups with more units than the driver has workers
    made dynamic (the order of the runs, and so every barrier, stays)."""
    dev, prof = rt.dev, rt.dev.profile
    workers = max(prof.workers, 1)
    if not active(prof) or not dispatches:
        return dispatches
    runs, cur = [], []
    for ds, hazard in zip(dispatches, barriers_before(dispatches)):
        if hazard and cur:
            runs.append(cur)
            cur = []
        cur.append(ds)
    runs.append(cur)
    out, slot = [], 0
    for run in runs:
        parts, keep = [], []
        for ds in run:
            p = _part(ds)
            (parts if p is not None else keep).append(p if p is not None else ds)
        for s, L, G in _sets(parts, dev.subgroup_size, dev, workers):
            dyn = (prof.dynamic and L == dev.subgroup_size and G > workers and slot < SLOTS
                   and _fits(dev, s, extra=1))
            if len(s) == 1 and not dyn:
                keep.append(s[0].ds)
                continue
            bases, base = [], 0
            for p in s:
                bases.append(base)
                base += len(p.ds.meta)
            prog = merged([(p.program, p.ds.groups, b) for p, b in zip(s, bases)], L, G, counter=dyn)
            k = rt.kernels.get(prog, build=False)    # built with the rest (`lower_graph`)
            views, writes, base = [], [], 0
            for p in s:
                writes += [base + w for w in p.ds.writes]
                views += p.ds.views
                base += len(p.ds.views)
            meta = np.concatenate([p.ds.meta for p in s]).astype(np.int32)
            if dyn:
                c = _counter(rt, slot)
                slot += 1
                writes.append(len(views))
                views.append(c)
                keep.append(Dispatch(k, meta, views, tuple(writes), min(workers, G), (c,)))
            else:
                keep.append(Dispatch(k, meta, views, tuple(writes), G))
        out += keep
    return out
