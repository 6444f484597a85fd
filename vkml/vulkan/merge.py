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

Merging follows the schedule's order (`order.memory_order`): a mergeable dispatch moves
back only across runs none of whose byte ranges it conflicts with (`_runs`). The memory
plan reuses ranges in that order, so a move that would meet a reused range, or read a
value before it is written, is never made, and nothing lives longer than planned.

A merged kernel is bounded by what its first compile may cost (`_cheap_to_compile`):
lavapipe's LLVM compile time grows faster than a kernel's size, and a merged kernel is
new code where its identical parts were one kernel compiled once (bench/RESULTS.md,
"merge budget", has the first calls with and without the bound).

Loop heads: lavapipe's gallivm ends every loop of an invocation once that invocation has
run `Profile.loop_limit` loop heads in all, silently. A merged kernel runs several parts'
loops in one invocation, and a dynamic one keeps taking units, so either may pass a limit
that each part alone stays well within (a dynamic attention kernel on one worker thread
returned wrong scores). Every dispatch therefore says how many heads one of its
invocations runs at most (`Dispatch.heads`, from its lowering); one that does not say is
never merged, a merged kernel's parts add up to at most half the limit, and a dynamic
kernel's workgroups take at most as many units as fit that half (each worker thread then
gets enough workgroups to take every unit, so the balance between workers stays dynamic).

First calls (`tiers`): a compiled program runs a large new merged kernel's parts until
the merged kernel is built, which starts in the background when the program is called a
second time; a program called once never pays for it.

Only dispatches touching at most MAX_BYTES each are merged: a long kernel does not
notice the cost of a dispatch, and keeping it alone keeps its own meta reads where they were.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .dispatch import Dispatch, Loop, View
from .program import Program, merged

MAX_BYTES = 8 << 20     # bytes a dispatch's tensors span, at most, to be merged
TINY = 64 << 10         # ... and where all touch at most this, one workgroup may run them
COMPILE_RATIO = 3        # a merged kernel's first compile over its parts', at most
SMALL_SOURCE = 100_000   # GLSL characters below which a merged kernel is always cheap
SPLIT_AMONG = 100        # dispatches past which a large merged kernel run once stays its parts
DEFER_SOURCE = 20_000    # GLSL characters past which a new merged kernel may wait (`tiers`)
WINDOW = 8            # runs a mergeable dispatch may move back across (`_runs`)
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

    @property
    def heads(self) -> int:
        return self.ds.heads or 0

    @property
    def size(self) -> int:
        """GLSL characters but its libraries' (a merged kernel holds those once)."""
        return len(self.program.render(0)) - sum(len(t) for t in self.program.libraries.values())


def _part(ds, limit: int) -> _Part | None:
    if isinstance(ds, Loop):              # a loop keeps its place
        return None
    p: Program = ds.kernel.program
    if not p.mergeable or sum(v.nbytes for v in ds.views) > MAX_BYTES:
        return None
    if limit and (ds.heads is None or ds.heads + 2 > limit):
        return None                       # its loops are not known to fit beside others'
    return _Part(ds, p)


def head_budget(profile) -> int:
    """Loop heads a merged kernel's invocation may run: half the driver's limit (0: no
    limit). Half, so a bound that is off by a few heads never meets the limit itself.

    >>> head_budget(type("P", (), {"loop_limit": 65535})), head_budget(type("P", (), {"loop_limit": 0}))
    (32767, 0)
    """
    return profile.loop_limit // 2 if profile.loop_limit else 0


def _unit_heads(p: _Part, L: int, G: int) -> int:
    """Loop heads part p adds to one turn of a merged kernel of G units of L: its share of
    units, each unit's heads and the head of the loop over them."""
    return p.ds.groups * (p.ds.kernel.local_size // L) // G * (p.heads + 1)


def _turn_heads(s: list, L: int, G: int) -> int:
    """Loop heads of one turn of a merged kernel over parts s, the turn's own head included."""
    return 1 + sum(_unit_heads(p, L, G) for p in s)


def _fits(dev, parts: list, extra: int = 0) -> bool:
    storage = 1 + extra + sum(1 for p in parts for i in range(p.ds.kernel.n_tensors)
                              if not p.ds.kernel.texels or p.ds.kernel.texels[i] is None)
    texel = sum(p.ds.kernel.n_tensors for p in parts) + 1 + extra - storage
    return (storage <= dev.max_storage_buffers and texel <= dev.max_sampled
            and storage + texel <= dev.max_resources)


def _cheap_to_compile(size: int, squares: int) -> bool:
    """Whether a merged kernel of `size` GLSL characters, from parts whose sizes' squares
    add up to `squares`, compiles in at most COMPILE_RATIO times its parts' time, taking
    compile time to grow as the square of a kernel's size (lavapipe's LLVM grows faster
    than linearly): two like parts cost twice, three three times, 31 thirty-one. Kernels
    of at most SMALL_SOURCE characters merge freely (they compile in milliseconds)."""
    return size <= SMALL_SOURCE or size * size <= COMPILE_RATIO * squares


def _sets(parts: list, S: int, dev, workers: int, limit: int = 0) -> list[tuple[list, int, int]]:
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
    workgroups. Within the descriptor limits and the loop-head budget `limit` (a turn's
    heads, `_turn_heads`); single parts come back as sets of one."""
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
        cur, size, sq, libs, heads = [], 0, 0, set(), 1
        for p in take:
            ph = _unit_heads(p, L, G)
            if limit and 1 + ph > limit:
                sets.append(alone(p))     # too many of its units for one invocation
                continue
            whole = p.size + sum(len(t) for t in p.program.libraries.values())
            grown = size + p.size + sum(len(t) for n, t in p.program.libraries.items() if n not in libs)
            if cur and (not _fits(dev, cur + [p]) or not _cheap_to_compile(grown, sq + whole * whole)
                        or (limit and heads + ph > limit)):
                sets.append((cur, L, G))
                cur, sq, libs, heads = [], 0, set(), 1
                grown = whole
            cur.append(p)
            size, sq, heads = grown, sq + whole * whole, heads + ph
            libs.update(p.program.libraries)
        if cur:
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


class _Run:
    """Dispatches that need no barrier between them, and the byte ranges they touch."""

    def __init__(self):
        self.items: list = []
        self.reads: list = []
        self.writes: list = []

    def add(self, ds, rs: list, ws: list) -> None:
        self.items.append(ds)
        self.reads += rs
        self.writes += ws

    def conflicts(self, rs: list, ws: list) -> bool:
        def hit(a, bs):
            return any(a[0] == b[0] and a[1] < b[2] and b[1] < a[2] for b in bs)
        return any(hit(r, self.writes) for r in rs + ws) or any(hit(w, self.reads) for w in ws)


def _ranges(ds) -> tuple[list, list]:
    rr = [(v.region, v.offset, v.offset + v.nbytes) for v in ds.views]
    return [r for i, r in enumerate(rr) if i not in ds.writes], [rr[i] for i in ds.writes]


def _runs(dispatches: list, limit: int = 0) -> list[list]:
    """dispatches in runs that need no barrier inside. A mergeable dispatch joins the
    earliest of the last WINDOW runs such that neither it nor any later run has a range
    in conflict with it (it then runs before those later runs, which is the same program:
    the memory plan's ranges are fixed, and a range reused after a value dies is a
    conflict that keeps the order). So a layer's input gradient joins its weight gradient across
    the weight update that the memory order put between them. Others keep their place."""
    runs: list[_Run] = []
    for ds in dispatches:
        rs, ws = _ranges(ds)
        at = len(runs)
        while at > 0 and not runs[at - 1].conflicts(rs, ws):
            at -= 1
            if _part(ds, limit) is None or len(runs) - at >= WINDOW:
                break
        if at == len(runs):
            runs.append(_Run())
        runs[at].add(ds, rs, ws)
    return [r.items for r in runs]


def active(profile) -> bool:
    """Whether dispatches under profile are merged (and so their kernels compiled late)."""
    return profile.merge and not _off[0]


def merge(rt, dispatches: list) -> list:
    """dispatches with each run that needs no barrier inside merged as far as allowed, and
    dispatches of subgroup-sized workgroups with more units than the driver has workers
    made dynamic (the order of the runs, and so every barrier, stays). A merged kernel of
    more than SMALL_SOURCE characters that a long program would run only once stays
    its parts (`_split`)."""
    return tiers(rt, dispatches, later=False)[0]


def tiers(rt, dispatches: list, later: bool = True) -> tuple[list, list | None]:
    """(first, final): `merge`'s dispatches, and where later (a program that will be
    called again) and some merged kernels are large and not compiled yet, first is the
    same with those kernels run as their parts and final the merged program (its new
    kernels not yet built), else None.

    A merged kernel is new code: lavapipe compiles a large one for about a second (a deep
    training step's first call spent most of its time on three of them), while its parts
    are kernels the program compiles anyway or already has. So a compiled program first
    runs the parts, and takes the merged kernels once they are built (`compiled.Compiled`
    builds them in the background once the program is called again); both give the same
    bits, and the memory plan is the same (merging never moves a dispatch across a
    conflicting range)."""
    dev, prof = rt.dev, rt.dev.profile
    workers = max(prof.workers, 1)
    if not active(prof) or not dispatches:
        return dispatches, None
    limit = head_budget(prof)
    runs = _runs(dispatches, limit)
    planned, slots = [], 0
    for run in runs:
        parts, keep = [], []
        for ds in run:
            p = _part(ds, limit)
            (parts if p is not None else keep).append(p if p is not None else ds)
        for s, L, G in _sets(parts, dev.subgroup_size, dev, workers, limit):
            # a workgroup of a dynamic kernel takes at most `turns` units (0: no bound)
            turns = limit // _turn_heads(s, L, G) if limit else 0
            if turns >= G:
                turns = 0
            elif turns:
                turns = 1 << (turns.bit_length() - 1)     # fewer distinct kernels
            dyn = (prof.dynamic and L == dev.subgroup_size and G > workers and slots < SLOTS
                   and (not limit or turns == 0 or turns >= 2) and _fits(dev, s, extra=1))
            if len(s) == 1 and not dyn:
                keep.append(s[0].ds)
                continue
            bases, base = [], 0
            for p in s:
                bases.append(base)
                base += len(p.ds.meta)
            prog = merged([(p.program, p.ds.groups, b) for p, b in zip(s, bases)], L, G, counter=dyn,
                          turns=turns if dyn else 0)
            slots += dyn
            keep.append((s, G, turns, dyn, prog))
        planned.append(keep)
    split = _split(planned, len(dispatches))
    fresh = _fresh(rt, planned, split) if later else set()
    final = _emit(rt, planned, split) if fresh else None
    return _emit(rt, planned, split | fresh), final


def _fresh(rt, planned: list, split: set) -> set:
    """ids of the planned merged kernels (not already split) to run as their parts until
    they are built: those of more than DEFER_SOURCE characters, not compiled yet, whose
    parts not otherwise in the program (nor compiled) are less than half as long, the
    largest first (compile time taken as growing with source length: the first call then
    compiles at most half as much for it)."""
    hoist = rt.dev.profile.hoist_meta

    def key(prog):
        return prog.key(hoist)
    merged_, need = [], set()
    for keep in planned:
        for e in keep:
            if isinstance(e, Loop):
                continue
            if not isinstance(e, tuple):
                need.add(key(e.kernel.program))
            elif len(e[0]) > 1 and id(e) not in split and len(e[4].render()) > DEFER_SOURCE \
                    and not rt.kernels.has(e[4]):
                merged_.append(e)
            elif id(e) in split:
                need.update(key(p.program) for p in e[0])
            else:
                need.add(key(e[4]))
    out = set()
    for e in sorted(merged_, key=lambda e: -len(e[4].render())):
        new = {key(p.program): len(p.program.render()) for p in e[0]
               if key(p.program) not in need and not rt.kernels.has(p.program)}
        if 2 * sum(new.values()) < len(e[4].render()):
            out.add(id(e))
            need.update(key(p.program) for p in e[0])
        else:
            need.add(key(e[4]))
    return out


def _emit(rt, planned: list, split: set) -> list:
    """The dispatches of planned runs, the merged kernels in split as their parts."""
    workers = max(rt.dev.profile.workers, 1)
    out, slot = [], 0
    for keep in planned:
        for e in keep:
            if not isinstance(e, tuple):
                out.append(e)
                continue
            s, G, turns, dyn, prog = e
            if id(e) in split:
                out += [p.ds for p in s]
                continue
            k = rt.kernels.get(prog, build=False)    # built with the rest (`lower_graph`)
            views, writes, base = [], [], 0
            for p in s:
                writes += [base + w for w in p.ds.writes]
                views += p.ds.views
                base += len(p.ds.views)
            meta = np.concatenate([p.ds.meta for p in s] + ([[G]] if dyn else [])).astype(np.int32)
            if dyn:
                c = _counter(rt, slot)
                slot += 1
                writes.append(len(views))
                views.append(c)
                # enough workgroups that each worker's share could take every unit: one
                # fast worker still takes more units than a slowed one
                W = min(G, workers * -(-G // turns)) if turns else min(workers, G)
                out.append(Dispatch(k, meta, views, tuple(writes), W, (c,), heads=None))
            else:
                out.append(Dispatch(k, meta, views, tuple(writes), G, heads=None))
    return out


def _split(planned: list, dispatches: int) -> set:
    """ids of the planned merged kernels to run as their parts instead: those larger than
    SMALL_SOURCE that a program of more than SPLIT_AMONG dispatches runs only once. There
    one run saves a few of many dispatches (a few percent of a call at most), while such a
    kernel costs lavapipe a second or so of LLVM once in every cold process, and its
    parts are often kernels compiled anyway (a deep training step's first and last layers
    merge differently from its repeated middle ones). A small program keeps them: its
    few dispatches are much of its call."""
    if dispatches <= SPLIT_AMONG:
        return set()
    merged_ = [e for keep in planned for e in keep if isinstance(e, tuple) and len(e[0]) > 1]
    uses: dict[str, int] = {}
    for e in merged_:
        uses[e[4].render()] = uses.get(e[4].render(), 0) + 1
    return {id(e) for e in merged_ if uses[e[4].render()] == 1 and len(e[4].render()) > SMALL_SOURCE}
