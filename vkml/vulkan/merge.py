"""Horizontal fusion on CPU devices: dispatches that need no barrier between them, run as
one dispatch of one generated kernel.

lavapipe runs the dispatches of a command buffer one after another and wakes its worker
threads for each: about 14 us per dispatch on the 2-core CI VM beyond the kernel itself
(`bench/tools/lvp_dispatch.py`: 18 us each with worker threads, 4 us on the queue thread
alone). A training step's backward pass has, per layer, a weight gradient, an input
gradient and a bias sum that only read what the layer before produced; as one dispatch
they also share the workers, where a one-workgroup sum left a core idle. A GPU overlaps
such dispatches anyway (no barrier between them), so only CPU devices merge.

A merged kernel holds each part's body with its global names prefixed (`h<p>_`), its
bindings renumbered after the previous parts' and its meta reads offset into the
concatenated meta. Every workgroup of it runs the same share of every part, one part
after another (`_sets` says why not one part per workgroup). The workgroup size is the
smallest of the parts'; a part with a larger one runs each of its workgroups as several
(its invocation index rebuilt from them), which is exact for kernels whose invocations
meet only through subgroup operations: a part that uses shared memory, barriers or
subgroup ids keeps its own size or stays a dispatch of its own. Every literal meta
read is done first thing in main(), where lavapipe loads a uniform value once
(`kernels.hoist_meta`). A merged body that does not compile (a construct this rewrite
does not know) leaves its parts as they were, recorded in `failures`. The test suite
runs merged on lavapipe; tests/vulkan/test_merge.py compares merged and unmerged bits.

Dynamic dispatches: lavapipe also splits a dispatch's workgroups into one fixed share per
worker thread, so on a VM whose vCPUs are time-shared one slowed vCPU stretches every
dispatch (the small MLP step: best 1.5 ms, but 2.6-2.8 ms in such stretches). A merged or
single kernel of subgroup-sized workgroups with more units than workers instead runs one
workgroup per worker, each taking the next unit from an atomic counter that the
recording zeroes first (`Dispatch.zero`), so a fast core takes more units. Measured
in a slow stretch, 24 rounds of 40 calls alternating (median of medians): 2.16 against
2.26 ms; in a quiet one about even (best 1.51 against 1.49 ms).

Only runs the schedule already puts side by side merge: the memory plan reuses ranges
in schedule order, so moving independent work next to other work would mostly meet a
range it must wait for.

Only dispatches touching at most MAX_BYTES each are merged: a long kernel does not
notice 14 us, and keeping it alone keeps its own meta reads where they were.
"""
from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator

import numpy as np

from .compile import GlslangMissingError
from .kernels import Kernel

MERGE = True            # tests turn it off to compare
MAX_BYTES = 8 << 20     # bytes a dispatch's tensors span, at most, to be merged
TINY = 64 << 10         # ... and where all touch at most this, one workgroup may run them
failures: list = []     # merged bodies that did not compile (kept unmerged)

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_EXT = re.compile(r"^\s*#extension[^\n]*\n?", re.M)
_BUFFER = re.compile(r"layout\s*\([^)]*\)\s*(?:\w+\s+)*?buffer\s+(\w+)\s*\{([^}]*)\}\s*;")
_MEMBER = re.compile(r"(\w+)\s*\[\s*\]\s*;")
_TEXEL = re.compile(r"uniform\s+\w*samplerBuffer\s+(\w+)\s*;")
_FUNC = re.compile(r"(\w+)\s*\([^()]*\)\s*\{\}")
_VAR = re.compile(r"^\s*(?:const\s+|shared\s+|precise\s+)*\w+\s+(\w+)\s*(?:\[[^\]]*\])?\s*(?:=|;|$)")
_BINDING = re.compile(r"binding\s*=\s*(\d+)")
# builtins a part cannot use: they would see the merged grid, not the part's
_GRID = re.compile(r"\b(gl_WorkGroupID|gl_GlobalInvocationID|gl_NumWorkGroups|gl_WorkGroupSize|"
                   r"gl_LocalInvocationIndex)\b")
# ... and ones that tie a part to its own workgroup size
_RIGID = re.compile(r"\b(shared|barrier|memoryBarrierShared|groupMemoryBarrier|gl_SubgroupID|gl_NumSubgroups)\b")
_SUBGROUP = re.compile(r"\b(subgroup\w+|gl_Subgroup\w+)\b")


@dataclass
class _Part:
    ds: object            # the Dispatch
    text: str             # its body without comments and #extension lines
    exts: list
    names: set            # global names it declares
    rigid: bool           # shared memory, barriers or subgroup ids: its own workgroup size only
    subgroups: bool       # uses subgroup operations


def _top_level(text: str) -> str:
    """text with every brace's contents dropped (declarations at file scope remain)."""
    out, depth = [], 0
    for ch in text:
        if ch == "{":
            depth += 1
            if depth == 1:
                out.append("{")
        elif ch == "}":
            depth -= 1
            if depth == 0:
                out.append("}")
        elif depth == 0:
            out.append(ch)
    if depth:
        raise ValueError("unbalanced braces")
    return "".join(out)


def global_names(text: str) -> set[str]:
    """The names a GLSL body (comments removed) declares at file scope: buffers and their
    arrays, texel buffers, functions, constants, shared arrays.

    >>> sorted(global_names("layout(std430, set = 0, binding = 1) buffer B1_o { float o[]; };\\n"
    ...                     "const float K = 2.0;\\nfloat f(float x) { return x * K; }\\nvoid main() { o[0] = f(1.0); }\\n"))
    ['B1_o', 'K', 'f', 'main', 'o']
    """
    names = set()
    for m in _BUFFER.finditer(text):
        names.add(m.group(1))
        names.update(_MEMBER.findall(m.group(2)))
    rest = _BUFFER.sub(";", text)
    names.update(_TEXEL.findall(rest))
    rest = _TEXEL.sub(";", rest)
    top = _top_level(rest)
    names.update(_FUNC.findall(top))
    for stmt in _FUNC.sub(";", top).split(";"):
        if stmt.strip().startswith("layout"):
            continue
        m = _VAR.match(stmt)
        if m:
            names.add(m.group(1))
    return names


def _part(ds) -> _Part | None:
    k: Kernel = ds.kernel
    if k.spec or not k.body or sum(v.nbytes for v in ds.views) > MAX_BYTES:
        return None
    parsed = _parse(k.body)
    return None if parsed is None else _Part(ds, *parsed)


@lru_cache(maxsize=512)
def _parse(body: str) -> tuple | None:
    """(text, extensions, global names, rigid, uses subgroups) of a kernel body, or None
    where it cannot be a part; once per body (a deep network repeats its layers' kernels)."""
    text = _COMMENT.sub("", body)
    exts = [e.strip() for e in _EXT.findall(text)]
    text = _EXT.sub("", text)
    if _GRID.search(text):
        return None
    try:
        names = frozenset(global_names(text))
    except ValueError:
        return None
    if "main" not in names:
        return None
    return text, exts, names, bool(_RIGID.search(text)), bool(_SUBGROUP.search(text))


def _wrap_meta(text: str, base: int, hoisted: dict) -> str:
    """text with meta[i] read at base + i: a literal i as a global set first thing in
    main() (hoisted: global name -> merged index), any other inside the brackets."""
    out, i = [], 0
    for m in re.finditer(r"\bmeta\s*\[", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while depth:
            depth += {"[": 1, "]": -1}.get(text[j], 0)
            j += 1
        expr = text[m.end():j - 1]
        if expr.strip().isdigit():
            name = f"hm{base}_{int(expr)}"
            hoisted[name] = base + int(expr)
            out.append(name)
        else:
            out.append(f"meta[{base} + ({_wrap_meta(expr, base, hoisted)})]")
        i = j
    out.append(text[i:])
    return "".join(out)


def _body(parts: list, L: int, G: int, counter: int | None = None) -> str:
    """The merged kernel's body: G units of L invocations, each running its share of every
    part's workgroups (their count, in workgroups of L, a multiple of G) in turn. A unit
    is a workgroup, or with counter (the binding of a zeroed counter; L a subgroup) one
    turn of a few workgroups' loop, each taking the next unit from the counter."""
    exts = []
    for p in parts:
        exts += [e for e in p.exts if e not in exts]
    src = [e + "\n" for e in exts] + ["uint hrel;   // this workgroup's index within its part\n"]
    hoisted: dict = {}
    declared: set = set()
    runs, b0, m0 = [], 0, 0
    for q, p in enumerate(parts):
        ds, k = p.ds, p.ds.kernel
        Q = k.local_size // L
        pre = f"h{q}_"
        names = re.compile(r"(?<![.\w])(" + "|".join(sorted(p.names, key=len, reverse=True)) + r")\b")
        text = names.sub(lambda m: pre + m.group(1), p.text)
        text = _BINDING.sub(lambda m: f"binding = {int(m.group(1)) + b0}", text)
        text = _wrap_meta(text, m0, hoisted)
        text = re.sub(r"(?<![.\w])gidx\(\)", f"{pre}gidx()", text)
        text = re.sub(r"(?<![.\w])group_id\(\)", f"{pre}group_id()", text)
        text = re.sub(r"\bgl_LocalInvocationID\b", f"uvec3({pre}lidx(), 0u, 0u)", text)
        src.append(f"// part {q}: {k.name}, {ds.groups} workgroups of {k.local_size}\n")
        if Q == 1:
            src.append(f"uint {pre}group_id() {{ return hrel; }}\n"
                       f"uint {pre}lidx() {{ return gl_LocalInvocationID.x; }}\n")
        else:
            src.append(f"uint {pre}group_id() {{ return hrel / {Q}u; }}\n"
                       f"uint {pre}lidx() {{ return (hrel % {Q}u) * {L}u + gl_LocalInvocationID.x; }}\n")
        src.append(f"uint {pre}gidx() {{ return {pre}group_id() * {k.local_size}u + {pre}lidx(); }}\n")
        src += [f"int {n};\n" for n in hoisted if n not in declared]
        declared.update(hoisted)
        src.append(text + "\n")
        runs.append(ds.groups * Q // G)
        b0 += k.n_tensors
        m0 += len(ds.meta)
    main = ["void main() {"]
    main += [f"  {n} = meta[{i}];" for n, i in hoisted.items()]
    ind = "  "
    if counter is None:
        main.append("  uint hg = group_id();")
    else:
        src.append(f"layout(std430, set = 0, binding = {counter}) buffer HCount {{ uint hcount[]; }};\n")
        main += ["  for (;;) {", "    uint hn = 0u;",
                 "    if (subgroupElect()) hn = atomicAdd(hcount[0], 1u);",
                 "    uint hg = subgroupMax(hn);", f"    if (hg >= {G}u) break;"]
        ind = "    "
    for q, r in enumerate(runs):
        if r == 1:
            main.append(f"{ind}hrel = hg; h{q}_main();")
        else:
            main.append(f"{ind}for (uint i = 0u; i < {r}u; ++i) {{ hrel = hg * {r}u + i; h{q}_main(); }}")
    if counter is not None:
        main.append("  }")
    main.append("}")
    return "".join(src) + "\n".join(main) + "\n"


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
    nearest `workers`, then the
    largest); a set takes the parts whose count it divides. Every workgroup then does the
    same work and runs all of it: lavapipe 22.3
    runs both sides of an if under a lane mask, so a kernel branching to one part per
    workgroup ran every part's straight-line code in every workgroup (the small MLP step
    1.6 -> 1.9 ms), and it hands each worker thread one contiguous share of the
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
    global MERGE
    old, MERGE = MERGE, False
    try:
        yield
    finally:
        MERGE = old


DYNAMIC = True          # tests turn it off to compare
SLOTS = 256             # counters one program's dynamic dispatches may use


def lavapipe_workers() -> int:
    """lavapipe's worker threads: LP_NUM_THREADS, else one per CPU on a machine with more
    than one (none on one CPU: the queue thread runs every workgroup), at most 16."""
    v = os.environ.get("LP_NUM_THREADS")
    n = int(v) if v and v.strip().isdigit() else (os.cpu_count() or 1)
    if v is None and n <= 1:
        n = 0
    return min(n, 16)


def _counter(rt, slot: int):
    """A zeroed-per-recording uint counter view for a dynamic dispatch: slot `slot` of one
    buffer (a distinct range per dispatch, so no two dispatches conflict)."""
    from .executor import View
    buf = getattr(rt, "_merge_counters", None)
    stride = rt.dev.storage_alignment
    if buf is None:
        buf = rt._merge_counters = rt.allocator.alloc(SLOTS * stride, "merge counters", mapped=False)
    return View(buf.block.buffer, buf.offset + slot * stride, 4, id(buf.block), (1,), np.dtype(np.uint32))


def active(dev) -> bool:
    """Whether dispatches on dev are merged (and so their kernels compiled late)."""
    return MERGE and dev.is_cpu


def merge(rt, dispatches: list) -> list:
    """dispatches with each run that needs no barrier inside merged as far as allowed, and
    dispatches of subgroup-sized workgroups with more units than lavapipe has workers
    made dynamic (CPU devices; the order of the runs, and so every barrier, stays)."""
    from .executor import Dispatch, barriers_before
    dev = rt.dev
    workers = max(lavapipe_workers(), 1)
    if not active(dev) or not dispatches:
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
            dyn = (DYNAMIC and L == dev.subgroup_size and G > workers and slot < SLOTS
                   and _fits(dev, s, extra=1))
            if len(s) == 1 and not dyn:
                keep.append(s[0].ds)
                continue
            n = sum(p.ds.kernel.n_tensors for p in s)
            body = _body(s, L, G, n + 1 if dyn else None)
            texels = ()
            if any(p.ds.kernel.texels for p in s):
                texels = tuple(f for p in s for f in (p.ds.kernel.texels or (None,) * p.ds.kernel.n_tensors))
                texels += (None,) * dyn
            names = [p.ds.kernel.name for p in s]
            name = "+".join(names) if len(names) <= 4 else f"{names[0]}+{len(names) - 1}_more"
            try:
                k = rt.kernels.get(name, body, n + dyn, L, texels)
            except GlslangMissingError:
                raise
            except RuntimeError:
                # a body this rewrite does not handle: the parts run as they were (tests
                # check that none of theirs fail: `failures`)
                failures.append(body)
                keep += [p.ds for p in s]
                continue
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

