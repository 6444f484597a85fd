"""No silent wrong answers from integer indices and labels (vkml issue 14).

Every place an integer index or class label reaches a kernel is listed in SITES, and each
test loops over all of them: a concrete out-of-range index raises IndexError (NumPy's
wording, the function's name first); a traced one follows JAX (gathers clamp, the
gradient's scatter drops) unless `vkml.debug.checks` is on, when the device checks it and
the host raises after the program runs, under jit, grad and vmap alike.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
import vkml.nn.functional as F
from vkml.array import bind
from vkml.trace.ops import OpKind as K

X = vnp.asarray(np.array([10.0, 20.0, 30.0], np.float32))
X2 = vnp.asarray(np.arange(12, dtype=np.float32).reshape(4, 3))
W = vnp.asarray(np.arange(6, dtype=np.float32).reshape(3, 2))
LOGITS = vnp.asarray(np.array([[1.0, 2.0, 0.5], [0.1, 0.2, 3.0]], np.float32))


class Site:
    """fn(i) -> float Array, where i is an int32 array of `n` indices into an axis of
    `size`; labels: class labels (no negative index, -100 ignored) rather than indices."""

    def __init__(self, name, what, fn, size, n=2, labels=False, axis=0):
        self.name, self.what, self.fn, self.size, self.n = name, what, fn, size, n
        self.labels, self.axis = labels, axis

    def bad(self):
        return [self.size, self.size + 7, -1 if self.labels else -self.size - 1]

    def good(self):
        return [0, self.size - 1] if self.labels else [-self.size, self.size - 1]

    def index(self, v):
        a = np.full(self.n, 0, np.int32)
        a[-1] = v
        return vnp.asarray(a)

    def message(self, v):
        if self.labels:
            return rf"^{self.what}: label {v} is out of bounds for {self.size} classes"
        return rf"^{self.what}: index {v} is out of bounds for axis {self.axis} with size {self.size}$"

    def __repr__(self):
        return self.name


SITES = [
    Site("getitem", "getitem", lambda i: X[i], 3),
    Site("getitem-axis1", "getitem", lambda i: X2[:, i], 3, axis=1),
    Site("getitem-2d-index", "getitem", lambda i: X[vnp.reshape(i, (1, -1))], 3),
    Site("take", "take", lambda i: vnp.take(X, i), 3),
    Site("take-axis0", "take", lambda i: vnp.take(X2, i, axis=0), 4),
    Site("embedding", "embedding", lambda i: F.embedding(i, W), 3),
    Site("cross_entropy", "cross_entropy", lambda i: F.cross_entropy(LOGITS, i), 3, labels=True),
    Site("cross_entropy-smoothing", "cross_entropy",
         lambda i: F.cross_entropy(LOGITS, i, label_smoothing=0.1), 3, labels=True),
    Site("nll_loss", "nll_loss", lambda i: F.nll_loss(F.log_softmax(LOGITS, axis=1), i), 3, labels=True),
]


@pytest.fixture(autouse=True)
def _checks_off():
    old = vkml.debug.check_indices(False)
    yield
    vkml.debug.check_indices(old)


@pytest.mark.parametrize("site", SITES, ids=repr)
def test_eager_out_of_range_raises_index_error(site):
    for v in site.bad():
        with pytest.raises(IndexError, match=site.message(v)):
            site.fn(site.index(v))
    for v in site.good():
        assert np.isfinite(np.asarray(site.fn(site.index(v)))).all()


@pytest.mark.parametrize("site", SITES, ids=repr)
def test_traced_default_is_jax_rule_and_checks_raise(site):
    f = vkml.jit(site.fn)
    for v in site.bad():
        got = np.asarray(f(site.index(v)))       # traced: no error, a finite value (JAX)
        assert np.isfinite(got).all()
    with vkml.debug.checks():
        for v in site.bad():
            with pytest.raises(IndexError, match=site.message(v)):
                f(site.index(v))
        for v in site.good():                    # in range: the same values as eager
            np.testing.assert_allclose(np.asarray(f(site.index(v))), np.asarray(site.fn(site.index(v))),
                                       rtol=1e-6)
    np.asarray(f(site.index(site.bad()[0])))     # off again: the unchecked program


@pytest.mark.parametrize("site", SITES, ids=repr)
def test_checks_under_vmap_and_grad(site):
    bad = site.bad()[0]
    idx = np.zeros((3, site.n), np.int32)
    idx[1, -1] = bad
    v = vkml.vmap(site.fn)
    assert np.isfinite(np.asarray(v(vnp.asarray(idx)))).all()
    with vkml.debug.checks():
        with pytest.raises(IndexError, match=site.message(bad)):
            v(vnp.asarray(idx))
        idx[1, -1] = site.good()[-1]
        v(vnp.asarray(idx))
        # grad with respect to what the index selects from, the index traced as an argument
        g = vkml.jit(vkml.grad(lambda x, i: vnp.sum(site.fn(i) * x)))
        with pytest.raises(IndexError, match=site.message(bad)):
            g(vnp.asarray(1.0), site.index(bad))
        g(vnp.asarray(1.0), site.index(site.good()[0]))


def test_negative_indices_follow_numpy():
    np.testing.assert_array_equal(np.asarray(X[[-1]]), [30.0])
    np.testing.assert_array_equal(np.asarray(vnp.take(X, [-3, -1, 0])), [10.0, 30.0, 10.0])
    with pytest.raises(IndexError, match="getitem: index -4 is out of bounds for axis 0 with size 3"):
        X[[-4]]


def test_ignore_index_is_not_an_error():
    lp = F.log_softmax(LOGITS, axis=1)
    want = -float(np.asarray(lp)[1, 2])
    for f in (F.cross_entropy, F.nll_loss):
        arg = LOGITS if f is F.cross_entropy else lp
        assert float(f(arg, vnp.asarray([-100, 2]))) == pytest.approx(want, rel=1e-6)
        assert float(f(arg, vnp.asarray([5, 2]), ignore_index=5)) == pytest.approx(want, rel=1e-6)
        with vkml.debug.checks():
            jf = vkml.jit(lambda a, y: f(a, y, ignore_index=5))
            assert float(jf(arg, vnp.asarray([5, 2]))) == pytest.approx(want, rel=1e-6)
            with pytest.raises(IndexError, match=r"label -100 .*or ignore_index 5\)"):
                jf(arg, vnp.asarray([-100, 2]))


def test_traced_gather_clamps_and_its_gradient_is_dropped():
    """JAX's rule: x[10] under jit reads x[2]; the scatter of its gradient drops it."""
    f = vkml.jit(lambda x, i: x[i])
    np.testing.assert_array_equal(np.asarray(f(X, vnp.asarray([10, -5]))), [30.0, 10.0])
    g = vkml.jit(vkml.grad(lambda x, i: vnp.sum(x[i])))
    np.testing.assert_array_equal(np.asarray(g(X, vnp.asarray([0, 10, 2, 2]))), [1.0, 0.0, 2.0])


def test_check_indices_switch_and_context_manager():
    assert vkml.debug.checks_enabled() is False
    with vkml.debug.checks():
        assert vkml.debug.checks_enabled()
        with vkml.debug.checks(False):
            assert not vkml.debug.checks_enabled()
        assert vkml.debug.checks_enabled()
    assert vkml.debug.check_indices(True) is False
    assert vkml.debug.check_indices(False) is True


def test_env_var_turns_checks_on():
    code = ("import vkml, vkml.numpy as vnp\n"
            "f = vkml.jit(lambda x, i: vnp.take(x, i))\n"
            "try:\n    f(vnp.arange(3), vnp.asarray([3]))\nexcept IndexError as e:\n    print('raised', e)\n")
    env = dict(os.environ, VKML_DEBUG_CHECKS="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "raised take: index 3 is out of bounds for axis 0 with size 3" in out.stdout, out.stderr


def test_int32_overflow_raises_under_every_transform():
    x = vnp.full((70000,), 65536, dtype="int32")
    for f in (vnp.sum, vkml.jit(vnp.sum), lambda a: vkml.vmap(vnp.sum)(vnp.reshape(a, (2, -1))),
              vnp.cumsum, vkml.jit(vnp.cumsum), lambda a: vnp.prod(a[:3])):
        with pytest.raises(OverflowError, match="does not fit int32"):
            np.asarray(f(x))
    assert int(vkml.jit(vnp.sum)(vnp.full((70000,), 3, dtype="int32"))) == 210000


def test_a_check_error_leaves_donated_inputs_whole():
    """A result copied into a donated input's buffer before the check raised would leave
    the caller's array holding it (review of issue 14): checked programs take fresh ones."""
    f = vkml.jit(lambda a: vnp.cumsum(a) + 0, donate_argnums=0)
    x = vnp.full((70000,), 65536, dtype="int32")
    with pytest.raises(OverflowError, match="does not fit int32"):
        np.asarray(f(x))
    np.testing.assert_array_equal(np.asarray(x), np.full(70000, 65536, np.int32))
    ok = vnp.full((70000,), 1, dtype="int32")
    np.testing.assert_array_equal(np.asarray(f(ok)), np.arange(1, 70001, dtype=np.int32))


# every operator that sums or multiplies int32 values: (name, fn(x) on an int32 array x of
# shape (6, 4) -> result, as int64 in NumPy)
ACCUMULATING = [
    ("Sum", lambda x: vnp.sum(x, axis=0), lambda x: x.sum(0)),
    ("Prod", lambda x: vnp.prod(x[:2], axis=0), lambda x: x[:2].prod(0)),
    ("Cumsum", lambda x: vnp.cumsum(x, axis=0), lambda x: x.cumsum(0)),
    ("MatMul", lambda x: vnp.transpose(x) @ x, lambda x: x.T @ x),
    ("ScatterAdd", lambda x: bind(K.ScatterAdd, [x, vnp.asarray(np.array([0, 1, 0, 1, 0, 1], np.int32))],
                                  axis=0, size=2),
     lambda x: np.stack([x[0::2].sum(0), x[1::2].sum(0)])),
]


@pytest.mark.parametrize("name,fn,ref", ACCUMULATING, ids=[a[0] for a in ACCUMULATING])
def test_int32_accumulations_are_exact_or_raise(name, fn, ref):
    """Partial results past int32 stay exact (int64 on the device); a result that does
    not fit raises OverflowError naming the op, eager and under jit; never a wrapped value."""
    rng = np.random.default_rng(1)
    small = rng.integers(-40, 40, (6, 4)).astype(np.int32)
    for f in (fn, vkml.jit(fn)):
        np.testing.assert_array_equal(np.asarray(f(vnp.asarray(small))), ref(small.astype(np.int64)))
    big = np.full((6, 4), 2**16 + 1, np.int32) * np.int32(1 if name == "Prod" else 2**14)
    assert np.abs(ref(big.astype(np.int64))).max() > 2**31 - 1
    for f in (fn, vkml.jit(fn)):
        with pytest.raises(OverflowError, match=rf"^{name}: .*does not fit int32.*float64"):
            np.asarray(f(vnp.asarray(big)))


def test_device_without_int64_refuses_int32_accumulation(monkeypatch):
    """No shaderInt64: an int32 accumulation is refused at the call, naming the op and the
    missing feature, rather than run in 32 bits where it could wrap."""
    from vkml.vulkan import runtime
    monkeypatch.setattr(runtime.get().dev, "has_int64", False)
    x = vnp.asarray(np.ones((3, 37), np.int32))       # shapes no other test compiles
    for name, f in [("Sum", lambda: vnp.sum(x, axis=1)), ("Cumsum", lambda: vnp.cumsum(x, axis=1)),
                    ("Prod", lambda: vnp.prod(x, axis=1)), ("MatMul", lambda: x @ vnp.transpose(x))]:
        with pytest.raises(vkml.DTypeError, match=rf"^{name}: .*shaderInt64.*float64"):
            f()
    assert float(vnp.sum(x.astype("float32"))) == 111.0      # floats need no int64


def test_checks_in_one_program_with_other_kernels():
    """Several checked kernels in one jitted program (on CPU devices `merge` runs them as
    one dispatch): each check is its own, and the one that fails is the one reported."""
    f = vkml.jit(lambda a, b, c, i: (vnp.sum(a, axis=1), vnp.cumsum(b, axis=0), vnp.exp(c).sum(),
                                     vnp.take(c, i)))
    a, b = vnp.asarray(np.ones((4, 8), np.int32)), vnp.asarray(np.ones((5, 3), np.int32))
    c, i = vnp.ones((7,)), vnp.asarray([1, 2])
    with vkml.debug.checks():
        r = f(a, b, c, i)
        np.testing.assert_array_equal(np.asarray(r[0]), [8] * 4)
        np.testing.assert_array_equal(np.asarray(r[1])[-1], [5] * 3)
        with pytest.raises(IndexError, match="take: index 9 "):
            f(a, b, c, vnp.asarray([1, 9]))
        with pytest.raises(OverflowError, match="^Sum: "):
            f(vnp.asarray(np.full((4, 8), 2**29, np.int32)), b, c, i)
        with pytest.raises(OverflowError, match="^Cumsum: "):
            f(a, vnp.asarray(np.full((5, 3), 2**29, np.int32)), c, i)
        np.testing.assert_array_equal(np.asarray(f(a, b, c, i)[3]), [1.0, 1.0])   # re-armed
