"""Node and Graph: the program representation every transform reads and writes.

A Node is immutable once made; a Graph is a topologically ordered, immutable view of the
nodes reachable from its outputs, with its Input nodes in argument order.
"""
from __future__ import annotations

import itertools
from typing import Any, Iterable, Sequence

import numpy as np

from .ops import OpKind, infer
from .shapes import size_of

_ids = itertools.count()


def _freeze(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.dtype):
        return str(v)
    if isinstance(v, float) and v != v:
        return ("nan",)
    if isinstance(v, (int, float, str, bool, type(None))):
        return v
    return ("id", id(v))  # arrays captured by Const: identity, never content


class Node:
    """One operator application: op, input nodes, attributes, inferred shape and dtype.

    >>> from vkml.trace.ops import OpKind
    >>> x = input_node((3,), "float32", 0)
    >>> Node(OpKind.Exp, (x,), {}).shape
    (3,)
    """
    __slots__ = ("op", "inputs", "attrs", "shape", "dtype", "id", "tag", "_key")

    def __init__(self, op: OpKind, inputs: Sequence["Node"], attrs: dict, tag: Any = None,
                 shape=None, dtype=None):
        attrs = dict(attrs)
        if shape is None:
            shape, dtype = infer(op, [i.shape for i in inputs], [i.dtype for i in inputs], attrs)
        # through the slots' descriptors (__setattr__ refuses): cheaper than
        # object.__setattr__ by name, and every traced or recorded operator makes a Node
        _set_op(self, op)
        _set_inputs(self, inputs if type(inputs) is tuple else tuple(inputs))
        _set_attrs(self, attrs)
        _set_shape(self, shape if type(shape) is tuple else tuple(shape))
        _set_dtype(self, dtype if isinstance(dtype, np.dtype) else np.dtype(dtype))
        _set_id(self, next(_ids))
        # tag marks provenance that transforms must respect (e.g. a checkpoint region)
        _set_tag(self, tag)
        _set_key(self, None)

    def __setattr__(self, k, v):
        raise AttributeError("Node is immutable")

    @property
    def size(self) -> int:
        return size_of(self.shape)

    def key(self) -> tuple:
        """Structural identity for common-subexpression merging (inputs by node id)."""
        if self._key is None:
            k = (self.op, tuple(i.id for i in self.inputs),
                 tuple(sorted((a, _freeze(v)) for a, v in self.attrs.items())), self.tag)
            object.__setattr__(self, "_key", k)
        return self._key

    def __repr__(self) -> str:
        a = ", ".join(f"{k}={v}" if k != "body" else f"body=<{len(v.nodes)} nodes>"
                      for k, v in self.attrs.items() if k not in ("value",))
        ins = ", ".join(f"%{i.id}" for i in self.inputs)
        return f"%{self.id} = {self.op.value}({ins}{', ' if ins and a else ''}{a}) : {self.dtype}{list(self.shape)}"


_set_op, _set_inputs, _set_attrs, _set_shape, _set_dtype, _set_id, _set_tag, _set_key = (
    getattr(Node, k).__set__ for k in Node.__slots__)


def input_node(shape: Sequence[int], dtype, index: int) -> Node:
    """An Input node: argument `index` of a graph (-1: a value that belongs to no
    argument list, e.g. a Tensor's place on the tape).

    >>> input_node((2, 3), "float32", 0)  # doctest: +ELLIPSIS
    %... = Input(shape=(2, 3), dtype=float32, index=0) : float32[2, 3]
    """
    return Node(OpKind.Input, (), {"shape": tuple(shape), "dtype": np.dtype(dtype), "index": index})


def toposort(outputs: Iterable[Node]) -> list[Node]:
    """Nodes reachable from outputs, each after all of its inputs (iterative DFS)."""
    order, seen = [], set()
    for root in outputs:
        if root.id in seen:
            continue
        stack = [(root, False)]
        while stack:
            n, done = stack.pop()
            if done:
                order.append(n)
                continue
            if n.id in seen:
                continue
            seen.add(n.id)
            stack.append((n, True))
            for i in reversed(n.inputs):
                if i.id not in seen:
                    stack.append((i, False))
    return order


class Graph:
    """An immutable program: Input nodes (in argument order), outputs, topological nodes.

    >>> import vkml, vkml.numpy as vnp
    >>> g = vkml.make_graph(lambda x: vnp.exp(x) + 1.0, vnp.ones(3))
    >>> [n.op.value for n in g.nodes]
    ['Input', 'Exp', 'Full', 'Add']
    """
    __slots__ = ("inputs", "outputs", "nodes", "keep")

    def __init__(self, inputs: Sequence[Node], outputs: Sequence[Node]):
        for i in inputs:
            if i.op is not OpKind.Input:
                raise TypeError(f"Graph inputs must be Input nodes, got {i}")
        # Later outputs first: value_and_grad's outputs are [value, dW_1, ..., dW_L] and the
        # cotangent reaches layer L first, so visiting dW_L first lets each layer's backward
        # finish (freeing its saved forward values) before the next one starts.
        order = toposort(list(outputs)[::-1])
        known = {i.id for i in inputs}
        for n in order:
            if n.op is OpKind.Input and n.id not in known:
                raise ValueError(f"Graph: {n} is reachable from the outputs but not an input")
        # unused inputs still belong to the graph, first
        used = {n.id for n in order}
        order = [i for i in inputs if i.id not in used] + order
        object.__setattr__(self, "inputs", tuple(inputs))
        object.__setattr__(self, "outputs", tuple(outputs))
        object.__setattr__(self, "nodes", tuple(order))
        object.__setattr__(self, "keep", [])

    def __setattr__(self, k, v):
        if k == "keep":  # side information from the tracer, not the program
            return object.__setattr__(self, k, v)
        raise AttributeError("Graph is immutable")

    def consumers(self) -> dict[int, list[Node]]:
        """node id -> nodes that read it."""
        c: dict[int, list[Node]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                c[i.id].append(n)
        return c

    def op_count(self) -> int:
        """Nodes other than Input/Const."""
        return sum(n.op not in (OpKind.Input, OpKind.Const) for n in self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        lines = [f"graph({', '.join('%' + str(i.id) for i in self.inputs)}):"]
        lines += ["  " + repr(n) for n in self.nodes if n.op is not OpKind.Input]
        lines.append(f"  return {', '.join('%' + str(o.id) for o in self.outputs)}")
        return "\n".join(lines)
