"""Horizontal fusion (`vkml.vulkan.merge`): independent dispatches run as one on CPU
devices, with the same bits as apart."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml import optim
from vkml.vulkan import device, merge, program, runtime
from vkml.vulkan.dispatch import barriers_before

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository, for bench
from bench.workloads import deep_mlp_data, deep_mlp_loss, vkml_mlp_step  # noqa: E402

CPU = runtime.get().dev.profile.merge
rng = np.random.default_rng(0)


def _f32(*shape):
    return vnp.asarray(rng.standard_normal(shape).astype(np.float32))


def _both(fn, *args):
    """(merged outputs, separate outputs, merged Lowering, separate Lowering), each from a
    jit of its own (kernels are cached by body, so the two never share a merged one)."""
    jm = vkml.jit(fn)
    lo_m = jm.lower(*args)       # its merged kernels built (a first call may run their parts)
    got = jm(*args)
    with merge.disabled():
        js = vkml.jit(fn)
        want = js(*args)
        lo_s = js.lower(*args)
    return got, want, lo_m, lo_s


def _same_bits(got, want):
    for g, w in zip(vkml.tree_util.tree_leaves(got), vkml.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def _program(name, n_in=1, **flags):
    p = program.Program(name, **flags)
    p.meta = program.Meta(("n", 1), ("scale", 1))
    o = p.buffer("o", "float")
    xs = [p.buffer(f"in{j}", "float", readonly=True) for j in range(n_in)]
    p.add("float twice(float v) { return 2.0 * v; }", names=("twice",))
    p.main("uint i = gidx();", f"if (i >= uint({p.m('n')})) return;",
           f"{o}[i] = twice({' + '.join(f'{x}[i]' for x in xs)}) * float({p.m('scale')});")
    return p


def test_merged_programs_rename_each_parts_globals_and_offset_its_meta():
    """Two parts declaring the same names: each keeps its own under a prefix, its bindings
    follow the previous part's, its meta reads start at its base; each part's own meta
    reads are done first thing in the merged main."""
    a, b = _program("A"), _program("B", n_in=2)
    m = program.merged([(a, 4, 0), (b, 8, a.meta.size)], L=256, G=4)
    src = m.render()
    assert m.n_tensors == 5 and [x.name for x in m.bindings] == ["o", "in0", "o", "in0", "in1"]
    assert "#define twice h0_twice" in src and "#define twice h1_twice" in src
    assert "binding = 3) buffer B3_o" in src and "binding = 5) readonly buffer B5_in1" in src
    assert "h1_m_scale = meta[3];" in src and "h0_m_n = meta[0];" in src
    assert "for (uint i = 0u; i < 2u; ++i) { hrel = hg * 2u + i; h1_main(); }" in src
    assert m.writes == (0, 2)


def test_programs_refuse_names_a_merge_would_rename_wrongly():
    p = program.Program("P")
    for bad in ("x", "xy", "rgba", "m_n", "gidx", "meta"):
        with pytest.raises(ValueError, match="cannot be a global name"):
            p.buffer(bad, "float")


def test_parts_that_cannot_share_a_unit_are_refused():
    p = _program("S", local_size=512)
    p.shared("tile", "float", 512)
    with pytest.raises(ValueError, match="cannot run in units"):
        program.merged([(p, 1, 0), (_program("T"), 1, 2)], L=256, G=1)
    with pytest.raises(ValueError, match="grid"):
        program.merged([(_program("G", grid=True), 1, 0)], L=256, G=1)


def test_active_where_the_profile_merges():
    assert merge.active(NS(merge=True)) and not merge.active(NS(merge=False))
    with merge.disabled():
        assert not merge.active(NS(merge=True))


def test_mlp_step_merges_and_keeps_its_bits():
    """The bench's small training step: per layer the weight gradient, the input gradient
    and the bias sum run as one dispatch (15 kernels in 9 on the 2-core CI VM)."""
    p = [(_f32(a, b) / np.sqrt(a), _f32(b)) for a, b in ((64, 256), (256, 256), (256, 10))]
    x, y = _f32(256, 64), vnp.asarray(rng.integers(0, 10, 256).astype(np.int32))
    opt = optim.sgd(0.01)
    jm = vkml_mlp_step(opt, donate=False)
    got = jm(p, opt.init(p), x, y)
    with merge.disabled():
        js = vkml_mlp_step(opt, donate=False)
        want = js(p, opt.init(p), x, y)
    _same_bits(got, want)
    lo = jm.lower(p, opt.init(p), x, y)
    assert lo.kernel_count == js.lower(p, opt.init(p), x, y).dispatch_count
    if CPU:
        assert lo.dispatch_count < lo.kernel_count, lo
        names = [d.kernel.name for d in jm._entry((p, opt.init(p), x, y))[0][0].lowered.dispatches]
        assert any(n.count("MatMul") == 2 for n in names), names


def test_a_deep_step_compiles_no_large_merged_kernel_it_runs_once():
    """A deep training step (hundreds of dispatches): each merged kernel of more than
    SMALL_SOURCE characters runs at least twice (the repeated middle layers); the first and
    last layers' own combinations run as their parts. Same bits as unmerged."""
    n = 24
    loss = deep_mlp_loss(vnp, vkml.checkpoint, n, "none")

    def step(params, x):
        l, g = vkml.value_and_grad(loss)(params, x)
        return l, vkml.tree_util.tree_map(lambda a, b: a - 0.01 * b, params, g)
    (Ws, bs), x = deep_mlp_data(n)
    args = (([vnp.asarray(w) for w in Ws], [vnp.asarray(b) for b in bs]), vnp.asarray(x))
    got, want, lo_m, lo_s = _both(step, *args)
    _same_bits(got, want)
    if CPU:
        assert lo_s.dispatch_count > merge.SPLIT_AMONG, lo_s
        assert lo_m.dispatch_count < lo_s.dispatch_count, (lo_m, lo_s)
        jm = vkml.jit(step)
        jm(*args)
        seen: dict = {}
        for d in jm._entry(args)[0][0].lowered.dispatches:
            src = d.kernel.program.render()
            if "+" in d.kernel.name and len(src) > merge.SMALL_SOURCE:
                seen[src] = seen.get(src, 0) + 1
        assert seen and min(seen.values()) >= 2, sorted(seen.values())


def test_a_new_merged_kernel_waits_for_a_second_call_and_its_build():
    """A large merged kernel whose parts are compiled already is new code (about a second
    of LLVM on lavapipe): the first call runs its parts, a second call builds it in the
    background, and a later call runs it. Every call gives the same bits."""
    a, b, c, d = _f32(64, 96), _f32(96, 80), _f32(64, 96), _f32(96, 80)

    def fn(a, b, c, d):
        return a @ b, (c @ d) * 2.0
    with merge.disabled():
        vkml.jit(fn)(a, b, c, d)                          # the parts' kernels
    f = vkml.jit(fn)
    outs = [f(a, b, c, d)]
    comp = f._entry((a, b, c, d))[0][0]
    first = [dd.kernel.name for dd in comp.lowered.dispatches]
    if not CPU:                                           # a GPU merges nothing
        assert comp.lowered.final is None
        return
    assert comp.lowered.final is not None and not any("+" in n for n in first), first
    outs.append(f(a, b, c, d))                            # starts the build
    assert comp.final is not None
    comp.finish()
    assert comp.lowered.final is None
    final = [dd.kernel.name for dd in comp.lowered.dispatches]
    assert len(final) < len(first) and any(n.count("MatMul") == 2 for n in final), final
    outs.append(f(a, b, c, d))
    for o in outs[1:]:
        _same_bits(o, outs[0])
    np.testing.assert_allclose(np.asarray(outs[0][1]), 2.0 * (np.asarray(c, np.float64) @ np.asarray(d, np.float64)),
                               rtol=1e-5, atol=1e-5)
    assert f.lower(a, b, c, d).dispatch_count == len(final)


def test_a_merged_kernel_that_fails_to_build_leaves_its_parts_running(monkeypatch):
    """A background build that fails: `lower` (through `finish`) raises its error, and the
    next call warns once and keeps running the parts, with the same bits."""
    from vkml.vulkan import compiled
    a, b, c, d = _f32(64, 96), _f32(96, 80), _f32(64, 96), _f32(96, 80)

    def fn(a, b, c, d):
        return a @ b - 1.0, (c @ d) * 4.0
    with merge.disabled():
        want = vkml.jit(fn)(a, b, c, d)

    def broken(rt, dispatches):
        raise RuntimeError("this merged kernel does not build")
    monkeypatch.setattr(compiled, "build_dispatches", broken)
    f = vkml.jit(fn)
    _same_bits(f(a, b, c, d), want)
    comp = f._entry((a, b, c, d))[0][0]
    if not CPU:
        assert comp.lowered.final is None
        return
    parts = len(comp.lowered.dispatches)
    _same_bits(f(a, b, c, d), want)                       # starts the build
    with pytest.raises(RuntimeError, match="does not build"):
        comp.finish()
    with pytest.warns(RuntimeWarning, match="did not build"):
        _same_bits(f(a, b, c, d), want)
    assert comp.lowered.final is None and len(comp.lowered.dispatches) == parts
    _same_bits(f(a, b, c, d), want)


def test_a_program_called_once_builds_no_deferred_kernel():
    """Only a program called again builds its merged kernels: a one-off call leaves them."""
    a, b, c, d = _f32(64, 96), _f32(96, 80), _f32(64, 96), _f32(96, 80)

    def fn(a, b, c, d):
        return a @ b + 1.0, (c @ d) * 3.0
    with merge.disabled():
        vkml.jit(fn)(a, b, c, d)
    f = vkml.jit(fn)
    f(a, b, c, d)
    comp = f._entry((a, b, c, d))[0][0]
    assert comp.final is None
    assert (comp.lowered.final is not None) == CPU


@pytest.mark.parametrize("n", [3, 40, 1000])
def test_mixed_workgroup_sizes_and_operand_kinds(n):
    """A matmul (subgroup workgroups), column and row sums (workgroups of 64, split), an
    elementwise region (256) and a scan, all independent: NumPy's values, and the same bits
    merged and apart."""
    a, b, c, d = _f32(n, 48), _f32(48, 33), _f32(n, 7), _f32(n)

    def fn(a, b, c, d):
        return (a @ b, vnp.sum(c, 0), vnp.sum(a, 1), vnp.tanh(d) * 2.0 + 1.0, vnp.cumsum(d),
                vnp.max(c, 1))
    got, want, lo_m, lo_s = _both(fn, a, b, c, d)
    _same_bits(got, want)
    A, B, C, D = (np.asarray(v, np.float64) for v in (a, b, c, d))
    for g, w in zip(got, (A @ B, C.sum(0), A.sum(1), np.tanh(D) * 2 + 1, np.cumsum(D), C.max(1))):
        np.testing.assert_allclose(np.asarray(g), w, rtol=2e-5, atol=2e-4)
    assert lo_m.kernel_count == lo_s.kernel_count
    if CPU:
        assert lo_m.dispatch_count < lo_s.dispatch_count, (lo_m, lo_s)


def test_parts_with_shared_memory_keep_their_workgroups():
    """LogSoftmax reduces its row through shared memory: beside a subgroup MatMul it is
    not split into the MatMul's workgroups (it stays a dispatch of its own), and the
    values are right."""
    x, a = _f32(6, 300), _f32(40, 40)
    got, want, lo_m, _ = _both(lambda x, a: (vkml.nn.functional.log_softmax(x, axis=1), a @ a), x, a)
    _same_bits(got, want)
    X = np.asarray(x, np.float64)
    ref = X - X.max(1, keepdims=True)
    ref = ref - np.log(np.exp(ref).sum(1, keepdims=True))
    np.testing.assert_allclose(np.asarray(got[0]), ref, rtol=1e-5, atol=1e-5)


def test_many_independent_kernels_stay_within_the_descriptor_limits():
    """60 independent sums of 60 inputs: more tensors than one kernel may bind on lavapipe
    (32 storage buffers), so several merged dispatches, each within the limits."""
    xs = [_f32(100, 9) for _ in range(60)]
    got, want, lo_m, lo_s = _both(lambda *xs: [vnp.sum(v * v, 0) for v in xs], *xs)
    _same_bits(got, want)
    for g, v in zip(got, xs):
        np.testing.assert_allclose(np.asarray(g), (np.asarray(v, np.float64) ** 2).sum(0), rtol=1e-5)
    dev = runtime.get().dev
    for ds in vkml.jit(lambda *xs: [vnp.sum(v * v, 0) for v in xs])._entry(tuple(xs))[0][0].lowered.dispatches:
        storage = 1 + sum(1 for f in (ds.kernel.texels or (None,) * ds.kernel.n_tensors) if f is None)
        assert storage <= dev.max_storage_buffers
    if CPU:
        assert 1 < lo_m.dispatch_count < lo_s.dispatch_count, (lo_m, lo_s)


def test_merged_dispatches_keep_every_barrier():
    """Two chains (each op reads the last): dispatches merge only between barriers, so
    every barrier stays."""
    x, y = _f32(500), _f32(500)

    def fn(x, y):
        for _ in range(3):
            x, y = vnp.sum(x) * x + 1.0, vnp.sum(y) * y - 1.0
        return x, y
    got, want, lo_m, lo_s = _both(fn, x, y)
    _same_bits(got, want)
    assert lo_m.barrier_count == lo_s.barrier_count and lo_m.dispatch_count <= lo_s.dispatch_count


def test_hazard_runs_are_what_barriers_say():
    """merge groups exactly the runs between barriers: no merged dispatch holds two parts
    where one reads what another writes."""
    x = _f32(64, 64)
    jf = vkml.jit(lambda x: (x @ x, vnp.sum(x, 0), (x @ x) @ x, vnp.sum(x @ x, 1)))
    ref = np.asarray(x, np.float64)
    out = jf(x)
    np.testing.assert_allclose(np.asarray(out[2]), ref @ ref @ ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(np.asarray(out[3]), (ref @ ref).sum(1), rtol=1e-4, atol=1e-3)
    ds = jf._entry((x,))[0][0].lowered.dispatches
    for d in ds:
        reads = {(v.region, v.offset) for i, v in enumerate(d.views) if i not in d.writes}
        writes = {(d.views[i].region, d.views[i].offset) for i in d.writes}
        assert not (reads & writes), d.kernel.name
    assert sum(barriers_before(ds)) >= 1


def test_lavapipe_workers(monkeypatch):
    monkeypatch.setenv("LP_NUM_THREADS", "3")
    assert device.lavapipe_workers() == 3
    monkeypatch.setenv("LP_NUM_THREADS", "64")
    assert device.lavapipe_workers() == 16
    monkeypatch.delenv("LP_NUM_THREADS")
    monkeypatch.setattr(device.os, "cpu_count", lambda: 1)
    assert device.lavapipe_workers() == 0       # one CPU: no worker threads


@pytest.mark.parametrize("shape", [(256, 256, 256), (300, 70, 290)])
def test_dynamic_dispatch_counts_again_at_every_call(shape):
    """A product of many tiles runs as one workgroup per lavapipe worker taking tiles from
    a counter: the recording zeroes it, so the second and third replays compute every
    tile again (a counter left at its end would skip them all), and the bits equal the
    static kernel's."""
    m, k, n = shape
    a, b = _f32(m, k), _f32(k, n)
    f = lambda a, b: a @ b
    jd = vkml.jit(f)
    with merge.disabled():
        js = vkml.jit(f)
        want = np.asarray(js(a, b))
        (static,) = js._entry((a, b))[0][0].lowered.dispatches
    np.testing.assert_allclose(want, np.asarray(a, np.float64) @ np.asarray(b, np.float64), rtol=1e-4, atol=1e-3)
    for _ in range(3):
        got = np.asarray(jd(a, b))
        np.testing.assert_array_equal(got, want)
    (ds,) = jd._entry((a, b))[0][0].lowered.dispatches
    workers = max(runtime.get().dev.profile.workers, 1)
    if CPU and static.groups > workers:
        assert len(ds.zero) == 1 and ds.groups == workers and "atomicAdd" in ds.kernel.source
    else:
        assert not ds.zero and ds.groups == static.groups


def test_dynamic_and_static_dispatches_agree_in_a_training_step():
    """The MLP step with dynamic dispatches on and off: the same bits."""
    p = [(_f32(a, b) / np.sqrt(a), _f32(b)) for a, b in ((64, 256), (256, 256), (256, 10))]
    x, y = _f32(256, 64), vnp.asarray(rng.integers(0, 10, 256).astype(np.int32))
    opt = optim.sgd(0.01)
    got = vkml_mlp_step(opt, donate=False)(p, opt.init(p), x, y)
    with device.using(dynamic=False):
        want = vkml_mlp_step(opt, donate=False)(p, opt.init(p), x, y)
    _same_bits(got, want)


def _fake(reads, writes, mergeable=True):
    """A dispatch touching byte ranges (start, end) of one buffer."""
    views = [NS(region=0, offset=a, nbytes=b - a) for a, b in list(reads) + list(writes)]
    prog = NS(mergeable=mergeable)
    return NS(views=views, writes=tuple(range(len(reads), len(views))), kernel=NS(program=prog))


def test_a_dispatch_joins_an_earlier_run_it_does_not_conflict_with():
    """dW (reads g, writes w), an update reading dW's result (a barrier), then dh reading g:
    dh moves back beside dW; what reads a range written later keeps its place."""
    dw = _fake([(0, 100)], [(100, 200)])
    upd = _fake([(100, 200)], [(200, 300)])
    dh = _fake([(0, 100)], [(300, 400)])
    late = _fake([(200, 300)], [(400, 500)])          # reads upd's result
    assert merge._runs([dw, upd, dh, late]) == [[dw, dh], [upd], [late]]
    fixed = _fake([(0, 100)], [(500, 600)], mergeable=False)
    assert merge._runs([dw, upd, fixed]) == [[dw], [upd, fixed]]
    reuse = _fake([(0, 100)], [(100, 150)])           # writes a range dW wrote: after upd read it
    assert merge._runs([dw, upd, reuse]) == [[dw], [upd], [reuse]]


def test_merged_kernels_are_bounded_by_their_compile_cost():
    big = 200_000
    assert merge._cheap_to_compile(2 * big, 2 * big * big)          # two like parts: twice
    assert merge._cheap_to_compile(3 * big, 3 * big * big)
    assert not merge._cheap_to_compile(4 * big, 4 * big * big)
    assert merge._cheap_to_compile(merge.SMALL_SOURCE, 1)           # small kernels merge freely


@pytest.mark.parametrize("B,T,D", [(128, 64, 24), (32, 128, 16)])
def test_dynamic_kernels_stay_within_the_loop_limit(B, T, D):
    """Attention's scores beside a softmax, merged dynamic on one worker: one workgroup
    used to take every unit and pass lavapipe's 65535 loop heads, which ended its loops
    silently (wrong scores and probabilities). Each workgroup now takes at most as many
    units as fit half the limit."""
    import vkml.nn.functional as F
    q, k, s = (rng.standard_normal(sh).astype(np.float32) for sh in ((B, T, D), (B, D, T), (B, T, T)))
    with device.using(workers=1, dynamic=True):
        f = vkml.jit(lambda q, k, s: (q @ k, F.softmax(s, axis=-1)))
        mm, sm = (np.asarray(v, np.float64) for v in f(vnp.asarray(q), vnp.asarray(k), vnp.asarray(s)))
        if CPU:
            low = f.lower(vnp.asarray(q), vnp.asarray(k), vnp.asarray(s))
            assert low.dispatch_count < low.kernel_count          # still merged
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(mm, q.astype(np.float64) @ k, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(sm, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def _looping(groups, heads, local=16):
    """A fake mergeable part of `groups` workgroups whose invocations run `heads` loop heads."""
    prog = NS(mergeable=True, barriers=False, subgroups=False, libraries={}, render=lambda h=0: "x" * 100)
    kernel = NS(program=prog, local_size=local, n_tensors=1, texels=())
    return merge._Part(NS(views=[NS(nbytes=64)], kernel=kernel, groups=groups, heads=heads), prog)


def test_merged_parts_add_up_to_half_the_loop_limit():
    dev = NS(max_storage_buffers=64, max_sampled=64, max_resources=128)
    budget = merge.head_budget(NS(loop_limit=65535))
    a, b, c = _looping(4, 12_000), _looping(4, 12_000), _looping(4, 12_000)
    sets = merge._sets([a, b, c], 16, dev, 4, budget)
    assert sorted(len(s) for s, _, _ in sets) == [1, 2]            # two fit, the third apart
    assert all(merge._turn_heads(s, L, G) <= budget for s, L, G in sets)
    many = _looping(64, 2_000)                # 16 units of it per workgroup at G = 4: too many
    assert [len(s) for s, _, _ in merge._sets([a, many], 16, dev, 4, budget)] == [1, 1]
    assert len(merge._sets([a, b, c], 16, dev, 4, 0)) == 1         # no limit: one kernel
    unknown = NS(views=[NS(nbytes=64)], kernel=a.ds.kernel, groups=4, heads=None)
    assert merge._part(unknown, budget) is None and merge._part(unknown, 0) is not None
