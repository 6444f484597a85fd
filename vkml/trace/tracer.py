"""Tracing: recording operator applications into a graph.

A Trace collects Nodes. Values that come from outside the trace are lifted: device arrays
become Const nodes, tracers of an enclosing trace become extra Input nodes ("captures")
that the caller maps back when it inlines the graph. That capture rule is what makes a
nested `grad` treat a closed-over outer variable as a constant (no perturbation
confusion) while the outer `grad` still differentiates through it.

This module does not know the Array class: values are anything with `_trace` and
`_node` (tracers) or a `_buf` (concrete), duck-typed.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Sequence


from .graph import Graph, Node, input_node
from .ops import OpKind

class _State(threading.local):
    """Per thread: the active traces (innermost last) and the no_grad flag."""

    def __init__(self):
        self.stack: list = []
        self.grad_enabled = True


_state = _State()


def _stack() -> list["Trace"]:
    return _state.stack


def current() -> "Trace | None":
    """The innermost active trace, or None when running eagerly."""
    s = _state.stack
    return s[-1] if s else None


def grad_enabled() -> bool:
    """False inside `vkml.no_grad()`: ops then record no gradient path."""
    return _state.grad_enabled


def set_grad_enabled(flag: bool) -> bool:
    """Set the no_grad flag of this thread; returns the previous value."""
    old = grad_enabled()
    _state.grad_enabled = flag
    return old


class LeakedTracerError(RuntimeError):
    """A traced value was used after the transform that made it returned."""


class Trace:
    """A recording of operator applications (a graph under construction)."""

    def __init__(self, tag: Any = None):
        self.inputs: list[Node] = []
        self.captured: list[Any] = []        # outer values for the capture inputs, in order
        self._capture_ids: dict[int, Node] = {}
        self._const_ids: dict[int, Node] = {}
        self._keepalive: list[Any] = []
        self.tag = tag                        # stamped on every node made here (checkpoint)
        self.active = False

    def __enter__(self) -> "Trace":
        _stack().append(self)
        self.active = True
        return self

    def __exit__(self, *exc) -> None:
        s = _stack()
        assert s and s[-1] is self, "trace stack corrupted"
        s.pop()
        self.active = False

    def new_input(self, shape: Sequence[int], dtype) -> Node:
        n = input_node(shape, dtype, len(self.inputs))
        self.inputs.append(n)
        return n

    def lift(self, value: Any) -> Node:
        """The node standing for value inside this trace."""
        t = getattr(value, "_trace", None)
        if t is self:
            return value._node
        if t is not None:
            if not t.active and t not in _stack():
                raise LeakedTracerError(
                    "a value traced inside a finished transform (grad, jit, vmap, ...) was used "
                    "outside it; return it from the transformed function instead")
            n = self._capture_ids.get(id(value))
            if n is None:
                n = self.new_input(value.shape, value.dtype)
                self._capture_ids[id(value)] = n
                self.captured.append(value)
                self._keepalive.append(value)
            return n
        n = self._const_ids.get(id(value))
        if n is None:
            n = Node(OpKind.Const, (), {"shape": tuple(value.shape), "dtype": value.dtype,
                                        "value": value})
            self._const_ids[id(value)] = n
            self._keepalive.append(value)
        return n

    def emit(self, op: OpKind, operands: Sequence[Any], attrs: dict, tag: Any = None) -> Node:
        return Node(op, [self.lift(v) for v in operands], attrs, tag=self.tag if tag is None else tag)

    def graph(self, outputs: Sequence[Node]) -> Graph:
        return Graph(self.inputs, outputs)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """No trace is active inside the block: operators on concrete values run now, even
    within a transform (for what must be known while tracing, such as the number of true
    values of a boolean mask given as a constant)."""
    s = _stack()
    saved = s[:]
    s.clear()
    try:
        yield
    finally:
        s[:] = saved
