"""Kernel fusion (vkml/vulkan/fusion.py): fused and unfused execution agree.

Every registry elementwise operator, in every dtype its kernel takes, runs inside a
region with movement and broadcasting around it; reductions run with fused prologues and
epilogues under both access layouts; materialisation rules, the memory plan over the
fused schedule and the vector/scalar paths of the generated kernels are checked too.
Fused results are compared with the unfused ones (`fusion.disabled()`), which the
per-operator tests hold against NumPy.
"""
from __future__ import annotations

import contextlib
import dataclasses

import ml_dtypes
import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.array import bind
from vkml.trace import dtypes as dt
from vkml.trace.graph import Graph, Node
from vkml.trace.ops import SPECS, OpKind
from vkml.vulkan import fusion
from vkml.vulkan.device import get as device, using
from vkml.vulkan.executor import plan
from vkml.vulkan.lower import expressions
from vkml.vulkan.lower import reduce as reduce_mod

RNG = np.random.default_rng(5)
EW_OPS = [k for k, s in SPECS.items() if s.kernel == "elementwise"]
REDUCE_OPS = [k for k, s in SPECS.items() if s.kernel == "reduce"]


@pytest.fixture(autouse=True)
def fused():
    """These tests compare against fusion off, so fusion is on whatever VKML_FUSION says."""
    with using(fuse=True):
        yield


# the profile fields of a CPU device (lavapipe) and of a GPU for what fusion recomputes
SMALL_REGION, SMALL_REDUCE = 4096, 16
CPU_FUSION = dict(recompute_small=SMALL_REGION, inline_sum=SMALL_REDUCE)
GPU_FUSION = dict(recompute_small=0, inline_sum=0)


def _data(shape, dtype, positive=False):
    d = np.dtype(dtype)
    if d == np.bool_:
        return RNG.random(shape) < 0.5
    if d.kind == "i":
        return RNG.integers(-4, 5, size=shape).astype(d)
    lo = 0.25 if positive else -2.0
    return RNG.uniform(lo, 2.0, size=shape).astype(d)


def _tol(dtype):
    # fused code may contract a*b+c into one rounding where separate kernels round twice
    if dt.is_low(dtype):
        # a fused chain rounds its 16-bit result once, separate kernels after every
        # operator (`profile.lowp_round_each`): a few ulps of the 16-bit dtype apart
        eps = float(ml_dtypes.finfo(np.dtype(dtype)).eps)
        return dict(rtol=2 * eps, atol=eps)
    return dict(rtol=1e-12, atol=1e-13) if np.dtype(dtype) == np.float64 else dict(rtol=3e-6, atol=1e-6)


def _both(f, *args):
    """(fused, unfused) outputs and Lowerings of vkml.jit(f) on numpy args. With 16-bit
    floats both round every operator (`profile.lowp_round_each`): a fused chain would
    otherwise keep float32 intermediates, and an argmin's near-ties come out differently."""
    a = [vnp.asarray(x) for x in args]
    each = any(dt.is_low(x.dtype) for x in a)
    with using(lowp_round_each=True) if each else contextlib.nullcontext():
        jf = vkml.jit(f)
        lo_f, got = jf.lower(*a), jf(*a)
        with fusion.disabled():
            ju = vkml.jit(f)
            lo_u, want = ju.lower(*a), ju(*a)
    return got, want, lo_f, lo_u


def _agree(got, want, dtype=None):
    got, want = vkml.tree_util.tree_leaves(got), vkml.tree_util.tree_leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if g.dtype.kind in "bi":
            np.testing.assert_array_equal(g, w)
        else:
            # a contracted multiply-add rounds once where two kernels round twice: an error
            # of a few ulps of the largest term, which a cancelling result can dwarf
            tol = _tol(dtype or g.dtype)
            scale = float(np.nanmax(np.abs(w[np.isfinite(w)]), initial=1.0))
            np.testing.assert_allclose(g, w, equal_nan=True, rtol=tol["rtol"],
                                       atol=tol["atol"] * max(1.0, scale))


def _attrs(kind, dtype):
    if kind is OpKind.Cast:
        return {"dtype": np.dtype(np.float32) if np.dtype(dtype) != np.float32 else np.dtype(np.int32)}
    if kind is OpKind.Gelu:
        return {"approximate": False}
    if kind is OpKind.IntegerPow:
        return {"exponent": 3 if np.dtype(dtype).kind == "i" else -1.5}
    return {}


# --------------------------------------------------------------------------- every op

def _cases():
    for k in EW_OPS:
        for d in SPECS[k].dtypes:
            yield pytest.param(k, np.dtype(d), id=f"{k.value}-{np.dtype(d)}")


@pytest.mark.parametrize("kind,dtype", list(_cases()))
def test_every_elementwise_op_fused_matches_unfused(kind, dtype):
    """op inside a region: its operands permuted, sliced and broadcast on the way in, its
    result flipped, reshaped and combined on the way out, a second use at another index."""
    positive = kind in (OpKind.Log, OpKind.Sqrt, OpKind.Rsqrt, OpKind.Pow, OpKind.Log1p)
    arity = SPECS[kind].arity
    attrs = _attrs(kind, dtype)
    x = _data((6, 5), dtype, positive)          # read as x.T[:, ::2]: (5, 3)
    y = _data((3,), dtype, positive)            # broadcast along the rows
    c = _data((5, 1), np.bool_)

    def apply(*ops):
        return bind(kind, list(ops), **attrs)

    def f(x, y, c):
        xt = vnp.transpose(x)[:, ::2]
        if arity == 1:
            r = apply(xt)
            r2 = apply(xt[::-1])                 # the same input at a second index
        elif kind is OpKind.Where:
            r = apply(vnp.broadcast_to(c, (5, 3)), xt, vnp.broadcast_to(y, (5, 3)))
            r2 = apply(vnp.broadcast_to(c, (5, 3)), xt[::-1], vnp.broadcast_to(y, (5, 3)))
        else:
            r = apply(xt, vnp.broadcast_to(y, (5, 3)))
            r2 = apply(vnp.broadcast_to(y, (5, 3)), xt[::-1])
        flipped = vnp.reshape(r[::-1, ::-1], (15,))
        both = vnp.logical_or(r, r2) if r.dtype == dt.bool_ else r + r2
        return flipped, both

    got, want, lo_f, lo_u = _both(f, x, y, c)
    _agree(got, want)
    # r feeds two outputs' regions: written once (three kernels), or recomputed in both
    # where it is one instruction (two)
    assert lo_f.kernel_count <= 3 < lo_u.kernel_count, (lo_f, lo_u)


@pytest.mark.parametrize("kind,dtype", [p for p in _cases() if SPECS[p.values[0]].arity == 2])
def test_binary_ops_with_a_folded_constant(kind, dtype):
    x = _data((7, 9), dtype, positive=kind is OpKind.Pow)
    one = {"f": 1.5, "i": 2, "b": True}["f" if dt.is_float(dtype) else dtype.kind]

    def f(x):
        return bind(kind, [x, vnp.full(x.shape, one, dtype)]), bind(kind, [vnp.full((9,), one, dtype), x.T.T])
    got, want, _, _ = _both(f, x)
    _agree(got, want)
    g = vkml.make_graph(lambda x: f(x)[0], vnp.asarray(x))
    (grp,) = fusion.schedule(g)
    assert grp.region.leaves == [g.inputs[0]]          # the constant is a literal, not a load


# --------------------------------------------------------------------------- reductions

def _reduce_cases():
    for k in REDUCE_OPS:
        for d in SPECS[k].dtypes:
            yield pytest.param(k, np.dtype(d), id=f"{k.value}-{np.dtype(d)}")


@pytest.fixture(params=["cpu", "gpu"])
def layout(request):
    with using(layout=request.param):
        yield request.param


def _reduce(kind, x, axes, keepdims=False):
    return bind(kind, [x], axes=tuple(axes), keepdims=keepdims)


@pytest.mark.parametrize("kind,dtype", list(_reduce_cases()))
def test_reduction_prologue_and_epilogue(kind, dtype, layout):
    """Elementwise producers (through a transpose, a broadcast and a strided slice) are
    read by the reduction's kernel; a same-shape elementwise epilogue with a second input
    and a constant is applied before its store. One kernel instead of several."""
    x = _data((12, 8), dtype)
    w = _data((12, 1), dtype)
    e = _data((8,), dtype)
    if kind is OpKind.Prod and dtype == np.int32:
        # factors of +-1 (x * 0 + x reversed): an int32 product that does not fit raises
        x, w = np.where(x > 0, 1, -1).astype(np.int32), np.zeros_like(w)

    def pro(x, w):
        if dtype == np.bool_:
            return vnp.logical_or(vnp.transpose(x), vnp.transpose(w))
        return vnp.transpose(x) * vnp.transpose(w) + vnp.transpose(x)[:, ::-1]

    def epi(r, e):
        if r.dtype == dt.bool_:
            return vnp.logical_and(r, e)
        if kind in (OpKind.ArgMax, OpKind.ArgMin):
            return r * 2 + 1
        return r * e.astype(r.dtype) - r

    # the epilogue's other input: same shape as the result, or one scalar
    for axes, other in [((1,), lambda e: e), ((0,), lambda e: e[0]), ((0, 1), lambda e: e[3])]:
        def f(x, w, e, axes=axes, other=other):
            return epi(_reduce(kind, pro(x, w), axes), other(e))
        got, want, lo_f, lo_u = _both(f, x, w, e)
        _agree(got, want, dtype)
        assert lo_f.kernel_count < lo_u.kernel_count


def test_reduction_fusion_schedule():
    x = vnp.asarray(_data((16, 32), np.float32))
    g = vkml.make_graph(lambda x: vnp.sqrt((vnp.exp(x) * 2.0).sum(axis=1)) + 1.0, x)
    (grp,) = fusion.schedule(g)
    assert grp.node.op is OpKind.Sum
    assert grp.prologue.n_ops == 2 and grp.epilogue.n_ops == 2
    assert grp.out is g.outputs[0]
    # a reduction that is a graph output keeps its own store; consumers read it
    g = vkml.make_graph(lambda x: (lambda s: (s, s * 2.0))(x.sum(axis=1)), x)
    kinds = [(grp.node.op.value if grp.node is not None else "region") for grp in fusion.schedule(g)]
    assert kinds == ["Sum", "region"]
    # an epilogue reading the reduction through a reshape (the same order)
    y = vnp.asarray(_data((16, 1), np.float32))
    g = vkml.make_graph(lambda x, y: vnp.reshape(x.max(axis=1), (16, 1)) * y, x, y)
    (grp,) = fusion.schedule(g)
    assert grp.node.op is OpKind.Max and grp.epilogue is not None
    got, want, _, _ = _both(lambda x, y: vnp.reshape(x.max(axis=1), (16, 1)) * y - y, np.asarray(x),
                            np.asarray(y))
    _agree(got, want)


def test_softmax_style_chain_and_layernorm(layout):
    x = _data((9, 40), np.float32)

    def softmax(x):
        m = x.max(axis=1, keepdims=True)
        e = vnp.exp(x - m)
        return e / e.sum(axis=1, keepdims=True)

    def layernorm(x):
        mu = x.mean(axis=1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
        return (x - mu) / vnp.sqrt(var + 1e-5)

    def logsumexp(x):
        m = x.max(axis=1, keepdims=True)
        return vnp.log(vnp.exp(x - m).sum(axis=1, keepdims=True)) + m

    # layernorm: x - mu (one instruction) is recomputed in both regions that use it
    for f, kernels in [(softmax, 4), (layernorm, 3), (logsumexp, 2)]:
        got, want, lo_f, lo_u = _both(f, x)
        _agree(got, want)
        assert lo_f.kernel_count <= kernels < lo_u.kernel_count, (f.__name__, lo_f, lo_u)


def test_empty_and_size_one_reductions_with_fused_neighbours():
    x = np.zeros((0, 5), np.float32)
    got, want, _, _ = _both(lambda x: vnp.exp(x * 2.0).sum(axis=0) + 1.0, x)
    _agree(got, want)
    np.testing.assert_array_equal(np.asarray(got), np.ones(5, np.float32))
    x1 = _data((1, 1, 7), np.float64)
    got, want, _, _ = _both(lambda x: (vnp.sin(x) * x).sum(axis=(0, 1)) * 3.0, x1)
    _agree(got, want)


# --------------------------------------------------------------------------- regions

def test_chain_becomes_one_kernel_with_no_arena():
    f = lambda x: vnp.tanh(2 * x + 1) * vnp.exp(-x) + vnp.sqrt(x + 1) - x * x
    x = np.random.default_rng(0).random(4096, dtype=np.float32)
    got, want, lo_f, lo_u = _both(f, x)
    _agree(got, want)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(np.asarray(got), np.tanh(2 * xd + 1) * np.exp(-xd) + np.sqrt(xd + 1) - xd * xd,
                               rtol=1e-6, atol=1e-6)
    print(f"\nchain: {lo_f.op_count} ops, {lo_u.kernel_count} kernels unfused -> {lo_f.kernel_count} fused; "
          f"peak {lo_u.peak_bytes} -> {lo_f.peak_bytes} bytes")
    assert lo_f.op_count == 13 and lo_f.kernel_count == 1 and lo_u.kernel_count == 13
    assert lo_f.arena_bytes == 0 and lo_f.peak_bytes < lo_u.peak_bytes


def test_grad_graph_kernel_count_drops():
    def loss(w, x):
        h = vnp.tanh(x @ w)
        return (vnp.exp(-h) * h + vnp.sin(h)).sum()
    w, x = _data((8, 4), np.float32), _data((16, 8), np.float32)
    got, want, lo_f, lo_u = _both(vkml.value_and_grad(loss), w, x)
    _agree(got, want)
    print(f"\nvalue_and_grad: {lo_f.op_count} ops, {lo_u.kernel_count} kernels unfused -> "
          f"{lo_f.kernel_count} fused")
    assert lo_f.kernel_count <= lo_u.kernel_count // 2


def test_multi_consumer_values_are_materialised_once():
    """a = exp(x) feeds two different outputs' regions: it is written once and read by
    both; b = a * 2 is used twice in one region: computed once there."""
    x = vnp.asarray(_data((64,), np.float32))

    def f(x):
        a = vnp.exp(x)
        b = a * 2.0
        return a.sum(), b * b + b, vnp.sin(a)
    g = vkml.make_graph(f, x)
    groups = fusion.schedule(g)
    exp_node = next(n for n in g.nodes if n.op is OpKind.Exp)
    writers = [grp for grp in groups if grp.out is exp_node]
    assert len(writers) == 1 and writers[0].region.n_ops == 1
    readers = [grp for grp in groups if exp_node in grp.reads]
    assert len(readers) == 3
    mul = next(grp for grp in groups if grp.out is g.outputs[1])
    assert sum(1 for ins in mul.region.code if ins[0] == "op" and ins[1] is OpKind.Mul) == 2
    got, want, _, _ = _both(f, np.asarray(x))
    _agree(got, want)


def test_broadcast_results_are_materialised_not_recomputed():
    with using(**GPU_FUSION):
        x, y = _data((32, 1), np.float32), _data((1, 64), np.float32)
        g = vkml.make_graph(lambda x, y: vnp.exp(x) * y, vnp.asarray(x), vnp.asarray(y))
        groups = fusion.schedule(g)
        assert [grp.region.n_ops for grp in groups] == [1, 1]      # exp once per element of x
        got, want, _, _ = _both(lambda x, y: vnp.exp(x) * y + vnp.sqrt(vnp.abs(y)), x, y)
        _agree(got, want)


def test_small_cpu_regions_recompute_what_they_broadcast():
    """On a CPU device a region of at most `profile.recompute_small` elements repeats a
    broadcast operand's work instead of paying a dispatch for it; a larger one still
    reads it."""
    with using(**CPU_FUSION):
        x, y = _data((32, 1), np.float32), _data((1, 64), np.float32)
        g = vkml.make_graph(lambda x, y: vnp.exp(x) * y, vnp.asarray(x), vnp.asarray(y))
        assert [grp.region.n_ops for grp in fusion.schedule(g)] == [2]
        big = _data((1, 4 * SMALL_REGION // 32), np.float32)
        g = vkml.make_graph(lambda x, y: vnp.exp(x) * y, vnp.asarray(x), vnp.asarray(big))
        assert [grp.region.n_ops for grp in fusion.schedule(g)] == [1, 1]
        for yy in (y, big):
            got, want, _, _ = _both(lambda x, y: vnp.exp(x) * y + vnp.sqrt(vnp.abs(y)), x, yy)
            _agree(got, want)


def test_movement_inside_regions():
    x = _data((4, 6, 5), np.float32)
    y = _data((5,), np.float32)
    fs = [
        lambda x, y: vnp.reshape(vnp.exp(x), (24, 5)).T + y[:, None],              # view reshape
        lambda x, y: vnp.reshape(vnp.transpose(vnp.sin(x), (2, 0, 1)), (5, 24)) * 2.0,  # copy needed
        lambda x, y: vnp.flip(vnp.tanh(x)[::2, 1::2, ::-1], axis=(0, 1)) - y[::-1],
        lambda x, y: vnp.broadcast_to(vnp.reshape(y * 2.0, (1, 5)), (3, 5)) + 1.0,
        lambda x, y: vnp.moveaxis(x, 0, 2)[:, :, None, :] * vnp.reshape(y, (1, 5, 1, 1)),
        lambda x, y: vnp.reshape(x[:, :, :0] + 1.0, (0, 4)),
    ]
    for f in fs:
        got, want, lo_f, lo_u = _both(f, x, y)
        _agree(got, want)
        assert lo_f.kernel_count <= lo_u.kernel_count


def test_reshape_without_a_strided_layout_materialises_its_input():
    x = vnp.asarray(_data((4, 6), np.float32))
    g = vkml.make_graph(lambda x: vnp.reshape(vnp.exp(x).T, (24,)) + 1.0, x)
    groups = fusion.schedule(g)
    assert len(groups) == 2 and groups[0].out.op is OpKind.Permute
    got, want, _, _ = _both(lambda x: vnp.reshape(vnp.exp(x).T, (3, 8)) + 1.0, np.asarray(x))
    _agree(got, want)


def test_a_chain_reading_two_inputs_per_step_fills_its_regions():
    """Cut where the bindings run out, not next to the root: a chain of n steps, each
    reading two inputs, takes about 2n / max_leaves kernels (one step per kernel before)."""
    L = device().profile.max_leaves
    n = 6 * L
    xs = [_data((16,), np.float32) for _ in range(2 * n + 1)]

    def f(x, *cs):
        for c, d in zip(cs[::2], cs[1::2]):
            x = vnp.tanh(x * c + d)
        return x
    groups = fusion.schedule(vkml.make_graph(f, *[vnp.asarray(v) for v in xs]))
    assert len(groups) <= 2 * n // (L - 2) + 2, len(groups)
    assert all(len(grp.region.leaves) <= L for grp in groups)
    got, want, _, _ = _both(f, *xs)
    _agree(got, want)


def test_region_input_limit_splits_regions():
    n = device().profile.max_leaves + 5
    xs = [_data((16,), np.float32) for _ in range(n)]

    def f(*xs):
        acc = xs[0]
        for v in xs[1:]:
            acc = acc * 0.5 + v
        return acc
    g = vkml.make_graph(f, *[vnp.asarray(v) for v in xs])
    groups = fusion.schedule(g)
    assert len(groups) > 1 and all(len(grp.region.leaves) <= device().profile.max_leaves for grp in groups)
    got, want, _, _ = _both(f, *xs)
    _agree(got, want)


def test_code_budget_splits_heavy_regions():
    def f(x):
        for _ in range(40):
            x = vnp.sin(x) * 0.9 + 0.1
        return x
    x = _data((256,), np.float32)
    g = vkml.make_graph(f, vnp.asarray(x))
    groups = fusion.schedule(g)
    assert 1 < len(groups) < 40
    assert all(grp.region.weight <= fusion.REGION_BUDGET for grp in groups)
    got, want, _, _ = _both(f, x)
    _agree(got, want)


def test_plan_sees_the_fused_schedule():
    """Fused-away values take no arena space; materialised ones still do, by liveness."""
    x = Node(OpKind.Input, (), {"shape": (256,), "dtype": np.dtype(np.float32), "index": 0})
    a = Node(OpKind.Exp, (x,), {})
    b = Node(OpKind.Neg, (a,), {})
    s = Node(OpKind.Sum, (b,), {"axes": (0,), "keepdims": False})      # b: a prologue
    c = Node(OpKind.Mul, (a, a), {})                                   # a: two regions read it
    r = Node(OpKind.Reshape, (s,), {"shape": (1,)})
    d = Node(OpKind.Add, (c, r), {})
    g = Graph([x], [d])
    p = plan(g)
    assert set(p.offsets) == {a.id, s.id}
    assert p.arena_bytes == 1024 + 256
    with fusion.disabled():
        pu = plan(g)
    assert set(pu.offsets) == {a.id, b.id, s.id, c.id, r.id}
    assert p.peak_bytes < pu.peak_bytes
    xv = np.linspace(-1, 1, 256).astype(np.float32)
    got, want, _, _ = _both(lambda v: vnp.exp(v) * vnp.exp(v) + (-vnp.exp(v)).sum(), xv)
    _agree(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_])
def test_vector_and_scalar_paths_agree(dtype):
    """Wide loads (aligned, contiguous), broadcast scalars and gathers (odd strides and
    offsets) against the one-element-per-thread kernel."""
    with using(vector_min=0):         # the vector path even for small arrays
        _vector_and_scalar_paths_agree(dtype)


def _vector_and_scalar_paths_agree(dtype):
    x = _data((8, 64), dtype)
    y = _data((64,), dtype)
    z = _data((8, 1), dtype)

    def f(x, y, z):
        if x.dtype == dt.bool_:
            return (vnp.logical_and(x, y), vnp.logical_or(x[:, 1:61], z), vnp.logical_or(x, x[::-1, ::-1]))
        return (x * y + z, x[:, 1:61] - z, x * x.T.T[::-1, ::-1], x[:, ::2] + y[::2])
    a = [vnp.asarray(v) for v in (x, y, z)]
    want = vkml.jit(f)(*a)
    with using(vectorize=False):
        scalar = vkml.jit(f)(*a)
    _agree(want, scalar)
    with fusion.disabled():
        _agree(want, vkml.jit(f)(*a))


def test_eager_ops_and_switch():
    x = vnp.asarray(_data((5, 7), np.float32))
    np.testing.assert_allclose(np.asarray(vnp.exp(x.T)), np.exp(np.asarray(x).T), rtol=1e-6)
    assert device().profile.fuse
    with fusion.disabled():
        assert not device().profile.fuse
        unfused = vkml.jit(lambda v: vnp.exp(v) * 2.0).lower(x).kernel_count
    assert device().profile.fuse
    assert vkml.jit(lambda v: vnp.exp(v) * 2.0).lower(x).kernel_count == 1 < unfused


def test_expression_table_declares_the_library_calls_it_makes():
    """Each operator's template names the math-library functions it calls (its code
    weight and whether a kernel needs the library come from them), and they exist."""
    import re
    lib = expressions.math_source("math32") + expressions.math_source("math64")
    table = [*expressions.FLOAT_EXPR.values(), *expressions.INT_EXPR.values(),
             *expressions.GELU.values(), expressions.WHERE]
    for e in table:
        assert sorted(re.findall(r"\b(vk_\w+)\(", e.text)) == sorted(e.calls), e
        assert all(re.search(rf"\b{f}\(", lib) for f in e.calls), e
        assert e.weight == 1 + sum(expressions.LIB_WEIGHT[f] for f in e.calls)
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert expressions.op_weight(OpKind.Sin, f32, f32) == 41
    assert expressions.op_weight(OpKind.Sin, f64, f64) == 82      # float64 math counts twice
    assert expressions.op_weight(OpKind.Add, f64, f64) == 1
    assert expressions.op_weight(OpKind.Gelu, f32, f32, True) == 21
    assert expressions.expression(OpKind.Where, np.dtype(np.int32), f32, {}, "c0", "x", "y") == \
        "((c0 != 0) ? x : y)"


@pytest.mark.parametrize("shape,dtype", [
    ((8 * (2 * 16384) + 24,), np.float32),      # two rounds a thread, a partial last group
    ((8 * (4 * 16384 + 5),), np.int32),         # four rounds
    ((300001,), np.float32),                    # no vector path (odd length), four rounds
    ((513, 1000), np.float64),                  # index decoding in every round
])
def test_large_kernels_with_several_rounds_per_thread(shape, dtype):
    x = _data(shape, dtype)
    y = _data(shape[-1:], dtype)

    def f(x, y):
        return x * y - x if x.dtype.kind == "i" else vnp.abs(x) * y + vnp.sqrt(vnp.abs(x + 1.0))
    got, want, lo_f, _ = _both(f, x, y)
    _agree(got, want)
    assert lo_f.kernel_count == 1
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    ref = xd * yd - xd if x.dtype.kind == "i" else np.abs(xd) * yd + np.sqrt(np.abs(xd + 1))
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("axes,keepdims", [((1,), False), ((1,), True), ((1, 2), False), ((0,), True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_sums_are_added_inside_regions_on_cpu(axes, keepdims, dtype):
    """On a CPU device a float Sum over at most `profile.inline_sum` elements per output
    is added up inside the region that reads it (no kernel of its own): one kernel, and
    the values of the unfused program."""
    with using(**CPU_FUSION):
        _small_sums(axes, keepdims, dtype)


def _small_sums(axes, keepdims, dtype):
    x = _data((6, 3, 4), dtype)

    def f(v):
        s = vnp.sum(vnp.exp(v) * 0.5, axis=axes, keepdims=keepdims)
        return vnp.tanh(s) + 1.0
    got, want, lo_f, _ = _both(f, x)
    _agree(got, want, dtype)
    assert lo_f.kernel_count == 1
    np.testing.assert_allclose(np.asarray(got), np.tanh((np.exp(x.astype(np.float64)) * 0.5).sum(
        axis=axes, keepdims=keepdims)) + 1.0, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_sums_stay_kernels_when_large_integer_or_on_gpus():
    x = _data((8, 17), np.float32)
    with using(**CPU_FUSION):
        for f, arg in [(lambda v: vnp.sum(v, axis=1) + 1.0, x),                       # 17 > 16
                       (lambda v: vnp.sum(v, axis=0) + 1, x.astype(np.int32))]:        # integer
            g = vkml.make_graph(f, vnp.asarray(arg))
            assert any(grp.node is not None and grp.node.op is OpKind.Sum for grp in fusion.schedule(g))
    with using(**GPU_FUSION):
        g = vkml.make_graph(lambda v: vnp.sum(v, axis=0) + 1.0, vnp.asarray(x))
        assert any(grp.node is not None and grp.node.op is OpKind.Sum for grp in fusion.schedule(g))
    # the schedule follows the profile it is given, whatever the device's
    g = vkml.make_graph(lambda v: vnp.sum(v, axis=0) + 1.0, vnp.asarray(x[:4]))
    cpu = dataclasses.replace(device().profile, **CPU_FUSION)
    gpu = dataclasses.replace(device().profile, **GPU_FUSION)
    assert not any(grp.node is not None for grp in fusion.schedule(g, profile=cpu))
    assert any(grp.node is not None and grp.node.op is OpKind.Sum for grp in fusion.schedule(g, profile=gpu))


def test_cross_entropy_gradient_fuses_on_cpu():
    """log_softmax + cross-entropy and its gradient over 10 classes: the row sums go into
    the regions, so the backward pass from the logits is one elementwise kernel."""
    with using(**CPU_FUSION):
        _cross_entropy_gradient()


def _cross_entropy_gradient():
    from vkml.nn import functional as F
    z = _data((64, 10), np.float32)
    y = np.random.default_rng(3).integers(0, 10, 64).astype(np.int32)
    f = vkml.grad(lambda z, y: F.cross_entropy(z, y))
    got, want, lo_f, lo_u = _both(f, z, y)
    _agree(got, want)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(64), y] -= 1
    np.testing.assert_allclose(np.asarray(got), p / 64, rtol=1e-4, atol=1e-7)
    assert lo_f.kernel_count <= 4 < lo_u.kernel_count, (lo_f.kernel_count, lo_u.kernel_count)


@pytest.mark.parametrize("start,stop,step", [(0, 10, 1), (3, 40, 3), (7, -20, -2)])
@pytest.mark.parametrize("shape", [(5,), (300, 7)], ids=["small", "wide"])
def test_an_integer_arange_is_computed_from_the_index(start, stop, step, shape):
    """An integer Arange a region reads (a compile-time Const, `elementwise.arange_leaf`)
    is start + step * index in the kernel, sliced, broadcast and reversed alike."""
    n = len(range(start, stop, step))
    y = np.random.default_rng(1).integers(min(start, stop), max(start, stop), shape[0]).astype(np.int32)

    def f(v):
        a = vnp.arange(start, stop, step)
        one_hot = (v[:, None] == a[None, ::-1]).astype(vnp.float32)
        return (one_hot * 2.0 + a[1:-1].sum() + a[:3][None, :].astype(vnp.float32)[:, :1],
                (v[:, None] == a[None, ::-1]).sum(axis=1), (a[None, :] * v[:, None]).sum(axis=0),
                (a[::2][None, :] - v[:, None]).max(axis=1))
    jf = vkml.jit(f)
    got = [np.asarray(g) for g in jf(vnp.asarray(y))]
    a = np.arange(start, stop, step, dtype=np.int64)
    want = (y[:, None] == a[None, ::-1]) * 2.0 + a[1:-1].sum() + a[:3][None, :1]
    np.testing.assert_array_equal(got[0], want.astype(np.float32))
    np.testing.assert_array_equal(got[1], (y[:, None] == a[None, ::-1]).sum(axis=1))
    np.testing.assert_array_equal(got[2], (a[None, :] * y[:, None]).sum(axis=0))
    np.testing.assert_array_equal(got[3], (a[::2][None, :] - y[:, None]).max(axis=1))
    srcs = [d.kernel.source for d in jf._entry((vnp.asarray(y),))[0][0].lowered.dispatches]
    assert any(f"({start} + {step} * (" in s for s in srcs), n


def test_small_kernels_reading_only_inputs_are_scheduled_first(monkeypatch):
    """A label count reads only an input: it moves ahead of the product (nothing it waits
    for); a large kernel reading only inputs keeps its place; the values stay NumPy's."""
    x = np.random.default_rng(3).standard_normal((40, 40)).astype(np.float32)
    y = np.arange(40, dtype=np.int32) % 7

    def f(x, y):
        return vnp.tanh(x @ x).sum() / vnp.sum((y != 3).astype(vnp.float32)), vnp.exp(x) * 2.0
    g = vkml.make_graph(f, vnp.asarray(x), vnp.asarray(y))
    groups = fusion.schedule(g)
    first = groups[0]
    assert first.node is not None and first.node.op.value == "Sum" and first.out.size == 1, first
    monkeypatch.setattr(fusion, "EARLY_BYTES", 0)
    before = fusion.schedule(g)
    monkeypatch.undo()
    assert [gr.out for gr in groups] == [first.out] + [gr.out for gr in before if gr.out is not first.out]
    assert any(gr.out.shape == (40, 40) and gr.node is None for gr in groups[1:])   # exp(x) * 2 stays
    got = vkml.jit(f)(vnp.asarray(x), vnp.asarray(y))
    X = x.astype(np.float64)
    np.testing.assert_allclose(float(got[0]), np.tanh(X @ X).sum() / np.sum(y != 3), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(got[1]), np.exp(X) * 2, rtol=1e-6)


def test_integer_pow_chains_fuse_with_their_neighbours():
    """IntegerPow's multiplication chain is statements inside the region's function: it
    fuses with the ops around it (and into a reduction's prologue), and a long chain counts
    its multiplications against the code budget."""
    x = _data((4, 8), np.float64)
    k = _data((4, 8), np.int32)

    def f(x, k):
        a = (x ** 7 + x ** -2 - x ** 2.5 * 0.5) * (x ** 1)
        s = vnp.sum(x ** 3, axis=1)
        return a, s, (k ** 13) & 0xFF, k ** 0
    got, want, lo_f, lo_u = _both(f, x, k)
    _agree(got, want)
    assert lo_f.kernel_count < lo_u.kernel_count
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(np.asarray(got[0]), (x ** 7 + x ** -2.0 - x ** 2.5 * 0.5) * x,
                                   rtol=1e-13, equal_nan=True)
        np.testing.assert_array_equal(np.asarray(got[2]), (k ** 13) & 0xFF)
    assert expressions.op_weight(OpKind.IntegerPow, np.dtype(np.float32), np.dtype(np.float32), None, 2 ** 20) > 20
    assert expressions.op_weight(OpKind.IntegerPow, np.dtype(np.float32), np.dtype(np.float32), None, 1) == 1


# Fusion patterns, each run in float32 and float64, under the default budgets and under
# budgets small enough that every region splits: a split turns a value into a region root
# that other groups (a reduction's prologue, an epilogue, an inlined Sum) must then read
# from memory. float64 code weighs more, so its regions split where float32's do not; the
# executor once failed with KeyError there (an inlined Sum taken for a reduction kernel).
_PATTERNS = {
    "sums of products": lambda a, b: (vnp.sum(vnp.cos(a) * b) + vnp.sum(vnp.sin(a) * b)
                                      + vnp.sum(vnp.cos(b) * a) + vnp.sum(vnp.sin(b) * a)),
    "reduce prologue epilogue": lambda a, b: vnp.tanh(vnp.sum(vnp.exp(a) * b, axis=0) * 2.0 + 1.0),
    "mean var": lambda a, b: vnp.sum((a - vnp.mean(a, axis=-1, keepdims=True)) ** 2 * b),
    "max and sum": lambda a, b: vnp.max(vnp.sin(a), axis=0) + vnp.sum(vnp.cos(b), axis=0),
    "softmax": lambda a, b: vnp.sum(vnp.exp(a - vnp.max(a, axis=-1, keepdims=True))
                                    / vnp.sum(vnp.exp(a), axis=-1, keepdims=True) * b),
    "matmul epilogue": lambda a, b: vnp.sum(vnp.tanh(a @ vnp.transpose(b) + 1.0) * vnp.sin(a @ vnp.transpose(b))),
    "chain": lambda a, b: vnp.sin(vnp.cos(vnp.tanh(a) * b) + vnp.exp(-a * b)) / (1.0 + b * b),
}


@pytest.mark.parametrize("budget", ["default", "tiny"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(_PATTERNS))
def test_fusion_patterns_in_every_float_dtype_and_budget(name, dtype, budget, monkeypatch):
    if budget == "tiny":
        monkeypatch.setattr(fusion, "REGION_BUDGET", 6)
        monkeypatch.setattr(fusion, "PROLOGUE_BUDGET", 3)
    f = _PATTERNS[name]
    shape = (3, 4)    # a Sum of all 12 elements is inlined on CPU devices (profile.inline_sum)
    a, b = _data(shape, dtype), _data(shape, dtype, positive=True)
    got, want, _, _ = _both(f, a, b)
    ref = np.asarray(f(vnp.asarray(a.astype(np.float64)), vnp.asarray(b.astype(np.float64))))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), **_tol(dtype))
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-4 if dtype == np.float32 else 1e-12,
                               atol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_higher_order_derivatives_fuse_in_float64(dtype):
    """Third derivatives and vmapped fifth ones: graphs of many small fused reductions."""
    import vkml.nn.functional as F
    x = vnp.asarray(np.array([0.3, 0.7, 1.1], dtype))
    f = lambda x: vnp.sum(F.gelu(vnp.sin(x) * x))
    h3 = vkml.jacrev(vkml.jacrev(vkml.jacrev(f)))(x)
    h3f = vkml.jacfwd(vkml.jacfwd(vkml.jacfwd(f)))(x)
    np.testing.assert_allclose(np.asarray(h3), np.asarray(h3f), **_tol(dtype))
    w = vnp.asarray(np.array([[0.7]], dtype))
    h = lambda x: vnp.sum(vnp.sqrt(1 / x) * w)
    for _ in range(5):
        h = vkml.jacrev(h)
    got = np.asarray(vkml.vmap(h)(vnp.asarray(np.array([[[2.0]]], dtype)))).ravel()[0]
    # d^5/dx^5 of 0.7 * x^-1/2 = 0.7 * (-1/2)(-3/2)(-5/2)(-7/2)(-9/2) x^-11/2
    want = 0.7 * (-0.5 * -1.5 * -2.5 * -3.5 * -4.5) * 2.0 ** -5.5
    np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == np.float32 else 1e-11)


def test_grad_of_unrolled_lstm_in_float64():
    """An unrolled LSTM's gradient (many small fused reductions per step) at T = 12."""
    T, H, I = 12, 4, 3
    rng = np.random.default_rng(0)
    W0, xs = rng.standard_normal((I + H, 4 * H)) * 0.3, vnp.asarray(rng.standard_normal((T, 2, I)))
    sig = vkml.nn.functional.sigmoid

    def loss(W):
        h = c = vnp.zeros((2, H), np.float64)
        for t in range(T):
            z = vnp.concatenate([xs[t], h], axis=1) @ W
            c = sig(z[:, H:2 * H]) * c + sig(z[:, :H]) * vnp.tanh(z[:, 2 * H:3 * H])
            h = sig(z[:, 3 * H:]) * vnp.tanh(c)
        return vnp.sum(h ** 2)

    g = np.asarray(vkml.grad(loss)(vnp.asarray(W0)))
    v, eps = rng.standard_normal(W0.shape), 1e-6
    fd = (float(loss(vnp.asarray(W0 + eps * v))) - float(loss(vnp.asarray(W0 - eps * v)))) / (2 * eps)
    np.testing.assert_allclose(np.vdot(g, v), fd, rtol=1e-7, atol=1e-9)


def test_region_and_strided_programs_merge_and_keep_their_bits():
    """Independent regions (vector path or not, meta hoisted or not) and, unfused, the
    strided copies and single-operator kernels: where the profile merges dispatches they
    run as one kernel with the bits of separate ones."""
    a, b = _data((40, 32), np.float32), _data((32,), np.float32)
    k, d = _data((40, 32), np.int32), _data((40, 32), np.float64)

    def f(a, b, k, d):
        return (vnp.tanh(a) * b + 1.0, a[::-1] - 2.0, (k * 3) & 7, vnp.exp(d) / (d + 3.0),
                vnp.where(a > 0, a, b), (a + k.astype(vnp.float32)).astype(vnp.int32), d ** 3,
                vnp.flip(d, axis=0), vnp.reshape(a.T, (40, 32)) * 1.5)
    args = tuple(vnp.asarray(v) for v in (a, b, k, d))
    for variant in ({}, {"fuse": False}, {"vector_min": 0}, {"hoist_meta": 1}):
        runs = []
        for merge in (True, False):
            with using(merge=merge, **variant):
                jf = vkml.jit(f)
                runs.append(([np.asarray(g) for g in jf(*args)], jf.lower(*args)))
        (got, lo_m), (want, lo_s) = runs
        _agree(got, want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        assert lo_m.dispatch_count < lo_s.dispatch_count, (variant, lo_m.dispatch_count)


def test_integer_progression_read_in_every_round():
    """An int32 arange fused as a progression (computed from the index, not loaded) into a
    kernel of several rounds per thread and wide stores: every round computes its own
    values (the second round's position was once local to its bounds check)."""
    idx = np.arange(64, dtype=np.int32) * 37
    f = vkml.jit(lambda i: vnp.logical_or(vnp.equal(vnp.arange(4096, dtype=np.int32), i[:, None]),
                                          False))
    np.testing.assert_array_equal(np.asarray(f(idx)), np.arange(4096)[None, :] == idx[:, None])
