"""vkml.Array: an immutable n-d array in a Vulkan buffer, or a traced stand-in for one.

A concrete Array owns a device Buffer. Inside a transform (grad, jit, ...) the same class
stands for a Node of the trace being recorded; users never see the difference except
that a traced value cannot be read back to the host.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from . import lazy
from .trace import dtypes as dt
from .trace import tracer
from .trace.tracer import _state as _tstate
from .trace.graph import Graph, Node, input_node
from .trace.ops import OpKind
from .trace.shapes import size_of
from .vulkan import runtime
from .vulkan.compiled import Compiled


class ConcretizationError(TypeError):
    """A traced value was asked for its contents (float(), bool(), np.asarray, ...)."""


class Array:
    """An immutable device array (``vkml.Array``).

    >>> import vkml.numpy as vnp
    >>> a = vnp.asarray([[1.0, 2.0], [3.0, 4.0]])
    >>> (a @ a.T).sum().item()
    52.0
    """
    # _b: the device Buffer; _lazy: the eager operator's `lazy.Pending` record while it has
    # not run (then _b is None): `_buf` runs it
    __slots__ = ("_b", "_lazy", "_trace", "_node", "shape", "dtype", "__weakref__")
    __array_priority__ = 100
    # NumPy's operators defer to the Array: `np_array % arr` calls arr.__rmod__ (a device
    # op, traceable), and a ufunc called on an Array (np.exp(arr)) raises TypeError; neither
    # converts the Array to compute on the host (or fails on a tracer)
    __array_ufunc__ = None

    def __init__(self, *a, **k):
        raise TypeError("make arrays with vkml.numpy.asarray / array / zeros / ...")

    @classmethod
    def _concrete(cls, buf, shape, dtype) -> "Array":
        self = object.__new__(cls)
        self._b, self._lazy, self._trace, self._node = buf, None, None, None
        self.shape = shape if type(shape) is tuple else tuple(shape)
        self.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        return self

    @classmethod
    def _pending(cls, rec, shape: tuple, dtype: np.dtype) -> "Array":
        self = object.__new__(cls)
        self._b, self._lazy, self._trace, self._node = None, rec, None, None
        self.shape, self.dtype = shape, dtype
        return self

    @classmethod
    def _traced(cls, trace, node: Node) -> "Array":
        self = object.__new__(cls)
        self._b, self._lazy, self._trace, self._node = None, None, trace, node
        self.shape, self.dtype = node.shape, node.dtype
        return self

    @property
    def _buf(self):
        """The device Buffer (None for a traced value), running pending eager work first."""
        r = self._lazy
        if r is not None:
            self._b = r.buf if r.buf is not None else lazy.realize(r)
            self._lazy = None
        return self._b

    @_buf.setter
    def _buf(self, buf) -> None:
        self._b, self._lazy = buf, None

    def _take(self, other: "Array") -> None:
        """Hold other's value (its buffer or its pending record) without running it."""
        self._b, self._lazy = other._b, other._lazy
        if self._lazy is not None:
            lazy.adopt(self)

    @property
    def _defined(self) -> bool:
        """Whether the array holds a value (a buffer or a pending record)."""
        return self._b is not None or self._lazy is not None

    def _share(self) -> "Array":
        """A plain Array of the same value, not run if it is pending."""
        a = Array._concrete(self._b, self.shape, self.dtype)
        a._take(self)
        return a

    # ------------------------------------------------------------------ properties
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return size_of(self.shape)

    @property
    def is_traced(self) -> bool:
        return self._trace is not None

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self) -> str:
        if self._trace is not None:
            return f"Traced<{self.dtype}{list(self.shape)}>"
        body = np.array2string(np.asarray(self), separator=", ", prefix="Array(")
        return f"Array({body}, dtype={self.dtype})"

    # ------------------------------------------------------------------ host access
    def _concrete_or_raise(self, what: str) -> None:
        if self._trace is not None:
            raise ConcretizationError(
                f"{what} needs a concrete value, but this array (shape {self.shape}, {self.dtype}) "
                f"is traced inside a transform (grad, jit, vmap, ...). Use vkml.numpy.where instead "
                f"of Python control flow on traced values, or mark the argument static.")

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        self._concrete_or_raise("np.asarray")
        raw = runtime.get().download(self._buf, self.size * dt.itemsize(self.dtype))
        store = np.int32 if self.dtype == dt.bool_ else self.dtype
        out = dt.from_device_numpy(raw.view(store), self.dtype).reshape(self.shape)
        return out.astype(dtype) if dtype is not None else out

    def numpy(self) -> np.ndarray:
        """The contents as a new NumPy array."""
        return np.asarray(self)

    def block_until_ready(self) -> "Array":
        """Wait until this array's value has been computed, and return it.

        A jitted call (and an eager operator) returns as soon as its work is queued on the
        device; reading a value (`np.asarray`, `float`, printing) waits by itself, so this
        is for timing and for overlapping host work with the device.

        >>> import vkml.numpy as vnp
        >>> vnp.ones(3).block_until_ready().shape
        (3,)
        """
        if self._trace is None:
            self._buf          # pending eager work runs
            runtime.get().wait()
        return self

    def item(self):
        """The single element as a Python scalar."""
        self._concrete_or_raise("item()")
        if self.size != 1:
            raise ValueError(f"item(): array of shape {self.shape} has {self.size} elements, not 1")
        return np.asarray(self).reshape(()).item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        self._concrete_or_raise("bool()")
        if self.size != 1:
            raise ValueError(f"the truth value of an array of shape {self.shape} is ambiguous; "
                             f"use .any() or .all()")
        return bool(self.item())

    def __index__(self) -> int:
        # as NumPy: only a 0-d integer array (not bool, not a 1-element 1-d array)
        if self.dtype != dt.int32 or self.ndim:
            raise TypeError(f"only integer scalar arrays can be converted to a scalar index, got "
                            f"{self.dtype}{list(self.shape)}")
        return int(self.item())

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __hash__(self):
        return id(self)

    # ------------------------------------------------------------------ methods
    def _np(self):
        # the operators and methods are vkml.numpy's functions, and vkml.numpy is built on
        # this class: imported at the first use, once both modules exist
        global _vnp
        if _vnp is None:
            from . import numpy as vnp
            _vnp = vnp
        return _vnp

    @property
    def T(self) -> "Array":
        return self._np().transpose(self)

    def reshape(self, *shape) -> "Array":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return self._np().reshape(self, shape)

    def transpose(self, *axes) -> "Array":
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return self._np().transpose(self, axes or None)

    def astype(self, dtype) -> "Array":
        return self._np().asarray(self, dtype=dtype)

    def sum(self, axis=None, keepdims=False, dtype=None, initial=None, where=None) -> "Array":
        return self._np().sum(self, axis=axis, keepdims=keepdims, dtype=dtype, initial=initial,
                              where=where)

    def mean(self, axis=None, keepdims=False, dtype=None, where=None) -> "Array":
        return self._np().mean(self, axis=axis, keepdims=keepdims, dtype=dtype, where=where)

    def max(self, axis=None, keepdims=False, initial=None, where=None) -> "Array":
        return self._np().max(self, axis=axis, keepdims=keepdims, initial=initial, where=where)

    def min(self, axis=None, keepdims=False, initial=None, where=None) -> "Array":
        return self._np().min(self, axis=axis, keepdims=keepdims, initial=initial, where=where)

    def prod(self, axis=None, keepdims=False, dtype=None, initial=None, where=None) -> "Array":
        return self._np().prod(self, axis=axis, keepdims=keepdims, dtype=dtype, initial=initial,
                               where=where)

    def argmax(self, axis=None, keepdims=False) -> "Array":
        return self._np().argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis=None, keepdims=False) -> "Array":
        return self._np().argmin(self, axis=axis, keepdims=keepdims)

    def var(self, axis=None, ddof=0, keepdims=False, dtype=None, where=None) -> "Array":
        return self._np().var(self, axis=axis, ddof=ddof, keepdims=keepdims, dtype=dtype,
                              where=where)

    def std(self, axis=None, ddof=0, keepdims=False, dtype=None, where=None) -> "Array":
        return self._np().std(self, axis=axis, ddof=ddof, keepdims=keepdims, dtype=dtype,
                              where=where)

    def any(self, axis=None, keepdims=False, *, where=None) -> "Array":
        return self._np().any(self, axis=axis, keepdims=keepdims, where=where)

    def all(self, axis=None, keepdims=False, *, where=None) -> "Array":
        return self._np().all(self, axis=axis, keepdims=keepdims, where=where)

    def flatten(self) -> "Array":
        return self.reshape(-1)

    ravel = flatten

    def squeeze(self, axis=None) -> "Array":
        return self._np().squeeze(self, axis)

    def clip(self, min=None, max=None) -> "Array":
        return self._np().clip(self, min, max)

    @property
    def at(self):
        """JAX's functional updates: x.at[idx].set(v), .add, .multiply, .min, .get, ...
        (vkml.indexing)."""
        from .indexing import IndexUpdateHelper
        return IndexUpdateHelper(self)

    def __getitem__(self, idx) -> "Array":
        from .indexing import getitem     # built on vkml.numpy, as the operators (`_np`)
        return getitem(self, idx)

    # ------------------------------------------------------------------ operators
    def __add__(self, o): return self._np().add(self, o)
    def __radd__(self, o): return self._np().add(o, self)
    def __sub__(self, o): return self._np().subtract(self, o)
    def __rsub__(self, o): return self._np().subtract(o, self)
    def __mul__(self, o): return self._np().multiply(self, o)
    def __rmul__(self, o): return self._np().multiply(o, self)
    def __truediv__(self, o): return self._np().divide(self, o)
    def __rtruediv__(self, o): return self._np().divide(o, self)
    def __floordiv__(self, o): return self._np().floor_divide(self, o)
    def __rfloordiv__(self, o): return self._np().floor_divide(o, self)
    def __mod__(self, o): return self._np().remainder(self, o)
    def __rmod__(self, o): return self._np().remainder(o, self)
    def __divmod__(self, o): return self._np().divmod(self, o)
    def __rdivmod__(self, o): return self._np().divmod(o, self)
    def __pow__(self, o): return self._np().power(self, o)
    def __rpow__(self, o): return self._np().power(o, self)
    def __matmul__(self, o): return self._np().matmul(self, o)
    def __rmatmul__(self, o): return self._np().matmul(o, self)
    def __neg__(self): return self._np().negative(self)
    def __pos__(self): return self
    def __abs__(self): return self._np().abs(self)
    def __eq__(self, o): return self._np().equal(self, o)
    def __ne__(self, o): return self._np().not_equal(self, o)
    def __lt__(self, o): return self._np().less(self, o)
    def __le__(self, o): return self._np().less_equal(self, o)
    def __gt__(self, o): return self._np().greater(self, o)
    def __ge__(self, o): return self._np().greater_equal(self, o)
    # bitwise on integers, logical on bools (NumPy's operators); floats raise TypeError
    def __and__(self, o): return self._np().bitwise_and(self, o)
    def __rand__(self, o): return self._np().bitwise_and(o, self)
    def __or__(self, o): return self._np().bitwise_or(self, o)
    def __ror__(self, o): return self._np().bitwise_or(o, self)
    def __xor__(self, o): return self._np().bitwise_xor(self, o)
    def __rxor__(self, o): return self._np().bitwise_xor(o, self)
    def __lshift__(self, o): return self._np().left_shift(self, o)
    def __rlshift__(self, o): return self._np().left_shift(o, self)
    def __rshift__(self, o): return self._np().right_shift(self, o)
    def __rrshift__(self, o): return self._np().right_shift(o, self)
    def __invert__(self): return self._np().invert(self)


_vnp = None     # vkml.numpy, once `Array._np` has imported it

# set by vkml.tensor: the Tensor class and its recording bind (eager ops on Tensors)
_tensor_type = None
_tensor_record = None


def bind(kind: OpKind, operands: list, _tag: Any = None, **attrs: Any) -> Array:
    """Apply an operator: record it in the active trace, or run it now on the device.

    Inside `no_grad()` a traced result is wrapped in StopGradient, so no gradient path
    is recorded through it.
    """
    s = _tstate.stack
    if s:
        t = s[-1]
        out = Array._traced(t, t.emit(kind, operands, attrs, _tag))
        if not tracer.grad_enabled() and kind is not OpKind.StopGradient and dt.is_float(out.dtype):
            out = Array._traced(t, t.emit(OpKind.StopGradient, [out], {}, _tag))
        return out
    for o in operands:
        if type(o) is not Array and _tensor_type is not None and isinstance(o, _tensor_type):
            return _tensor_record(kind, operands, attrs)
    return apply(kind, operands, attrs)


def apply(kind: OpKind, operands: list, attrs: dict, make=Array._pending) -> Array:
    """bind() outside any transform, recording nothing on a Tensor's tape: the result
    waits (`vkml.lazy`; make(record, shape, dtype) builds its array) or runs now."""
    for v in operands:
        if v._trace is not None:
            i = next(i for i, o in enumerate(operands) if o is v)
            raise tracer.LeakedTracerError(
                f"{kind.value}: operand {i} is a value traced inside a transform that has returned; "
                f"return it from the transformed function instead")
    if lazy.ENABLED:
        if not attrs:
            akey = ()
        else:
            try:
                akey = tuple(sorted((k, _freeze(v)) for k, v in attrs.items()))
            except TypeError:      # an attribute holding an array: run now
                akey = None
        if akey is not None:
            out = lazy.record(kind, operands, attrs, akey, make)
            if out is not None:
                return out
    return _eager(kind, operands, attrs)


EAGER_CACHE = 256    # compiled single-operator programs kept (least recently used dropped)
_eager_cache: OrderedDict = OrderedDict()
_eager_lock = threading.Lock()


def _freeze(v: Any):
    """A hashable key for an attribute value that tells apart what == does not (1, 1.0 and
    True; 0.0 and -0.0; nan): a kernel may bake the value into its source."""
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(_freeze(x) for x in v))
    if isinstance(v, (float, np.floating, complex, np.complexfloating)):
        return (type(v).__name__, repr(v))
    if isinstance(v, np.ndarray):
        raise TypeError("array attribute")
    hash(v)
    return (type(v).__name__, v)


def _profile():
    """The device profile eager programs are lowered for (part of their cache key)."""
    return runtime.get().dev.profile


def run_compiled(c: Compiled, operands: Sequence[Array], donated=()) -> list[Array]:
    """Run a compiled program on concrete arrays (the program works on their buffers):
    its results as arrays; an output that is an input is that very argument.

    >>> import vkml.numpy as vnp
    >>> x = input_node((3,), "float32", 0)
    >>> c = Compiled(Graph([x], [Node(OpKind.Exp, [x], {}), x]))
    >>> y, same = run_compiled(c, [vnp.zeros(3)])
    >>> y.numpy().tolist(), same.shape
    ([1.0, 1.0, 1.0], (3,))
    """
    bufs = c.run([a._buf for a in operands], donated)
    outs = []
    for b, node in zip(bufs, c.exec_graph.outputs):
        if b is not None:
            outs.append(Array._concrete(b, node.shape, node.dtype))
        elif node.op is OpKind.Const:
            outs.append(node.attrs["value"])
        else:
            outs.append(operands[c.input_pos[node.id]])
    return outs


def _eager(kind: OpKind, operands: list, attrs: dict) -> "Array":
    """Run one operator now: compiled once per operator, attributes and operand shapes
    and dtypes (like a jitted function of one operator), so that a repeated eager
    operator replays a recorded command buffer instead of lowering and recording again."""
    try:
        key = (kind, tuple(sorted((k, _freeze(v)) for k, v in attrs.items())),
               tuple((v.shape, v.dtype) for v in operands), _profile())
    except TypeError:
        key = None
    with _eager_lock:
        c = _eager_cache.get(key) if key is not None else None
        if c is not None:
            _eager_cache.move_to_end(key)
    if c is None:
        ins = [input_node(v.shape, v.dtype, i) for i, v in enumerate(operands)]
        c = Compiled(Graph(ins, [Node(kind, ins, attrs)]), copy_fallback=False)
        if key is not None:
            with _eager_lock:
                _eager_cache[key] = c
                while len(_eager_cache) > EAGER_CACHE:
                    _eager_cache.popitem(last=False)
    return run_compiled(c, operands)[0]
