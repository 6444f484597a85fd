"""MatMul kernels beyond the registry cases: a larger product against float64 NumPy with
an error bound that grows like sqrt(k), every tiling strategy on the device at hand (the
GPU `shared` kernel runs on lavapipe, the CPU `subgroup` one on a GPU), odd sizes around the tile and chunk edges,
broadcast batches, and the tiling choice under other devices' limits.
"""
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import vkml.numpy as vnp
from vkml.array import bind
from vkml.trace.ops import OpKind
from vkml.vulkan import device
from vkml.vulkan.lower import matmul as mm

RNG = np.random.default_rng(5)
EPS32 = np.finfo(np.float32).eps

TILINGS = {
    "device": None,                                   # what this device runs by default
    "gpu": mm.GPU_TILING,
    "gpu-small": mm.Tiling("shared", tm=2, tn=4, bm=16, bn=32, bk=4),
    "gpu-vec4": mm.Tiling("shared", tm=8, tn=8, bm=128, bn=128, bk=8),
    "gpu-vec4-small": mm.Tiling("shared", tm=4, tn=8, bm=16, bn=32, bk=8),
    "cpu": mm.CPU_TILING,
    "cpu-narrow": mm.Tiling("subgroup", tm=4, tn=4, wa=1, wb=4),
    "cpu-wideA": mm.Tiling("subgroup", tm=8, tn=8, wa=8, wb=2),
    # the subgroup kernel with storage-buffer operands and one store per element (on a
    # CPU device it otherwise reads float32 operands as texels and stores runs of columns)
    "cpu-ssbo": mm.CPU_TILING,
    "cpu-narrow-ssbo": mm.Tiling("subgroup", tm=4, tn=4, wa=1, wb=4),
}


def _variant(name: str) -> dict:
    """The profile of a TILINGS entry: its tiling forced, and for an -ssbo one operands
    and epilogue leaves as storage buffers, one store per element."""
    changes = {"matmul_tiling": TILINGS[name]}
    if name.endswith("-ssbo"):
        changes.update(matmul_texels=False, matmul_wide_stores=False)
    return changes


@pytest.fixture(params=list(TILINGS))
def tiling(request):
    with device.using(**_variant(request.param)):
        yield request.param


@pytest.fixture(params=["vec4", "vec4-prefetch", "scalar"])
def vec4(request):
    """The shared kernel's vec4 variant where it fits (with and without register
    prefetch), then the scalar one everywhere."""
    with device.using(matmul_vec4=request.param != "scalar", matmul_prefetch=request.param == "vec4-prefetch"):
        yield request.param


def _matmul(a, b):
    return np.asarray(bind(OpKind.MatMul, [vnp.asarray(a), vnp.asarray(b)]))


def test_large_float32_against_float64():
    m, k, n = 256, 300, 129
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    got = _matmul(a, b).astype(np.float64)
    want = a.astype(np.float64) @ b.astype(np.float64)
    # rounding errors of a k-term float32 sum grow like sqrt(k) ulps of the result's
    # scale (NumPy's own float32 product: max 1.3, rms 0.3 of this unit); one lost or
    # doubled term (size ~1) would be off by ~3e4 units
    unit = np.sqrt(k) * EPS32 * np.sqrt(np.mean(want ** 2))
    err = np.abs(got - want)
    assert err.max() < 4 * unit, err.max() / unit
    assert np.sqrt(np.mean(err ** 2)) < unit


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("shapes", [
    ((65, 129), (129, 66)),           # one past the tile edges, odd k after whole chunks
    ((1, 7), (7, 1)),
    ((40, 17), (17, 129)),            # k below one chunk: the remainder loop only
    ((3, 1, 33, 24), (4, 24, 9)),     # batch broadcast from both sides
    ((2, 5, 0), (2, 0, 3)),           # k = 0
], ids=lambda s: "x".join(map(str, s[0])) + "@" + "x".join(map(str, s[1])))
def test_tilings(tiling, dtype, shapes):
    _check_product(dtype, shapes)


def test_special_values_stay_local(tiling):
    """inf and nan reach exactly the outputs whose row and column they are on (clamped
    edge loads and remainder steps must not leak them elsewhere)."""
    a = RNG.uniform(1, 2, (9, 19)).astype(np.float32)
    b = RNG.uniform(1, 2, (19, 70)).astype(np.float32)
    a[8, 18] = np.inf          # last row, last k: the remainder step of the edge row
    b[18, 69] = np.nan         # last k, last column
    got = _matmul(a, b)
    with np.errstate(invalid="ignore"):      # inf * 0 terms in the reference
        want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5)


def test_vector_operands_through_numpy_surface():
    a = RNG.standard_normal(33).astype(np.float32)
    b = RNG.standard_normal((33, 5)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(vnp.matmul(vnp.asarray(a), vnp.asarray(b))), a @ b,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(vnp.asarray(b.T) @ vnp.asarray(a)), b.T @ a,
                               rtol=1e-5, atol=1e-5)


def _fake(is_cpu, sub, smem, inv, int64=True, cores=None):
    """A device's limits and the profile of a CPU (lavapipe) or GPU (NVIDIA) driver."""
    prof = device.profile_for("lavapipe" if is_cpu else "nvidia", 4 if is_cpu else 2, int64, 1 << 20)
    if cores is not None:
        prof = replace(prof, cores=cores)
    return SimpleNamespace(profile=prof, subgroup_size=sub, max_shared_memory=smem,
                           max_workgroup_invocations=inv, has_int64=int64, name="fake")


@pytest.mark.parametrize("dev", [_fake(False, 32, 48 << 10, 1024), _fake(False, 64, 32 << 10, 256),
                                 _fake(False, 32, 16 << 10, 128)], ids=["nvidia", "amd-ish", "small"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_tiling_fits_limits(dev, dtype):
    t = mm.choose_tiling(dev, dtype, 1024, 1024, 1024)
    threads = (t.bm // t.tm) * (t.bn // t.tn)
    assert t.strategy == "shared"
    assert threads <= dev.max_workgroup_invocations
    assert t.bk * (t.bm + t.bn + 2) * np.dtype(dtype).itemsize <= dev.max_shared_memory


def test_gpu_products_too_small_for_the_device_take_smaller_tiles():
    gpu = _fake(False, 32, 48 << 10, 1024)
    t, _ = mm.select_tiling(gpu, np.float32, 4096, 10, 4096)           # 32 tiles of 128 x 128
    assert (t.bm, t.bn) == (mm.SKINNY_TILING.bm, mm.SKINNY_TILING.bn)
    t, _ = mm.select_tiling(gpu, np.float32, 4096, 4096, 4096)         # plenty of tiles
    assert t == mm.VEC4_TILINGS[(False, False)][0]
    t, _ = mm.select_tiling(gpu, np.float32, 64, 10, 64, nbatch=512)   # the batch fills it
    assert t.bm != mm.SKINNY_TILING.bm or t.bn != mm.SKINNY_TILING.bn
    assert mm.select_tiling(_fake(True, 8, 32 << 10, 1024), np.float32, 4096, 10, 4096)[0].strategy == "subgroup"


def test_cpu_tiling_shrinks_to_small_operands():
    dev = _fake(True, 8, 32 << 10, 1024)
    big = mm.choose_tiling(dev, np.float32, 1024, 1024, 1024)
    assert (big.tm, big.tn, big.wa, big.wb) == (mm.CPU_TILING.tm, mm.CPU_TILING.tn, 2, 8)
    t = mm.choose_tiling(dev, np.float32, 1, 5, 7)        # a row vector, odd n and k
    assert (t.tm, t.tn, t.wa, t.wb) == (1, 1, 1, 1)
    t = mm.choose_tiling(dev, np.float64, 100, 100, 100)  # doubles: at most 4 per load
    assert t.wb == 4 and t.wa == 2
    assert mm.choose_tiling(_fake(True, 8, 32 << 10, 1024, int64=False), np.float32, 64, 64, 64).wb == 4


def test_cpu_tiling_follows_the_subgroup_width():
    """16 lanes (lavapipe with 512-bit vectors) take half the rows and k per lane of 8."""
    assert mm.cpu_tiling(8) == mm.CPU_TILING
    t = mm.cpu_tiling(16)
    assert (t.tm, t.tn, t.wa, t.wb) == (mm.CPU_TILING.tm // 2, mm.CPU_TILING.tn, 1, mm.CPU_TILING.wb)
    big = mm.choose_tiling(_fake(True, 16, 32 << 10, 1024), np.float32, 1024, 1024, 1024)
    assert (big.tm, big.tn, big.wa, big.wb) == (t.tm, t.tn, 1, 8)


def test_cpu_tiling_keeps_every_core_busy():
    """Row tiles shrink until there are four subgroups per core (not below 16 rows)."""
    dev = _fake(True, 8, 32 << 10, 1024, cores=2)
    assert mm.choose_tiling(dev, np.float32, 1024, 1024, 1024).tm == mm.CPU_TILING.tm
    t = mm.choose_tiling(dev, np.float32, 256, 10, 256)    # n = 10: one column tile
    assert (t.tm, t.tn) == (32, 2)
    assert mm.choose_tiling(dev, np.float32, 64, 10, 256).tm == 16


def _transposed_inputs(sa, sb, which):
    """Operands A (sa) and B (sb), and the arrays a test passes: each operand named in
    `which` stored transposed (the function under test transposes it back)."""
    a = RNG.uniform(-2, 2, sa).astype(np.float32)
    b = RNG.uniform(-2, 2, sb).astype(np.float32)
    ta, tb = which in ("A.T", "both"), which in ("B.T", "both")
    at = np.ascontiguousarray(np.swapaxes(a, -1, -2)) if ta else a
    bt = np.ascontiguousarray(np.swapaxes(b, -1, -2)) if tb else b
    return a, b, at, bt, ta, tb


@pytest.mark.parametrize("which", ["A.T", "B.T", "both"])
@pytest.mark.parametrize("shapes", [((65, 129), (129, 66)), ((40, 17), (17, 129)),
                                    ((3, 2, 33, 24), (2, 24, 9)), ((68, 36), (36, 132)),
                                    ((2, 3, 20, 44), (3, 44, 12))],
                         ids=lambda s: "x".join(map(str, s[0])) + "@" + "x".join(map(str, s[1])))
def test_transposed_operands_read_in_place(which, shapes, vec4):
    """Under jit the shared kernel reads a transposed operand where it lies (no Permute
    kernel); results match NumPy and the transposes are gone from the schedule."""
    import vkml
    from vkml.vulkan import fusion
    sa, sb = shapes
    a, b, at, bt, ta, tb = _transposed_inputs(sa, sb, which)

    def f(x, y):
        return ((vnp.swapaxes(x, -1, -2) if ta else x) + 0.0) @ (vnp.swapaxes(y, -1, -2) if tb else y)

    def g(x, y):   # the transposes read straight from the inputs
        return (vnp.swapaxes(x, -1, -2) if ta else x) @ (vnp.swapaxes(y, -1, -2) if tb else y)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    with device.using(matmul_tiling=mm.Tiling("shared", tm=4, tn=8, bm=16, bn=32, bk=8) if vec4 != "scalar"
                      else mm.Tiling("shared", tm=2, tn=4, bm=16, bn=32, bk=4)):
        for fn in (f, g):
            jf = vkml.jit(fn)
            got = np.asarray(jf(vnp.asarray(at), vnp.asarray(bt)))
            np.testing.assert_allclose(got, want, rtol=0, atol=64 * EPS32 * np.sqrt(sa[-1]))
            groups = fusion.schedule(jf.lower(vnp.asarray(at), vnp.asarray(bt)).graph)
            assert not any(gr.node is not None and gr.node.op is OpKind.Permute for gr in groups)
            mmg = [gr for gr in groups if gr.node is not None and gr.node.op is OpKind.MatMul]
            assert len(mmg) == 1 and mmg[0].transposed == (ta, tb)


@pytest.mark.parametrize("which", ["A.T", "B.T", "both"])
@pytest.mark.parametrize("shapes", [((65, 129), (129, 66)), ((40, 17), (17, 129)),
                                    ((3, 2, 33, 24), (2, 24, 9)), ((68, 36), (36, 132)),
                                    ((2, 3, 20, 44), (3, 44, 12)), ((5, 3), (3, 7)),
                                    ((256, 256), (256, 10)), ((16, 64), (64, 64))],
                         ids=lambda s: "x".join(map(str, s[0])) + "@" + "x".join(map(str, s[1])))
@pytest.mark.parametrize("sub", ["cpu", "cpu-narrow", "cpu-wideA", "cpu-ssbo"])
def test_subgroup_kernel_reads_transposed_operands(which, shapes, sub):
    """The subgroup kernel (CPU devices) reads A^T one k per lane and B^T along k: odd
    sizes, remainders of k, batches and broadcasts match NumPy, with no Permute kernel
    (operands as texels or storage buffers)."""
    import vkml
    from vkml.vulkan import fusion
    sa, sb = shapes
    a, b, at, bt, ta, tb = _transposed_inputs(sa, sb, which)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    with device.using(**_variant(sub)):
        jf = vkml.jit(lambda x, y: (vnp.swapaxes(x, -1, -2) if ta else x) @ (vnp.swapaxes(y, -1, -2) if tb else y))
        got = np.asarray(jf(vnp.asarray(at), vnp.asarray(bt)))
        np.testing.assert_allclose(got, want, rtol=0, atol=64 * EPS32 * np.sqrt(sa[-1]))
        groups = fusion.schedule(jf.lower(vnp.asarray(at), vnp.asarray(bt)).graph)
        assert not any(gr.node is not None and gr.node.op is OpKind.Permute for gr in groups)


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
@pytest.mark.parametrize("which", ["A.T", "B.T", "both"])
def test_subgroup_kernel_reads_transposed_operands_of_any_dtype(which, dtype):
    import vkml
    ta, tb = which in ("A.T", "both"), which in ("B.T", "both")
    a = RNG.integers(-9, 9, (2, 37, 20)).astype(dtype)
    b = RNG.integers(-9, 9, (20, 24)).astype(dtype)
    at = np.ascontiguousarray(np.swapaxes(a, -1, -2)) if ta else a
    bt = np.ascontiguousarray(np.swapaxes(b, -1, -2)) if tb else b
    with device.using(matmul_tiling=TILINGS["cpu"]):
        jf = vkml.jit(lambda x, y: (vnp.swapaxes(x, -1, -2) if ta else x) @ (vnp.swapaxes(y, -1, -2) if tb else y))
        np.testing.assert_array_equal(np.asarray(jf(vnp.asarray(at), vnp.asarray(bt))), a @ b)


def test_vec4_kernel_runs_where_it_fits():
    """float32 with k and n multiples of 4 takes the vec4 shared kernel; n = 9 does not."""
    import vkml
    with device.using(matmul_tiling=TILINGS["gpu-vec4"]):
        for n, want in ((12, "MatMul_shared4"), (9, "MatMul_shared")):
            f = vkml.jit(lambda x, y: x @ y)
            names = [k for k, _ in f.profile(vnp.ones((8, 16)), vnp.ones((16, n)))]
            assert names == [want], (n, names)


@pytest.mark.parametrize("unroll_k,double", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("layout", sorted(mm.VEC4_TILINGS))
def test_tuned_vec4_tilings(layout, unroll_k, double):
    """Each layout's tuned GPU tiling (and its prefetch choice), run here by force, on
    sizes past its tile edges (k = 72: a partial last slab), with the slab loop rolled or
    marked [[unroll]] and the slabs in one shared buffer or two (`tiling.vec4_scheme`)."""
    import vkml
    ta, tb = layout
    tiling, prefetch = mm.VEC4_TILINGS[layout]
    a = RNG.uniform(-2, 2, (2, 132, 72)).astype(np.float32)
    b = RNG.uniform(-2, 2, (2, 72, 136)).astype(np.float32)
    at = np.ascontiguousarray(np.swapaxes(a, -1, -2)) if ta else a
    bt = np.ascontiguousarray(np.swapaxes(b, -1, -2)) if tb else b
    f = vkml.jit(lambda x, y: (vnp.swapaxes(x, -1, -2) if ta else x) @ (vnp.swapaxes(y, -1, -2) if tb else y))
    with device.using(matmul_tiling=tiling, matmul_prefetch=prefetch, matmul_spec_tiles=True,
                      matmul_unroll_k=unroll_k, matmul_double_buffer=double):
        got = np.asarray(f(vnp.asarray(at), vnp.asarray(bt)))
        names = [k for k, _ in f.profile(vnp.asarray(at), vnp.asarray(bt))]
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * EPS32 * np.sqrt(72))
    assert names == ["MatMul_shared4"]


@pytest.mark.parametrize("name", ["device", "gpu", "gpu-vec4", "gpu-vec4-small"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("shapes", [
    ((68, 36), (36, 132)),            # k, n multiples of 4 (vec4 for float32), past the tile edges
    ((3, 1, 20, 44), (4, 44, 12)),    # the same with a batch broadcast
    ((2, 5, 0), (2, 0, 4)),           # k = 0
], ids=lambda s: "x".join(map(str, s[0])) + "@" + "x".join(map(str, s[1])))
def test_vec4_eligible_shapes(name, dtype, shapes, vec4):
    """Shapes the vec4 kernel takes (float32), on the shared tilings, against the scalar
    kernel's answer and NumPy; other dtypes take the scalar kernel on the same shapes."""
    with device.using(matmul_tiling=TILINGS[name]):
        _check_product(dtype, shapes)


def _check_product(dtype, shapes):
    sa, sb = shapes
    if np.dtype(dtype).kind == "i":
        a, b = RNG.integers(-9, 10, sa).astype(dtype), RNG.integers(-9, 10, sb).astype(dtype)
    else:
        a, b = RNG.uniform(-2, 2, sa).astype(dtype), RNG.uniform(-2, 2, sb).astype(dtype)
    got = _matmul(a, b)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == want.shape and got.dtype == dtype
    if np.dtype(dtype).kind == "i":
        np.testing.assert_array_equal(got, want.astype(dtype))
    else:
        eps = np.finfo(dtype).eps
        np.testing.assert_allclose(got, want, rtol=0, atol=64 * eps * np.sqrt(max(sa[-1], 1)))


# --------------------------------------------------------------------------- epilogues

_EPILOGUES = {
    # name: (function of (product, extra operand), extra operand's shape given the product's)
    "bias-relu": (lambda p, e: vnp.maximum(p + e, 0.0), lambda s: s[-1:]),
    "row-scale": (lambda p, e: p * e, lambda s: s[-2:-1] + (1,)),
    "mask": (lambda p, e: vnp.where(e > 0, p, 0.0), lambda s: s),
    "sgd": (lambda p, e: e - 0.01 * p, lambda s: s),
    "scalar": (lambda p, e: p * 3.0 + e, lambda s: ()),
}


@pytest.mark.parametrize("name", list(_EPILOGUES))
@pytest.mark.parametrize("shapes", [((33, 20), (20, 17)), ((3, 9, 8), (8, 12)), ((2, 3, 5, 16), (3, 16, 7))],
                         ids=lambda s: "x".join(map(str, s[0])) + "@" + "x".join(map(str, s[1])))
@pytest.mark.parametrize("tiling", ["device", "gpu-small", "gpu-vec4-small", "cpu", "cpu-narrow", "cpu-ssbo"],
                         indirect=True)
@pytest.mark.parametrize("transposed", [False, True], ids=["AB", "ATBT"])
def test_epilogue_runs_in_the_matmul_kernel(name, shapes, tiling, transposed):
    """A small elementwise consumer of a MatMul is applied at its stores: one kernel, the
    same values as computed apart (fusion off), for biases, row scales, masks, optimiser
    updates and scalars, batched or not, with transposed operands or not."""
    import vkml
    from vkml.vulkan import fusion
    fn, extra = _EPILOGUES[name]
    sa, sb = shapes
    a = RNG.uniform(-1, 1, sa).astype(np.float32)
    b = RNG.uniform(-1, 1, sb).astype(np.float32)
    out_shape = np.matmul(a, b).shape
    e = RNG.uniform(-1, 1, extra(out_shape)).astype(np.float32)
    args = [np.ascontiguousarray(np.swapaxes(a, -1, -2)), np.ascontiguousarray(np.swapaxes(b, -1, -2))] \
        if transposed else [a, b]

    def f(x, y, z):
        if transposed:
            x, y = vnp.swapaxes(x, -1, -2), vnp.swapaxes(y, -1, -2)
        return fn(x @ y, z)
    vargs = [vnp.asarray(v) for v in args + [e]]
    want = np.asarray(fn(vnp.asarray(np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)),
                         vnp.asarray(e)))
    jf = vkml.jit(f)
    got = np.asarray(jf(*vargs))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=32 * EPS32 * np.sqrt(sa[-1]))
    groups = fusion.schedule(jf.lower(*vargs).graph)
    assert len(groups) == 1 and groups[0].node.op is OpKind.MatMul and groups[0].epilogue is not None
    with fusion.disabled():
        np.testing.assert_allclose(np.asarray(vkml.jit(f)(*vargs)), got, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_epilogue_of_other_dtypes(dtype):
    import vkml
    a = RNG.integers(-5, 5, (2, 7, 9)).astype(dtype)
    b = RNG.integers(-5, 5, (9, 6)).astype(dtype)
    c = RNG.integers(-5, 5, (6,)).astype(dtype)
    got = vkml.jit(lambda x, y, z: vnp.maximum(x @ y + z, 0))(vnp.asarray(a), vnp.asarray(b), vnp.asarray(c))
    np.testing.assert_array_equal(np.asarray(got), np.maximum(a @ b + c, 0))


def test_epilogue_not_fused_where_its_loads_would_not_fit():
    """A per-batch bias (a batch stride) or a product used twice keeps its own kernels."""
    import vkml
    from vkml.vulkan import fusion
    a = RNG.uniform(-1, 1, (3, 5, 4)).astype(np.float32)
    b = RNG.uniform(-1, 1, (4, 6)).astype(np.float32)
    c = RNG.uniform(-1, 1, (3, 1, 6)).astype(np.float32)
    for f, want in [(lambda x, y, z: x @ y + z, a @ b + c),
                    (lambda x, y, z: ((x @ y) * 2.0, (x @ y).sum()), None)]:
        jf = vkml.jit(f)
        args = [vnp.asarray(v) for v in (a, b, c)]
        got = jf(*args)
        if want is not None:
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
        groups = fusion.schedule(jf.lower(*args).graph)
        assert all(g.epilogue is None for g in groups if g.node is not None and g.node.op is OpKind.MatMul)


def test_relu_layer_under_grad_is_one_kernel_forward():
    """relu's gradient reads relu's output (x > 0 exactly where relu(x) > 0, nan included),
    so a layer's pre-activation x @ w + b need not be kept: bias and relu run at the
    MatMul's stores even when the backward pass follows."""
    import vkml
    from vkml.nn import functional as F
    from vkml.vulkan import fusion
    x = vnp.asarray(RNG.uniform(-1, 1, (16, 8)).astype(np.float32))
    w = vnp.asarray(RNG.uniform(-1, 1, (8, 12)).astype(np.float32))
    b = vnp.asarray(RNG.uniform(-1, 1, (12,)).astype(np.float32))
    v = vnp.asarray(RNG.uniform(-1, 1, (12, 3)).astype(np.float32))
    f = vkml.jit(vkml.value_and_grad(lambda w, b: (F.relu(x @ w + b) @ v).sum(), argnums=(0, 1)))
    groups = fusion.schedule(f.lower(w, b).graph)
    # the layer's output relu(x @ w + b) is stored by the MatMul kernel; nothing else of
    # that shape is computed before the backward pass's mask
    assert any(g.epilogue is not None and g.out.op is OpKind.Relu for g in groups)
    assert not any(g.node is None and g.out.shape == (16, 12) and g.out.op is OpKind.Relu for g in groups)
    _, (gw, gb) = f(w, b)
    z = np.asarray(x) @ np.asarray(w) + np.asarray(b)
    dz = np.asarray(v).sum(1) * (z > 0)
    np.testing.assert_allclose(np.asarray(gw), np.asarray(x).T @ dz, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(gb), dz.sum(0), rtol=1e-5, atol=1e-5)
    g = vkml.grad(lambda v: F.relu(v).sum())(vnp.asarray(np.array([-1.0, 0.0, 2.0, np.nan], np.float32)))
    np.testing.assert_array_equal(np.asarray(g)[:3], [0.0, 0.0, 1.0])


def test_texel_operands_only_where_views_allow():
    """A device whose profile reads the matmul's operands as texels (lavapipe) does so only
    when both views start on a texel boundary and hold whole texels within the device's
    limit; else storage buffers."""
    lvp = device.profile_for("lavapipe", 4, True, 32)
    cpu = SimpleNamespace(profile=lvp, texel_alignment=16, max_texels=1 << 27)
    t = mm.Tiling("subgroup", tm=8, tn=8, wa=2, wb=8)
    v = lambda off, n: SimpleNamespace(offset=off, nbytes=n, dtype=np.dtype(np.float32))
    assert mm.texel_operands(cpu, "float", t, v(0, 4096), v(256, 4096))
    assert not mm.texel_operands(cpu, "float", t, v(0, 4096), v(8, 4096))      # B off a texel
    assert not mm.texel_operands(cpu, "float", t, v(4, 4096), v(0, 4096))      # A off a texel
    assert not mm.texel_operands(cpu, "float", t, v(0, 4), v(0, 4096))         # A under one texel
    assert not mm.texel_operands(cpu, "double", t, v(0, 4096), v(0, 4096))
    assert not mm.texel_operands(SimpleNamespace(**{**vars(cpu), "profile": replace(lvp, matmul_texels=False)}),
                                 "float", t, v(0, 4096), v(0, 4096))
    assert not mm.texel_operands(SimpleNamespace(**{**vars(cpu), "max_texels": 100}), "float", t,
                                 v(0, 4096), v(0, 4096))


@pytest.mark.parametrize("n", [8, 10, 12, 66, 64])
def test_wide_stores_mask_whole_runs(n, monkeypatch):
    """Columns stored ws at a time: every n (a multiple of the run, of two, or neither)
    writes exactly the product, nothing past the row (checked through a fused neighbour).
    (Small products store one at a time: they are made to take the shape-fitted kernel.)"""
    import vkml
    from vkml.vulkan.lower.matmul import tiling
    monkeypatch.setattr(tiling, "SMALL_PRODUCT", 0)
    a = RNG.standard_normal((33, 24)).astype(np.float32)
    b = RNG.standard_normal((24, n)).astype(np.float32)
    c = RNG.standard_normal((33, n)).astype(np.float32)
    f = vkml.jit(lambda x, y, z: (x @ y, z * 2))
    got, twice = f(vnp.asarray(a), vnp.asarray(b), vnp.asarray(c))
    np.testing.assert_allclose(np.asarray(got), a.astype(np.float64) @ b, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(twice), c * 2)


# --------------------------------------------------------------------------- specialisation

@pytest.mark.parametrize("tiling", ["gpu", "gpu-small", "gpu-vec4", "gpu-vec4-small"], indirect=True)
@pytest.mark.parametrize("layout", ["NN", "TN", "NT", "TT"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_specialised_tiles_match_tiles_in_the_source(tiling, layout, dtype):
    """The GPU kernels take their tiling as specialisation constants; the same tiling
    baked into the source (`Profile.matmul_spec_tiles` off) computes the same bits,
    transposes, edges, a bias epilogue and all."""
    import vkml
    a = RNG.uniform(-1, 1, (70, 36) if layout[0] == "N" else (36, 70)).astype(dtype)
    b = RNG.uniform(-1, 1, (36, 68) if layout[1] == "N" else (68, 36)).astype(dtype)
    c = RNG.uniform(-1, 1, (68,)).astype(dtype)

    def f(x, y, z):
        x = x if layout[0] == "N" else x.T
        y = y if layout[1] == "N" else y.T
        return vnp.maximum(x @ y + z, 0.0), x @ y
    args = [vnp.asarray(v) for v in (a, b, c)]
    outs = {}
    for spec in (True, False):
        with device.using(matmul_spec_tiles=spec):
            outs[spec] = [np.asarray(r) for r in vkml.jit(f)(*args)]
    for s, t in zip(outs[True], outs[False]):
        np.testing.assert_array_equal(s, t)
    want = (a if layout[0] == "N" else a.T).astype(np.float64) @ (b if layout[1] == "N" else b.T)
    np.testing.assert_allclose(outs[True][1], want, rtol=0, atol=64 * np.finfo(dtype).eps * 6)


def test_one_module_serves_every_tiling():
    """Two shared-memory tilings of one product: the same GLSL (one SPIR-V module), two
    pipelines told apart by their specialisation constants (the local size, id 0, and
    the tiling, ids 1-5)."""
    import vkml
    a = vnp.asarray(RNG.uniform(-1, 1, (40, 24)).astype(np.float32))
    kernels = []
    for t in (mm.Tiling("shared", tm=2, tn=4, bm=16, bn=32, bk=4), mm.Tiling("shared", tm=4, tn=2, bm=32, bn=16, bk=8)):
        with device.using(matmul_spec_tiles=True, matmul_tiling=t):
            jf = vkml.jit(lambda x: x @ x.T)
            jf(a)
            kernels.append(jf._entry((a,))[0][0].lowered.dispatches[0].kernel)
    k1, k2 = kernels
    assert k1.source == k2.source and k1.pipeline != k2.pipeline
    assert (k1.local_size, *k1.spec) == (64, 2, 4, 16, 32, 4) and (k2.local_size, *k2.spec) == (64, 4, 2, 32, 16, 8)
    # float64 keeps its tiles in the source (an array of doubles stays in memory on NVIDIA)
    d = vnp.asarray(RNG.uniform(-1, 1, (40, 24)))
    with device.using(matmul_tiling=mm.Tiling("shared", tm=2, tn=4, bm=16, bn=32, bk=4)):
        jf = vkml.jit(lambda x: x @ x.T)
        jf(d)
        assert jf._entry((d,))[0][0].lowered.dispatches[0].kernel.spec == ()


def test_set_tiling_forces_the_profile_tiling():
    """`set_tiling` is the profile's `matmul_tiling` (so jit compiles apart for it); None
    restores the device's choice."""
    t = mm.Tiling("shared", tm=2, tn=4, bm=16, bn=32, bk=4)
    mm.set_tiling(t)
    try:
        assert device.get().profile.matmul_tiling == t
        assert mm.choose_tiling(device.get(), np.float32, 64, 64, 64) == t
    finally:
        mm.set_tiling(None)
    assert device.get().profile.matmul_tiling is None


def _with_and_without(flag: str, f, args):
    """Results and kernel sources of vkml.jit(f)(*args) under the device's profile (True)
    and with the profile field flag off (False)."""
    import vkml
    got, srcs = {}, {}
    for on in (True, False):
        with device.using() if on else device.using(**{flag: False}):
            jf = vkml.jit(f)
            got[on] = np.asarray(jf(*args))
            srcs[on] = [d.kernel.source for d in jf._entry(tuple(args))[0][0].lowered.dispatches]
    return got, srcs


@pytest.mark.parametrize("shapes", [((40, 256), (256, 200)), ((3, 2, 33, 128), (2, 128, 72)),
                                    ((64, 1024), (1024, 24)), ((5, 256), (256, 9))],
                         ids=lambda s: "x".join(map(str, s[0])) + "@" + "x".join(map(str, s[1])))
@pytest.mark.parametrize("epi", ["none", "bias-relu", "mask"])
@pytest.mark.parametrize("sub", ["device", "cpu-narrow", "cpu-ssbo"])
def test_interleaved_columns_of_a_transposed_b(shapes, epi, sub):
    """A B^T product whose lanes' rows of B^T would share a cache set takes its columns
    one lane apart and shuffles them back (`interleave`): the same bits as without, and
    NumPy's values, with epilogues, batches and partial column tiles."""
    import vkml
    sa, sb = shapes
    a, b, _, bt, _, _ = _transposed_inputs(sa, sb, "B.T")
    bias = RNG.uniform(-1, 1, sb[-1]).astype(np.float32)
    mask = RNG.uniform(-1, 1, sa[:-1] + sb[-1:]).astype(np.float32)

    def f(x, y, c, m):
        r = x @ vnp.swapaxes(y, -1, -2)
        return {"none": r, "bias-relu": vnp.maximum(r + c, 0.0), "mask": r * (m > 0)}[epi]
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    want = {"none": want, "bias-relu": np.maximum(want + bias, 0.0), "mask": want * (mask > 0)}[epi]
    args = [vnp.asarray(v) for v in (a, bt, bias, mask)]
    with device.using(**_variant(sub)):
        got, srcs = _with_and_without("matmul_interleave", f, args)
        dev = device.get()
        t = mm.choose_tiling(dev, np.float32, sa[-2], sb[-1], sa[-1])
        expect = (dev.profile.matmul_interleave and t.strategy == "subgroup"
                  and mm.interleave(True, dev.subgroup_size, t.tn, sa[-1], 4))
    assert any("uw_l0" in s for s in srcs[True]) == expect
    assert not any("uw_l0" in s for s in srcs[False])
    if sub == "device" and sa == (40, 256):
        assert expect == dev.profile.cpu
    np.testing.assert_array_equal(got[True], got[False])
    np.testing.assert_allclose(got[True], want, rtol=0, atol=64 * EPS32 * np.sqrt(sa[-1]) * 4)



@pytest.mark.parametrize("which", ["none", "A.T", "B.T", "both"])
@pytest.mark.parametrize("shapes", [((256, 64), (64, 10)), ((2, 3, 70, 33), (3, 33, 5)), ((130, 7), (7, 1))],
                         ids=lambda s: "x".join(map(str, s[0])) + "@" + "x".join(map(str, s[1])))
@pytest.mark.parametrize("epi", ["none", "bias", "leaf", "rows"])
def test_few_columns_computed_as_the_transposed_product(which, shapes, epi, monkeypatch):
    """C with fewer columns than a subgroup has lanes (and rows for four subgroups) is
    computed as C^T = B^T A^T and stored transposed (`swap_small_n`): the same bits as
    without, and NumPy's values, for every operand layout and epilogue kind (a bias
    per column, a leaf per element, a column vector per row). (Small products, which
    take one form whatever their shape, are tested below.)"""
    import vkml
    from vkml.vulkan import runtime
    from vkml.vulkan.lower.matmul import tiling
    monkeypatch.setattr(tiling, "SMALL_PRODUCT", 0)
    sa, sb = shapes
    a, b, at, bt, ta, tb = _transposed_inputs(sa, sb, which)
    out = np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
    bias = RNG.uniform(-1, 1, out[-1:]).astype(np.float32)
    leaf = RNG.uniform(-1, 1, out).astype(np.float32)
    rows = RNG.uniform(-1, 1, out[-2:-1] + (1,)).astype(np.float32)

    def f(x, y, c, l, r):
        p = (vnp.swapaxes(x, -1, -2) if ta else x) @ (vnp.swapaxes(y, -1, -2) if tb else y)
        return {"none": p, "bias": vnp.maximum(p + c, 0.0), "leaf": l - 0.5 * p, "rows": p * r}[epi]
    p = np.matmul(a.astype(np.float64), b.astype(np.float64))
    want = {"none": p, "bias": np.maximum(p + bias, 0.0), "leaf": leaf - 0.5 * p, "rows": p * rows}[epi]
    args = [vnp.asarray(v) for v in (at, bt, bias, leaf, rows)]
    dev = runtime.get().dev
    expect = dev.profile.matmul_swap and mm.swap_small_n(dev.subgroup_size, sa[-2], sb[-1])
    got, srcs = _with_and_without("matmul_swap", f, args)
    for on in (True, False):
        assert any("* M + row0" in s for s in srcs[on]) == (on and expect)
    np.testing.assert_array_equal(got[True], got[False])
    np.testing.assert_allclose(got[True], want, rtol=1e-5, atol=64 * EPS32 * np.sqrt(sa[-1]))


@pytest.mark.parametrize("which", ["none", "A.T", "B.T", "both"])
@pytest.mark.parametrize("k", [10, 23, 3])
def test_k_past_the_last_whole_chunk_is_one_masked_chunk(which, k, monkeypatch):
    """The k left after the whole chunks run as one more chunk with clamped loads and
    zeroed products (`Profile.matmul_tail_chunk`, CPU devices): NumPy's values and the
    step-by-step loop's, and an
    inf or nan in the last column of k stays where it belongs (inf * 0 never enters).
    (The shape-fitted kernel: small products are made to take it.)"""
    import vkml
    from vkml.vulkan.lower.matmul import tiling
    monkeypatch.setattr(tiling, "SMALL_PRODUCT", 0)
    a, b, at, bt, ta, tb = _transposed_inputs((70, k), (k, 40), which)
    a[5, k - 1] = np.inf
    b[k - 1, 7] = np.nan
    b[0, 9] = -np.inf
    at = np.ascontiguousarray(np.swapaxes(a, -1, -2)) if ta else a
    bt = np.ascontiguousarray(np.swapaxes(b, -1, -2)) if tb else b
    f = lambda x, y: (vnp.swapaxes(x, -1, -2) if ta else x) @ (vnp.swapaxes(y, -1, -2) if tb else y)
    with np.errstate(invalid="ignore"):
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    got, _ = _with_and_without("matmul_tail_chunk", f, [vnp.asarray(at), vnp.asarray(bt)])
    for g in got.values():
        np.testing.assert_array_equal(np.isnan(g), np.isnan(want))
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=64 * EPS32 * np.sqrt(k), equal_nan=True)
    np.testing.assert_allclose(got[True], got[False], rtol=0, atol=0, equal_nan=True)


def test_vec4_schemes_follow_the_layout_table_and_the_profile():
    """The tuned tiling of each layout takes its scheme from `tiling.VEC4_SCHEMES`; a
    forced tiling takes none; the profile's flags override both."""
    import dataclasses
    from vkml.vulkan.device import profile_for
    gpu = profile_for("nvidia", 2, True, 1 << 20)
    for layout, (t, _) in mm.VEC4_TILINGS.items():
        sch = mm.VEC4_SCHEMES.get(layout, {})
        assert mm.vec4_scheme(gpu, t, *layout) == (sch.get("unroll", False), sch.get("double", False))
        forced = dataclasses.replace(gpu, matmul_tiling=t)
        assert mm.vec4_scheme(forced, t, *layout) == (False, False)
        both = dataclasses.replace(gpu, matmul_unroll_k=True, matmul_double_buffer=True)
        assert mm.vec4_scheme(both, t, *layout) == (True, True)
    assert mm.VEC4_SCHEMES[(False, True)] == {"unroll": True}
    # two slabs are not asked for where they would not fit the device's shared memory
    big = mm.Tiling("shared", tm=8, tn=8, bm=128, bn=128, bk=24)
    both = dataclasses.replace(gpu, matmul_double_buffer=True)
    assert mm.vec4_scheme(both, big, False, False, 32 << 10) == (False, False)
    assert mm.vec4_scheme(both, big, False, False, 64 << 10) == (False, True)


@pytest.mark.parametrize("which", ["none", "A.T", "B.T", "both"])
@pytest.mark.parametrize("epi", ["none", "bias", "leaf"])
def test_small_products_share_one_kernel_whatever_their_shape(which, epi):
    """On a CPU device products of at most `SMALL_PRODUCT` multiply-adds take
    `SMALL_TILING` and one kernel form: shapes of every remainder (k below, at and past a
    chunk, odd m and n, batches) compile to one kernel per layout and epilogue, with
    NumPy's values."""
    import vkml
    from vkml.vulkan import runtime
    from vkml.vulkan.lower.matmul import tiling
    dev = runtime.get().dev
    shapes = [((20, 17), (17, 18)), ((48, 39), (39, 48)), ((3, 7), (7, 1)), ((64, 64), (64, 10)),
              ((2, 9, 33), (33, 40)), ((16, 16), (16, 32)), ((1, 5), (5, 3))]
    sources = set()
    for sa, sb in shapes:
        a, b, at, bt, ta, tb = _transposed_inputs(sa, sb, which)
        out = np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
        bias = RNG.uniform(-1, 1, out[-1:]).astype(np.float32)
        leaf = RNG.uniform(-1, 1, out).astype(np.float32)

        def f(x, y, c, l):
            p = (vnp.swapaxes(x, -1, -2) if ta else x) @ (vnp.swapaxes(y, -1, -2) if tb else y)
            return {"none": p, "bias": vnp.maximum(p + c, 0.0), "leaf": l - 0.5 * p}[epi]
        p = np.matmul(a.astype(np.float64), b.astype(np.float64))
        want = {"none": p, "bias": np.maximum(p + bias, 0.0), "leaf": leaf - 0.5 * p}[epi]
        args = [vnp.asarray(v) for v in (at, bt, bias, leaf)]
        jf = vkml.jit(f)
        got = np.asarray(jf(*args))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=64 * EPS32 * np.sqrt(sa[-1]))
        m, k, n = sa[-2], sa[-1], sb[-1]
        assert tiling.small_product(dev.profile, m, n, k, int(np.prod(out[:-2], dtype=int))) == dev.profile.cpu
        for d in jf._entry(tuple(args))[0][0].lowered.dispatches:
            if "MatMul" in d.kernel.name:
                sources.add((len(sa), d.kernel.source))
    if dev.profile.cpu:
        # per batch rank (2-d operands, a batched A) the kernel, and the same kernel taking
        # its units from a counter where they outnumber the driver's workers (`merge`)
        ranks = {r for r, _ in sources}
        assert len(ranks) == 2 and len(sources) <= 2 * len(ranks), len(sources)
