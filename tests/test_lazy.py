"""Lazy eager operators (`vkml/lazy.py`): recorded at once, run together when read."""
from __future__ import annotations

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml import lazy
from vkml.trace.shapes import ShapeError

X = np.linspace(-2.0, 2.0, 24).reshape(4, 6).astype(np.float32)


@pytest.fixture(autouse=True)
def _lazy_on(monkeypatch):
    monkeypatch.setattr(lazy, "ENABLED", True)
    yield
    lazy.flush()


def _chain(x, w):
    h = vnp.tanh(x * 1.5 + 0.25) * vnp.exp(-x)
    return (h @ w).sum(axis=0) / 3.0 - vnp.sqrt(x * x + 1.0).mean()


def _eager(f, *a, monkeypatch):
    monkeypatch.setattr(lazy, "ENABLED", False)
    try:
        return np.asarray(f(*a))
    finally:
        monkeypatch.setattr(lazy, "ENABLED", True)


def test_results_wait_until_read():
    x = vnp.asarray(X)
    y = vnp.exp(x) * 2.0
    assert lazy.is_pending(y)
    np.testing.assert_allclose(np.asarray(y), np.exp(X.astype(np.float64)) * 2.0, rtol=2e-6)
    assert not lazy.is_pending(y)


def test_a_repeated_step_is_one_program_bit_for_bit_as_eager(monkeypatch):
    x, w = vnp.asarray(X), vnp.asarray(X.T.copy())
    want = _eager(_chain, x, w, monkeypatch=monkeypatch)
    before = dict(lazy.stats)
    for _ in range(4):
        got = np.asarray(_chain(x, w))
        np.testing.assert_array_equal(got, want)
    # seen once (run operator by operator), then compiled once and replayed
    assert lazy.stats["compiled"] - before["compiled"] == 1
    assert lazy.stats["replayed"] - before["replayed"] >= 2


def test_a_first_seen_structure_compiles_no_program():
    before = lazy.stats["compiled"]
    x = vnp.asarray(np.arange(7, dtype=np.float32))
    assert float((x * 3.0 + 2.0).sum()) == 3.0 * 21 + 14
    assert lazy.stats["compiled"] == before


def test_errors_raise_at_the_operator_not_at_the_read():
    x = vnp.asarray(X)
    y = x * 2.0
    with pytest.raises(ShapeError):
        y + vnp.ones(5)                  # (4, 6) + (5,): raised here, while y still waits
    assert lazy.is_pending(y)
    np.testing.assert_allclose(np.asarray(y), 2.0 * X)


def test_integer_operators_run_at_once():
    # int32 kernels may raise from the device (overflow): they keep their errors at their line
    i = vnp.asarray(np.arange(6, dtype=np.int32))
    assert not lazy.is_pending(i * 2)
    assert not lazy.is_pending(i.sum())


def test_an_in_place_update_does_not_change_a_waiting_result():
    t = vkml.Tensor(X)
    y = t * 2.0                          # reads t's value now
    t.add_(1.0)                          # replaces t's buffer before y has run
    np.testing.assert_allclose(np.asarray(y), 2.0 * X)
    np.testing.assert_allclose(np.asarray(t), X + 1.0)


def test_tensors_and_backward_through_waiting_values():
    w = vkml.Tensor(X, requires_grad=True)
    loss = (vnp.tanh(w) * w).sum()       # Tensor operators wait too
    loss.backward()
    w64 = X.astype(np.float64)
    want = np.tanh(w64) + w64 * (1.0 - np.tanh(w64) ** 2)
    np.testing.assert_allclose(np.asarray(w.grad), want, rtol=2e-5, atol=1e-6)


def test_pending_work_is_bounded(monkeypatch):
    monkeypatch.setattr(lazy, "MAX_PENDING", 16)
    x = vnp.asarray(np.ones(4, np.float32))
    ys = [x + float(k) for k in range(40)]
    assert sum(lazy.is_pending(y) for y in ys) < 16
    assert [float(y[0]) for y in ys] == [1.0 + k for k in range(40)]


def test_dropped_results_never_run():
    lazy.flush()
    before = lazy.stats["flushes"]
    x = vnp.asarray(np.ones(4, np.float32))
    x * 5.0                              # nothing reads it: a flush finds nothing to run
    lazy.flush()
    assert lazy.stats["flushes"] == before


def test_jit_calls_see_waiting_arguments():
    f = vkml.jit(lambda a: a * a)
    x = vnp.asarray(X) + 1.0
    assert lazy.is_pending(x)
    np.testing.assert_allclose(np.asarray(f(x)), (X + 1.0) ** 2, rtol=1e-6)
