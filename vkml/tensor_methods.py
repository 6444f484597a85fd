"""torch's Tensor methods and keywords, mixed into vkml.Tensor (api.md, "PyTorch face").

Every method is a composition of vkml.numpy functions or registry ops, so on a Tensor it
is recorded for backward() like any operator. Where numpy and torch give one name two
meanings, these follow torch (vkml.Array keeps numpy's): `repeat` tiles, `std`/`var` are
unbiased by default, `max`/`min(dim)` return a (values, indices) pair, `transpose` swaps
two dims, `size()` is a method, `flatten(start_dim, end_dim)`, `split(int)` is a chunk
size. Reductions take torch's `dim=` / `keepdim=` and numpy's `axis=` / `keepdims=`.

>>> import vkml
>>> t = vkml.Tensor([[1.0, 5.0], [4.0, 2.0]])
>>> t.max(dim=1).indices.tolist(), t.size(), t.size(0)
([1, 0], (2, 2), 2)
"""
from __future__ import annotations

import collections
import math
from typing import Any, Sequence

from . import numpy as vnp
from .array import Array, bind
from .trace import dtypes as dt
from .trace import tracer
from .trace.dtypes import DTypeError
from .trace.ops import OpKind
from .trace.shapes import ShapeError, broadcast_shapes, normalize_axis, size_of

__all__ = ["TensorMethods", "cat", "stack", "MaxResult", "MinResult"]

# torch.return_types.max / .min: a named (values, indices) pair
MaxResult = collections.namedtuple("max", ["values", "indices"])
MinResult = collections.namedtuple("min", ["values", "indices"])

_LEAF_INPLACE = "a leaf Variable that requires grad is being used in an in-place operation."


class _Size(int):
    """numel as an int (what vkml's Array code reads as `.size`) that, called, answers as
    torch's `size()`: the shape, or one dim's length."""

    def __new__(cls, shape: tuple):
        self = int.__new__(cls, size_of(shape))
        self.shape = tuple(shape)
        return self

    def __call__(self, dim: int | None = None):
        if dim is None:
            return self.shape
        return self.shape[normalize_axis("size", dim, len(self.shape))]


def _pick(name: str, dim: Any, axis: Any) -> Any:
    """torch's dim= or numpy's axis= (not both)."""
    if dim is not None and axis is not None:
        raise TypeError(f"{name}: pass dim= or axis=, not both")
    return axis if dim is None else dim


def _keep(keepdim: bool, keepdims: bool | None) -> bool:
    return bool(keepdim if keepdims is None else keepdims)


def _dims_arg(name: str, dims: tuple) -> tuple:
    """*dims or a single sequence of dims, as torch takes them."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    for d in dims:
        if isinstance(d, bool) or not hasattr(d, "__index__"):
            raise TypeError(f"{name}: dims must be ints, got {dims!r}")
    return tuple(int(d) for d in dims)


def _float_self(x: Array, name: str) -> Array:
    if not dt.is_float(x.dtype):
        raise DTypeError(f"{name}: needs a float tensor, got {x.dtype} (cast with .float())")
    return x


class TensorMethods:
    """The torch methods of vkml.Tensor (a mixin placed before Array in Tensor's bases).

    >>> import vkml
    >>> vkml.Tensor([[1.0, 2.0, 3.0]]).repeat(2, 1).shape
    (2, 3)
    """
    __slots__ = ()

    # ------------------------------------------------------------------ sizes
    @property
    def size(self) -> _Size:
        """`t.size()` is the shape, `t.size(d)` one dim's length (and `t.size` compares as
        the element count, numpy's meaning, which vkml's own code reads)."""
        return _Size(self.shape)

    def dim(self) -> int:
        """The number of dims (torch's `dim()`, numpy's `ndim`)."""
        return len(self.shape)

    ndimension = dim

    def numel(self) -> int:
        """The number of elements."""
        return size_of(self.shape)

    nelement = numel

    def contiguous(self):
        """Self: vkml's arrays are always dense."""
        return self

    def tolist(self):
        """The values as (nested) Python lists; a 0-d tensor gives a scalar."""
        return self.numpy().tolist()

    # ------------------------------------------------------------------ elementwise
    def exp(self):
        return vnp.exp(self)

    def log(self):
        return vnp.log(self)

    def sqrt(self):
        return vnp.sqrt(self)

    def tanh(self):
        return vnp.tanh(self)

    def abs(self):
        return vnp.abs(self)

    def neg(self):
        return vnp.negative(self)

    negative = neg

    def relu(self):
        """max(x, 0) (the gradient at 0 is 0)."""
        return bind(OpKind.Relu, [self.astype(dt.int32) if self.dtype == dt.bool_ else self])

    def sigmoid(self):
        return bind(OpKind.Sigmoid, [_float_self(self, "sigmoid")])

    def pow(self, exponent: Any):
        return vnp.power(self, exponent)

    def clamp(self, min: Any = None, max: Any = None):
        """Values limited to [min, max] (either may be None, a number or a tensor)."""
        if min is None and max is None:
            raise ValueError("clamp: at least one of min and max must be given")
        out = self
        if min is not None:
            out = vnp.maximum(out, min)
        if max is not None:
            out = vnp.minimum(out, max)
        return out

    clip = clamp

    def lt(self, other: Any):
        return self < other

    def gt(self, other: Any):
        return self > other

    def le(self, other: Any):
        return self <= other

    def ge(self, other: Any):
        return self >= other

    def eq(self, other: Any):
        return self == other

    def ne(self, other: Any):
        return self != other

    def masked_fill(self, mask: Any, value: Any):
        """value where mask (bool, broadcast to self) is True, self elsewhere."""
        mask = vnp.asarray(mask)
        if mask.dtype != dt.bool_:
            raise DTypeError(f"masked_fill: mask must be bool, got {mask.dtype}")
        return vnp.where(mask, vnp.asarray(value, self.dtype), self)

    def where(self, condition: Any, other: Any):
        """self where condition, other elsewhere (torch's `x.where(cond, y)`)."""
        return vnp.where(condition, self, other)

    # ------------------------------------------------------------------ shapes
    def view(self, *shape):
        """reshape: vkml's tensors are immutable buffers, so a view is a new tensor (an
        in-place op on it does not change the original)."""
        if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)) \
                and not hasattr(shape[0], "__index__"):
            raise TypeError(f"view: takes a shape (view(dtype) is not supported), got {shape[0]!r}")
        return self.reshape(*shape)

    def permute(self, *dims):
        dims = _dims_arg("permute", dims)
        if len(dims) != self.ndim:
            raise ShapeError(f"permute: {len(dims)} dims {dims} for a tensor of rank {self.ndim}")
        return vnp.transpose(self, dims)

    def transpose(self, dim0: int, dim1: int):
        """self with dims dim0 and dim1 swapped (torch's meaning; permute for any order)."""
        return vnp.swapaxes(self, dim0, dim1)

    def t(self):
        """The transpose of a tensor of rank <= 2 (rank 0 and 1: self)."""
        if self.ndim > 2:
            raise ShapeError(f"t: expects a tensor of rank <= 2, got shape {self.shape}; use "
                             f"transpose(d0, d1) or mT")
        return self if self.ndim < 2 else vnp.swapaxes(self, 0, 1)

    @property
    def mT(self):
        """The last two dims swapped (batched matrix transpose)."""
        if self.ndim < 2:
            raise ShapeError(f"mT: needs a tensor of rank >= 2, got shape {self.shape}")
        return vnp.swapaxes(self, -1, -2)

    def unsqueeze(self, dim: int):
        return vnp.expand_dims(self, normalize_axis("unsqueeze", dim, self.ndim + 1))

    def squeeze(self, dim: Any = None):
        """Drop the given dims (all when None) of length 1; other dims given are kept, as
        in torch."""
        if dim is None:
            return vnp.squeeze(self)
        dims = (dim,) if not isinstance(dim, (tuple, list)) else tuple(dim)
        nd = max(self.ndim, 1)
        drop = {normalize_axis("squeeze", d, nd) for d in dims}
        keep = tuple(s for i, s in enumerate(self.shape) if not (i in drop and s == 1))
        return self if keep == self.shape else self.reshape(keep)

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        """Dims start_dim..end_dim merged into one (a 0-d tensor becomes shape (1,))."""
        if self.ndim == 0:
            return self.reshape(1)
        s = normalize_axis("flatten", start_dim, self.ndim)
        e = normalize_axis("flatten", end_dim, self.ndim)
        if s > e:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for "
                             f"shape {self.shape}")
        return self.reshape(self.shape[:s] + (size_of(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def expand(self, *sizes):
        """Broadcast to sizes (-1 keeps a dim; new dims go in front), without copying data."""
        sizes = _dims_arg("expand", sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"expand: {len(sizes)} sizes {sizes} for a tensor of rank {self.ndim} "
                             f"(shape {self.shape}); give at least {self.ndim}")
        lead = len(sizes) - self.ndim
        out = []
        for i, s in enumerate(sizes):
            have = self.shape[i - lead] if i >= lead else None
            if s == -1:
                if have is None:
                    raise ShapeError(f"expand: -1 is not allowed for a new leading dim ({sizes})")
                s = have
            if have is not None and have != 1 and have != s:
                raise ShapeError(f"expand: the size {s} must match the existing size {have} at "
                                 f"non-singleton dim {i}; target sizes {sizes}, tensor shape "
                                 f"{self.shape}")
            out.append(s)
        return vnp.broadcast_to(self, tuple(out))

    def expand_as(self, other: Any):
        return self.expand(*other.shape)

    def repeat(self, *sizes):
        """torch's repeat: tile the data sizes[i] times along dim i (numpy's tile)."""
        sizes = _dims_arg("repeat", sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat: {len(sizes)} repeat counts {sizes} for a tensor of rank "
                             f"{self.ndim}; give at least one per dim")
        return vnp.tile(self, sizes)

    def chunk(self, chunks: int, dim: int = 0) -> tuple:
        """Split into at most `chunks` pieces of ceil(n / chunks) along dim (the last may
        be smaller, and there may be fewer pieces, as in torch)."""
        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
            raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
        n = self.shape[normalize_axis("chunk", dim, self.ndim)]
        return self.split(max(-(-n // chunks), 1), dim)

    def split(self, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple:
        """An int: pieces of that size along dim (the last may be smaller); a list: pieces
        of those sizes, which must add up to the dim's length."""
        ax = normalize_axis("split", dim, self.ndim)
        n = self.shape[ax]
        s = split_size_or_sections
        if isinstance(s, int) and not isinstance(s, bool):
            if s < 1:
                raise ValueError(f"split: split_size must be a positive int, got {s}")
            sizes = [min(s, n - i) for i in range(0, n, s)] or [0]
        else:
            sizes = [int(k) for k in s]
            if sum(sizes) != n or any(k < 0 for k in sizes):
                raise ShapeError(f"split: sections {sizes} must be non-negative and add up to "
                                 f"{n}, the length of dim {ax} of shape {self.shape}")
        out, lo = [], 0
        for k in sizes:
            idx = [slice(None)] * self.ndim
            idx[ax] = slice(lo, lo + k)
            out.append(self[tuple(idx)])
            lo += k
        return tuple(out)

    # ------------------------------------------------------------------ products
    def matmul(self, other: Any):
        return vnp.matmul(self, other)

    def mm(self, other: Any):
        """Matrix product of two 2-d tensors."""
        if self.ndim != 2 or getattr(other, "ndim", None) != 2:
            raise ShapeError(f"mm: needs two 2-d tensors, got shapes {self.shape} and "
                             f"{getattr(other, 'shape', None)}")
        return vnp.matmul(self, other)

    def bmm(self, other: Any):
        """Batched matrix product of (b, n, m) and (b, m, p)."""
        os_ = getattr(other, "shape", None)
        if self.ndim != 3 or os_ is None or len(os_) != 3 or os_[0] != self.shape[0]:
            raise ShapeError(f"bmm: needs 3-d tensors with the same batch size, got shapes "
                             f"{self.shape} and {os_}")
        return vnp.matmul(self, other)

    # ------------------------------------------------------------------ reductions
    def sum(self, dim: Any = None, keepdim: bool = False, dtype: Any = None, *, axis: Any = None,
            keepdims: bool | None = None):
        return vnp.sum(self, axis=_pick("sum", dim, axis), keepdims=_keep(keepdim, keepdims),
                       dtype=dtype)

    def mean(self, dim: Any = None, keepdim: bool = False, dtype: Any = None, *, axis: Any = None,
             keepdims: bool | None = None):
        x = self if dtype is None else self.astype(dtype)
        return vnp.mean(x, axis=_pick("mean", dim, axis), keepdims=_keep(keepdim, keepdims))

    def _minmax(self, name: str, pair, dim: Any, keepdim: bool, axis: Any, keepdims: bool | None):
        red, arg, elt = ((vnp.max, vnp.argmax, vnp.maximum) if name == "max"
                         else (vnp.min, vnp.argmin, vnp.minimum))
        if isinstance(dim, Array):        # torch's max(other): elementwise
            return elt(self, dim)
        d, k = _pick(name, dim, axis), _keep(keepdim, keepdims)
        if d is None:
            return red(self)
        if isinstance(d, (tuple, list)):
            raise TypeError(f"{name}(dim=): one dim (an int), got {d!r}; use amax/amin for several")
        idx = arg(self, axis=d, keepdims=k)
        if not dt.is_float(self.dtype) or self.ndim == 0:
            return pair(red(self, axis=d, keepdims=k), idx)
        # the values are those at the indices, so the gradient goes to that one element
        # (torch's rule) rather than being shared among ties: every other element is
        # replaced by the identity of the reduction before reducing
        ax = normalize_axis(name, d, self.ndim)
        at = idx if k else vnp.expand_dims(idx, ax)
        pos = vnp.reshape(vnp.arange(self.shape[ax]), (-1,) + (1,) * (self.ndim - ax - 1))
        fill = -math.inf if name == "max" else math.inf
        return pair(red(vnp.where(pos == at, self, fill), axis=ax, keepdims=k), idx)

    def max(self, dim: Any = None, keepdim: bool = False, *, axis: Any = None,
            keepdims: bool | None = None):
        """The maximum; with dim, the pair (values, indices) along dim; with a tensor, the
        elementwise maximum."""
        return self._minmax("max", MaxResult, dim, keepdim, axis, keepdims)

    def min(self, dim: Any = None, keepdim: bool = False, *, axis: Any = None,
            keepdims: bool | None = None):
        """The minimum; with dim, the pair (values, indices) along dim."""
        return self._minmax("min", MinResult, dim, keepdim, axis, keepdims)

    def amax(self, dim: Any = None, keepdim: bool = False):
        return vnp.max(self, axis=dim, keepdims=keepdim)

    def amin(self, dim: Any = None, keepdim: bool = False):
        return vnp.min(self, axis=dim, keepdims=keepdim)

    def argmax(self, dim: Any = None, keepdim: bool = False, *, axis: Any = None,
               keepdims: bool | None = None):
        """Index of the maximum along dim (of the flattened tensor when dim is None; then
        keepdim gives shape (1, ..., 1), as torch)."""
        return vnp.argmax(self, axis=_pick("argmax", dim, axis), keepdims=_keep(keepdim, keepdims))

    def argmin(self, dim: Any = None, keepdim: bool = False, *, axis: Any = None,
               keepdims: bool | None = None):
        return vnp.argmin(self, axis=_pick("argmin", dim, axis), keepdims=_keep(keepdim, keepdims))

    def _ddof(self, name: str, unbiased: bool | None, correction: Any, ddof: Any) -> int:
        given = [v for v in (unbiased, correction, ddof) if v is not None]
        if len(given) > 1:
            raise TypeError(f"{name}: pass one of unbiased=, correction= and ddof=")
        if correction is not None:
            return int(correction)
        if ddof is not None:
            return int(ddof)
        return 1 if unbiased is None or unbiased else 0

    def var(self, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
            correction: Any = None, axis: Any = None, ddof: Any = None,
            keepdims: bool | None = None):
        """Variance, unbiased (n - 1) by default as in torch; correction= or ddof= set the
        divisor n - correction."""
        return vnp.var(self, axis=_pick("var", dim, axis),
                       ddof=self._ddof("var", unbiased, correction, ddof),
                       keepdims=_keep(keepdim, keepdims))

    def std(self, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *,
            correction: Any = None, axis: Any = None, ddof: Any = None,
            keepdims: bool | None = None):
        """Standard deviation, unbiased by default (see var)."""
        return vnp.sqrt(self.var(dim, unbiased, keepdim, correction=correction, axis=axis,
                                 ddof=ddof, keepdims=keepdims))

    def norm(self, p: Any = "fro", dim: Any = None, keepdim: bool = False):
        """The vector p-norm over dim (all elements when None): "fro" and 2 (Euclidean),
        1, inf, -inf, 0 (the count of nonzeros) or any other positive p. The gradient at
        a zero vector is 0, as in torch."""
        x = _float_self(self, "norm")
        ax = dim if dim is None or isinstance(dim, int) else tuple(dim)
        if p in ("fro", 2, 2.0):
            s = vnp.sum(x * x, axis=ax, keepdims=keepdim)
            zero = s == 0
            # sqrt's derivative is infinite at 0: evaluate it away from 0 where s is 0
            return vnp.where(zero, vnp.zeros((), x.dtype), vnp.sqrt(vnp.where(zero, vnp.ones((), x.dtype), s)))
        if isinstance(p, str):
            raise ValueError(f"norm: p={p!r}; valid are 'fro' or a number (2, 1, inf, -inf, 0, ...)")
        from .linalg.spectral import _vector_norm     # numpy.linalg.norm's vector orders
        return _vector_norm(x, p, ax, keepdim)

    def softmax(self, dim: int):
        """exp(x) / sum(exp(x)) along dim, numerically stable."""
        x = _float_self(self, "softmax")
        return bind(OpKind.Softmax, [x], axis=normalize_axis("softmax", dim, x.ndim))

    def log_softmax(self, dim: int):
        """x - logsumexp(x) along dim, numerically stable."""
        x = _float_self(self, "log_softmax")
        return bind(OpKind.LogSoftmax, [x], axis=normalize_axis("log_softmax", dim, x.ndim))

    # ------------------------------------------------------------------ copies
    def clone(self):
        """A copy that stays in the graph (gradients flow through it)."""
        return vnp.copy(self)

    def to(self, dtype: Any = None, *, copy: bool = False):
        """Cast to dtype (or to another tensor's dtype); self when it already has it."""
        if isinstance(dtype, Array):
            dtype = dtype.dtype
        if isinstance(dtype, str) and dtype == "half":
            return self.half()
        try:
            d = dt.canonical(dtype, "to")
        except (TypeError, DTypeError):
            raise TypeError(f"to: takes a dtype ({dt.VALID}) or a tensor whose "
                            f"dtype to take, got {dtype!r}; vkml's tensors live on its one device, "
                            f"so there is no device to move to") from None
        out = vnp.asarray(self, d)
        return vnp.copy(out) if copy and out is self else out

    def double(self):
        """Cast to float64."""
        return vnp.asarray(self, dt.float64)

    def half(self):
        """Cast to float16 (stored in 16 bits, computed in float32)."""
        return vnp.asarray(self, dt.float16)

    def bfloat16(self):
        """Cast to bfloat16 (ml_dtypes.bfloat16, as JAX's)."""
        return vnp.asarray(self, dt.bfloat16)

    def long(self):
        """Cast to vkml's integer dtype (int32; vkml has no int64)."""
        return vnp.asarray(self, dt.int32)

    int = long

    def float(self):
        """Cast to float32."""
        return vnp.asarray(self, dt.float32)

    # ------------------------------------------------------------------ in place
    def _inplace(self, name: str, compute):
        """Replace the contents by compute(value of self), broadcast and cast to self's shape
        and dtype. Allowed on tensors outside the tape: a leaf that requires grad only under
        no_grad (as in torch); a tensor with history never (vkml records no in-place ops).
        The buffer is replaced, not written: anything holding the old value keeps it, and
        backward() refuses a graph whose saved tensor changed since it was recorded."""
        from .tensor import UndefinedTensorError, no_record
        if not self._defined:
            raise UndefinedTensorError(f"{name}: the tensor is undefined (it holds no value)")
        if not self._is_leaf:
            raise RuntimeError(f"{name}: this tensor has history (it is the output of a recorded "
                               f"operation that requires grad); vkml records no in-place operations: "
                               f"use the out-of-place form, or detach() first")
        if self.requires_grad and tracer.grad_enabled():
            raise RuntimeError(_LEAF_INPLACE)
        with no_record():
            v = vnp.asarray(compute(self.data))
            if v._trace is not None:
                raise TypeError(f"{name}: cannot store a traced value in a Tensor")
            if v.dtype != self.dtype:
                if dt.is_float(v.dtype) and not dt.is_float(self.dtype):
                    raise DTypeError(f"{name}: result type {v.dtype} cannot be stored in a "
                                     f"{self.dtype} tensor")
                v = v.astype(self.dtype)
            if v.shape != self.shape:
                try:
                    fits = broadcast_shapes(name, v.shape, self.shape) == self.shape
                except ValueError:
                    fits = False
                if not fits:
                    raise ShapeError(f"{name}: a value of shape {v.shape} does not broadcast to the "
                                     f"tensor's shape {self.shape}")
                v = vnp.copy(vnp.broadcast_to(v, self.shape))
        self._take(v)
        self._version += 1
        return self

    def add_(self, other: Any, *, alpha: Any = 1):
        """self += alpha * other, in place."""
        o = _plain(other)
        return self._inplace("add_", lambda x: x + (o if alpha == 1 else vnp.multiply(o, alpha)))

    def sub_(self, other: Any, *, alpha: Any = 1):
        """self -= alpha * other, in place."""
        o = _plain(other)
        return self._inplace("sub_", lambda x: x - (o if alpha == 1 else vnp.multiply(o, alpha)))

    def mul_(self, other: Any):
        """self *= other, in place."""
        o = _plain(other)
        return self._inplace("mul_", lambda x: x * o)

    def div_(self, other: Any):
        """self /= other, in place."""
        o = _plain(other)
        return self._inplace("div_", lambda x: x / o)

    def clamp_(self, min: Any = None, max: Any = None):
        """clamp(min, max), in place."""
        if min is None and max is None:
            raise ValueError("clamp_: at least one of min and max must be given")
        lo, hi = _plain(min), _plain(max)
        return self._inplace("clamp_", lambda x: vnp.clip(x, lo, hi))

    def fill_(self, value: Any):
        """Every element set to value, in place."""
        return self._inplace("fill_", lambda x: vnp.full(x.shape, _plain(value), x.dtype))

    def zero_(self):
        """Every element set to 0, in place (torch's meaning; clear a gradient with
        `t.grad = None` or an optimiser's zero_grad())."""
        return self._inplace("zero_", lambda x: vnp.zeros(x.shape, x.dtype))

    def copy_(self, src: Any):
        """src's values (broadcast, cast to self's dtype) copied into self."""
        s = _plain(src)
        return self._inplace("copy_", lambda x: s)


def _plain(v: Any) -> Any:
    """A Tensor's value without history (other values as they are)."""
    from .tensor import Tensor
    return v.data if isinstance(v, Tensor) else v


def cat(tensors: Sequence, dim: int = 0, *, axis: int | None = None):
    """torch.cat: join tensors (or Arrays) along an existing dim; a Tensor result (in the
    graph) when any input is a Tensor.

    >>> import vkml
    >>> vkml.cat([vkml.Tensor([1.0]), vkml.Tensor([2.0, 3.0])]).tolist()
    [1.0, 2.0, 3.0]
    """
    if isinstance(tensors, Array):
        raise TypeError("cat: takes a sequence of tensors, got a single tensor")
    return vnp.concatenate(list(tensors), axis=dim if axis is None else axis)


def stack(tensors: Sequence, dim: int = 0, *, axis: int | None = None):
    """torch.stack: join same-shape tensors (or Arrays) along a new dim.

    >>> import vkml
    >>> vkml.stack([vkml.Tensor([1.0, 2.0]), vkml.Tensor([3.0, 4.0])], dim=1).shape
    (2, 2)
    """
    if isinstance(tensors, Array):
        raise TypeError("stack: takes a sequence of tensors, got a single tensor")
    return vnp.stack(list(tensors), axis=dim if axis is None else axis)
