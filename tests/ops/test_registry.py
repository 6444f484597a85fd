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
    if case.exact or got.dtype.kind in "bi":
        np.testing.assert_array_equal(got, want.astype(got.dtype))
    else:
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=case.rtol, atol=case.atol)
