"""vkml.Tensor: the PyTorch-style stateful adapter, a thin layer over the transforms.

A Tensor is an Array (same device buffer, same operators) that also records the ops
applied to it: each result keeps its operator, attributes and operands (the tape; their
graph Nodes are built only when a backward plans its program).
`backward()` runs the same reverse walk as `vkml.grad` (transforms.grad.backward) over
the recorded nodes, with every forward value the tape still holds an input of the gradient
graph (nothing is recomputed), executes that graph in one submission, and deposits
realized gradients into the leaves that require grad, accumulating. The planned program is
kept by the tape's structure, so a loop's later backward() calls replay it.
Semantics are those of autograd-semantics.txt.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

import numpy as np

from . import array as _array
from . import lazy as _lazy
from . import numpy as vnp
from .array import Array, bind, run_compiled
from .graphs import for_execution
from .trace import dtypes as dt
from .trace import tracer
from .trace.dtypes import DTypeError
from .trace.graph import Graph, Node, input_node, toposort
from .trace.ops import OpKind
from .transforms.grad import backward as _backward
from .transforms.simplify import simplify
from .vulkan.compiled import Compiled
from .tensor_methods import TensorMethods


class UndefinedTensorError(RuntimeError):
    """backward() on a tensor that holds no value."""


class Tensor(TensorMethods, Array):
    """An Array that records operations for `.backward()`.

    >>> import vkml
    >>> w = vkml.Tensor([1.0, 2.0], requires_grad=True)
    >>> loss = (w * w).sum()
    >>> loss.backward()
    >>> w.grad.numpy().tolist()
    [2.0, 4.0]

    It also has torch's methods and keywords (vkml/tensor_methods.py): `t.sum(dim=1)`,
    `t.max(dim=0)`, `t.view(2, -1)`, `t.add_(1)` on tensors outside the tape, ...
    """
    # _version counts in-place changes; _saved holds each parent's _version when this
    # tensor was recorded, so backward() refuses values changed since (as torch does)
    # _tp: the tensor's node on the tape (`_tape`), made when first asked for: None for a
    # tensor without history (most eager results are never a backward's operand), or the
    # (operator, attributes) that recorded it: its graph Node is built only where a
    # backward plans a program (`_build_tape`); a cached backward reads the pair itself
    __slots__ = ("requires_grad", "grad", "_tp", "_parents", "_is_leaf", "_version", "_saved")

    def __init__(self, data: Any, requires_grad: bool = False, dtype=None):
        a = vnp.asarray(data, dtype)
        if a._trace is not None:
            raise TypeError("vkml.Tensor: cannot wrap a traced value; Tensors are for eager use")
        self._trace, self._node = None, None
        self._take(a)
        self.shape, self.dtype = a.shape, a.dtype
        if requires_grad and not dt.is_float(self.dtype):
            raise DTypeError(f"Tensor: only float tensors can require gradients, got {self.dtype}")
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self._tp = None
        self._parents = ()
        self._is_leaf = True
        self._version, self._saved = 0, ()

    @classmethod
    def _result(cls, value: Array, node: Node | None, parents: tuple, requires_grad: bool) -> "Tensor":
        t = object.__new__(cls)
        t._trace, t._node = None, None
        t._take(value)
        t.shape, t.dtype = value.shape, value.dtype
        t.requires_grad, t.grad = requires_grad, None
        t._tp, t._parents, t._is_leaf = node, parents, not requires_grad
        t._version = 0
        t._saved = tuple(getattr(p, "_version", 0) for p in parents) if parents else ()
        return t

    @classmethod
    def _pending(cls, rec, shape, dtype) -> "Tensor":
        """A Tensor holding an eager operator's pending record (`vkml.lazy`), no history
        yet (`record` gives it its node)."""
        t = object.__new__(cls)
        t._b, t._lazy, t._trace, t._node = None, rec, None, None
        t.shape, t.dtype = shape, dtype
        t.requires_grad, t.grad, t._tp, t._parents, t._is_leaf = False, None, None, (), True
        t._version, t._saved = 0, ()
        return t

    @property
    def _tape(self) -> Node:
        """The tensor's node on the tape: its operator's, or an Input for a leaf."""
        n = self._tp
        if type(n) is Node:
            return n
        if n is None:
            n = self._tp = input_node(self.shape, self.dtype, -1)
            return n
        _build_tape(self)
        return self._tp

    @classmethod
    def _undefined(cls, shape=(), dtype=np.float32) -> "Tensor":
        """A placeholder holding no value (what a skipped computation leaves behind)."""
        t = object.__new__(cls)
        t._b, t._lazy, t._trace, t._node = None, None, None, None
        t.shape, t.dtype = tuple(shape), np.dtype(dtype)
        t.requires_grad, t.grad, t._parents, t._is_leaf = False, None, (), True
        t._version, t._saved = 0, ()
        t._tp = None
        return t

    # ---------------------------------------------------------------- PyTorch face
    @property
    def is_leaf(self) -> bool:
        """True for tensors made by the user (or without history), as in PyTorch."""
        return self._is_leaf

    @property
    def data(self) -> Array:
        """The value as a plain Array (no history)."""
        return self._share()

    def detach(self) -> "Tensor":
        """Same values, no history, requires_grad False."""
        return Tensor._result(self.data, None, (), False)

    def requires_grad_(self, flag: bool = True) -> "Tensor":
        if not self._is_leaf:
            raise RuntimeError("requires_grad_: only leaf tensors can change requires_grad; use detach()")
        if flag and not dt.is_float(self.dtype):
            raise DTypeError(f"requires_grad_: only float tensors can require gradients, got {self.dtype}")
        self.requires_grad = bool(flag)
        return self

    def _set_value(self, value: Array) -> None:
        """Replace the contents in place (optimisers); shape and dtype must match."""
        if tuple(value.shape) != self.shape or value.dtype != self.dtype:
            raise ValueError(f"Tensor._set_value: new value {value.dtype}{list(value.shape)} does not "
                             f"match {self.dtype}{list(self.shape)}")
        if value._trace is not None:
            raise TypeError("Tensor._set_value: cannot store a traced value")
        self._take(value)
        self._version += 1

    def __repr__(self) -> str:
        if not self._defined:
            return "Tensor(<undefined>)"
        body = np.array2string(np.asarray(self), separator=", ", prefix="Tensor(")
        rg = ", requires_grad=True" if self.requires_grad else ""
        return f"Tensor({body}{rg})"

    def backward(self, gradient: Any = None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's .grad that requires grad.

        Without `gradient` the tensor must be a scalar (seed 1); otherwise gradient has
        self's shape and is the seed of the reverse walk.
        """
        # checks first, in the design note's order
        if not self._defined:
            raise UndefinedTensorError("backward: the tensor is undefined (it holds no value)")
        # the dtype before requires_grad: a bool or integer result never requires grad
        # (as in PyTorch), and its backward() is the design note's DTypeError
        if not dt.is_float(self.dtype):
            raise DTypeError(f"backward: root of dtype {self.dtype} has no gradient; only float "
                             f"roots can be differentiated")
        if not self.requires_grad:
            raise RuntimeError("backward: this tensor does not require grad and has no history "
                               "(was it made under no_grad(), detached, or from leaves without "
                               "requires_grad=True?)")
        if gradient is None:
            if self.size != 1:
                raise RuntimeError(f"backward: grad can be implicitly created only for scalar outputs; "
                                   f"this tensor has shape {self.shape}, pass gradient=")
            seed = vnp.ones(self.shape, self.dtype)
        else:
            seed = vnp.asarray(gradient, self.dtype)
            if seed.shape != self.shape:
                raise ValueError(f"backward: gradient shape {seed.shape} does not match the tensor's "
                                 f"{self.shape}")
        # the tape: node id -> the tensor holding that node's value
        # (by the tensor's identity: `order` keeps them alive while the ids are used)
        values: dict[int, Tensor] = {}
        stack = [self]
        while stack:
            t = stack.pop()
            if id(t) in values:
                continue
            values[id(t)] = t
            for p, seen in zip(t._parents, t._saved):
                if isinstance(p, Tensor):
                    if p._version != seen:
                        raise RuntimeError(
                            f"one of the variables needed for gradient computation has been "
                            f"modified by an inplace operation: [Tensor {p.dtype}{list(p.shape)}] "
                            f"is at version {p._version}; expected version {seen} instead")
                    stack.append(p)
        leaves = [t for t in values.values() if t._is_leaf and t.requires_grad]
        if not leaves:
            return
        order = list(values.values())
        consts = [p for t in order for p in t._parents if not isinstance(p, Tensor)]
        key = _tape_key(order, seed)
        entry = _BACKWARD_CACHE.get(key) if key is not None else None
        if entry is None:
            entry = _plan_backward(self, order, leaves, consts)
            if key is not None:
                _BACKWARD_CACHE[key] = entry
                while len(_BACKWARD_CACHE) > BACKWARD_CACHE_SIZE:
                    _BACKWARD_CACHE.popitem(last=False)
            _BACKWARD_STATS["plans"] += 1
        else:
            _BACKWARD_CACHE.move_to_end(key)
            _BACKWARD_STATS["hits"] += 1
        compiled, reads = entry
        pool = [t.data for t in order] + list(consts)
        results = run_compiled(compiled, [seed] + [pool[i] for i in reads])
        with no_record():
            for leaf, g in zip(leaves, results):
                leaf.grad = g if leaf.grad is None else leaf.grad + g


# Planned backward programs by the structure of their tape (`_tape_key`): a training loop's
# backward() replays its program from the second step on, as a jitted step does, instead of
# building, fusing and lowering the gradient graph again. VKML_BACKWARD_CACHE=0 plans every
# backward (to measure what the cache saves: bench/tools/eager_step.py).
BACKWARD_CACHE_SIZE = int(os.environ.get("VKML_BACKWARD_CACHE", "64"))
_BACKWARD_CACHE: "OrderedDict[tuple, tuple]" = OrderedDict()
_BACKWARD_STATS = {"plans": 0, "hits": 0}


def _tape_key(order: list, seed: Array) -> tuple | None:
    """What the backward program depends on: per tape tensor (in walk order) its op,
    attributes, shape and dtype, where each operand comes from (another tape tensor, or a
    constant of some shape and dtype), and whether it is a leaf that gets a gradient; the
    seed's shape and dtype; the device profile. None where an attribute is not hashable
    (that backward is planned each time)."""
    pos = {id(t): i for i, t in enumerate(order)}
    parts = []
    try:
        for t in order:
            if not t._parents:
                parts.append(("leaf", t.shape, str(t.dtype), t._is_leaf and t.requires_grad))
                continue
            n = t._tp
            op, attrs = (n.op, n.attrs) if type(n) is Node else n
            src = tuple(("t", pos[id(p)]) if isinstance(p, Tensor) else ("c", p.shape, str(p.dtype))
                        for p in t._parents)
            attrs = tuple(sorted((k, _array._freeze(v)) for k, v in attrs.items()))
            parts.append((op, attrs, t.shape, str(t.dtype), src, t._is_leaf and t.requires_grad))
        return (seed.shape, str(seed.dtype), tuple(parts), _array._profile())
    except TypeError:
        return None


def _plan_backward(root: "Tensor", order: list, leaves: list, consts: list) -> tuple:
    """The compiled gradient program of root's tape and which of the tape's values it
    reads: every forward value the tape holds (and every constant operand) is an input of
    the gradient graph, not baked into it, so the program serves every tape of the same
    structure."""
    seed_in = input_node(root.shape, root.dtype, 0)
    grads = _backward([root._tape], [seed_in], [t._tape for t in leaves])
    inputs: dict[int, tuple[int, Node]] = {}
    for i, t in enumerate(order):
        inputs[t._tape.id] = (i, input_node(t.shape, t.dtype, i + 1))
    k = len(order)
    for t in order:
        for p, n in zip(t._parents, t._tape.inputs):
            if not isinstance(p, Tensor) and n.id not in inputs:
                inputs[n.id] = (k, input_node(p.shape, p.dtype, k + 1))
                k += 1
    sub: dict[int, Node] = {}
    used: dict[int, Node] = {}
    for n in toposort(grads):
        if n.id in inputs:
            i, node = inputs[n.id]
            sub[n.id] = node
            used[i] = node
        elif n.op is not OpKind.Input and any(i.id in sub for i in n.inputs):
            sub[n.id] = Node(n.op, [sub.get(i.id, i) for i in n.inputs], n.attrs, tag=n.tag,
                             shape=n.shape, dtype=n.dtype)
    reads = sorted(used)
    graph = Graph([seed_in] + [used[i] for i in reads], [sub.get(g.id, g) for g in grads])
    # fresh activations every step: bind them where they lie (a recording per binding, as
    # an eager operator does) rather than copy them into slots
    return Compiled(for_execution(simplify(graph)), copy_fallback=False), reads


class no_record:
    """Internal: plain Array arithmetic on gradients (never recorded)."""

    def __enter__(self):
        self._old = tracer.set_grad_enabled(False)

    def __exit__(self, *e):
        tracer.set_grad_enabled(self._old)


def _node_of(v) -> Node:
    if isinstance(v, Tensor):
        return v._tape
    return Node(OpKind.Const, (), {"shape": v.shape, "dtype": v.dtype, "value": v},
                shape=v.shape, dtype=v.dtype)


def _build_tape(root: "Tensor") -> None:
    """Give root, and every recorded tensor it depends on that has none yet, its graph
    Node (parents first; iterative, a long chain is deeper than Python's recursion)."""
    stack = [(root, False)]
    while stack:
        t, ready = stack.pop()
        op = t._tp
        if type(op) is not tuple:
            continue
        if not ready:
            stack.append((t, True))
            for p in t._parents:
                if isinstance(p, Tensor) and type(p._tp) is tuple:
                    stack.append((p, False))
        else:
            t._tp = Node(op[0], tuple([_node_of(p) for p in t._parents]), op[1], shape=t.shape,
                         dtype=t.dtype)


def record(kind: OpKind, operands: list, attrs: dict) -> Tensor:
    """bind() for eager operations with Tensor operands: compute now (or let it wait,
    `vkml.lazy`), record the node."""
    req = traced = False
    for o in operands:
        if o._b is None and o._lazy is None:
            raise UndefinedTensorError(f"{kind.value}: an operand tensor is undefined")
        if not req and isinstance(o, Tensor) and o.requires_grad:
            req = True
        if o._trace is not None:
            traced = True       # `apply` raises LeakedTracerError
    if _lazy.ENABLED and not attrs and not traced:
        # what `apply` does for an operator without attributes (most of a model's)
        out = _lazy.record(kind, operands, attrs, (), _pending_tensor)
        if out is None:
            out = _array._eager(kind, operands, attrs)
    else:
        out = _array.apply(kind, operands, attrs, _pending_tensor)
    if type(out) is not Tensor or out._lazy is None:
        # it ran now (its value may be an operand's, passed through): a new Tensor of it
        out = Tensor._result(out, None, (), False)
    if req and out.dtype in _FLOAT_SET and tracer._state.grad_enabled:
        # the pair, not a Node: the Node is built when a backward plans (`_build_tape`);
        # each operand's version now (backward refuses one changed since)
        out.requires_grad, out._tp, out._parents, out._is_leaf = True, (kind, attrs), tuple(operands), False
        out._saved = tuple([_version(p) for p in operands]) if len(operands) != 2 else (
            _version(operands[0]), _version(operands[1]))
    return out


def _version(p) -> int:
    return p._version if isinstance(p, Tensor) else 0


# a bool or integer result (comparisons, argmax, bitwise, casts) never requires grad, as
# in PyTorch: no gradient flows through its values
_FLOAT_SET = frozenset(dt.FLOATS)


_pending_tensor = Tensor._pending      # bound once (an eager operator's host cost)
_array._tensor_type = Tensor
_array._tensor_record = record
