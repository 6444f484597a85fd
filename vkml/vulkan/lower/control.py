"""Control flow: a Scan lowered to a `dispatch.Loop`.

The body graph is lowered once (its own memory plan, kernels and dispatches) against
stand-ins for its inputs, which are then moved onto fixed places: the loop's constants
where they lie, each carry in the buffer of the Scan's final-carry result (so the last
step leaves the result in place), each step's slice in a slot of its own. A step copies
its slices into their slots, runs the body, then copies the new carries over the old and
each step output into slice i of its stacked result. Every step binds the same
descriptors, so the body is recorded T times by a few raw calls per dispatch, with no
descriptor set, meta or Python lowering per step; a step's copies are per-step offsets
into the stacked arrays (`Loop.pre`/`post`).
"""
from __future__ import annotations

from typing import Callable, Sequence

from ...trace import dtypes as dt
from ...trace.control import WHILE_REVERSE, gated_step
from ..dispatch import Loop, View, WhileLoop, flat, view_of


class _Stand:
    """A body input's stand-in while the body is lowered (a Buffer's shape)."""
    __slots__ = ("block", "offset", "nbytes")

    class _Block:
        __slots__ = ("buffer", "mapped", "__weakref__")

        def __init__(self):
            self.buffer, self.mapped = None, None

    def __init__(self, nbytes: int):
        self.block, self.offset, self.nbytes = _Stand._Block(), 0, nbytes


def _nbytes(n) -> int:
    return n.size * dt.itemsize(n.dtype)


def lower(node, ins, out, ctx) -> None:
    raise AssertionError(f"{node.op.value} is lowered by the executor (`lower_scan`)")


def lower_scan(rt, node, ins: Sequence[View], outs: Sequence[View], checks: list,
               lower_graph: Callable) -> Loop:
    """The Loop computing a Scan node: ins are its operands' views, outs its results'
    (final carries, then stacked step outputs)."""
    a = node.attrs
    body, T, nc, nk = a["body"], a["length"], a["n_consts"], a["n_carry"]
    stands = [_Stand(_nbytes(i)) for i in body.inputs]
    low = lower_graph(rt, body, stands)
    checks.extend(low.checks)
    slots, held = [], [low]
    target: dict[int, View] = {}      # id(stand block) -> the view it becomes
    n_in = len(body.inputs)
    for k, (inp, st) in enumerate(zip(body.inputs, stands)):
        if k < nc:
            v = ins[k]
        elif k < nc + nk:
            v = outs[k - nc]
        else:
            b = rt.allocator.alloc(_nbytes(inp), "scan slot")
            held.append(b)
            v = view_of(b, inp.shape, inp.dtype)
            slots.append((k, v))
        target[id(st.block)] = v

    def move(v: View) -> View:
        t = target.get(v.region)
        if t is None:
            return v
        return View(t.vkbuf, t.offset + v.offset, v.nbytes, t.region, v.shape, v.dtype)

    shell = Loop(low.dispatches, T, bool(a["reverse"]), [], [], [], [], (), held)
    body_ds = shell.moved(move).body
    stand_of = {id(s): k for k, s in enumerate(stands)}
    before, pre, post = [], [], []
    for k in range(nk):                      # initial carries into the carry results
        if outs[k].nbytes:
            before.append((ins[nc + k], outs[k], 0, 0))
    for k, v in slots:                       # each step's slices into their slots
        x = ins[k]
        if v.nbytes:
            pre.append((x, v, v.nbytes, 0))
    for j, (o, res) in enumerate(zip(body.outputs, low.outputs)):
        dst = outs[j]
        if not dst.nbytes:
            continue
        step = 0 if j < nk else dst.nbytes // max(T, 1)
        k = stand_of.get(id(res))
        if k is None:                        # computed by the body (or a constant of it)
            post.append((view_of(res, o.shape, o.dtype), dst, 0, step))
            continue
        if j < nk and k == nc + j:           # a carry passed through unchanged
            continue
        # a body input returned as a step output: copied before the step changes it
        src = ins[k] if k < nc else (outs[k - nc] if k < nc + nk else ins[k])
        src_step = src.nbytes // max(T, 1) if k >= nc + nk else 0
        (pre if j >= nk else post).append((src, dst, src_step, step))
    reads = list(ins)
    writes = tuple(range(len(reads), len(reads) + len(outs)))
    del n_in
    return Loop(body_ds, T, bool(a["reverse"]), before, pre, post, reads + list(outs), writes, held)


def lower_while(rt, node, ins: Sequence[View], outs: Sequence[View], checks: list,
                lower_graph: Callable) -> WhileLoop:
    """The WhileLoop computing a While node: its gated step (`trace.control.gated_step`)
    lowered once against stand-ins, moved onto the loop's constants and onto the buffers
    of its results (the carries live there from the start, so the last step leaves the
    results in place); a step's post copies move the new carries over the old and its
    any-lane predicate into a host-mapped flag."""
    a = node.attrs
    if a.get("transpose") is not None:
        raise ValueError(WHILE_REVERSE)
    nc, nk = a["n_consts"], a["n_carry"]
    step = gated_step(a["body"], a["cond"], nc, nk)
    stands = [_Stand(_nbytes(i)) for i in step.inputs]
    low = lower_graph(rt, step, stands)
    checks.extend(low.checks)
    held: list = [low]
    target = {id(st.block): (ins[k] if k < nc else outs[k - nc]) for k, st in enumerate(stands)}

    def move(v: View) -> View:
        t = target.get(v.region)
        if t is None:
            return v
        return View(t.vkbuf, t.offset + v.offset, v.nbytes, t.region, v.shape, v.dtype)

    body_ds = Loop(low.dispatches, 0, False, [], [], [], [], (), held).moved(move).body
    go = step.outputs[nk]
    flag = rt.allocator.alloc(_nbytes(go), "while flag", host=True)
    held.append(flag)
    before = [(ins[nc + k], outs[k], 0, 0) for k in range(nk) if outs[k].nbytes]
    post = []
    for j, (o, res) in enumerate(zip(step.outputs, low.outputs)):
        dst = outs[j] if j < nk else view_of(flag, o.shape, o.dtype)
        if dst.nbytes:      # the step's outputs are computed (Where, Max or Copy nodes)
            post.append((view_of(res, o.shape, o.dtype), dst, 0, 0))
    reads = list(ins)
    writes = tuple(range(len(reads), len(reads) + len(outs)))
    return WhileLoop(body_ds, 0, False, before, [], post, reads + list(outs), writes, held, (), flag)


def body_zero(loop: Loop) -> list[View]:
    """The counters the body's dispatches count from zero (`merge`): refilled per step."""
    return [v for ds in flat(loop.body) for v in ds.zero]
