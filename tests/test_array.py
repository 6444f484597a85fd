"""Eager operators (vkml/array.py): each is compiled once per operator, attributes and
operand signature, and replayed."""
import importlib
import threading
from collections import OrderedDict

import numpy as np
import pytest

import vkml.numpy as vnp
array_mod = importlib.import_module("vkml.array")


@pytest.fixture
def built(monkeypatch):
    """Counts the single-operator programs compiled while the test runs."""
    count = [0]
    real = array_mod.Compiled

    class Counting(real):
        def __init__(self, *a, **k):
            count[0] += 1
            super().__init__(*a, **k)
    monkeypatch.setattr(array_mod, "Compiled", Counting)
    monkeypatch.setattr(array_mod, "_eager_cache", OrderedDict())
    return count


def test_a_repeated_eager_operator_is_compiled_once(built):
    x = vnp.asarray(np.arange(5, dtype=np.float32))
    y = vnp.asarray(np.ones(5, np.float32))
    for i in range(4):
        np.testing.assert_array_equal(np.asarray(x * y), np.arange(5, dtype=np.float32))
    assert built[0] == 1
    z = vnp.asarray(np.ones(6, np.float32))
    np.asarray(z * z)                                # a new signature: compiled again
    assert built[0] == 2


def test_attribute_values_that_compare_equal_are_not_confused(built):
    """0.0 and -0.0, 1 and 1.0 and True key different programs: a kernel may bake them in."""
    pos, neg = vnp.full((3,), 0.0), vnp.full((3,), -0.0)
    assert not np.signbit(np.asarray(pos)).any() and np.signbit(np.asarray(neg)).all()
    assert np.isnan(np.asarray(vnp.full((2,), float("nan")))).all()
    assert np.asarray(vnp.full((2,), 1)).dtype == np.int32
    assert np.asarray(vnp.full((2,), True)).dtype == np.bool_
    assert np.asarray(vnp.full((2,), 1.0)).dtype == np.float32


def test_the_cache_is_bounded(built, monkeypatch):
    monkeypatch.setattr(array_mod, "EAGER_CACHE", 3)
    for n in range(1, 8):
        vnp.asarray(np.ones(n, np.float32)) + 1.0
    assert len(array_mod._eager_cache) <= 3


def test_eager_operators_from_several_threads():
    x = vnp.asarray(np.arange(64, dtype=np.float32))
    errors = []

    def work(k):
        try:
            for _ in range(20):
                np.testing.assert_allclose(np.asarray(x * float(k) + 1.0), np.arange(64) * k + 1.0)
        except Exception as e:      # pragma: no cover - reported below
            errors.append(e)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_every_python_operator_is_implemented_with_its_reflected_form():
    """Python's arithmetic and bitwise operators all exist on Array (forward and reflected),
    so none falls through to a NumPy conversion; NumPy's own operators defer to Array."""
    binary = ["add", "sub", "mul", "truediv", "floordiv", "mod", "divmod", "pow", "matmul",
              "and", "or", "xor", "lshift", "rshift"]
    missing = [n for b in binary for n in (f"__{b}__", f"__r{b}__")
               if getattr(array_mod.Array, n, None) is None]
    missing += [n for n in ("__neg__", "__pos__", "__abs__", "__invert__")
                if getattr(array_mod.Array, n, None) is None]
    assert not missing, missing
    assert array_mod.Array.__array_ufunc__ is None
    x = np.array([4, 5, 6], np.int32)
    a = vnp.asarray(np.array([1, 2, 3], np.int32))
    for op in ("+", "-", "*", "/", "//", "%", "**", "&", "|", "^", "<<", ">>", "<", "==", ">="):
        got = eval(f"x {op} a")
        assert isinstance(got, array_mod.Array), op
        with np.errstate(all="ignore"):
            want = eval(f"x {op} np.array([1, 2, 3], np.int32)")
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, err_msg=op)
    assert all(isinstance(v, array_mod.Array) for v in divmod(x, a))


def test_index_is_a_0d_integer_array_only():
    """As NumPy's __index__: a 1-element 1-d array, a bool or a float is no index."""
    import operator
    assert operator.index(vnp.asarray(3)) == 3 and range(5)[vnp.asarray(-1)] == 4
    for bad in (vnp.asarray([3]), vnp.asarray(True), vnp.asarray(3.0)):
        with pytest.raises(TypeError, match="only integer scalar arrays"):
            operator.index(bad)
