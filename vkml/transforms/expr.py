"""A tiny expression layer over Nodes, so gradient rules read like math.

`E` wraps a Node; its operators build new Nodes (forward operators only) with the
broadcasting and scalar handling the rules need. Transforms use it; users never see it.
"""
from __future__ import annotations

import math

import numpy as np

from ..trace import dtypes as dt
from ..trace.graph import Node
from ..trace.ops import OpKind as K


class E:
    """A node being built by a transform."""
    __slots__ = ("n",)

    def __init__(self, n: Node):
        self.n = n.n if isinstance(n, E) else n

    shape = property(lambda self: self.n.shape)
    dtype = property(lambda self: self.n.dtype)
    ndim = property(lambda self: len(self.n.shape))

    def _c(self, o) -> "E":
        return o if isinstance(o, E) else (E(o) if isinstance(o, Node) else full((), o, self.dtype))

    def __add__(self, o): return op(K.Add, self, self._c(o))
    def __radd__(self, o): return op(K.Add, self._c(o), self)
    def __sub__(self, o): return op(K.Sub, self, self._c(o))
    def __rsub__(self, o): return op(K.Sub, self._c(o), self)
    def __mul__(self, o): return op(K.Mul, self, self._c(o))
    def __rmul__(self, o): return op(K.Mul, self._c(o), self)
    def __truediv__(self, o): return op(K.Div, self, self._c(o))
    def __rtruediv__(self, o): return op(K.Div, self._c(o), self)
    def __neg__(self): return op(K.Neg, self)
    def __gt__(self, o): return op(K.Greater, self, self._c(o))
    def __lt__(self, o): return op(K.Less, self, self._c(o))
    def __ge__(self, o): return op(K.GreaterEqual, self, self._c(o))
    def __le__(self, o): return op(K.LessEqual, self, self._c(o))

    def eq(self, o): return op(K.Equal, self, self._c(o))
    def __matmul__(self, o): return op(K.MatMul, self, o)

    @property
    def mT(self) -> "E":
        p = list(range(self.ndim))
        p[-1], p[-2] = p[-2], p[-1]
        return permute(self, p)

    def __repr__(self):
        return f"E({self.n!r})"


def op(kind: K, *args, tag=None, **attrs) -> E:
    """A new node kind(*args, **attrs) carrying `tag` (the helpers below take it too: a
    transform keeps the tag of the node it rewrites on everything it makes for it).

    >>> from vkml.trace.graph import input_node
    >>> op(K.Exp, input_node((2,), "float32", 0), tag="t").n.tag
    't'
    """
    return E(Node(kind, [a.n if isinstance(a, E) else a for a in args], attrs, tag=tag))


def full(shape, value, dtype, tag=None) -> E:
    d = np.dtype(dtype)
    v = bool(value) if d == dt.bool_ else (int(value) if d == dt.int32 else float(value))
    return op(K.Full, shape=tuple(shape), dtype=d, value=v, tag=tag)


def zeros_like(x: E) -> E:
    return full(x.shape, 0, x.dtype)


def cast(x: E, dtype) -> E:
    return x if x.dtype == np.dtype(dtype) else op(K.Cast, x, dtype=np.dtype(dtype))


def where(c: E, a, b) -> E:
    ref = a if isinstance(a, E) else b
    a = a if isinstance(a, E) else full((), a, ref.dtype)
    b = b if isinstance(b, E) else full((), b, ref.dtype)
    return op(K.Where, c, a, b)


def unary(kind: K):
    return lambda x: op(kind, x)


exp, log, sqrt, sin, cos, tanh = (unary(k) for k in (K.Exp, K.Log, K.Sqrt, K.Sin, K.Cos, K.Tanh))
sigmoid, erfc, reciprocal = unary(K.Sigmoid), unary(K.Erfc), unary(K.Reciprocal)


def reshape(x: E, shape, tag=None) -> E:
    shape = tuple(shape)
    return x if x.shape == shape else op(K.Reshape, x, shape=shape, tag=tag)


def permute(x: E, perm, tag=None) -> E:
    perm = tuple(perm)
    return x if perm == tuple(range(x.ndim)) else op(K.Permute, x, perm=perm, tag=tag)


def expand(x: E, shape, tag=None) -> E:
    shape = tuple(shape)
    return x if x.shape == shape else op(K.Expand, x, shape=shape, tag=tag)


def rsum(x: E, axes, keepdims: bool) -> E:
    axes = tuple(sorted(axes))
    if not axes:
        return x
    return op(K.Sum, x, axes=axes, keepdims=keepdims)


def keep_shape(shape, axes) -> tuple:
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def unbroadcast(g: E, shape) -> E:
    """Sum g (of a broadcast result's shape) back down to shape."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1]
    return reshape(rsum(g, axes, keepdims=False), shape)


def to_reduced(g: E, in_shape, axes, keepdims) -> E:
    """A reduction's cotangent broadcast back over the input shape."""
    return expand(g if keepdims else reshape(g, keep_shape(in_shape, axes)), in_shape)


SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
