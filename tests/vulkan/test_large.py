"""Tensors larger than one storage-buffer binding (vkml issue 16).

maxStorageBufferRange (128 MiB on lavapipe) limits one descriptor, not one tensor: a
dispatch whose view exceeds it runs its program's `Program.addressed` variant, reaching
that view through a buffer device address. One tensor is then limited by one allocation
(`Device.max_tensor_bytes`, 2 GiB on lavapipe) and by the 2^31 - 1 elements 32-bit kernel
indices reach. The 1 GiB tests keep at most about 5 GiB of host memory (lavapipe's
device memory is host memory).
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import vkml
import vkml.nn.functional as F
import vkml.numpy as vnp
from vkml.vulkan import device, memory, program, runtime

N = 1 << 28               # float32 elements of a 1 GiB tensor
RANGE = 128 << 20         # lavapipe's maxStorageBufferRange; a GPU's may be 4 GiB


@pytest.fixture(autouse=True)
def binding_range(monkeypatch):
    """Every device treated as having at most lavapipe's binding range, so that the same
    views are reached by address everywhere."""
    dev = runtime.get().dev
    monkeypatch.setattr(dev, "max_storage_buffer_range", min(dev.max_storage_buffer_range, RANGE))


@pytest.fixture(autouse=True)
def give_back():
    """Each test's device memory back to the driver after it (lavapipe's device memory is
    host memory, and the suite's other worker needs it)."""
    yield
    gc.collect()
    rt = runtime.get()
    rt.wait()
    rt.allocator.trim()


@pytest.fixture
def addressed(monkeypatch):
    """The names of the programs whose dispatches ran by address in the test."""
    seen: list = []
    orig = program.Program.addressed

    def spy(self, bindings):
        seen.append(self.name)
        return orig(self, bindings)
    monkeypatch.setattr(program.Program, "addressed", spy)
    return seen


def _equal_by_chunks(got: np.ndarray, xn: np.ndarray, want, chunk: int = 1 << 24) -> None:
    """got == want(xn) bit for bit, compared a chunk at a time: assert_array_equal of two
    1 GiB arrays makes several temporaries of their size (two test workers of the suite
    ran the machine out of memory)."""
    for s in range(0, len(xn), chunk):
        np.testing.assert_array_equal(got[s:s + chunk], want(xn[s:s + chunk]))


@pytest.fixture(scope="module")
def big():
    """x: 1 GiB of float32 in [-1, 1) on the device, and its host copy."""
    dev = runtime.get().dev
    assert dev.buffer_address and dev.max_tensor_bytes >= 4 * N, dev.summary()
    xn = np.random.default_rng(16).random(N, dtype=np.float32)
    xn *= 2
    xn -= 1
    x = vnp.asarray(xn)
    yield x, xn
    del x, xn
    gc.collect()


def test_eager_elementwise_and_sum_of_1gib(big, addressed):
    x, xn = big
    y = x * 3.0
    assert y.shape == (N,) and addressed == ["Mul"]     # the 1 GiB result, by address
    _equal_by_chunks(np.asarray(y), xn, lambda v: v * np.float32(3))
    del y
    assert float(vnp.sum(x)) == pytest.approx(xn.sum(dtype=np.float64), rel=1e-6, abs=1.0)
    # a strided view: the Slice kernel reads x and writes 512 MiB by address
    addressed.clear()
    assert float(vnp.sum(x[1::2])) == pytest.approx(xn[1::2].sum(dtype=np.float64), rel=1e-6, abs=1.0)
    assert "Slice" in addressed


def test_jit_of_1gib(big, addressed):
    x, xn = big
    f = vkml.jit(lambda x: (vnp.sum(x * x), vnp.abs(x) - 0.5))
    s, y = f(x)
    _equal_by_chunks(np.asarray(y), xn, lambda v: np.abs(v) - np.float32(0.5))
    del y
    ss = sum(np.dot(c.astype(np.float64), c) for c in np.split(xn, 16))    # no 2 GiB float64 copy
    assert float(s) == pytest.approx(ss, rel=1e-6)
    assert addressed
    s2, y2 = f(x)           # replayed: the same recording, the same addresses
    assert float(s2) == float(s) and f.trace_count == 1
    del y2


def test_matmul_with_an_operand_or_result_past_the_binding_range(addressed):
    rng = np.random.default_rng(1)
    # the result, 17408 x 2048 float32 (136 MiB), is written by address
    a = rng.random((17408, 32), dtype=np.float32) - 0.5
    b = rng.random((32, 2048), dtype=np.float32) - 0.5
    c = np.asarray(vnp.asarray(a) @ vnp.asarray(b))
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert any(n.startswith("MatMul") for n in addressed), addressed
    del c
    # the operand A, 8704 x 4096 float32 (136 MiB): lavapipe reads it as texels (they
    # reach 2^27 of them); read from a storage buffer it is read by address
    a = rng.random((8704, 4096), dtype=np.float32) - 0.5
    b = rng.random((4096, 64), dtype=np.float32) - 0.5
    with device.using(texels=False, matmul_texels=False):
        addressed.clear()
        got = vkml.jit(lambda p, q: p @ q)(vnp.asarray(a), vnp.asarray(b))
        np.testing.assert_allclose(np.asarray(got), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
        assert any(n.startswith("MatMul") for n in addressed), addressed


def _families(x, w, ids, img, k, key):
    """One output or more of every kernel family, each over more than 4 KiB."""
    h = vnp.tanh(x @ w) + vnp.flip(x, 0)[:, :64] * 0.5                    # matmul, elementwise, movement
    out = [h, vnp.sum(h, axis=0), vnp.max(h, axis=1), vnp.argmax(h, axis=0),  # reduce
           vnp.var(h, axis=1), F.softmax(h, axis=-1), F.log_softmax(h, axis=0),  # softmax
           vnp.cumsum(h, axis=1), vnp.take(h, ids, axis=0),                  # scan, index
           vnp.concatenate([h, vnp.transpose(h)[:, :64]], axis=0), vnp.pad(h, 3),
           x.astype(vnp.int32) @ w.astype(vnp.int32)]                        # int32 matmul
    y = F.conv2d(img, k, padding=1)                                          # window
    out += [y, F.max_pool2d(y, 2), F.avg_pool2d(y, 2),
            vkml.random.uniform(key, (2048,)), vnp.arange(2048.0), vnp.full((2048,), 3.0)]
    # backward passes: scatter-add (take), col2im and pooling gradients
    loss = lambda x, img: vnp.sum(vnp.take(x, ids, axis=0) ** 2) + vnp.sum(F.max_pool2d(F.conv2d(img, k), 2))
    out += list(vkml.grad(loss, argnums=(0, 1))(x, img))
    return out


def test_every_kernel_family_reaches_its_operands_by_address(monkeypatch, addressed):
    """Every view past 4 KiB reached by address gives the bits the descriptors do."""
    rng = np.random.default_rng(2)
    args = (vnp.asarray(rng.standard_normal((256, 96)).astype(np.float32)),
            vnp.asarray(rng.standard_normal((96, 64)).astype(np.float32)),
            vnp.asarray(rng.integers(0, 256, 300).astype(np.int32)),
            vnp.asarray(rng.standard_normal((2, 3, 24, 24)).astype(np.float32)),
            vnp.asarray(rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
            vkml.random.key(3))
    # storage buffers throughout (lavapipe reads float32 operands as texels otherwise)
    with device.using(texels=False, matmul_texels=False):
        want = [np.asarray(o) for o in vkml.jit(_families)(*args)]
        assert not addressed
        monkeypatch.setattr(runtime.get().dev, "max_storage_buffer_range", 4096)
        got = [np.asarray(o) for o in vkml.jit(_families)(*args)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    names = set(addressed)
    for family in ("MatMul", "Sum", "Softmax", "Cumsum", "Im2Col", "Col2Im", "MaxPool2d"):
        assert any(family in n for n in names), (family, sorted(names))


def test_texel_operands_past_the_texel_limit_are_read_by_address(monkeypatch, addressed):
    """`kernels.texel_format` gives a storage buffer past maxTexelBufferElements; that
    buffer past the binding range is read by address, with the bits the texels give."""
    rng = np.random.default_rng(4)
    x = vnp.asarray(rng.standard_normal((64, 128)).astype(np.float32))
    w = vnp.asarray(rng.standard_normal((128, 32)).astype(np.float32))
    f = lambda x, w: (vnp.exp(x) * 2.0, vnp.sum(x, axis=0), x @ w)
    want = [np.asarray(o) for o in vkml.jit(f)(x, w)]
    dev = runtime.get().dev
    monkeypatch.setattr(dev, "max_texels", 256)
    monkeypatch.setattr(dev, "max_storage_buffer_range", 4096)
    got = [np.asarray(o) for o in vkml.jit(f)(x, w)]
    for g, v in zip(got, want):
        np.testing.assert_array_equal(g, v)
    assert any(n.startswith("MatMul") for n in addressed) and len(addressed) >= 3, addressed


# --------------------------------------------------------------------------- the true limits


def test_a_tensor_past_the_memory_limit_is_out_of_memory_with_its_sizes():
    gc.collect()
    alloc = runtime.get().allocator
    alloc.trim()
    held = runtime.memory_stats()["block_bytes"]
    # more than any free range of the blocks held (a freed 1 GiB block may hold small
    # ranges since), so it needs a block of its own, past the limit
    free = max([sz for b in alloc.blocks for _, sz in b.free] + [0])
    n = max(N // 2, free // 4 + (1 << 20))        # at least 512 MiB: past one binding
    runtime.set_memory_limit(held + (256 << 20))
    try:
        with pytest.raises(vkml.OutOfMemoryError) as e:
            vnp.zeros(n)
        msg = str(e.value)
        assert msg.startswith(f"Full: out of device memory: {n * 4:,} bytes ({n * 4 / 2**20:g} MiB) "
                              f"requested"), msg
        assert f"memory limit of {held + (256 << 20):,} bytes" in msg and "set_memory_limit" in msg, msg
        assert e.value.requested == n * 4 and e.value.available <= 256 << 20
    finally:
        runtime.set_memory_limit(None)
    assert float(vnp.sum(vnp.ones(1000))) == 1000.0


def test_a_tensor_past_one_allocation_names_the_device_limit():
    dev = runtime.get().dev
    n = dev.max_tensor_bytes // 4 + 1
    with pytest.raises(ValueError, match=rf"Full: {n * 4:,} bytes \(.* MiB\) exceeds this device's "
                                         rf"(maxMemoryAllocationSize|maxBufferSize) of {dev.max_tensor_bytes:,} bytes"):
        vnp.zeros(n)


def test_2_31_elements_is_the_next_wall(monkeypatch):
    """Past one allocation's bytes, kernels' 32-bit indices stop a tensor at 2^31 - 1
    elements (8 GiB of float32): the error names both, before anything is allocated."""
    dev = runtime.get().dev
    monkeypatch.setattr(dev, "max_allocation", 1 << 40)     # a device with room for it
    monkeypatch.setattr(dev, "max_buffer_size", 1 << 40)
    live = runtime.memory_stats()["live_bytes"]
    with pytest.raises(ValueError, match=r"Full: 2,147,483,648 elements \(8,589,934,592 bytes \(8192 MiB\)\) "
                                         r"exceed the 2,147,483,647 \(2\^31 - 1\) elements"):
        vnp.zeros(1 << 31)
    assert runtime.memory_stats()["live_bytes"] == live
    assert memory.MAX_ELEMENTS == 2**31 - 1


def test_an_arena_larger_than_one_allocation_is_several(monkeypatch):
    """Intermediates adding up to more than one allocation holds: the arena is allocated
    in chunks, no value crossing one (here allocations are made to hold 1 MiB)."""
    dev = runtime.get().dev
    monkeypatch.setattr(dev, "max_allocation", 1 << 20)
    x = np.linspace(-1, 1, 3 * 2**16, dtype=np.float32).reshape(3, 2**16)   # 768 KiB

    def f(x):
        a, b = vnp.exp(x), vnp.tanh(x)      # each read by several reductions: materialised
        return a.sum(0).sum() + b.sum(1).sum() + a.max() + b.min() + (a * b).sum()
    lo = vkml.jit(f).lower(vnp.asarray(x))
    assert lo.arena_bytes > 1 << 20, lo
    got = float(vkml.jit(f)(vnp.asarray(x)))
    xd = x.astype(np.float64)
    a, b = np.exp(xd), np.tanh(xd)
    want = a.sum() + b.sum() + a.max() + b.min() + (a * b).sum()
    assert got == pytest.approx(want, rel=1e-5)
    from vkml.vulkan import executor
    p = executor.plan(lo.graph, chunk=1 << 20)
    sizes = {n.id: n.size * n.dtype.itemsize for n in lo.graph.nodes}
    assert all(o // (1 << 20) == (o + sizes[i] - 1) // (1 << 20) for i, o in p.offsets.items())
