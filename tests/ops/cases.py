"""The per-operator test case format shared by every family's case table.

A family module (tests/ops/cases_<family>.py) defines `CASES: list[Case]`. The coverage
test (test_registry.py) gathers all of them and fails for any registry operator (other
than Input and Const) that has none, then runs every case against its NumPy reference.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import ml_dtypes
import numpy as np

RNG = np.random.default_rng(0)


@dataclass
class Case:
    """fn(*vkml_arrays) must apply `op` (it may also use movement ops to make inputs
    non-contiguous); ref(*float64_or_int numpy arrays) is the oracle, evaluated on the
    same inputs upcast to float64 (ints/bools unchanged) and compared after casting to
    the result's dtype."""
    op: object                       # OpKind
    name: str
    fn: Callable
    ref: Callable
    args: Sequence[np.ndarray]
    rtol: float = 1e-5
    atol: float = 1e-6
    exact: bool = False              # ints, bools, indices: compare exactly
    tags: tuple = field(default_factory=tuple)
    dtype: object = None             # the dtype this case covers (default: args[0].dtype);
                                     # set it for creation ops and for Where (its data dtype)

    @property
    def covers(self):
        return np.dtype(self.dtype) if self.dtype is not None else np.asarray(self.args[0]).dtype

    @property
    def id(self) -> str:
        return f"{self.op.value}-{self.name}"


def rand(shape, dtype=np.float32, lo=-2.0, hi=2.0):
    """Random test data of a dtype (ints in [lo, hi], bools half true)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind == "i":
        return RNG.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def upcast(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.astype(np.float64) if a.dtype.kind == "f" or a.dtype == ml_dtypes.bfloat16 else a


def tol(dtype, rtol32=1e-5, atol32=1e-6, rtol64=1e-12, atol64=1e-13):
    """Tolerances that would catch a real bug for each float dtype."""
    return (rtol64, atol64) if np.dtype(dtype) == np.float64 else (rtol32, atol32)


_FTZ = None


def flushes_subnormals() -> bool:
    """Whether this device flushes float32 subnormals to zero (NVIDIA does by default;
    Vulkan leaves it to the implementation). Probed once with a kernel."""
    global _FTZ
    if _FTZ is None:
        import vkml.numpy as vnp
        x = vnp.asarray(np.array([1e-40], np.float32))
        _FTZ = bool(np.asarray(x * 1.0)[0] == 0.0)
    return _FTZ


def flush32(a: np.ndarray) -> np.ndarray:
    """a with float32 subnormals set to zero (float32 arrays only)."""
    a = np.asarray(a)
    if a.dtype != np.float32:
        return a
    zero = np.copysign(np.float32(0), a).astype(np.float32)
    return np.where(np.abs(a) < np.finfo(np.float32).tiny, zero, a).astype(np.float32)
