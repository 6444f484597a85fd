"""Asynchronous calls: a jitted call (and an eager operator) returns once its work is queued;
values are right whatever the host does meanwhile (reads, frees, uploads, more calls), and
nothing a running submission uses is freed or overwritten under it."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.vulkan import runtime

N = 1 << 20      # long enough on lavapipe that a call is still running when it returns


def _slow(v):
    for _ in range(6):
        v = vnp.sin(v) * 1.01 + vnp.cos(v) * 0.5
    return v


def _want(x):
    v = x.astype(np.float64)
    for _ in range(6):
        v = np.sin(v) * 1.01 + np.cos(v) * 0.5
    return v


@pytest.fixture
def asynchronous():
    rt = runtime.get()
    old, rt.asynchronous = rt.asynchronous, True
    yield rt
    rt.asynchronous = old


def test_a_call_returns_before_its_work_finishes(asynchronous):
    rt = asynchronous
    f = vkml.jit(_slow)
    x = vnp.asarray(np.linspace(-3, 3, N, dtype=np.float32))
    f(x).block_until_ready()
    seen = 0
    for _ in range(5):
        y = f(x)
        seen += rt.submitted > rt.completed      # queued, not yet finished
        np.testing.assert_allclose(np.asarray(y), _want(np.asarray(x)), rtol=2e-5, atol=2e-5)
        assert rt.completed == rt.submitted      # reading waited
    assert seen, "every call had finished by the time it returned: nothing ran asynchronously"


def test_kept_results_of_back_to_back_calls(asynchronous):
    f = vkml.jit(lambda v, s: _slow(v) * s)
    xs = np.linspace(-3, 3, N, dtype=np.float32)
    x = vnp.asarray(xs)
    rs = [f(x, float(i)) for i in range(12)]           # a fresh scalar each call
    base = _want(xs)
    for i, r in enumerate(rs):
        np.testing.assert_allclose(np.asarray(r), base * i, rtol=2e-5, atol=2e-5 * i + 1e-6)


def test_a_chain_of_calls_each_feeding_the_next(asynchronous):
    f = vkml.jit(lambda v: (_slow(v), vnp.sum(v)))
    xs = np.linspace(-1, 1, N, dtype=np.float32)
    v, want = vnp.asarray(xs), xs.astype(np.float64)
    sums = []
    for _ in range(5):
        v, s = f(v)
        sums.append(s)
        want_s, want = want.sum(), _want(want)
    np.testing.assert_allclose(np.asarray(v), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(float(sums[-1]), want_s, rtol=1e-4)


def test_freed_inputs_are_not_reused_by_uploads_while_read(asynchronous):
    # the host writes a new upload by memcpy: it must not land in a range a queued call
    # still reads (the freed argument's)
    rt = asynchronous
    f = vkml.jit(_slow)
    rng = np.random.default_rng(0)
    for _ in range(4):
        a = rng.standard_normal(N).astype(np.float32)
        x = vnp.asarray(a)
        y = f(x)
        del x
        gc.collect()
        zs = [vnp.asarray(np.full(N, 7.0, np.float32)) for _ in range(3)]   # fill freed ranges
        np.testing.assert_allclose(np.asarray(y), _want(a), rtol=2e-5, atol=2e-5)
        assert all(float(z[-1]) == 7.0 for z in zs)
    rt.wait()
    assert not rt.allocator._deferred


def test_eager_operators_and_grad_interleave_with_jit(asynchronous):
    f = vkml.jit(_slow)
    xs = np.linspace(-2, 2, 4096, dtype=np.float32)
    x = vnp.asarray(xs)
    y = f(x)
    g = vkml.grad(lambda v: vnp.sum(vnp.sin(v) ** 2))(y)      # eager, on a queued result
    z = (y * 2.0 + g).sum()
    yw = _want(xs)
    np.testing.assert_allclose(float(z), (yw * 2 + 2 * np.sin(yw) * np.cos(yw)).sum(), rtol=1e-4)


def test_a_device_check_still_raises_at_its_own_call(asynchronous):
    from vkml import debug
    x = vnp.arange(4.0)
    with debug.checks():
        f = vkml.jit(lambda v, i: v[i])
        with pytest.raises(IndexError):
            f(x, vnp.asarray(7))


def test_synchronous_mode_waits_for_every_call():
    rt = runtime.get()
    old, rt.asynchronous = rt.asynchronous, False
    try:
        f = vkml.jit(_slow)
        x = vnp.asarray(np.linspace(-3, 3, N, dtype=np.float32))
        for _ in range(3):
            y = f(x)
            assert rt.completed == rt.submitted
        np.testing.assert_allclose(np.asarray(y), _want(np.asarray(x)), rtol=2e-5, atol=2e-5)
    finally:
        rt.asynchronous = old


def test_memory_stats_count_what_running_calls_released(asynchronous):
    f = vkml.jit(_slow)
    x = vnp.asarray(np.zeros(N, np.float32))
    f(x).block_until_ready()
    before = runtime.memory_stats()["live_bytes"]
    for _ in range(6):
        f(x)          # each result dropped at once, while its call runs
    assert runtime.memory_stats()["live_bytes"] == before    # stats wait and count them free
