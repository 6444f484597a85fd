"""Every registry operator against NumPy, looping over the registry itself."""
import importlib
import pkgutil

import numpy as np
import pytest

import vkml.numpy as vnp
from vkml.trace.ops import SPECS, OpKind

from . import cases as C

SKIP = {OpKind.Input, OpKind.Const}


def _gather():
    out = []
    import tests.ops as pkg
    for m in pkgutil.iter_modules(pkg.__path__):
        if m.name.startswith("cases_"):
            out += importlib.import_module(f"tests.ops.{m.name}").CASES
    return out


ALL = _gather()
BY_OP = {}
for _c in ALL:
    BY_OP.setdefault(_c.op, []).append(_c)


@pytest.mark.parametrize("kind", [k for k in SPECS if k not in SKIP], ids=lambda k: k.value)
def test_every_operator_has_cases(kind):
    assert BY_OP.get(kind), f"{kind.value} has no test case in tests/ops/cases_*.py"
    covered = {c.covers for c in BY_OP[kind]}
    if kind is OpKind.Rand:
        return  # its operand is always an int32 key; output dtypes are checked in its cases
    missing = [str(d) for d in SPECS[kind].dtypes if np.dtype(d) not in covered]
    assert not missing, f"{kind.value}: no case covers dtypes {missing}"


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.id)
def test_case(case):
    args = [vnp.asarray(a) for a in case.args]
    got = np.asarray(case.fn(*args))
    want = np.asarray(case.ref(*[C.upcast(a) for a in case.args]))
    assert got.shape == want.shape, (got.shape, want.shape)
    ok = _matches(case, got, want)
    if not ok.all() and C.flushes_subnormals():
        # a device that flushes float32 subnormals in arithmetic (NVIDIA) but moves them
        # unchanged in copies: an element may match either the exact or the flushed oracle
        flat = [C.flush32(a) for a in case.args]
        want2 = np.asarray(case.ref(*[C.upcast(a) for a in flat]))
        if want2.dtype.kind == "f":
            want2 = np.where(np.abs(want2) < np.finfo(np.float32).tiny, np.copysign(0.0, want2), want2)
        ok |= _matches(case, got, want2) | _matches(case, got, C.flush32(want.astype(got.dtype)) if got.dtype == np.float32 else want)
        # Vulkan leaves results on subnormal operands to such a device (e.g. NVIDIA's
        # a * rcp(b) division): elements fed a subnormal are not judged there
        sub = np.zeros(got.shape, bool)
        for a in case.args:
            a = np.asarray(a)
            if a.dtype == np.float32 and a.shape and np.broadcast_shapes(a.shape, got.shape) == got.shape:
                sub |= np.broadcast_to((a != 0) & (np.abs(a) < np.finfo(np.float32).tiny), got.shape)
        ok |= sub
    assert ok.all(), [(i, got.ravel()[i], want.ravel()[i]) for i in np.flatnonzero(~ok.ravel())[:10]]


def _matches(case, got, want) -> np.ndarray:
    """Elementwise agreement as assert_allclose/assert_array_equal would judge it."""
    if case.exact or got.dtype.kind in "bi":
        w = want.astype(got.dtype)
        return (got == w) | (np.isnan(got) & np.isnan(w)) if got.dtype.kind == "f" else (got == w)
    g, w = got.astype(np.float64), np.asarray(want, np.float64)
    with np.errstate(all="ignore"):
        close = np.abs(g - w) <= case.atol + case.rtol * np.abs(w)
    return np.where(np.isnan(w), np.isnan(g), np.where(np.isinf(w), g == w, close))
