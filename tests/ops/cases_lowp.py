"""Every registry operator in float16 and bfloat16.

Derived from the float32 cases of the other tables: per operator the smallest float32
case (every family's layouts are tested there), its float operands rounded to the 16-bit
dtype. The oracle is the case's own NumPy reference in float64 on those same 16-bit
values, and a result must lie within one ulp of the dtype of it (elementwise operators
compute in float32 and round once; reductions, softmax, MatMul, scans and the window
family accumulate in float32 and round once, so float32's own error is far below that).
Creation operators (Full, Arange) get cases of their own; Rand's 16-bit draws are
checked in tests/test_lowp.py. One small case per operator and dtype keeps the kernels
few (the 16-bit casts around the float32 families are shared by every case of a rank).
"""
from __future__ import annotations

import importlib
import pkgutil

import ml_dtypes
import numpy as np

from vkml.array import bind
from vkml.trace.ops import SPECS, OpKind

from .cases import Case

F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
EPS = {F16: 2.0 ** -10, BF16: 2.0 ** -7}     # one ulp at 1
CASES: list[Case] = []


def _float32_cases() -> dict:
    import tests.ops as pkg
    best: dict = {}
    for m in pkgutil.iter_modules(pkg.__path__):
        if not m.name.startswith("cases_") or m.name == "cases_lowp":
            continue
        for c in importlib.import_module(f"tests.ops.{m.name}").CASES:
            if c.covers != np.float32 or "wide" in c.name or not c.args:
                continue
            if any(np.asarray(a).dtype == np.float64 for a in c.args):
                continue
            size = sum(np.asarray(a).size for a in c.args)
            if size == 0:
                continue
            best.setdefault(c.op, []).append((size, len(best.get(c.op, ())), c))
    return {k: [c for _, _, c in sorted(v, key=lambda t: t[:2])] for k, v in best.items()}


def _low(a, d):
    a = np.asarray(a)
    with np.errstate(over="ignore"):
        return a.astype(d) if a.dtype == np.float32 else a


def _fits(c, d) -> bool:
    # values past the dtype's range would turn into infinities (a float-to-int cast of inf
    # is the driver's choice): such a case is not taken for that dtype
    return not any(np.asarray(a).dtype == np.float32 and np.any(np.isfinite(a) & ~np.isfinite(_low(a, d)))
                   for a in c.args)


for _op, _cs in _float32_cases().items():
    # Rand: tests/test_lowp.py; Scan/Part/While: the body is traced in its own dtypes; operators
    # whose kernels take only float32/float64 (linear algebra) refuse 16-bit operands
    if _op in (OpKind.Rand, OpKind.Scan, OpKind.Part, OpKind.While):
        continue
    for _d in (F16, BF16):
        if _d not in SPECS[_op].dtypes:
            continue
        _c = next((c for c in _cs if _fits(c, _d)), None)     # the smallest case that fits
        if _c is None:
            continue
        CASES.append(Case(_c.op, f"{_c.name}-as-{_d.name}", _c.fn, _c.ref, [_low(a, _d) for a in _c.args],
                          rtol=EPS[_d], atol=EPS[_d] * 1e-3, exact=_c.exact, dtype=_d))

for _d in (F16, BF16):
    for _v in (0.1, -0.0, np.inf, 65504.0 if _d == F16 else 3e38):
        CASES.append(Case(OpKind.Full, f"{_v!r}-{_d.name}",
                          lambda _d=_d, _v=_v: bind(OpKind.Full, [], shape=(2, 3), dtype=_d, value=_v),
                          lambda _d=_d, _v=_v: np.full((2, 3), _v, dtype=_d), [], exact=True, dtype=_d))
    CASES.append(Case(OpKind.Arange, f"n7-{_d.name}",
                      lambda _d=_d: bind(OpKind.Arange, [], n=7, start=0.5, step=0.25, dtype=_d),
                      lambda _d=_d: (0.5 + 0.25 * np.arange(7)).astype(_d), [], rtol=EPS[_d], dtype=_d))
