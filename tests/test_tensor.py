"""The stateful adapter against autograd-semantics.txt, one behaviour per test."""
import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.tensor import UndefinedTensorError
from vkml.trace.ops import OpKind


def T(x, rg=True):
    return vkml.Tensor(np.asarray(x, np.float64), requires_grad=rg)


def test_backward_deposits_realized_gradient():
    w = T([1.0, 2.0, 3.0])
    (vnp.sin(w) * w).sum().backward()
    x = np.array([1.0, 2.0, 3.0])
    assert isinstance(w.grad, vkml.Array) and not w.grad.is_traced
    np.testing.assert_allclose(np.asarray(w.grad), np.cos(x) * x + np.sin(x), rtol=1e-12)


def test_accumulation_across_two_backwards_and_zero_grad():
    w = T([1.0, -2.0])
    (w * w).sum().backward()
    (w * 3.0).sum().backward()
    np.testing.assert_allclose(np.asarray(w.grad), [2.0 + 3.0, -4.0 + 3.0])
    w.grad = None
    assert w.grad is None
    (w * w).sum().backward()
    np.testing.assert_allclose(np.asarray(w.grad), [2.0, -4.0])


def test_only_leaves_that_require_grad_keep_grad():
    w, c = T([1.0, 2.0]), T([3.0, 4.0], rg=False)
    h = w * c
    assert not h.is_leaf and h.requires_grad
    h.sum().backward()
    assert h.grad is None and c.grad is None
    np.testing.assert_allclose(np.asarray(w.grad), [3.0, 4.0])


def test_seed_argument():
    w = T([1.0, 2.0])
    (w * w).backward(gradient=vnp.asarray([1.0, 0.5], np.float64))
    np.testing.assert_allclose(np.asarray(w.grad), [2.0, 2.0])
    with pytest.raises(ValueError, match="shape"):
        (w * w).backward(gradient=vnp.ones(3, np.float64))


def test_no_argument_backward_needs_a_scalar():
    w = T([1.0, 2.0])
    with pytest.raises(RuntimeError, match="scalar"):
        (w * 2.0).backward()


def test_root_without_grad():
    with pytest.raises(RuntimeError, match="does not require grad"):
        T([1.0], rg=False).sum().backward()


def test_integer_root():
    w = T([1.0, 2.0])
    with pytest.raises(vkml.DTypeError, match="int32"):
        vnp.argmax(w).backward()


def test_undefined_root():
    with pytest.raises(UndefinedTensorError):
        vkml.Tensor._undefined().backward()


def test_no_grad_and_detach_stop_recording():
    w = T([2.0])
    with vkml.no_grad():
        c = w * 3.0
    assert not c.requires_grad
    d = w.detach()
    assert not d.requires_grad and d.is_leaf
    (w * c + w * d).sum().backward()
    np.testing.assert_allclose(np.asarray(w.grad), [6.0 + 2.0])


def test_op_without_rule_raises_naming_it(monkeypatch):
    """Sign has JAX's zero gradient; made rule-less here, backward names it and the advice
    (stop_gradient on its output) works."""
    import dataclasses
    from vkml.trace.ops import SPECS, Grad
    w = T([1.0, -1.0])
    (vnp.sign(w) * w).sum().backward()
    np.testing.assert_array_equal(np.asarray(w.grad), [1.0, -1.0])
    monkeypatch.setitem(SPECS, OpKind.Sign, dataclasses.replace(SPECS[OpKind.Sign], grad=Grad.DISCONTINUOUS))
    # the registry is fixed at import in real use: planned backward programs assume it
    monkeypatch.setattr(vkml.tensor, "_BACKWARD_CACHE", type(vkml.tensor._BACKWARD_CACHE)())
    w = T([1.0, -1.0])
    with pytest.raises(NotImplementedError, match=r"Sign.*stop_gradient\(sign\(x\)\)"):
        (vnp.sign(w) * w).sum().backward()
    (vkml.stop_gradient(vnp.sign(w)) * w).sum().backward()
    np.testing.assert_array_equal(np.asarray(w.grad), [1.0, -1.0])


def test_grad_of_shared_subexpression_and_matmul():
    a = T(np.arange(6.0).reshape(2, 3) * 0.1)
    b = T(np.ones((3, 2)))
    y = a @ b
    (y * y + y).sum().backward()
    A, B = np.arange(6.0).reshape(2, 3) * 0.1, np.ones((3, 2))
    G = 2 * (A @ B) + 1
    np.testing.assert_allclose(np.asarray(a.grad), G @ B.T, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(b.grad), A.T @ G, rtol=1e-12)


def test_bool_and_integer_results_never_require_grad():
    """PyTorch: a comparison of a tensor that requires grad does not require grad; nor
    does any integer result. backward() on one is still the design note's DTypeError."""
    w = T([1.0, -2.0, 3.0])
    i = vkml.Tensor(np.array([1, 2, 3], np.int32))
    results = {"==": w == 1.0, "!=": w != 1.0, "<": w < 1.0, "<=": w <= 1.0, ">": w > 1.0,
               ">=": w >= 1.0, "argmax": vnp.argmax(w), "argmin": vnp.argmin(w),
               "astype-int": w.astype(np.int32), "isnan": vnp.isnan(w), "astype-bool": w.astype(bool),
               "&": (w > 0) & (w < 2), "|": (w > 0) | (w < 2), "^": (w > 0) ^ (w < 2), "~": ~(w > 0),
               "int&": w.astype(np.int32) & i, "<<": w.astype(np.int32) << i,
               ">>": i >> w.astype(np.int32), "//": w.astype(np.int32) // i, "%": w.astype(np.int32) % i,
               "int**": w.astype(np.int32) ** 2}
    for name, r in results.items():
        assert isinstance(r, vkml.Tensor), name
        assert not r.requires_grad, name
        assert r.dtype.kind in "bi", name
    with pytest.raises(vkml.DTypeError, match="bool"):
        (w > 0).backward()
    with pytest.raises(vkml.DTypeError, match="int32"):
        (w.astype(np.int32) & i).sum().backward()
    # float results of the same tensor still record, and a mask of it still works
    m = (w > 0).astype(np.float64)
    assert not m.requires_grad
    loss = (w * m).sum()
    assert loss.requires_grad
    loss.backward()
    np.testing.assert_array_equal(np.asarray(w.grad), [1.0, 0.0, 1.0])


def test_integer_power_of_a_tensor_is_exact():
    w = T([3.0])
    (w ** 2).sum().backward()
    assert np.asarray(w.grad).tolist() == [6.0]


def test_a_repeated_backward_replays_its_planned_program():
    """The gradient program is planned once per tape structure: later identical steps hit
    the cache and give the gradients of a fresh plan (vkml.grad's); a changed shape plans
    again; forward values, constant operands and Python scalars are the program's inputs,
    never baked into it."""
    from vkml import tensor as vt
    R = np.random.default_rng(3)
    w1, w2 = R.standard_normal((4, 8)), R.standard_normal((8, 1))

    def loss(m, a, b, x, c, s):
        return m.sum(m.tanh(x @ a) @ b * c) * s

    def step(x, c, s):
        a, b = vkml.Tensor(w1, requires_grad=True), vkml.Tensor(w2, requires_grad=True)
        loss(vnp, a, b, x, c, s).backward()
        return np.asarray(a.grad), np.asarray(b.grad)

    before = dict(vt._BACKWARD_STATS)
    for i in range(3):
        x, c, s = R.standard_normal((5, 4)), R.standard_normal((5, 1)), float(i + 1)
        got = step(x, c, s)
        want = vkml.grad(lambda a, b: loss(vnp, a, b, x, c, s), argnums=(0, 1))(w1, w2)
        for g, w_ in zip(got, want):
            np.testing.assert_allclose(g, np.asarray(w_), rtol=1e-12, atol=1e-12)
    assert vt._BACKWARD_STATS["plans"] - before["plans"] == 1
    assert vt._BACKWARD_STATS["hits"] - before["hits"] == 2
    x, c = R.standard_normal((7, 4)), R.standard_normal((7, 1))    # a new batch size
    got = step(x, c, 2.0)
    want = vkml.grad(lambda a, b: loss(vnp, a, b, x, c, 2.0), argnums=(0, 1))(w1, w2)
    np.testing.assert_allclose(got[0], np.asarray(want[0]), rtol=1e-12, atol=1e-12)
    assert vt._BACKWARD_STATS["plans"] - before["plans"] == 2


def test_a_tape_deeper_than_the_recursion_limit_plans_its_backward():
    """A recorded operator keeps (operator, attributes), not a graph Node: the Nodes are
    built when a backward plans, parents first and without recursion, so a chain longer
    than Python's recursion limit still differentiates."""
    import sys
    n = sys.getrecursionlimit() + 200
    w = T([1.0, 2.0])
    v = w
    for _ in range(n):
        v = v + w
    assert type(v._tp) is tuple            # nothing built while recording
    v.sum().backward()
    np.testing.assert_array_equal(np.asarray(w.grad), [n + 1.0, n + 1.0])
