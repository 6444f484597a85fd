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
