"""Resource behaviour: memory stays flat over long runs, caches stay bounded, running out
of device memory is a clear, recoverable error, and two threads can share the device."""
from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml import optim
from vkml.vulkan import memory, runtime
from vkml.vulkan import compile as _compile
from vkml.vulkan.vk import vk


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _mlp_step():
    rng = np.random.default_rng(0)
    params = {"w1": vnp.asarray(rng.standard_normal((8, 16)) * 0.3, "float32"),
              "b1": vnp.zeros(16), "w2": vnp.asarray(rng.standard_normal((16, 1)) * 0.3, "float32"),
              "b2": vnp.zeros(1)}
    x = vnp.asarray(rng.standard_normal((32, 8)), "float32")
    y = vnp.asarray(rng.standard_normal((32, 1)), "float32")
    opt = optim.adam(1e-2)

    def loss(p, x, y):
        h = vnp.tanh(x @ p["w1"] + p["b1"])
        return vnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

    @vkml.jit
    def step(p, s, x, y):
        l, g = vkml.value_and_grad(loss)(p, x, y)
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s, l
    return step, params, opt.init(params), x, y


def test_training_memory_is_flat():
    step, p, s, x, y = _mlp_step()
    first = None
    for i in range(2100):
        p, s, l = step(p, s, x, y)
        if i == 99:               # warmed up: compiled, recorded, allocator blocks made
            gc.collect()
            first = _rss(), runtime.memory_stats()
            l0 = float(l)
    gc.collect()
    rss, stats = _rss(), runtime.memory_stats()
    rss0, stats0 = first
    assert float(l) < l0                          # it trains
    assert rss <= rss0 * 1.05, f"RSS {rss0 >> 20} -> {rss >> 20} MiB over 2000 steps"
    for k in ("live_bytes", "block_bytes", "blocks"):
        assert stats[k] <= stats0[k] * 1.05, f"{k}: {stats0[k]} -> {stats[k]} over 2000 steps"
    assert step.trace_count == 1


def test_eager_calls_on_new_shapes_keep_caches_bounded():
    from vkml import array as _array
    rt = runtime.get()
    gc.collect()
    kernels0, spirv0 = len(rt.kernels), len(_compile._memo)
    live0 = runtime.memory_stats()["live_bytes"]
    for n in range(1, 2001):
        y = vnp.exp(vnp.ones(n))
        if n in (1, 7, 2000):
            assert float(y[n - 1]) == pytest.approx(np.e, rel=1e-6)
        if n % 4 == 0:      # reductions and broadcasting on new shapes, too
            s = vnp.sum(vnp.ones((n // 4, 3)) + vnp.arange(3.0), axis=0)
            if n in (4, 2000):
                np.testing.assert_allclose(np.asarray(s), (n // 4) * np.arange(1.0, 4.0))
    # each shape is a new one-operator program; the kernels are the same ones
    # a few size classes of reduction kernels, not one per shape (measured: 20)
    assert len(rt.kernels) - kernels0 <= 40, "a new kernel per shape"
    assert len(_compile._memo) - spirv0 <= 40
    assert len(_array._eager_cache) <= _array.EAGER_CACHE
    gc.collect()
    stats = runtime.memory_stats()
    # 256 cached programs, each holding a few small slots and recordings: well under 64 MiB
    assert stats["live_bytes"] - live0 < 64 << 20, stats


def test_jit_keeps_a_bounded_number_of_signatures(monkeypatch):
    import importlib
    monkeypatch.setattr(importlib.import_module("vkml.jit"), "SIGNATURES_KEPT", 8)
    f = vkml.jit(lambda x: vnp.exp(x) * 2.0 + 1.0)
    gc.collect()
    live0 = runtime.memory_stats()["live_bytes"]
    for n in range(1, 41):
        np.testing.assert_allclose(np.asarray(f(vnp.ones(n))), np.full(n, 2 * np.e + 1), rtol=1e-6)
    assert len(f.cache) == 8 and len(f._plain) <= 8
    assert f.trace_count == 40
    f(vnp.ones(40))                 # still cached: no new trace
    assert f.trace_count == 40
    f(vnp.ones(1))                  # dropped long ago: traced again, same answer
    assert f.trace_count == 41
    gc.collect()
    assert runtime.memory_stats()["live_bytes"] - live0 < 8 * (64 << 10)


# --------------------------------------------------------------------------- out of memory

def test_out_of_memory_is_a_clear_recoverable_error():
    gc.collect()
    alloc = runtime.get().allocator
    alloc.trim()
    held = runtime.memory_stats()["block_bytes"]
    runtime.set_memory_limit(held + (200 << 20))
    xs = []
    try:
        with pytest.raises(vkml.OutOfMemoryError) as e:
            for _ in range(20):
                xs.append(vnp.zeros(8 << 20) + 1.0)        # 32 MiB each
        assert isinstance(e.value, MemoryError)
        msg = str(e.value)
        # names the operator (or, for eager operators that ran as one program, the operators)
        assert set(msg.split(":")[0].split(", ")) <= {"Full", "Add"}, msg
        assert "33,554,432 bytes (32 MiB) requested" in msg and "available" in msg and "limit" in msg, msg
        assert e.value.requested == 32 << 20 and e.value.available < 32 << 20
        # what fits: the limit's new blocks, and ranges free in the blocks already held
        assert 3 <= len(xs) <= (held + (200 << 20)) // (32 << 20)
        del xs
        gc.collect()
        # the freed memory is there again, under the same limit
        big = [vnp.zeros(8 << 20) + 2.0 for _ in range(3)]
        assert float(vnp.sum(big[-1])) == 2.0 * (8 << 20)
        del big
    finally:
        runtime.set_memory_limit(None)
    assert float(vnp.sum(vnp.ones(1000))) == 1000.0


@pytest.mark.parametrize("exc", ["VkErrorOutOfDeviceMemory", "VkErrorOutOfHostMemory"])
def test_vulkan_out_of_memory_maps_to_out_of_memory_error(monkeypatch, exc):
    rt = runtime.get()
    a = memory.Allocator(rt.dev)          # a private allocator: the runtime's keeps its blocks

    def refuse(*args, **kw):
        raise getattr(vk, exc)("refused")
    monkeypatch.setattr(vk, "vkAllocateMemory", refuse)
    with pytest.raises(vkml.OutOfMemoryError) as e:
        a.alloc(5 << 20, "test alloc")
    msg = str(e.value)
    assert "test alloc" in msg and "5,242,880 bytes (5 MiB) requested" in msg and exc in msg, msg
    assert e.value.requested == 5 << 20
    monkeypatch.undo()
    b = a.alloc(5 << 20, "test alloc")   # works once the driver gives memory again
    assert b.nbytes == 5 << 20
    b.release()
    a.trim()
    assert a.stats()["block_bytes"] == 0


def test_other_vulkan_errors_are_not_out_of_memory(monkeypatch):
    a = memory.Allocator(runtime.get().dev)

    def broken(*args, **kw):
        raise vk.VkErrorUnknown("broken")
    monkeypatch.setattr(vk, "vkAllocateMemory", broken)
    with pytest.raises(RuntimeError, match="VkErrorUnknown"):
        a.alloc(1000)


def test_memory_limit_from_the_environment():
    assert memory.parse_limit("512M") == 512 << 20
    assert memory.parse_limit("2GiB") == 2 << 30
    assert memory.parse_limit(None) is None
    with pytest.raises(ValueError, match="VKML_DEVICE_MEMORY_LIMIT"):
        memory.parse_limit("lots")
    with pytest.raises(ValueError, match="set_memory_limit"):
        runtime.set_memory_limit(-1)


# --------------------------------------------------------------------------- threads

def _in_threads(fns, timeout=120.0):
    errors = []

    def wrap(f):
        def go():
            try:
                f()
            except BaseException as e:      # reported by the main thread
                errors.append(e)
        return go
    ts = [threading.Thread(target=wrap(f), daemon=True) for f in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    assert not any(t.is_alive() for t in ts), "deadlock: a thread did not finish"
    if errors:
        raise errors[0]


def test_two_threads_share_the_device(monkeypatch):
    from vkml import array as _array
    # a small eager cache: programs are dropped (their command buffers freed) while the
    # other thread records and submits
    monkeypatch.setattr(_array, "EAGER_CACHE", 8)
    f = vkml.jit(lambda a, b: vnp.tanh(a @ b).sum(axis=0) * 2.0)
    g = vkml.jit(lambda a: (vnp.exp(-a * a), vnp.cumsum(a, axis=0)))
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 4)).astype(np.float32)
    want_f = np.tanh(a.astype(np.float64) @ b).sum(axis=0) * 2.0

    def jitted():
        A, B = vnp.asarray(a), vnp.asarray(b)
        for i in range(200):
            np.testing.assert_allclose(np.asarray(f(A, B)), want_f, rtol=1e-4, atol=1e-5)
            e, c = g(A + float(i))
            np.testing.assert_allclose(np.asarray(c)[-1], (a + i).sum(axis=0), rtol=1e-4, atol=1e-3)

    def eager():
        for i in range(200):
            n = 1 + i % 17           # new shapes: tracing, lowering and caching race too
            x = vnp.arange(n, dtype="float32")
            y = vnp.sqrt(x * x + 1.0).sum()
            assert float(y) == pytest.approx(np.sqrt(np.arange(n) ** 2 + 1.0).sum(), rel=1e-5)
            z = vkml.grad(lambda v: vnp.sum(vnp.sin(v) * v))(x)
            np.testing.assert_allclose(np.asarray(z), np.sin(np.arange(n)) + np.arange(n) * np.cos(np.arange(n)),
                                       rtol=1e-4, atol=1e-4)

    _in_threads([jitted, eager, eager])
    runtime.get().wait()      # frees what was left for the end of running submissions
    assert not runtime.get()._graveyard
