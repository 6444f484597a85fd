"""The four device dtypes, promotion (jax.numpy with x64 enabled), and DTypeError.

bool is stored on the device as a 32-bit 0/1 word, int64 input is narrowed to int32
(refused when a value does not fit), everything else outside the four is refused.
"""
from __future__ import annotations

import numpy as np

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int32 = np.dtype(np.int32)
bool_ = np.dtype(np.bool_)

DTYPES = (bool_, int32, float32, float64)
FLOATS = (float32, float64)
INTS = (int32,)
INTEGRAL = (bool_, int32)   # the bitwise operators' dtypes
NUMERIC = (int32, float32, float64)
ALL = DTYPES

# Lattice order used for promotion: bool < int32 < float32 < float64.
_RANK = {bool_: 0, int32: 1, float32: 2, float64: 3}


class DTypeError(TypeError):
    """A dtype that an operator or transform cannot take.

    >>> import vkml.numpy as vnp
    >>> vnp.negative(vnp.asarray([True]))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    vkml.trace.dtypes.DTypeError: negative: not defined for bool arrays; use logical_not, ...
    >>> issubclass(DTypeError, TypeError)
    True
    """


def canonical(dtype, op: str = "asarray") -> np.dtype:
    """Map a user dtype onto one of the four device dtypes, or raise DTypeError; byte order
    is a storage detail (">f4" is float32).

    >>> canonical("int64"), canonical(">f8")
    (dtype('int32'), dtype('float64'))
    """
    if dtype is float:
        return float32
    if dtype is int:
        return int32
    if dtype is bool:
        return bool_
    try:
        d = np.dtype(dtype)
    except TypeError as e:
        raise DTypeError(f"{op}: {dtype!r} is not a dtype; valid: float32, float64, int32, bool") from e
    if not d.isnative:
        d = d.newbyteorder("=")   # big-endian data: converted on upload (to_device_numpy)
    if d in _RANK:
        return d
    if d.kind in "iu" and d.itemsize <= 8:
        return int32
    raise DTypeError(
        f"{op}: dtype {d} is not supported on the device; valid: float32, float64, int32, bool "
        f"(int64 and smaller integer types are narrowed to int32)")


def is_float(d: np.dtype) -> bool:
    return np.dtype(d) in FLOATS


def promote(*dtypes: np.dtype) -> np.dtype:
    """The common dtype of strongly typed operands (jax.numpy x64 lattice on four types)."""
    return max((np.dtype(d) for d in dtypes), key=_RANK.__getitem__)


def promote_weak(strong: list[np.dtype], weak: list[type]) -> np.dtype:
    """Promotion with Python scalars as weak types, as in JAX.

    A Python int never widens an array dtype; a Python float makes an integer or bool
    result float32 and leaves a float array's dtype alone.
    """
    if strong:
        d = promote(*strong)
    else:
        d = bool_ if all(w is bool for w in weak) else int32
        if any(w is float for w in weak):
            d = float32
        return d
    if any(w is float for w in weak) and not is_float(d):
        return float32
    if any(w is int for w in weak) and d == bool_:
        return int32
    return d


def glsl_type(d: np.dtype) -> str:
    """GLSL scalar type holding dtype d in a storage buffer (bool is a 0/1 int)."""
    return {float32: "float", float64: "double", int32: "int", bool_: "int"}[np.dtype(d)]


def itemsize(d: np.dtype) -> int:
    """Bytes per element on the device."""
    return 8 if np.dtype(d) == float64 else 4


def to_device_numpy(a: np.ndarray, dtype: np.dtype, op: str = "asarray") -> np.ndarray:
    """A contiguous NumPy array in the device's storage representation of dtype (native
    byte order: a big-endian input is byte-swapped here, on the host, as part of the I/O)."""
    dtype = np.dtype(dtype)
    if a.dtype.kind in "iu" and dtype == int32 and a.size:
        lo, hi = a.min(), a.max()
        if lo < -2**31 or hi > 2**31 - 1:
            raise DTypeError(f"{op}: integer values in [{lo}, {hi}] do not fit int32, the device's "
                             f"integer type; cast to float64 or reduce the range")
    if dtype == bool_:   # stored as 0/1 whatever the source (astype(int32) would keep -3)
        return np.ascontiguousarray(a.astype(np.bool_).astype(np.int32))
    return np.ascontiguousarray(a.astype(dtype, copy=False))


def from_device_numpy(raw: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Inverse of to_device_numpy."""
    if np.dtype(dtype) == bool_:
        return raw.view(np.int32) != 0
    return raw.view(dtype)
