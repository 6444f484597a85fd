"""The device dtypes, their facts (one table, `INFO`), promotion (jax.numpy's lattice with
x64 enabled) and DTypeError.

bool is stored on the device as a 32-bit 0/1 word, int64 input is narrowed to int32
(refused when a value does not fit); float16 and bfloat16 (`ml_dtypes.bfloat16`, the type
JAX uses) are stored as 16-bit values and computed in float32 (`INFO[d].compute`): an
elementwise operator rounds its float32 result once to the storage type, and every other
kernel family reads them through float32 (`vulkan/widen.py`). Everything else is refused.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int32 = np.dtype(np.int32)
bool_ = np.dtype(np.bool_)


@dataclass(frozen=True)
class DTypeInfo:
    """The facts of one device dtype.

    itemsize: bytes per element on the device; storage: the GLSL type of a storage-buffer
    element (16-bit types: the raw bits, `uint16_t`); compute: the GLSL type kernels
    compute in; low: a 16-bit float (stored as bits, computed in float32, rounded once per
    operator with round-to-nearest-even).
    """
    dtype: np.dtype
    itemsize: int
    storage: str
    compute: str
    low: bool = False


INFO: dict[np.dtype, DTypeInfo] = {
    bool_: DTypeInfo(bool_, 4, "int", "int"),
    int32: DTypeInfo(int32, 4, "int", "int"),
    float16: DTypeInfo(float16, 2, "uint16_t", "float", True),
    bfloat16: DTypeInfo(bfloat16, 2, "uint16_t", "float", True),
    float32: DTypeInfo(float32, 4, "float", "float"),
    float64: DTypeInfo(float64, 8, "double", "double"),
}

DTYPES = tuple(INFO)
LOW = (float16, bfloat16)
FLOATS = (float16, bfloat16, float32, float64)
INTS = (int32,)
INTEGRAL = (bool_, int32)   # the bitwise operators' dtypes
NUMERIC = (int32,) + FLOATS
ALL = DTYPES
VALID = "bool, int32, float16, bfloat16, float32, float64"

# The promotion lattice (jax.numpy's, restricted to the device dtypes): bool < int32 <
# {float16, bfloat16} < float32 < float64; float16 and bfloat16 join at float32.
_RANK = {bool_: 0, int32: 1, float16: 2, bfloat16: 2, float32: 3, float64: 4}


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

    >>> canonical("int64"), canonical(">f8"), canonical("bfloat16")
    (dtype('int32'), dtype('float64'), dtype(bfloat16))
    """
    if dtype is float:
        return float32
    if dtype is int:
        return int32
    if dtype is bool:
        return bool_
    if isinstance(dtype, str) and dtype == "bfloat16":
        return bfloat16
    try:
        d = np.dtype(dtype)
    except TypeError as e:
        raise DTypeError(f"{op}: {dtype!r} is not a dtype; valid: {VALID}") from e
    if not d.isnative:
        d = d.newbyteorder("=")   # big-endian data: converted on upload (to_device_numpy)
    if d in _RANK:
        return d
    if d.kind in "iu" and d.itemsize <= 8:
        return int32
    raise DTypeError(
        f"{op}: dtype {d} is not supported on the device; valid: {VALID} "
        f"(int64 and smaller integer types are narrowed to int32)")


def is_float(d: np.dtype) -> bool:
    return np.dtype(d) in FLOATS


def is_low(d: np.dtype) -> bool:
    """Whether d is a 16-bit float (stored as bits, computed in float32).

    >>> is_low(bfloat16), is_low(float32)
    (True, False)
    """
    info = INFO.get(np.dtype(d))
    return info is not None and info.low


def _join(a: np.dtype, b: np.dtype) -> np.dtype:
    if a == b:
        return a
    ra, rb = _RANK[a], _RANK[b]
    if ra == rb:            # float16 and bfloat16: neither holds the other
        return float32
    return a if ra > rb else b


def promote(*dtypes: np.dtype) -> np.dtype:
    """The common dtype of strongly typed operands (jax.numpy's x64 lattice).

    >>> promote(float16, bfloat16), promote(int32, bfloat16), promote(float16, float32)
    (dtype('float32'), dtype(bfloat16), dtype('float32'))
    """
    ds = [np.dtype(d) for d in dtypes]
    out = ds[0]
    for d in ds[1:]:
        out = _join(out, d)
    return out


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
    """GLSL scalar type holding dtype d in a storage buffer (bool is a 0/1 int); the
    16-bit floats have none here: only the elementwise kernels store them (as bits),
    every other family reads them widened to float32 (`vulkan/widen.py`)."""
    info = INFO[np.dtype(d)]
    if info.low:
        raise DTypeError(f"{np.dtype(d)}: a 16-bit float reached a float32-only kernel; the graph "
                         f"must be widened first (vkml.vulkan.widen)")
    return info.storage


def compute_type(d: np.dtype) -> str:
    """GLSL type a kernel computes dtype d in (float for the 16-bit floats).

    >>> compute_type(bfloat16), compute_type(int32)
    ('float', 'int')
    """
    return INFO[np.dtype(d)].compute


def itemsize(d: np.dtype) -> int:
    """Bytes per element on the device."""
    return INFO[np.dtype(d)].itemsize


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
