"""Reduction, cumsum and softmax kernels beyond the registry cases: every axis subset of
a 4-d tensor, long inputs split over many workgroups (accuracy against float64), products
with zeros and wild magnitudes, first-index ties, and -inf rows.

Both access layouts run here whatever the device: "cpu" (each lane streams its own
contiguous run) and "gpu" (threads of a workgroup interleave, then a subgroup/shared
tree), so the path a GPU would take is exercised on lavapipe too.
"""
import itertools

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
import vkml.vulkan.device
from vkml.array import bind
from vkml.trace.ops import OpKind

from tests.ops.cases_reduce import softmax_ref

RNG = np.random.default_rng(11)
REDUCTIONS = [OpKind.Sum, OpKind.Mean, OpKind.Max, OpKind.Min, OpKind.Prod, OpKind.ArgMax,
              OpKind.ArgMin]
_NP = {OpKind.Sum: np.sum, OpKind.Mean: np.mean, OpKind.Max: np.max, OpKind.Min: np.min,
       OpKind.Prod: np.prod}


@pytest.fixture(params=["cpu", "gpu"])
def layout(request):
    """Force one access layout in every kernel family of this file (the profile's)."""
    with vkml.vulkan.device.using(layout=request.param):
        yield request.param


def _run(op, x, **attrs) -> np.ndarray:
    return np.asarray(bind(op, [vnp.asarray(x)], **attrs))


def reduce_ref(op, x: np.ndarray, axes: tuple, keepdims: bool) -> np.ndarray:
    """NumPy reference; ArgMax/ArgMin give the flat C-order index over `axes`."""
    if op in _NP:
        return _NP[op](x, axis=axes, keepdims=keepdims)
    kept = [i for i in range(x.ndim) if i not in axes]
    moved = x.transpose(kept + list(axes)).reshape([x.shape[i] for i in kept] + [-1])
    f = np.argmax if op is OpKind.ArgMax else np.argmin
    r = f(moved, axis=-1)
    if keepdims:
        r = r.reshape([1 if i in axes else d for i, d in enumerate(x.shape)])
    return r


ALL_AXES = [c for k in range(5) for c in itertools.combinations(range(4), k)]


@pytest.mark.parametrize("op", REDUCTIONS, ids=lambda o: o.value)
def test_every_axis_subset_of_4d(op, layout):
    # last extent 8: the innermost reduced axis takes the 4-wide loads when it is reduced;
    # ints in a small range make ties (first index must win) and keep sums exact
    x = RNG.integers(-4, 5, size=(3, 2, 5, 8)).astype(np.float32)
    if op is OpKind.Prod:
        x = RNG.uniform(0.8, 1.25, size=x.shape).astype(np.float32)
    for axes in ALL_AXES:
        for keep in (False, True):
            got = _run(op, x, axes=axes, keepdims=keep)
            want = reduce_ref(op, x.astype(np.float64), axes, keep)
            assert got.shape == want.shape, (axes, keep)
            if op in (OpKind.ArgMax, OpKind.ArgMin):
                np.testing.assert_array_equal(got, want, err_msg=f"axes={axes} keepdims={keep}")
            else:
                np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6,
                                           err_msg=f"axes={axes} keepdims={keep}")


@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.bool_])
def test_axis_subsets_other_dtypes(dtype, layout):
    x = RNG.integers(-3, 4, size=(2, 3, 4, 6)).astype(dtype)
    ops = [OpKind.Max, OpKind.Min] if dtype == np.bool_ else [
        OpKind.Sum, OpKind.Max, OpKind.Min, OpKind.ArgMax, OpKind.ArgMin]
    for op in ops:
        for axes in ALL_AXES:
            if op in (OpKind.ArgMax, OpKind.ArgMin) and not axes:
                continue
            got = _run(op, x, axes=axes, keepdims=False)
            want = reduce_ref(op, x, axes, False)
            np.testing.assert_array_equal(got, np.asarray(want).astype(got.dtype),
                                          err_msg=f"{op.value} axes={axes}")


def test_sum_16m_float32_matches_float64(layout):
    n = 1 << 24
    x = RNG.random(n, dtype=np.float32) * 2 - 0.5
    a = vnp.asarray(x)
    ref = x.astype(np.float64).sum()
    got = float(vnp.sum(a))
    # a serial float32 loop is off by ~1e-3 here; a tree is within a few ulps
    assert abs(got - ref) <= 2e-7 * abs(ref), (got, ref)
    mean = float(vnp.mean(a))
    assert abs(mean - ref / n) <= 2e-7 * abs(ref / n), (mean, ref / n)
    # the same elements as columns: the strided (thread) kernel with splits
    cols = np.asarray(vnp.sum(a.reshape(-1, 4), axis=0))
    np.testing.assert_allclose(cols, x.reshape(-1, 4).astype(np.float64).sum(0), rtol=5e-7)


def test_prod_long_with_zeros_and_nonfinite(layout):
    x = RNG.uniform(0.9, 1.1, size=(3, 20001)).astype(np.float32)
    x[0, 17] = 0.0
    x[1, 20000] = -0.0
    x[2, 5] = 0.0
    x[2, 9000] = np.inf             # 0 * inf is nan
    got = _run(OpKind.Prod, x, axes=(1,), keepdims=False)
    with np.errstate(invalid="ignore"):
        want = np.prod(x.astype(np.float64), axis=1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[:2], want[:2].astype(np.float32))
    assert np.signbit(got[1]) == np.signbit(want[1])


def test_prod_mixed_magnitudes_never_overflows_partially(layout):
    # factors 2**e * (1 + small) whose exponents cancel overall but wander far beyond
    # float32 (and float64) range in any running product
    n = 10000
    e = RNG.integers(40, 120, size=n // 2)
    e = RNG.permutation(np.concatenate([e, -e]))
    m = RNG.uniform(1.0, 1.0002, size=n)
    for dtype in (np.float32, np.float64):
        x = (np.ldexp(m, e)).astype(dtype)
        logs = np.log2(np.abs(x.astype(np.float64)))
        want = np.exp2(logs.sum())
        got = float(_run(OpKind.Prod, x, axes=(0,), keepdims=False))
        assert np.isfinite(got) and got > 0, got
        np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == np.float32 else 1e-10)
    # far out of range overall: inf / 0, with the sign
    big = np.full(300, -2.0**100, np.float32)
    assert float(_run(OpKind.Prod, big, axes=(0,), keepdims=False)) == np.inf
    assert float(_run(OpKind.Prod, big[:299], axes=(0,), keepdims=False)) == -np.inf
    tiny = np.full(301, -2.0**-100, np.float32)
    r = float(_run(OpKind.Prod, tiny, axes=(0,), keepdims=False))
    assert r == 0.0 and np.signbit(r)


INT_REDUCE_SHAPES = [((100003,), (0,)), ((2, 5000), (1,)), ((5000, 3), (0,)), ((7, 300, 5), (1,)),
                     ((1 << 20,), (0,)), ((16,), (0,))]


@pytest.mark.parametrize("shape,axes", INT_REDUCE_SHAPES, ids=str)
def test_int32_sum_exact_with_partials_beyond_int32(layout, shape, axes):
    """Every split and pass layout: partial sums far past int32 (+-2^30 alternating in
    runs), results that fit, exact; a result that does not fit raises, never wraps."""
    n = int(np.prod([shape[a] for a in axes]))
    run = np.where(np.arange(n) // max(n // 8, 1) % 2 == 0, 2**30, -2**30)
    x = np.moveaxis(np.broadcast_to(run, [d for i, d in enumerate(shape) if i not in axes] + [n]),
                    -1, axes[0]).reshape(shape).astype(np.int32).copy()
    x.reshape(-1)[-1] = 12345
    want = x.astype(np.int64).sum(axis=axes)
    if np.abs(want).max() <= 2**31 - 1:
        np.testing.assert_array_equal(_run(OpKind.Sum, x, axes=axes, keepdims=False), want)
    y = np.full(shape, 2**16 + 3, np.int32)          # 70000 x 65539 > 2^31 where n is large
    want = y.astype(np.int64).sum(axis=axes)
    if want.max() > 2**31 - 1:
        with pytest.raises(OverflowError, match=r"Sum: .*shape \(.*does not fit int32.*float64"):
            _run(OpKind.Sum, y, axes=axes, keepdims=False)
    else:
        np.testing.assert_array_equal(_run(OpKind.Sum, y, axes=axes, keepdims=False), want)


def test_int32_sum_issue_example_raises():
    """vkml issue 14: 70,000 copies of 65,536 summed to 292552704 (wrapped)."""
    x = vnp.full((70000,), 65536, dtype="int32")
    with pytest.raises(OverflowError, match=r"Sum: .*\(70000,\) does not fit int32"):
        vnp.sum(x)
    assert float(vnp.sum(x.astype("float64"))) == 4587520000.0
    # fused into a jitted program (the reduction reads x * 2 - x through a prologue)
    f = vkml.jit(lambda x: vnp.sum(x * 2 - x))
    with pytest.raises(OverflowError, match="Sum"):
        f(x)
    assert int(f(vnp.full((70000,), 3, dtype="int32"))) == 210000   # the same program, fits


def test_int32_prod_exact_or_raises(layout):
    p = RNG.integers(-9, 10, size=4099).astype(np.int32)
    with pytest.raises(OverflowError, match="Prod: .*does not fit int32"):
        _run(OpKind.Prod, np.abs(p) + 2, axes=(0,), keepdims=False)
    # partial products far past int32 (even past int64), then a zero: exactly 0
    q = np.full(4099, 9, np.int32)
    q[4000] = 0
    assert int(_run(OpKind.Prod, q, axes=(0,), keepdims=False)) == 0
    # signs and a result of exactly -2^31 (the int32 minimum fits)
    r = np.ones(3000, np.int32)
    r[::1000] = [-2**10, 2**10, 2**11]
    assert int(_run(OpKind.Prod, r, axes=(0,), keepdims=False)) == -2**31
    r[0] = 2**10
    with pytest.raises(OverflowError):
        _run(OpKind.Prod, r, axes=(0,), keepdims=False)


@pytest.mark.parametrize("shape,axis", [((16,), 0), ((200000,), 0), ((3, 5000), 1), ((5000, 3), 0),
                                        ((2, 70001, 3), 1)], ids=str)
def test_int32_cumsum_exact_or_raises(layout, shape, axis):
    n = shape[axis]
    step = np.where(np.arange(n) % 2 == 0, 2**30, -2**30)     # running sums stay in int32
    x = np.broadcast_to(step.reshape([-1 if i == axis else 1 for i in range(len(shape))]),
                        shape).astype(np.int32).copy()
    np.testing.assert_array_equal(np.asarray(vnp.cumsum(vnp.asarray(x), axis=axis)),
                                  np.cumsum(x, axis=axis, dtype=np.int64))
    x.reshape(-1)[-1] = 2**30                 # the last running sum reaches 2^31
    if n % 2 == 0:
        with pytest.raises(OverflowError, match=r"Cumsum: .*does not fit int32"):
            vnp.cumsum(vnp.asarray(x), axis=axis)


@pytest.mark.parametrize("op", [OpKind.ArgMax, OpKind.ArgMin], ids=lambda o: o.value)
def test_arg_ties_and_nans_across_splits(op, layout):
    n = 300007
    x = np.zeros(n, np.float32)
    assert int(_run(op, x, axes=(0,), keepdims=False)) == 0
    best = 5.0 if op is OpKind.ArgMax else -5.0
    for pos in (n - 1, 250000, 123457, 77777):
        x[pos] = best
    assert int(_run(op, x, axes=(0,), keepdims=False)) == 77777
    x[200001] = np.nan
    x[100003] = np.nan
    assert int(_run(op, x, axes=(0,), keepdims=False)) == 100003
    # columns (strided kernel) and rows of one 2-d array, each with ties
    y = RNG.integers(0, 3, size=(4099, 8)).astype(np.float64)
    f = np.argmax if op is OpKind.ArgMax else np.argmin
    np.testing.assert_array_equal(_run(op, y, axes=(0,), keepdims=False), f(y, axis=0))
    np.testing.assert_array_equal(_run(op, y.T.copy(), axes=(1,), keepdims=False), f(y.T, axis=1))
    # int32 with the extreme values themselves
    z = np.zeros(5000, np.int32)
    z[3000] = z[4000] = np.iinfo(np.int32).min if op is OpKind.ArgMin else np.iinfo(np.int32).max
    assert int(_run(op, z, axes=(0,), keepdims=False)) == 3000


def test_max_min_nan_and_bool_any_all(layout):
    x = RNG.standard_normal(70001).astype(np.float32)
    x[65432] = np.nan
    assert np.isnan(float(vnp.max(vnp.asarray(x))))
    assert np.isnan(float(vnp.min(vnp.asarray(x))))
    b = np.zeros((3, 50001), bool)
    b[1, 49999] = True
    b[2] = True
    np.testing.assert_array_equal(np.asarray(vnp.any(vnp.asarray(b), axis=1)), b.any(1))
    np.testing.assert_array_equal(np.asarray(vnp.all(vnp.asarray(b), axis=1)), b.all(1))


def test_empty_reductions():
    x = vnp.asarray(np.zeros((3, 0, 2), np.float32))
    np.testing.assert_array_equal(np.asarray(vnp.sum(x, axis=1)), np.zeros((3, 2)))
    np.testing.assert_array_equal(np.asarray(vnp.prod(x, axis=(0, 1))), np.ones(2))
    assert np.isnan(np.asarray(vnp.mean(x, axis=1))).all()
    i = vnp.asarray(np.zeros((0,), np.int32))
    assert int(vnp.sum(i)) == 0 and int(vnp.prod(i)) == 1


def test_cumsum_long_rows_accuracy(layout):
    x = RNG.random(1 << 20, dtype=np.float32)
    got = np.asarray(vnp.cumsum(vnp.asarray(x)))
    ref = np.cumsum(x.astype(np.float64))
    serial = np.cumsum(x)               # NumPy's float32 cumsum is a serial loop
    err = np.abs(got - ref) / ref
    assert err.max() <= max(np.abs(serial - ref).max() / ref[-1], 1e-6) and err.max() < 1e-5
    # columns and middle axes, long
    y = RNG.standard_normal((3001, 6)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(vnp.cumsum(vnp.asarray(y), axis=0)),
                               np.cumsum(y.astype(np.float64), axis=0), rtol=1e-4, atol=1e-4)
    z = RNG.integers(-1000, 1000, size=(2, 70001, 3)).astype(np.int32)
    z[0, 0, 0] = 2**31 - 2**24        # near the int32 limit, running sums stay inside
    np.testing.assert_array_equal(np.asarray(vnp.cumsum(vnp.asarray(z), axis=1)),
                                  np.cumsum(z, axis=1, dtype=np.int64))


@pytest.mark.parametrize("op", [OpKind.Softmax, OpKind.LogSoftmax], ids=lambda o: o.value)
def test_softmax_rows_long_short_and_inf(op, layout):
    log = op is OpKind.LogSoftmax
    for shape, axis in [((1, 100003), 1), ((5000, 3), 1), ((7, 40, 5), 1), ((300, 2), 0)]:
        x = RNG.uniform(-20, 20, size=shape).astype(np.float32)
        got = _run(op, x, axis=axis)
        np.testing.assert_allclose(got, softmax_ref(x.astype(np.float64), axis, log),
                                   rtol=2e-5, atol=1e-6 if not log else 2e-5)
    x = RNG.standard_normal((4, 3000)).astype(np.float64)
    x[0, ::7] = -np.inf
    x[1] = -np.inf
    x[2, 1234] = np.nan
    got = _run(op, x, axis=1)
    want = softmax_ref(x, 1, log)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    assert np.isnan(got[1]).all() and np.isnan(got[2]).all()
    if log:
        assert (got[0, ::7] == -np.inf).all()
    else:
        assert (got[0, ::7] == 0).all()
        np.testing.assert_allclose(got[[0, 3]].sum(1), 1.0, rtol=1e-12)
    # long rows, split into chunks: whole chunks of -inf, an all -inf row, a +inf
    x = RNG.standard_normal((4, 40000)).astype(np.float32)
    x[0, :25000] = -np.inf
    x[1] = -np.inf
    x[2, 39999] = np.inf
    got = _run(op, x, axis=1)
    want = softmax_ref(x.astype(np.float64), 1, log)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-9 if not log else 2e-5)
    assert np.isnan(got[1]).all() and np.isnan(got[2]).all()


def test_cpu_plan_small_reductions_in_one_pass():
    """On CPU devices a small reduction (a bias gradient's column sums) is one dispatch:
    a second one costs more than the loads it saves."""
    from vkml.vulkan.lower import reduce as rd
    for shape, axes in [((256, 256), (0,)), ((256, 10), (0,)), ((256, 10), (1,)), ((1024,), (0,))]:
        passes = rd.reduction_passes(*rd.split_dims(shape, axes), "cpu")
        assert len(passes) == 1 and passes[0].lx == rd.CPU_LX, (shape, passes)
    # large ones still split, so no one thread walks a long serial run
    assert len(rd.reduction_passes(*rd.split_dims((1 << 24,), (0,)), "cpu")) > 1
    assert len(rd.reduction_passes(*rd.split_dims((4096, 1024), (0,)), "cpu")) > 1


KV_CASES = [((2048, 96), (0,)), ((5, 12), (0,)), ((3, 7, 16), (0, 1)), ((4, 5, 6, 8), (0, 2)),
            ((2, 70000, 4), (1,)), ((33, 20), (0,)), ((16, 16, 8), (0,))]


@pytest.mark.parametrize("shape,axes", KV_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_column_reductions_load_four_outputs_at_once(shape, axes, dtype):
    """On a CPU device a reduction over strided elements loads four neighbouring
    outputs' elements at once (`Pass.kvec`): against NumPy for Sum, Mean, Max and Min,
    with fused prologues whose loads are vectors, broadcasts along the kept axis
    (scalars) and transposed (gathers), and an epilogue; split runs included."""
    from vkml.vulkan.lower import reduce as rd
    a = (RNG.standard_normal(shape) * 3).astype(dtype)
    b = (RNG.standard_normal(shape[-1:]) * 2).astype(dtype)
    c = RNG.standard_normal(shape[:-1] + (1,)).astype(dtype)
    A, B, C = (v.astype(np.float64) for v in (a, b, c))
    ax = axes
    flip = lambda v: v.swapaxes(0, 1) if v.ndim > 1 and v.shape[0] == v.shape[1] else v   # noqa: E731
    cases = [(lambda x, y, z: vnp.sum(x, axis=ax), A.sum(ax)),
             (lambda x, y, z: vnp.max(x, axis=ax), A.max(ax)),
             (lambda x, y, z: vnp.min(x * y + z, axis=ax), (A * B + C).min(ax))]
    if dtype != np.int32:
        cases += [(lambda x, y, z: vnp.mean(vnp.tanh(x) * z, axis=ax), (np.tanh(A) * C).mean(ax)),
                  (lambda x, y, z: vnp.exp(vnp.sum(x * y, axis=ax) * 0.01) + 1, np.exp((A * B).sum(ax) * 0.01) + 1)]
    if shape[0] == shape[1]:
        cases.append((lambda x, y, z: vnp.sum(vnp.swapaxes(x, 0, 1) * x, axis=ax), (flip(A) * A).sum(ax)))
    eps = {np.float32: 2.0 ** -23, np.float64: 2.0 ** -52, np.int32: 0}[dtype]
    count = int(np.prod([shape[i] for i in axes]))
    for f, want in cases:
        got = np.asarray(vkml.jit(f)(vnp.asarray(a), vnp.asarray(b), vnp.asarray(c))).astype(np.float64)
        # a sum's rounding grows with its terms' magnitudes: a few ulps of sqrt(count)
        # times the largest term (every term is at most |a| * |b| + |c| here)
        scale = (np.abs(A).max() * max(1.0, np.abs(B).max()) + np.abs(C).max()) * np.sqrt(count)
        np.testing.assert_allclose(got, want, rtol=8 * eps * np.sqrt(count), atol=8 * eps * scale)
    kept, red = rd.split_dims(shape, axes)
    if vkml.vulkan.device.get().profile.layout == "cpu":
        assert rd.reduction_passes(kept, red, "cpu", 65535, True)[0].kvec


@pytest.mark.parametrize("how", ["cpu", "gpu"])
def test_no_thread_walks_past_the_loop_limit(how):
    """lavapipe ends any shader loop after 65535 iterations (`Profile.loop_limit`): every
    plan keeps one thread's run within max_run loads, however many outputs share the
    device; a driver without a limit gets the same plan where no run is that long."""
    from vkml.vulkan.device import profile_for
    from vkml.vulkan.lower import reduce as rd
    limit = profile_for("lavapipe", 4, True, 32).loop_limit
    assert limit == 65535 and rd.max_run(limit) == 1 << 15
    for shape, axes in [((1 << 17, 100003), (1,)), ((100003, 1 << 17), (0,)), ((300001,), (0,)),
                        ((1 << 20, 64), (0,))]:
        for kvec in (False, True):
            for p in rd.reduction_passes(*rd.split_dims(shape, axes), how, limit, kvec):
                assert p.C <= rd.max_run(limit) or p.kind == "row", (shape, p)
    short = rd.split_dims((64, 4096), (1,))
    assert rd.reduction_passes(*short, how, limit) == rd.reduction_passes(*short, how)


@pytest.mark.parametrize("shape,axes", [((256, 256), (0,)), ((37, 1000), (1,)), ((300001,), (0,)),
                                        ((6, 7, 50), (0, 2))])
def test_unrolled_thread_runs_match_the_loop(shape, axes):
    """Thread passes write `Profile.reduce_unroll` steps out per iteration, then finish
    the run in a loop: the same bits as the loop alone, for runs that are and are not
    multiples of it (with a fused prologue and epilogue)."""
    x = vnp.asarray(RNG.standard_normal(shape).astype(np.float32))
    outs = []
    for u in (1, vkml.vulkan.device.get().profile.reduce_unroll):
        with vkml.vulkan.device.using(reduce_unroll=u):
            outs.append(np.asarray(vkml.jit(lambda v: vnp.sum(v * v, axis=axes) * 0.5 + 1.0)(x)))
    np.testing.assert_array_equal(outs[0], outs[1])
    want = (x.numpy().astype(np.float64) ** 2).sum(axis=axes) * 0.5 + 1.0
    np.testing.assert_allclose(outs[1], want, rtol=1e-5)


def _heavy(xp, x, y):
    # a prologue past PROLOGUE_BUDGET four times over: library calls on every element
    return xp.sin(xp.tanh(x * y) + xp.cos(x)) * xp.exp(-xp.abs(x)) + xp.sin(y) * xp.cos(x * 0.5)


@pytest.mark.parametrize("shape,axes,op", [((7, 4096), (1,), "sum"), ((40003,), (0,), "max"),
                                           ((512, 12), (0,), "mean"), ((3, 70001), (1,), "argmax"),
                                           ((2, 150000), (1,), "sum")])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_long_prologue_reads_one_element_at_a_time(shape, axes, op, dtype):
    """On a CPU device a reduction whose fused prologue is long reads one element at a
    time in its first pass (`reduce.prologue_alone`: one copy of the prologue's code, not
    the four a vector load's elements need), whether the reduced axis or the kept one is
    innermost; later passes and long split runs as before; against NumPy."""
    from vkml.vulkan.lower import reduce as rd
    x = RNG.uniform(-3, 3, shape).astype(dtype)
    y = RNG.uniform(-2, 2, shape[-1:]).astype(dtype)
    ax = axes[0]
    f = {"sum": lambda v: vnp.sum(v, axis=ax), "max": lambda v: vnp.max(v, axis=ax),
         "mean": lambda v: vnp.mean(v, axis=ax), "argmax": lambda v: vnp.argmax(v, axis=ax)}[op]
    g = {"sum": lambda v: v.sum(ax), "max": lambda v: v.max(ax), "mean": lambda v: v.mean(ax),
         "argmax": lambda v: v.argmax(ax)}[op]
    jf = vkml.jit(lambda a, b: f(_heavy(vnp, a, b)))
    got = np.asarray(jf(vnp.asarray(x), vnp.asarray(y)))
    want = g(_heavy(np, x.astype(np.float64), y.astype(np.float64)))
    if op == "argmax":
        ref = _heavy(np, x.astype(np.float64), y.astype(np.float64))
        picked = np.take_along_axis(ref, np.expand_dims(got, ax), ax).squeeze(ax)
        np.testing.assert_allclose(picked, ref.max(ax), rtol=1e-5 if dtype == np.float32 else 1e-12)
    else:
        count = shape[ax]
        eps = 2.0 ** -23 if dtype == np.float32 else 2.0 ** -52
        np.testing.assert_allclose(got, want, rtol=64 * eps * np.sqrt(count), atol=64 * eps * np.sqrt(count) * 3)
    dev = vkml.vulkan.device.get()
    low = jf._entry((vnp.asarray(x), vnp.asarray(y)))[0][0].lowered
    srcs = [d.kernel.program.render() for d in low.dispatches if "_pro" in d.kernel.name]
    assert srcs
    # the prologue is called once per load: at one place in main()
    calls = [s_.split("void main")[1].count("pro(") for s_ in srcs]
    assert all(c == 1 for c in calls) if dev.profile.cpu else all(c >= 1 for c in calls)
    assert rd.prologue_alone(dev.profile, 1000) == bool(dev.profile.cpu)
