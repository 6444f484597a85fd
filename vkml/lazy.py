"""Lazy eager operators: an eager operator records a node and returns at once; the pending
nodes run together when a value is needed (tinygrad's and the design's "lazily batched until
a value is needed").

An eager operator (`array.bind` outside any transform) checks its operands' shapes and
dtypes at once, by making its graph Node (so errors are raised at the user's line), and
returns an Array holding a `Pending` record instead of a buffer. Reading a buffer
(`Array._buf`: `np.asarray`, `item()`, a jitted call, `backward()`, ...) flushes every
pending record whose Array is still alive, as one graph:

* The graph's structure (operators, attributes, shapes, dtypes, how nodes connect, which
  are results) keys a cache of compiled programs. A structure seen before replays its
  program: an eager training loop whose step repeats runs its optimiser update or its
  forward pass as one fused, recorded program, as a jitted step does.
* A structure seen for the first time runs operator by operator through the cached
  single-operator programs (`array._eager`), as eager vkml did before: a program is only
  compiled for a structure that repeats, so one-off eager code compiles nothing new.

Operators that may raise from the device (int32 overflow checks, `vkml.debug` index
checks), and attributes that hold arrays, run at once, so their errors stay at their line.
At most MAX_PENDING nodes wait. On by default; $VKML_LAZY=0 (or `lazy.ENABLED = False`)
runs every eager operator at once.

An operator's host cost is kept small (a few microseconds, as a PyTorch CPU operator's) by
checking each signature (operator, attributes, operand shapes and dtypes) once: its result
shape and dtype, and whether it may wait, are memoised; a waiting record is a `Pending`,
not a graph Node.

>>> import vkml.numpy as vnp, vkml.lazy
>>> was, vkml.lazy.ENABLED = vkml.lazy.ENABLED, True
>>> x = vnp.arange(4.0)
>>> y = (x * 2.0 + 1.0).sum()     # recorded, not run
>>> is_pending(y), float(y), is_pending(y)
(True, 16.0, False)
>>> vkml.lazy.ENABLED = was
"""
from __future__ import annotations

import itertools
import operator
import os
import threading
import weakref
from collections import OrderedDict
from typing import Any

from .trace import dtypes as dt
from .trace.graph import Graph, Node
from .trace.ops import OpKind
from .trace.shapes import size_of
from .vulkan.memory import Buffer

MAX_PENDING = 512       # nodes waiting before a flush (bounds the graph and what it holds)
# result bytes waiting before a flush: what waits keeps its operands' buffers alive, and a
# chain over large arrays gains nothing from waiting (the device's work dominates)
MAX_PENDING_BYTES = 64 << 20
LARGE_BYTES = 4 << 20   # an operator with a larger result runs at once (`lazy_ok`)
PROGRAMS_KEPT = 64      # compiled flush programs kept (least recently used dropped)
# $VKML_LAZY=0 turns it off (every eager operator runs at once)
ENABLED = os.environ.get("VKML_LAZY", "1") != "0"


class Pending:
    """A node not run yet. key: its signature (operator, attribute key, per operand its
    (shape, dtype)); out: the signature's (result shape, dtype, bytes); args: per operand
    the concrete Buffer or the Pending record it reads; attrs: the attributes; buf: once
    run, its result buffer. No graph Node is made while it waits (a flush that compiles
    makes them: `_compile`)."""
    __slots__ = ("key", "out", "args", "attrs", "buf", "seq")

    def __init__(self, key: tuple, out: tuple, args: tuple, attrs: dict, seq: int):
        self.key, self.out, self.args, self.attrs, self.buf = key, out, args, attrs, None
        self.seq = seq      # creation order: a flush lists its results so, whatever the set's order

    kind = property(lambda self: self.key[0])
    avals = property(lambda self: self.key[2])
    shape = property(lambda self: self.out[0])
    dtype = property(lambda self: self.out[1])
    nbytes = property(lambda self: size_of(self.out[0]) * self.out[1].itemsize)


_lock = threading.RLock()
# Arrays whose records wait, by id (a WeakSet would compare Tensors with their elementwise ==).
# `record` adds to it without the lock (a dict store is atomic): a record that a concurrent
# flush misses is run alone when read (`realize`)
_pending: dict = {}
_count = 0                                          # records made since the last flush
_bytes = 0                                          # ... and their result bytes
_seq = itertools.count()
_seen: OrderedDict = OrderedDict()                  # structure key -> None (seen once)
_programs: OrderedDict = OrderedDict()              # structure key -> Compiled
stats = {"flushes": 0, "replayed": 0, "stepped": 0, "compiled": 0}
# (operator, attribute key, operand shapes and dtypes) -> (result shape, dtype, result bytes,
# or -1 where the operator must run at once): the registry's checks run once per signature
# (a signature that fails them raises each time and is not kept)
_signatures: dict = {}
SIGNATURES_KEPT = 4096


def is_pending(a) -> bool:
    """Whether array a holds a record not run yet (testing and debugging)."""
    r = a._lazy
    return r is not None and r.buf is None


def lazy_ok(kind: OpKind, node: Node) -> bool:
    """Whether an operator may wait: not one whose kernels may raise from the device, nor
    one with a large result (LARGE_BYTES: the device's work dominates its host cost, and
    waiting would keep its operands' memory; its out-of-memory error names it at once)."""
    if node.dtype == dt.int32 or kind is OpKind.CheckIndex:
        return False
    return node.size * node.dtype.itemsize <= LARGE_BYTES


def _signature(key: tuple, kind: OpKind, avals: tuple, attrs: dict) -> tuple:
    """The memo entry of `_signatures` for key, checking the operator as a graph Node does
    (shape and dtype errors raise here, at the user's line)."""
    node = Node(kind, [_placeholder(s, d) for s, d in avals], attrs)
    nbytes = node.size * node.dtype.itemsize if lazy_ok(kind, node) else -1
    sig = (node.shape, node.dtype, nbytes)
    if len(_signatures) >= SIGNATURES_KEPT:
        _signatures.clear()
    _signatures[key] = sig
    return sig


def record(kind: OpKind, operands: list, attrs: dict, attrs_key, make_array) -> Any:
    """The pending result of an eager operator, or None where it must run now (the
    caller runs it). make_array(record, shape, dtype) builds the result Array."""
    global _count, _bytes
    args, avals = [], []
    for v in operands:
        r = v._lazy
        if r is None:
            # the buffer itself, not the Array: a Tensor's in-place update replaces its
            # buffer, and the operator reads the value it had now
            b = v._b
            if type(b) is not Buffer:
                getattr(b, "nbytes")    # a donated array's stand-in raises DonatedArrayError
            args.append(b)
        elif r.buf is None:
            args.append(r)
        else:
            args.append(v._buf)
        avals.append((v.shape, v.dtype))
    key = (kind, attrs_key, tuple(avals))
    sig = _signatures.get(key)
    if sig is None:
        sig = _signature(key, kind, key[2], attrs)
    nbytes = sig[2]
    if nbytes < 0:
        return None
    out = make_array(Pending(key, sig, tuple(args), attrs, next(_seq)), sig[0], sig[1])
    _pending[id(out)] = weakref.ref(out)
    _count += 1
    _bytes += nbytes
    if _count >= MAX_PENDING or _bytes >= MAX_PENDING_BYTES:
        flush()
    return out


def _placeholder(shape: tuple, dtype) -> Node:
    # input_node without the shape inference (a measurable part of an eager operator)
    return Node(OpKind.Input, (), {"shape": shape, "dtype": dtype, "index": -1}, shape=shape, dtype=dtype)


def adopt(a) -> None:
    """Register array a as holding a pending record it took from another (a Tensor made
    from an Array's value), so a flush computes it."""
    if a._lazy is not None and a._lazy.buf is None:
        _pending[id(a)] = weakref.ref(a)


def _walk(outs: list) -> tuple[list, list, tuple, bool]:
    """(records in dependency order, leaf buffers in first-use order, structure key,
    whether an operand is a record run by an earlier flush)."""
    found, stack = {}, list(outs)
    while stack:
        r = stack.pop()
        if id(r) in found:
            continue
        found[id(r)] = r
        for a in r.args:
            if type(a) is Pending and a.buf is None and id(a) not in found:
                stack.append(a)
    # a record's operands were made before it: creation order is a dependency order
    order = sorted(found.values(), key=_by_seq)
    index = {id(r): i for i, r in enumerate(order)}
    leaves, entries, mixed = [], [], False
    for r in order:
        refs = []
        for a in r.args:
            if type(a) is Pending:
                if a.buf is None:
                    refs.append(index[id(a)])
                    continue
                mixed, a = True, a.buf
            refs.append(None)
            leaves.append(a)
        # the signature (the operator, its attributes, the operands' shapes and dtypes)
        # and which operands are records, by position
        entries.append((r.key, tuple(refs)))
    key = (tuple(entries), tuple(index[id(r)] for r in outs))
    return order, leaves, key, mixed


_by_seq = operator.attrgetter("seq")


def flush() -> None:
    """Run every pending record whose Array is alive (see the module docstring)."""
    global _count, _bytes, _pending
    with _lock:
        waiting, _pending = _pending, {}
        _count = _bytes = 0
        arrays = [a for a in (w() for w in waiting.values())
                  if a is not None and a._lazy is not None and a._lazy.buf is None]
        del waiting
        if not arrays:
            return
        outs = sorted({id(a._lazy): a._lazy for a in arrays}.values(), key=lambda r: r.seq)
        order, leaves, key, mixed = _walk(outs)
        from .vulkan import runtime
        key = key + (runtime.get().dev.profile,)
        stats["flushes"] += 1
        try:
            _run(key, order, leaves, outs, mixed)
        except BaseException as e:
            # what did not run waits again (its arrays are still alive): a later read
            # retries it, and the error is raised here, at the operator or the read
            for x in arrays:
                if x._lazy is not None and x._lazy.buf is None:
                    _pending[id(x)] = weakref.ref(x)
            x = None
            if not isinstance(e, MemoryError):
                raise
            # an out-of-memory error is caught and survived: its traceback must not hold
            # this flush's arrays and records (their buffers) in its frames
            del arrays, outs, order, leaves
            raise e.with_traceback(None)
        for r in order:
            r.args = ()


def _run(key, order: list, leaves: list, outs: list, mixed: bool) -> None:
    c = _programs.get(key)
    # a cached program keeps its planned intermediates: only small graphs get one (for
    # large arrays the device's work dominates the operators' host cost anyway)
    small = sum(r.out[2] for r in order) <= MAX_PENDING_BYTES
    if c is None and key in _seen and len(order) > 1 and not mixed and small:
        c = _compile(order, outs)
        _programs[key] = c
        stats["compiled"] += 1
        while len(_programs) > PROGRAMS_KEPT:
            _programs.popitem(last=False)
    if c is not None:
        _programs.move_to_end(key)
        _replay(c, order, leaves, outs)
        stats["replayed"] += 1
    else:
        _seen[key] = None
        while len(_seen) > 4 * PROGRAMS_KEPT:
            _seen.popitem(last=False)
        _step(order, outs)
        stats["stepped"] += 1


def _compile(order: list, outs: list):
    """A Compiled program of the records' graph: the placeholder Inputs (in the order
    `_walk` lists leaves) are its inputs."""
    from .vulkan.compiled import Compiled
    placeholders, nodes = [], {}
    for r in order:
        ins = []
        for a, (shape, dtype) in zip(r.args, r.avals):
            if type(a) is Pending and a.buf is None:
                ins.append(nodes[id(a)])
            else:
                ins.append(_placeholder(shape, dtype))
                placeholders.append(ins[-1])
        nodes[id(r)] = Node(r.kind, ins, r.attrs, shape=r.shape, dtype=r.dtype)
    c = Compiled(Graph(placeholders, [nodes[id(r)] for r in outs]))
    # an out-of-memory error names the operators, as an eager operator's does
    c.what = ", ".join(dict.fromkeys(r.kind.value for r in order))
    return c


def _replay(c, order: list, leaves: list, outs: list) -> None:
    bufs = c.run(leaves)
    for r, b, node in zip(outs, bufs, c.exec_graph.outputs):
        if b is None:
            if node.op is OpKind.Const:
                b = node.attrs["value"]._buf
            else:
                b = leaves[c.input_pos[node.id]]
        r.buf = b
    # records inside the program that are not results have no buffer: only dead
    # arrays held them, and nothing reads them again


def _step(order: list, outs: list) -> None:
    """Run the records one by one through the single-operator programs, dropping each
    intermediate result (no alive array holds it) after its last use, as eager code does."""
    from .array import Array, _eager
    last = {}
    for j, r in enumerate(order):
        for a in r.args:
            if type(a) is Pending:
                last[id(a)] = j
    keep = {id(r) for r in outs}
    for j, r in enumerate(order):
        operands = []
        for a, (shape, dtype) in zip(r.args, r.avals):
            b = a.buf if type(a) is Pending else a
            operands.append(Array._concrete(b, shape, dtype))
        r.buf = _eager(r.kind, operands, r.attrs)._buf
        del operands
        for a in r.args:
            if type(a) is Pending and last.get(id(a)) == j and id(a) not in keep:
                a.buf = None


def realize(rec: Pending):
    """The buffer of record rec, flushing the pending records first if it has none."""
    if rec.buf is None:
        flush()
        if rec.buf is None:         # not reachable from a registered array: run it alone
            if rec.avals and not rec.args:
                raise RuntimeError(f"vkml.lazy: {rec.kind.value} was dropped by a flush while an "
                                   f"array still held it (an array not registered with `adopt`)")
            with _lock:
                order, _, _, _ = _walk([rec])
                _step(order, [rec])
                for r in order:
                    r.args = ()
    return rec.buf
