"""float16 and bfloat16: dtypes, conversions, promotion, fusion, gradients (vkml/trace/dtypes.py,
vkml/vulkan/lower/lowp.py, vkml/vulkan/widen.py). The registry's operators in both dtypes
are tests/ops/cases_lowp.py."""
import itertools

import ml_dtypes
import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.trace import dtypes as dt
from vkml.vulkan import runtime

F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
LOW = [F16, BF16]
RNG = np.random.default_rng(21)

_NAMES = ["bool", "int32", "float16", "bfloat16", "float32", "float64"]


def _d(name):
    return dt.canonical(name)


def test_promotion_table_is_jax_numpy():
    # jax.numpy's table (jnp.promote_types, x64 enabled) on the device dtypes, copied
    # here so the test does not import JAX: row + column (in _NAMES order) -> entry
    table = {}
    rows = {
        "bool": ["bool", "int32", "float16", "bfloat16", "float32", "float64"],
        "int32": ["int32", "int32", "float16", "bfloat16", "float32", "float64"],
        "float16": ["float16", "float16", "float16", "float32", "float32", "float64"],
        "bfloat16": ["bfloat16", "bfloat16", "float32", "bfloat16", "float32", "float64"],
        "float32": ["float32", "float32", "float32", "float32", "float32", "float64"],
        "float64": ["float64"] * 6,
    }
    for r, cols in rows.items():
        for c, e in zip(_NAMES, cols):
            table[(r, c)] = e
    for (a, b), want in table.items():
        assert str(dt.promote(_d(a), _d(b))) == want, (a, b)
        assert table[(b, a)] == want        # the table is symmetric
    # through the operators (traced only: no kernel runs)
    for a, b in itertools.product(["bool", "int32", "float16", "bfloat16", "float32"], repeat=2):
        g = vkml.make_graph(lambda x, y: x + y, vnp.zeros(2, _d(a)), vnp.zeros(2, _d(b)))
        assert str(g.outputs[0].dtype) == table[(a, b)], (a, b)


@pytest.mark.parametrize("d", LOW, ids=str)
def test_weak_python_scalars_keep_the_dtype(d):
    x = vnp.zeros(2, d)
    for f in (lambda x: x + 1, lambda x: x * 2.5, lambda x: 1.0 - x, lambda x: x ** 2, lambda x: vnp.maximum(x, 0)):
        assert vkml.make_graph(f, x).outputs[0].dtype == d
    assert vkml.make_graph(lambda x: x + vnp.zeros(2, vnp.int32), x).outputs[0].dtype == d
    assert vkml.make_graph(lambda x: vnp.exp(x), x).outputs[0].dtype == d
    assert vkml.make_graph(lambda x: vnp.mean(x), x).outputs[0].dtype == d


@pytest.mark.parametrize("d", LOW, ids=str)
def test_astype_round_trips_bit_exact_with_ml_dtypes(d):
    # every 16-bit pattern widens to float32 exactly as ml_dtypes does and back again
    h = np.arange(1 << 16, dtype=np.uint16).view(d)
    a = vnp.asarray(h)
    assert a.dtype == d and np.asarray(a).dtype == d
    f = np.asarray(a.astype(vnp.float32))
    ref = h.astype(np.float32)
    nan = np.isnan(ref)
    assert np.array_equal(f.view(np.uint32)[~nan], ref.view(np.uint32)[~nan]) and np.isnan(f[nan]).all()
    back = np.asarray(a.astype(vnp.float32).astype(d))
    assert np.array_equal(back.view(np.uint16)[~nan], h.view(np.uint16)[~nan])
    # narrowing float32 rounds to nearest even: random bit patterns, exact ties, the
    # overflow threshold, subnormals
    u = RNG.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    up = h[~nan].astype(np.float32)
    ties = (up.view(np.uint32) + np.uint32(1 << (15 if d == BF16 else 12))).view(np.float32)
    # ties and their float32 neighbours, infinities, NaNs of both signs and payloads
    tu = ties.view(np.uint32)
    x = np.concatenate([u, ties, (tu + 1).view(np.float32), (tu - 1).view(np.float32),
                        np.float32([65519.99, 65520, 65504, 1e-8, 2.98e-8, 5.96e-8, -0.0, 3.4e38,
                                    np.inf, -np.inf, -65520, -2.98e-8, 1e-45]),
                        np.uint32([0x7F800001, 0xFFC00000, 0x7FFFFFFF, 0x7FA00000]).view(np.float32)])
    xnan = np.isnan(x)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(d)
    got = np.asarray(vnp.asarray(x).astype(d))
    assert np.array_equal(got.view(np.uint16)[~xnan], want.view(np.uint16)[~xnan])
    # a NaN stays a NaN of its sign (quieted: the payload's top bits need not survive)
    assert np.isnan(got[xnan].astype(np.float32)).all()
    if runtime.get().dev.profile.layout == "cpu":
        # vkml's own rounding keeps a NaN's sign; a GPU's float unit may return its
        # canonical NaN (NVIDIA's is positive), as IEEE 754 allows
        assert np.array_equal(got.view(np.uint16)[xnan] >> 15, x.view(np.uint32)[xnan] >> 31)
    # host -> device -> host keeps the bits, and float64 input converts as ml_dtypes does
    assert np.array_equal(np.asarray(vnp.asarray(h[~nan])).view(np.uint16), h[~nan].view(np.uint16))
    y = RNG.standard_normal(100)
    assert np.array_equal(np.asarray(vnp.asarray(y, d)).view(np.uint16), y.astype(d).view(np.uint16))


@pytest.mark.parametrize("d", LOW, ids=str)
@pytest.mark.parametrize("n", [1 << 15, 1001], ids=["wide", "scalar"])
def test_elementwise_rounding(d, n):
    # exactly rounded float32 operators (mul, add, sub): a fused chain keeps float32
    # intermediates and rounds once at the store (XLA's excess precision), or with
    # `lowp_round_each` rounds after every operator as the eager operators do; the kernel
    # (packed wide loads on the large array, 16-bit scalars on the odd one) is bit exact
    x = RNG.uniform(-4, 4, n).astype(d)
    y = RNG.uniform(-4, 4, n).astype(d)
    xf, yf = x.astype(np.float32), y.astype(np.float32)
    X, Y = vnp.asarray(x), vnp.asarray(y)
    once = (((xf * yf + np.float32(1.5)) * xf) - yf).astype(d)
    r = lambda v: np.asarray(v, np.float32).astype(d).astype(np.float32)    # noqa: E731
    each = r(r(r(r(xf * yf) + np.float32(1.5)) * xf) - yf).astype(d)
    bits = lambda a: np.asarray(a).view(np.uint16)                          # noqa: E731

    def chain(a, b):
        return (a * b + 1.5) * a - b
    f = vkml.jit(chain)
    assert f.lower(X, Y).kernel_count == 1      # one fused kernel
    got = f(X, Y)
    # rounded once: NumPy's float32 chain rounded, or one ulp from it where a GPU's compiler
    # contracted a * b + 1.5 into one fma (GLSL allows it)
    assert got.dtype == d and np.max(np.abs(bits(got).astype(np.int32) - bits(once).astype(np.int32))) <= (
        0 if runtime.get().dev.profile.cpu else 1)
    with vkml.vulkan.device.using(lowp_round_each=True):
        assert np.array_equal(bits(vkml.jit(lambda a, b: chain(a, b) + 0.0)(X, Y)), bits(each))
    # eager: one operator per kernel, each rounded
    assert np.array_equal(bits(chain(X, Y)), bits(each))
    # an explicit cast inside a fused chain rounds there
    g = vkml.jit(lambda a, b: (a * b).astype(d) + 0.0)
    assert np.array_equal(bits(g(X, Y)), bits(r(xf * yf).astype(d)))


@pytest.mark.parametrize("d", LOW, ids=str)
def test_reductions_and_matmul_accumulate_in_float32(d):
    # 4096 ones: a 16-bit accumulator would stop at 256 (bfloat16) or 2048 (float16)
    x = vnp.ones(4096, d)
    assert float(x.sum()) == 4096.0 and x.sum().dtype == d
    a = RNG.standard_normal((64, 256)).astype(d)
    b = RNG.standard_normal((256, 8)).astype(d)
    got = np.asarray(vnp.asarray(a) @ vnp.asarray(b))
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(d)
    assert got.dtype == d
    ulp = np.abs(got.astype(np.float64) - want.astype(np.float64)) / np.maximum(
        np.abs(want.astype(np.float64)) * (2.0 ** -10 if d == F16 else 2.0 ** -7), 1e-3)
    assert ulp.max() <= 1.0
    s = np.asarray(vkml.nn.functional.softmax(vnp.asarray(a), axis=-1)).astype(np.float64)
    e = np.exp(a.astype(np.float64) - a.astype(np.float64).max(-1, keepdims=True))
    np.testing.assert_allclose(s, e / e.sum(-1, keepdims=True), rtol=2.0 ** -7, atol=1e-6)


@pytest.mark.parametrize("d", LOW, ids=str)
def test_grad_of_a_low_precision_loss_against_finite_differences(d):
    x = RNG.standard_normal((6, 5)).astype(d)
    w = (0.5 * RNG.standard_normal((5, 3))).astype(d)
    y = RNG.standard_normal((6, 3)).astype(d)

    def loss(w, x, y):
        return vnp.mean((vnp.tanh(x @ w) - y) ** 2)
    g = vkml.grad(loss)(vnp.asarray(w), vnp.asarray(x), vnp.asarray(y))
    assert g.dtype == d
    # float64 central differences of the same function on the same (16-bit) values
    X, Y, W = (v.astype(np.float64) for v in (x, y, w))

    def f(W):
        return np.mean((np.tanh(X @ W) - Y) ** 2)
    fd = np.zeros_like(W)
    for i in np.ndindex(W.shape):
        e = np.zeros_like(W)
        e[i] = 1e-6
        fd[i] = (f(W + e) - f(W - e)) / 2e-6
    # eager (every operator rounded) and jitted (fused chains rounded at their stores)
    gj = vkml.jit(vkml.grad(loss))(vnp.asarray(w), vnp.asarray(x), vnp.asarray(y))
    for got in (g, gj):
        err = np.abs(np.asarray(got).astype(np.float64) - fd).max() / np.abs(fd).max()
        assert err < (4e-3 if d == F16 else 3e-2), err
    v = vkml.vmap(lambda r: r.max())(vnp.asarray(x))
    assert v.dtype == d and np.array_equal(np.asarray(v), x.max(1))


def test_random_draws_stay_in_the_unit_interval():
    k = vkml.random.key(3)
    for d in LOW:
        u = np.asarray(vkml.random.uniform(k, (1 << 14,), dtype=d))
        assert u.dtype == d
        u = u.astype(np.float32)
        assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.02


def test_device_profile_and_tensor_casts():
    p = vkml.vulkan.device.get().profile
    assert p.storage16 and isinstance(p.float16, bool) and p.bfloat16 is False
    t = vkml.Tensor(np.float32([1.0, 2.0]), requires_grad=True)
    h = t.bfloat16()
    (h * h).sum().backward()
    assert h.dtype == BF16 and t.grad.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(t.grad), [2.0, 4.0])


def test_nn_layers_and_optimisers_take_16_bit_parameters():
    bf = vnp.bfloat16
    k = vkml.random.key(0)
    m = vkml.nn.Sequential(vkml.nn.Conv2d(3, 4, 3, key=k), vkml.nn.ReLU(), vkml.nn.Flatten(),
                           vkml.nn.Linear(4 * 6 * 6, 5, key=k))
    m = vkml.optim.Policy(bf, bf, bf).cast_to_compute(m)
    x = vnp.asarray(RNG.standard_normal((2, 3, 8, 8)), bf)
    y = vnp.asarray([1, 3])

    def loss(m):
        return vkml.nn.functional.cross_entropy(m(x), y)
    opt = vkml.optim.adamw(1e-2)
    s = opt.init(m)
    first = None
    for _ in range(5):
        l, g = vkml.value_and_grad(loss)(m)
        assert l.dtype == bf and all(p.dtype == bf for p in vkml.tree_util.tree_leaves(g))
        first = float(l) if first is None else first
        u, s = opt.update(g, s, m)
        m = vkml.optim.apply_updates(m, u)
    assert all(p.dtype == bf for p in vkml.tree_util.tree_leaves(m))
    assert np.isfinite(float(loss(m))) and float(loss(m)) < first
    q = vnp.asarray(RNG.standard_normal((1, 2, 4, 8)), bf)
    assert vkml.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).dtype == bf
