"""Indexing, gather and scatter (vkml/indexing.py) against NumPy float64: every index form
of __getitem__, `.at[]` updates against ufunc.at, take's modes, take/put_along_axis,
nonzero/argwhere/flatnonzero; NumPy's exception types; gradients (check_grads order 2),
jit and vmap."""
import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.array import ConcretizationError
from vkml.indexing import NonConcreteBooleanIndexError
from vkml.test_util import check_grads

F64, I32 = np.float64, np.int32
R = np.random.default_rng(7)
X = R.uniform(-2, 2, (3, 4, 5))       # distinct values: max/min gradients are one-sided


def vk(x):
    return vnp.asarray(x)


def close(got, want):
    want = np.asarray(want)
    assert isinstance(got, vkml.Array), type(got)
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-13)


def b(*v):
    return np.asarray(v, dtype=bool)


FORMS = {
    "int": 1, "neg": -1, "slice": np.s_[1:3], "step": np.s_[::-2, 1::2], "none": np.s_[None, 1],
    "ell": np.s_[..., 2], "ell-mid": np.s_[0, ..., 1], "arr": np.s_[[0, 2]],
    "arr2d": np.s_[np.array([[0, 1], [2, 0]])], "two": np.s_[[0, 1], [1, 2]],
    "two-neg": np.s_[[-1, 0], [-4, 3]], "three": np.s_[[0, 2], [1, 3], [4, 0]],
    "arr,slice,arr": np.s_[[0, 1], :, [1, 2]], "slice,arr,arr": np.s_[:, [0, 1], [1, 2]],
    "int,slice,arr": np.s_[0, :, [1, 2]], "int,arr-adjacent": np.s_[:, 1, [1, 2]],
    "arr,int": np.s_[[2, 0], 3], "bcast": np.s_[np.array([[0], [1]]), np.array([0, 1, 2])],
    "bcast-sep": np.s_[np.array([[0], [2]]), 1:3, np.array([0, 4, 1])],
    "none-sep": np.s_[None, [0, 1], None, [1, 2]], "none-adjacent": np.s_[[0, 1], [1, 2], None],
    "ell-arr": np.s_[..., [0, -1]], "slice-step-arr": np.s_[::-1, [3, 0, 3]],
    "mask": np.s_[b(1, 0, 1)], "mask2d": np.s_[X[:, :, 0] > 0], "mask3d": np.s_[X > 0.5],
    "slice,mask": np.s_[:, b(0, 1, 1, 0)], "mask,arr": np.s_[b(1, 0, 1), :, [0, 4]],
    "mask-none": np.s_[b(0, 0, 0)], "True": True, "False": False, "True,arr": np.s_[True, [0, 2]],
    "arr,False": np.s_[[[0], [1]], False], "empty": np.s_[[]], "empty2": np.s_[[], []],
    "0d-array": np.s_[np.array(2)], "0d-array-sep": np.s_[np.array(1), :, [0, 1]],
    "dup": np.s_[[1, 1, 0, 1]], "np-int": np.s_[np.int64(1), 2],
}


@pytest.mark.parametrize("name", list(FORMS))
def test_getitem_forms(name):
    idx = FORMS[name]
    close(vk(X)[idx], X[idx])
    xt = X.transpose(2, 0, 1).copy().transpose(1, 2, 0)      # non-contiguous on the device
    close(vnp.transpose(vk(X.transpose(2, 0, 1)), (1, 2, 0))[idx], xt[idx])


@pytest.mark.parametrize("idx", [np.s_[[1, 0]], np.s_[:, []], np.s_[:, :, [1]], np.s_[[0, 1], :, [1, 0]],
                                 np.s_[..., b(0, 1)], np.s_[[], :, 0], np.s_[b(0, 0), []]], ids=str)
def test_getitem_size0(idx):
    e = np.zeros((2, 0, 2))
    close(vk(e)[idx], e[idx])


ERRORS = [np.s_[3], np.s_[-4], np.s_[[0, 3]], np.s_[:, [-5]], np.s_[[0, 1], [0, 1, 2]],
          np.s_[0, 0, 0, 0], np.s_[..., 0, ...], np.s_[np.array([0.0])], np.s_[1.0], np.s_["a"],
          np.s_[b(1, 0)], np.s_[:, b(1, 0, 1, 0, 1)], np.s_[[0, 1], 0, 9], np.s_[[0, 1], False]]


@pytest.mark.parametrize("idx", ERRORS, ids=repr)
def test_getitem_errors_are_numpys(idx):
    with pytest.raises(Exception) as want:
        X[idx]
    with pytest.raises(want.type):
        vk(X)[idx]


def test_getitem_grad_order2():
    for idx in (np.s_[[0, 2, 0], 1:3], np.s_[[0, 1], :, [1, 1]], np.s_[[2, 0], [1, 3], [4, 0]],
                np.s_[b(1, 0, 1), ::-2], np.s_[None, 1, [0, 0, 3]]):
        check_grads(lambda x: x[idx] * x[idx], [vk(X)], order=2)


def test_getitem_jit_and_vmap():
    i, j = np.array([[0, 2], [1, 1]]), np.array([3, -1])
    f = vkml.jit(lambda x, i, j: x[i, :, j] * 2.0)
    close(f(vk(X), vk(i), vk(j)), X[i, :, j] * 2)
    # traced indices out of range clamp (JAX's rule)
    close(vkml.jit(lambda x, i: x[i, 0, 0])(vk(X), vk(np.array([5, -9]))), X[[2, 0], 0, 0])
    ib = R.integers(-3, 3, (4, 2))
    close(vkml.vmap(lambda i: vk(X)[i, 1:, i])(vk(ib)), np.stack([X[k, 1:, k] for k in ib]))
    xs = R.uniform(-1, 1, (2, 3, 4))
    close(vkml.vmap(lambda x, i: x[i, [0, 3]])(vk(xs), vk(np.array([[2, 0], [1, 1]]))),
          np.stack([xs[0][[2, 0], [0, 3]], xs[1][[1, 1], [0, 3]]]))


def test_traced_indices_checked_under_debug_checks():
    f = vkml.jit(lambda x, i, j: x[i, :, j])
    close(f(vk(X), vk(np.array([5])), vk(np.array([0]))), X[[2], :, [0]])     # clamped
    with vkml.debug.checks():
        with pytest.raises(IndexError, match="getitem: index 5 is out of bounds for axis 0"):
            f(vk(X), vk(np.array([5])), vk(np.array([0])))
        with pytest.raises(IndexError, match=r"at\[\]\.add: index -6 is out of bounds for axis 2"):
            vkml.jit(lambda x, i: x.at[0, 1, i].add(1.0))(vk(X), vk(np.array([1, -6])))


def test_traced_boolean_mask_names_the_way():
    with pytest.raises(NonConcreteBooleanIndexError, match="where.*size="):
        vkml.jit(lambda x: x[x > 0])(vk(X))
    assert issubclass(NonConcreteBooleanIndexError, IndexError)
    m = X[:, 0, 0] > 0          # a concrete mask is fine under a transform
    close(vkml.jit(lambda x: x[m])(vk(X)), X[m])
    close(vkml.grad(lambda x: (x[m] ** 2).sum())(vk(X)), np.where(m[:, None, None], 2 * X, 0))


# --------------------------------------------------------------------------- take


@pytest.mark.parametrize("mode", ["clip", "wrap"])
def test_take_modes_against_numpy(mode):
    idx = np.array([[0, 7], [-1, -9]])
    for axis in (None, 0, 1, -1):
        close(vnp.take(vk(X), vk(idx), axis=axis, mode=mode), np.take(X, idx, axis=axis, mode=mode))


def test_take_fill_and_raise():
    x = np.arange(5.0)
    close(vnp.take(vk(x), [0, -1, 5, -6], mode="fill"), [0, 4, np.nan, np.nan])
    close(vnp.take(vk(x), [0, 5], mode="fill", fill_value=-1.0), [0, -1])
    got = vnp.take(vk(np.arange(5, dtype=I32)), [5, 1], mode="fill")
    assert got.numpy().tolist() == [np.iinfo(I32).min, 1]
    with pytest.raises(IndexError, match="out of bounds"):
        vnp.take(vk(x), [5], mode="raise")
    with pytest.raises(IndexError, match="out of bounds"):       # checked on the device
        vkml.jit(lambda x, i: vnp.take(x, i, mode="raise"))(vk(x), vk(np.array([7])))
    with pytest.raises(ValueError, match="mode"):
        vnp.take(vk(x), [0], mode="bogus")
    check_grads(lambda x: vnp.take(x, vk(np.array([0, 9, -1, 2])), mode="fill", fill_value=0.0) ** 2,
                [vk(x)], order=2)
    check_grads(lambda x: vnp.take(x, vk(np.array([[0, 9], [-7, 1]])), axis=1, mode="clip") ** 2,
                [vk(X[0])], order=2)


def test_take_along_axis():
    a = R.uniform(-1, 1, (3, 4))
    for axis, idx in ((1, R.integers(-4, 4, (3, 6))), (0, R.integers(0, 3, (2, 4))),
                      (-1, R.integers(0, 4, (1, 2))), (0, R.integers(0, 3, (5, 1)))):
        close(vnp.take_along_axis(vk(a), vk(idx), axis=axis), np.take_along_axis(a, idx, axis=axis))
        check_grads(lambda x: vnp.take_along_axis(x, vk(idx), axis=axis) ** 2, [vk(a)], order=2)
    i = np.array([11, 0, -1])
    close(vnp.take_along_axis(vk(a), vk(i), axis=None), np.take_along_axis(a, i, axis=None))
    with pytest.raises(ValueError):
        vnp.take_along_axis(vk(a), vk(np.zeros(3, I32)), axis=0)
    with pytest.raises(IndexError):
        vnp.take_along_axis(vk(a), vk(np.full((1, 1), 9)), axis=0)
    s = vnp.take_along_axis(vk(a), vk(np.argsort(a, axis=1)), axis=1)
    close(s, np.sort(a, axis=1))
    f = vkml.vmap(lambda r, i: vnp.take_along_axis(r, i, axis=0))
    ib = R.integers(0, 4, (3, 2))
    close(f(vk(a), vk(ib)), np.stack([a[k][ib[k]] for k in range(3)]))


def test_put_along_axis():
    a = R.uniform(-1, 1, (3, 4))
    idx = np.array([[1, 3], [0, 0], [2, -1]])
    v = R.uniform(-1, 1, (3, 2))
    want = a.copy()
    np.put_along_axis(want, idx, v, axis=1)
    close(vnp.put_along_axis(vk(a), vk(idx), vk(v), axis=1), want)
    want = a.copy()
    np.put_along_axis(want, np.array([1, 5]), 9.0, axis=None)
    close(vnp.put_along_axis(vk(a), vk(np.array([1, 5])), 9.0, axis=None), want)
    with pytest.raises(ValueError, match="inplace"):
        vnp.put_along_axis(vk(a), vk(idx), 1.0, axis=1, inplace=True)
    check_grads(lambda x, v: vnp.put_along_axis(x, vk(idx), v, axis=1) ** 2, [vk(a), vk(v)], order=2)


# --------------------------------------------------------------------------- nonzero


@pytest.mark.parametrize("x", [np.array([0, 3, 0, -1, 2.5]), X > 0.3, np.zeros((2, 3)), np.zeros((0, 4)),
                               np.array([[1, 0], [0, 1]], I32), R.uniform(size=(2, 70)) > 0.5],
                         ids=["1d", "3d", "none", "size0", "int", "long"])
def test_nonzero_family(x):
    got = vnp.nonzero(vk(x))
    want = np.nonzero(x)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.numpy().tolist() == w.tolist()
    assert vnp.argwhere(vk(x)).numpy().tolist() == np.argwhere(x).tolist()
    assert vnp.argwhere(vk(x)).shape == np.argwhere(x).shape
    assert vnp.flatnonzero(vk(x)).numpy().tolist() == np.flatnonzero(x).tolist()
    assert [w.numpy().tolist() for w in vnp.where(vk(x))] == [w.tolist() for w in np.where(x)]


def test_nonzero_size_and_fill():
    x = np.array([[0, 2, 0], [3, 0, 4]])
    r, c = vnp.nonzero(vk(x), size=5, fill_value=(-1, -2))
    assert r.numpy().tolist() == [0, 1, 1, -1, -1] and c.numpy().tolist() == [1, 0, 2, -2, -2]
    r, c = vnp.nonzero(vk(x), size=2)
    assert r.numpy().tolist() == [0, 1] and c.numpy().tolist() == [1, 0]
    f = vkml.jit(lambda x: vnp.flatnonzero(x, size=4, fill_value=9))
    assert f(vk(x)).numpy().tolist() == [1, 3, 5, 9]
    assert vnp.argwhere(vk(x), size=4).numpy().tolist() == [[0, 1], [1, 0], [1, 2], [0, 0]]
    with pytest.raises(ConcretizationError, match="size="):
        vkml.jit(lambda x: vnp.nonzero(x))(vk(x))
    assert vnp.argwhere(vk(np.array(3.0))).shape == np.argwhere(np.array(3.0)).shape
    assert vnp.argwhere(vk(np.array(0.0))).shape == np.argwhere(np.array(0.0)).shape
    with pytest.raises(ValueError):
        vnp.nonzero(vk(np.array(1.0)))
    g = vkml.vmap(lambda r: vnp.nonzero(r, size=2, fill_value=-1)[0])(vk(x))
    assert g.numpy().tolist() == [[1, -1], [0, 2]]


# --------------------------------------------------------------------------- .at[]

AT_FORMS = [1, np.s_[[0, 2, 0]], np.s_[[0, 1], :, [1, 1]], np.s_[:, [1, 1, 3], 1:4:2],
            np.s_[[2, 0, 2], [1, 3, 1], [4, 0, 4]], np.s_[..., [-1, 0, -1]], np.s_[b(1, 0, 1)],
            np.s_[X > 0.5], np.s_[None, 0, ::2], np.s_[1:, 2], np.s_[[]], np.s_[True, [1, 1]],
            np.s_[np.array([[0], [2]]), np.array([1, 1, 3])]]
UFUNCS = {"add": np.add, "multiply": np.multiply, "divide": np.divide, "min": np.minimum,
          "max": np.maximum, "power": np.power}


def _np_at(how, x, idx, v):
    out = x.copy()
    if how == "set":
        out[idx] = v
    elif how == "subtract":
        np.subtract.at(out, idx, v)
    else:
        UFUNCS[how].at(out, idx, v)
    return out


@pytest.mark.parametrize("idx", AT_FORMS, ids=repr)
@pytest.mark.parametrize("how", ["set", "add", "subtract", "multiply", "divide", "min", "max", "power"])
def test_at_against_ufunc_at(how, idx):
    x = np.abs(X) + 0.5 if how == "power" else X
    shape = x[idx].shape
    v = R.uniform(0.5, 1.5, shape) if how in ("divide", "power") else R.uniform(-2, 2, shape)
    close(getattr(vk(x).at[idx], how)(vk(v)), _np_at(how, x, idx, v))
    close(getattr(vk(x).at[idx], how)(0.75), _np_at(how, x, idx, 0.75))     # broadcast scalar


def test_at_set_duplicates_last_write_wins():
    got = vk(np.zeros(4)).at[np.array([[1, 3], [1, 1]])].set(vk(np.array([[1.0, 2.0], [3.0, 4.0]])))
    assert got.numpy().tolist() == [0.0, 4.0, 0.0, 2.0]
    i = vnp.asarray([2, 2, 0])
    got = vkml.jit(lambda x, i, v: x.at[i].set(v))(vk(np.zeros(3)), i, vk(np.array([5.0, 6.0, 7.0])))
    assert got.numpy().tolist() == [7.0, 0.0, 6.0]


def test_at_get_and_modes():
    x = np.arange(6.0).reshape(2, 3)
    close(vk(x).at[1, [0, 2]].get(), x[1, [0, 2]])
    close(vk(x).at[[0, 5], 1].get(mode="fill", fill_value=-1.0), [1.0, -1.0])
    close(vk(x).at[[0, 5], -7].get(mode="clip"), [0.0, 3.0])
    with pytest.raises(IndexError, match="out of bounds"):
        vk(x).at[[0, 5]].set(1.0)
    with pytest.raises(IndexError, match="out of bounds"):
        vk(x).at[2, 0].add(1.0)
    close(vk(x).at[[0, 5], 1].set(9.0, mode="drop"), np.where(np.arange(6).reshape(2, 3) == 1, 9.0, x))
    close(vk(x).at[[0, 5], 1].add(1.0, mode="clip"), x + np.array([[0, 1, 0], [0, 1, 0]]))
    # traced: out-of-range updates are dropped (JAX's rule)
    f = vkml.jit(lambda x, i: x.at[i, 0].add(10.0))
    close(f(vk(x), vk(np.array([1, 4, -1]))), x + np.array([[0, 0, 0], [20, 0, 0]]))
    with pytest.raises(ValueError, match="broadcast"):
        vk(x).at[0].set(vk(np.ones(4)))
    v = vk(x).at[0].set(vnp.asarray([1, 2, 3]))           # values take x's dtype
    assert v.dtype == vk(x).dtype
    i32 = vk(np.arange(4, dtype=I32)).at[[1, 1]].add(5)
    assert i32.dtype == I32 and i32.numpy().tolist() == [0, 11, 2, 3]
    assert vk(np.arange(4, dtype=I32)).at[[1, 1, 2]].max(vnp.asarray([7, 9, -1])).numpy().tolist() == [0, 9, 2, 3]
    with pytest.raises(vkml.DTypeError):      # true division is for floats
        vk(np.arange(4, dtype=I32)).at[1].divide(2)


def test_at_grads_order2():
    i3 = (np.array([0, 2, 0]), slice(1, 3))
    v = R.uniform(-1, 1, (3, 2, 5))
    for how in ("set", "add", "multiply", "divide", "power"):
        xx = np.abs(X) + 0.5
        vv = np.abs(v) + 0.5
        check_grads(lambda x, u: getattr(x.at[i3], how)(u) ** 2, [vk(xx), vk(vv)], order=2)
    # min / max with duplicates: distinct values, so each position has one winner
    dup = np.s_[[1, 0, 1], [2, 2, 2]]
    u = vk(np.array([[5.0] * 5, [-5.0] * 5, [0.3] * 5]) + R.uniform(-0.1, 0.1, (3, 5)))
    for how in ("min", "max"):
        check_grads(lambda x, u: getattr(x.at[dup], how)(u) ** 2, [vk(X), u], order=2)
    check_grads(lambda x: x.at[[0, 2]].get(mode="fill", fill_value=0.0) ** 2, [vk(X)], order=2)
    # a product with zeros among repeated updates (the rule counts them, never divides)
    check_grads(lambda x, u: x.at[[0, 0, 1, 1, 1]].multiply(u), [vk(np.array([1.5, -2.0, 0.7])),
                vk(np.array([0.0, 1.3, 0.0, 0.0, 2.0]))], order=2)
    check_grads(lambda x, u: x.at[[0, 0, 2]].multiply(u), [vk(np.array([1.5, -2.0, 0.0])),
                vk(np.array([0.0, 1.3, -0.4]))], order=2)
    check_grads(lambda x, u: x.at[[0, 0, 0, 1, 1, 1, 1]].multiply(u), [vk(np.array([1.5, -2.0])),
                vk(np.array([0.0, 0.0, 1.3, 0.0, 0.0, 0.0, 0.8]))], order=2)


def test_at_max_ties_share_the_gradient():
    """JAX's rule: a tie between the current value and k updates splits the cotangent
    evenly among the k + 1."""
    x = vk(np.array([1.0, 2.0]))
    u = vk(np.array([2.0, 2.0, 0.0]))
    gx, gu = vkml.grad(lambda x, u: x.at[np.array([1, 1, 0])].max(u).sum(), argnums=(0, 1))(x, u)
    close(gx, [1.0, 1 / 3])
    close(gu, [1 / 3, 1 / 3, 0.0])


def test_at_set_grad_masks():
    gx, gv = vkml.grad(lambda x, v: (x.at[[0, 0, 2]].set(v) * vk(np.arange(1.0, 4.0))).sum(),
                       argnums=(0, 1))(vk(np.ones(3)), vk(np.ones(3)))
    close(gx, [0.0, 2.0, 0.0])
    close(gv, [0.0, 1.0, 3.0])      # the overwritten first write gets none


def test_at_under_vmap():
    xs = R.uniform(-1, 1, (3, 4))
    ib = R.integers(0, 4, (3, 2))
    vs = R.uniform(-1, 1, (3, 2))
    for how in ("add", "set", "max", "multiply"):
        f = vkml.vmap(lambda x, i, v: getattr(x.at[i], how)(v))
        want = np.stack([_np_at(how, xs[k], ib[k], vs[k]) for k in range(3)])
        close(f(vk(xs), vk(ib), vk(vs)), want)
    g = vkml.vmap(lambda v: vk(xs).at[1:, [0, 0]].add(v))(vk(R.uniform(size=(2, 2, 2))))
    assert g.shape == (2, 3, 4)


def test_grads_compose_with_jit_and_vmap():
    idx = np.s_[[0, 2, 0], :, [1, 4, 1]]
    f = lambda x, u: (x.at[idx].max(u) * x[idx[0], 1:, idx[2]].sum()).sum()   # noqa: E731
    u = vk(R.uniform(-1, 1, (3, 4)))
    check_grads(vkml.jit(f), [vk(X), u], order=2)
    g = vkml.grad(f, argnums=(0, 1))
    gj = vkml.jit(g)(vk(X), u)
    for a_, b_ in zip(gj, g(vk(X), u)):
        close(a_, np.asarray(b_))
    xs = R.uniform(-1, 1, (2, 3, 4, 5))
    per = vkml.vmap(lambda x: vkml.grad(lambda x: (x[[1, 2], :, [0, 0]] ** 2).sum())(x))(vk(xs))
    want = np.zeros_like(xs)
    for k in range(2):
        np.add.at(want[k], ([1, 2], slice(None), [0, 0]), 2 * xs[k][[1, 2], :, [0, 0]])
    close(per, want)
