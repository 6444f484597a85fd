"""The Vulkan runtime under the operators: allocator, executor (schedule, barriers,
liveness plan), SPIR-V cache, device listing. Graphs here are built from Nodes directly
and run with Runtime.run, so nothing between the test and the executor rewrites them."""
from __future__ import annotations

import gc

import numpy as np

from vkml.vulkan import fusion, merge
from vkml.vulkan.lower import movement
import pytest

import vkml
import vkml.numpy as vnp
from vkml.array import Array
from vkml.trace.graph import Graph, Node
from vkml.trace.ops import OpKind
from vkml.vulkan import compile as vkcompile
from vkml.vulkan import runtime
from vkml.vulkan.executor import plan
from vkml.vulkan.memory import ALIGN, Allocator

MiB = 1 << 20


@pytest.fixture
def alloc():
    """A private allocator with small blocks, so block boundaries are easy to reach (and
    no separate pool for small ranges)."""
    a = Allocator(runtime.get().dev, block_size=MiB, small=0)
    yield a
    gc.collect()
    a.trim()


# --------------------------------------------------------------------------- allocator


def test_freed_range_is_reused(alloc):
    a, b, c = alloc.alloc(1000), alloc.alloc(3000), alloc.alloc(500)
    assert len(alloc.blocks) == 1
    assert (a.offset, b.offset, c.offset) == (0, 1024, 4096)     # ALIGN-rounded, first fit
    assert alloc.live_bytes == 1024 + 3072 + 512
    b_off = b.offset
    b.release()
    assert alloc.live_bytes == 1024 + 512
    d = alloc.alloc(2000)                                        # fits in b's hole
    assert d.block is a.block and d.offset == b_off
    e = alloc.alloc(1024)                                        # the hole's remainder
    assert e.offset == b_off + 2048
    assert alloc.peak_bytes == 1024 + 3072 + 512


def test_garbage_collected_buffer_returns_its_range(alloc):
    a = alloc.alloc(4096)
    off = a.offset
    del a
    gc.collect()
    assert alloc.live_bytes == 0
    assert alloc.alloc(4096).offset == off


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (0, 2, 1), (1, 0, 2)])
def test_free_neighbours_coalesce(alloc, order):
    bufs = [alloc.alloc(100_000) for _ in range(3)]
    block = bufs[0].block
    tail = alloc.alloc(10)                   # keeps the block's end in use
    for i in order:
        bufs[i].release()
    # one hole where the three were, whatever the release order
    assert block.free[0] == (0, 3 * bufs[0].capacity)
    big = alloc.alloc(3 * 100_000)           # fits only in the merged hole
    assert big.block is block and big.offset == 0 and len(alloc.blocks) == 1
    big.release()
    tail.release()
    assert block.free == [(0, block.size)]


def test_double_release_is_harmless(alloc):
    a = alloc.alloc(256)
    a.release()
    a.release()
    assert alloc.live_bytes == 0 and alloc.blocks[0].free == [(0, MiB)]


def test_new_block_when_full_and_trim(alloc):
    a = alloc.alloc(MiB - ALIGN)
    b = alloc.alloc(2 * ALIGN)                  # does not fit the first block's rest
    assert len(alloc.blocks) == 2 and b.block is not a.block
    big = alloc.alloc(3 * MiB)                  # larger than a block: a block of its own
    assert big.block.size >= 3 * MiB and len(alloc.blocks) == 3
    zero = alloc.alloc(0)                       # zero bytes still get a bindable slot
    assert zero.nbytes == 0 and zero.capacity >= 4
    for x in (b, big):
        x.release()
    alloc.trim()
    assert len(alloc.blocks) == 1               # only a's block (holding a and zero) is left


def test_allocation_above_tensor_limit_is_refused_before_allocating(alloc, monkeypatch):
    dev = alloc.dev
    assert dev.buffer_address, "lavapipe and current GPUs have buffer device addresses"
    limit = dev.max_tensor_bytes           # one allocation (maxMemoryAllocationSize)
    with pytest.raises(ValueError, match=r"MyOp: .* exceeds this device's (maxMemoryAllocationSize|maxBufferSize)"):
        alloc.alloc(limit + 1, "MyOp")
    # without buffer device addresses a tensor is one binding (NVIDIA's binding range,
    # 4 GiB - 1, passes its largest allocation: that stays the limit there)
    monkeypatch.setattr(dev, "buffer_address", False)
    assert dev.max_tensor_bytes == min(limit, dev.max_storage_buffer_range)
    if dev.max_storage_buffer_range < limit:
        with pytest.raises(ValueError, match=r"MyOp: .*maxStorageBufferRange.*without buffer device addresses"):
            alloc.alloc(dev.max_storage_buffer_range + 1, "MyOp")
    assert alloc.blocks == [] and alloc.live_bytes == 0


@pytest.mark.parametrize("x", [np.arange(5, dtype=np.float32) - 2.5, np.arange(3, dtype=np.float64) / 3,
                               np.array([-7, 0, 2**31 - 1], np.int32), np.array([True, False, True]),
                               np.zeros((0, 4), np.float32)])
def test_upload_download_round_trip(x):
    np.testing.assert_array_equal(np.asarray(vnp.asarray(x)), x)


# --------------------------------------------------------------------------- executor


def _input(shape, dtype, i):
    return Node(OpKind.Input, (), {"shape": shape, "dtype": np.dtype(dtype), "index": i})


def _run(graph: Graph, args: list[np.ndarray]) -> list[np.ndarray]:
    arrays = [vnp.asarray(a) for a in args]
    rt = runtime.get()
    bufs = rt.run(graph, [a._buf for a in arrays])
    return [np.asarray(Array._concrete(b, o.shape, o.dtype)) for b, o in zip(bufs, graph.outputs)]


def test_diamond_dependency():
    x = _input((300,), np.float32, 0)
    a = Node(OpKind.Add, (x, x), {})
    b = Node(OpKind.Mul, (x, x), {})
    c = Node(OpKind.Sub, (a, b), {})         # joins the two branches
    d = Node(OpKind.Mul, (c, a), {})         # and re-reads one of them
    xv = np.linspace(-2, 2, 300).astype(np.float32)
    av, bv = xv + xv, xv * xv
    cv = av - bv
    got_d, got_a, got_x = _run(Graph([x], [d, a, x]), [xv])
    np.testing.assert_allclose(got_d, cv * av, rtol=1e-5)   # a GPU may contract into an fma
    np.testing.assert_array_equal(got_a, av)      # an output that is also an intermediate
    np.testing.assert_array_equal(got_x, xv)      # an output that is an input


def test_many_independent_ops():
    """One kernel per node here (fusion would merge the ops under test) and one dispatch
    per kernel (`merge` would)."""
    with fusion.disabled(), merge.disabled():
        x = _input((4, 5), np.int32, 0)
        branches = [Node(OpKind.Add, (x, Node(OpKind.Full, (), {"shape": (), "dtype": np.dtype(np.int32),
                                                               "value": i})), {}) for i in range(24)]
        joined = Node(OpKind.Concat, tuple(branches), {"axis": 1})
        xv = np.arange(20, dtype=np.int32).reshape(4, 5)
        outs = _run(Graph([x], [joined] + branches[::5]), [xv])
        np.testing.assert_array_equal(outs[0], np.concatenate([xv + i for i in range(24)], axis=1))
        for got, i in zip(outs[1:], range(0, 24, 5)):
            np.testing.assert_array_equal(got, xv + i)
        # one Concat kernel reads up to CONCAT_PIECES inputs
        assert runtime.get().executor.last_dispatch_count >= 24 * 2 + 24 // movement.CONCAT_PIECES


def test_write_after_read_of_reused_arena_range():
    # a long chain reuses arena ranges: each op overwrites memory an earlier op read
    x = _input((1000,), np.float64, 0)
    n, vals = x, np.linspace(0, 1, 1000)
    want = vals.copy()
    for i in range(12):
        n = Node(OpKind.Add, (n, x), {}) if i % 2 else Node(OpKind.Neg, (n,), {})
        want = want + vals if i % 2 else -want
    (got,) = _run(Graph([x], [n]), [vals])
    np.testing.assert_allclose(got, want, rtol=1e-15)


def test_liveness_plan_reuses_memory_along_a_chain():
    """One kernel per node here (fusion would merge the ops under test)."""
    with fusion.disabled():
        x = _input((1024,), np.float32, 0)
        n, nodes = x, []
        for i in range(20):
            n = Node(OpKind.Mul if i % 2 else OpKind.Add, (n, x), {})
            nodes.append(n)
        g = Graph([x], [n])
        p = plan(g)
        each = 1024 * 4
        intermediates = len(nodes) - 1                     # the last node is the output
        assert len(p.offsets) == intermediates
        # a step only needs its input and its output alive at once
        assert p.arena_bytes <= 2 * each < intermediates * each
        assert p.output_bytes == each and p.input_bytes == each
        assert p.peak_bytes == p.arena_bytes + 2 * each
        xv = np.linspace(0.5, 1.0, 1024).astype(np.float32)
        want = xv.copy()
        for i in range(20):
            want = want * xv if i % 2 else want + xv
        (got,) = _run(g, [xv])
        np.testing.assert_allclose(got, want, rtol=1e-5)
        assert runtime.get().executor.last_plan.arena_bytes == p.arena_bytes


def test_values_alive_together_never_share_memory():
    # a DAG where values stay alive across many steps: check every pair the plan placed
    x = _input((256,), np.float32, 0)
    vals = [Node(OpKind.Neg, (x,), {})]
    for i in range(1, 12):
        vals.append(Node(OpKind.Add if i % 3 else OpKind.Mul, (vals[-1], vals[i // 2]), {}))
    g = Graph([x], [vals[-1]])
    p = plan(g)
    step = {n.id: i for i, n in enumerate(g.nodes)}
    last = {}
    for n in g.nodes:
        for i in n.inputs:
            last[i.id] = step[n.id]
    placed = [v for v in vals if v.id in p.offsets]
    for u in placed:
        for v in placed:
            if u is v:
                continue
            alive_together = step[u.id] <= last[v.id] and step[v.id] <= last[u.id]
            overlap = p.offsets[u.id] < p.offsets[v.id] + 1024 and p.offsets[v.id] < p.offsets[u.id] + 1024
            assert not (alive_together and overlap), (u, v)
    xv = np.arange(256, dtype=np.float32) / 256
    want = [-xv]
    for i in range(1, 12):
        want.append(want[-1] + want[i // 2] if i % 3 else want[-1] * want[i // 2])
    (got,) = _run(g, [xv])
    np.testing.assert_allclose(got, want[-1], rtol=1e-5, atol=1e-6)   # fma contraction on GPUs


def test_graph_with_size0_values():
    x = _input((0, 3), np.float32, 0)
    e = Node(OpKind.Exp, (x,), {})
    s = Node(OpKind.Concat, (e, Node(OpKind.Full, (), {"shape": (2, 3), "dtype": np.dtype(np.float32),
                                                       "value": 1.5})), {"axis": 0})
    (got,) = _run(Graph([x], [s]), [np.zeros((0, 3), np.float32)])
    np.testing.assert_array_equal(got, np.full((2, 3), 1.5, np.float32))


# --------------------------------------------------------------------------- kernels


def test_spirv_cache_hit_on_second_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("VKML_CACHE_DIR", str(tmp_path))
    src = ("#version 450\nlayout(local_size_x = 1) in;\n"
           f"// cache test {tmp_path.name}\nvoid main() {{}}\n")
    first, origin = vkcompile.compiled(src, "cache_test")
    assert origin == "glslang" and first[:4] == b"\x03\x02\x23\x07"    # the SPIR-V magic number
    assert len(list(tmp_path.glob("*.spv"))) == 1
    vkcompile._memo.clear()                  # as a new process would start
    assert vkcompile.compiled(src, "cache_test") == (first, "disk"), "second compile ran glslang again"
    assert vkcompile.compiled(src, "cache_test") == (first, "memory")


def test_compile_error_shows_the_source(tmp_path, monkeypatch):
    monkeypatch.setenv("VKML_CACHE_DIR", str(tmp_path))
    with pytest.raises(vkcompile.ShaderCompileError, match=r"broken_kernel(?s:.*)not_a_type"):
        vkcompile.spirv("#version 450\nlayout(local_size_x = 1) in;\nvoid main() { not_a_type x; }\n",
                        "broken_kernel")


def _probe():
    from vkml.vulkan.program import Program
    p = Program("cache_probe")
    o = p.buffer("o", "float")
    p.main(f"{o}[gidx()] = 1.0; // pipeline cache test")
    return p


def test_pipeline_cache_returns_the_same_kernel():
    kc = runtime.get().kernels
    k1 = kc.get(_probe())
    n = len(kc)
    # the same program object, or another one rendering the same source
    assert kc.get(k1.program) is k1 and kc.get(_probe()) is k1 and len(kc) == n
    assert kc.get(_probe(), build=False) is k1


# --------------------------------------------------------------------------- devices


def test_devices_lists_the_device_in_use():
    """vkml.devices() lists every physical device; without a GPU that is lavapipe (CPU)."""
    devs = vkml.devices()
    assert devs and all(isinstance(d.index, int) for d in devs)
    assert [d.index for d in devs] == list(range(len(devs)))
    assert runtime.get().dev.info in devs
    cur = runtime.get().dev.info
    assert str(cur).startswith(f"[{cur.index}] ")
    if all(d.kind == "CPU" for d in devs):
        assert any("llvmpipe" in d.name.lower() for d in devs), devs


@pytest.mark.parametrize("spin_s,give", [(0.0, None), (1e-7, "yield"), (0.05, "yield"),
                                         (0.005, None)], ids=["block", "poll-then-block", "poll", "spin"])
def test_every_wait_returns_the_same_result(monkeypatch, spin_s, give):
    """A submission is waited for by blocking, by polling (yielding the core, as on a CPU
    device) until it is done, or by polling for a while and then blocking."""
    import os
    rt = runtime.get()
    monkeypatch.setattr(rt, "spin_s", spin_s)
    monkeypatch.setattr(rt, "_yield", os.sched_yield if give else None)
    x = np.random.default_rng(3).standard_normal((300, 200)).astype(np.float32)
    f = vkml.jit(lambda a: vnp.tanh(a) @ a.T)
    np.testing.assert_allclose(np.asarray(f(vnp.asarray(x))), np.tanh(x.astype(np.float64)) @ x.T.astype(np.float64),
                               rtol=2e-5, atol=2e-4)


def test_waits_poll_as_the_profile_says():
    rt = runtime.get()
    p = rt.dev.profile
    assert rt.spin_s == p.poll_s and (rt._yield is not None) == p.poll_yield
    if p.driver == "lavapipe":      # polling yields the core to the driver's workers
        assert p.poll_yield and p.poll_s > 0
