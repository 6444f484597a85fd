"""Debug switches: bounds checks on indices inside compiled programs.

Outside any transform, every integer index or class label that reaches a kernel (array
indexing, `vkml.numpy.take`, `nn.functional.embedding`, `cross_entropy`, `nll_loss`) is
read back and checked on the host: an out-of-range one raises IndexError at the call.
Under `jit`, `grad` or `vmap` the index is traced and cannot be read, so by default the
rule is JAX's: a gather clamps an out-of-range index into range, a scatter (the gather's
gradient) drops its update. With checks on, the surface puts a `CheckIndex` operator in
front of each such gather: a kernel that flags an out-of-range index in a device check,
and the host raises IndexError when the program's results are produced (at the jitted
call's return; at the call, for an eager operator), as JAX's checkify does. Checks cost
one small kernel per index array, so they are off by default; `VKML_DEBUG_CHECKS=1` in
the environment turns them on from the start.

Integer overflow of int32 accumulations (Sum, Prod, Cumsum, MatMul, ScatterAdd) is always
checked, on or off:
it raises OverflowError in the same way.

Programs are traced with the switch as it is at trace time; `jit` keys its cache on it,
so a function traced before the switch is traced again after it.
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator

import numpy as np

from .array import bind
from .trace.ops import OpKind
from .vulkan.lower.index import index_error

__all__ = ["check_indices", "checks", "checks_enabled"]

_state = threading.local()
_DEFAULT = os.environ.get("VKML_DEBUG_CHECKS", "").strip().lower() not in ("", "0", "false", "no", "off")


def checks_enabled() -> bool:
    """Whether index bounds checks are put into traced programs (this thread).

    >>> import vkml
    >>> with vkml.debug.checks():
    ...     vkml.debug.checks_enabled()
    True
    """
    return getattr(_state, "on", _DEFAULT)


def check_indices(enabled: bool = True) -> bool:
    """Turn index bounds checks in traced programs on or off (this thread); returns the
    previous setting.

    >>> import vkml, vkml.numpy as vnp
    >>> old = vkml.debug.check_indices(True)
    >>> f = vkml.jit(lambda x, i: vnp.take(x, i))
    >>> f(vnp.arange(3), vnp.asarray([5]))
    Traceback (most recent call last):
        ...
    IndexError: take: index 5 is out of bounds for axis 0 with size 3
    >>> _ = vkml.debug.check_indices(old)
    """
    old = checks_enabled()
    _state.on = bool(enabled)
    return old


@contextlib.contextmanager
def checks(enabled: bool = True) -> Iterator[None]:
    """Context manager: index bounds checks on (or off) inside the block.

    >>> import vkml, vkml.numpy as vnp
    >>> f = vkml.jit(lambda x, i: x[i])
    >>> f(vnp.arange(3), vnp.asarray([5])).numpy().tolist()   # traced: clamped, as in JAX
    [2]
    >>> with vkml.debug.checks():
    ...     f(vnp.arange(3), vnp.asarray([5]))
    Traceback (most recent call last):
        ...
    IndexError: getitem: index 5 is out of bounds for axis 0 with size 3
    """
    old = check_indices(enabled)
    try:
        yield
    finally:
        check_indices(old)


def check_index(what: str, idx, size: int, axis: int | None = 0, negative: bool = True,
                ignore: int | None = None):
    """idx (an int32 Array) checked against size: concrete, it is read back and an
    out-of-range value raises IndexError now (the first one, in C order, as NumPy);
    traced, a CheckIndex node is put in front when checks are on. Returns the index to
    gather with. axis None: idx holds class labels (only [0, size) or `ignore` valid).

    >>> import vkml.numpy as vnp
    >>> check_index("take", vnp.asarray([0, 3]), 3)
    Traceback (most recent call last):
        ...
    IndexError: take: index 3 is out of bounds for axis 0 with size 3
    """
    if idx._trace is None:
        v = np.asarray(idx.numpy()).reshape(-1).astype(np.int64)
        bad = ((v < -size) if negative else (v < 0)) | (v >= size)
        if ignore is not None:
            bad &= v != ignore
        if bad.any():
            raise index_error(what, int(v[np.argmax(bad)]), size, axis, ignore)
        return idx
    if not checks_enabled():
        return idx
    return bind(OpKind.CheckIndex, [idx], size=int(size), negative=bool(negative),
                ignore=None if ignore is None else int(ignore), what=what, axis=axis)
