"""vkml.numpy's reductions beyond sum/mean/max/...: count_nonzero, average, ptp, the nan
family, and where= / initial= / dtype= / ddof= of the basic ones, against NumPy in float64
(size-0 inputs, nan, all-nan slices, the ddof edge values), their errors against NumPy's
exception types, and gradients by check_grads(order=2)."""
from __future__ import annotations

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.test_util import check_grads

from tests.test_numpy_classes import build, np_error_type, run_np, same

F32, F64, I32, B = np.float32, np.float64, np.int32, np.bool_
RNG = np.random.default_rng(6)


def with_nans(shape, dtype=F64, all_nan_row: bool = True):
    """Normal data with nans sprinkled in, and (2-d and up) a first row of nans only."""
    x = RNG.standard_normal(shape)
    x[RNG.random(shape) < 0.3] = np.nan
    if all_nan_row and len(shape) >= 2:
        x[0] = np.nan
    return x.astype(dtype)


def raises_like(np_call, vk_call):
    """vk_call raises an instance of the type np_call raises (NumPy's builtin type)."""
    try:
        run_np(np_call)
    except Exception as e:
        with pytest.raises(np_error_type(e)):
            vk_call()
        return
    raise AssertionError("NumPy did not raise")


AXES = [None, 0, 1, -1, (0, 1), ()]

# --------------------------------------------------------------------------- nan family

NAN_FNS = ["nansum", "nanprod", "nanmax", "nanmin", "nanmean", "nanvar", "nanstd",
           "nanargmax", "nanargmin"]


@pytest.mark.parametrize("name", NAN_FNS)
def test_nan_reductions_match_numpy(name):
    fn, vk = getattr(np, name), getattr(vnp, name)
    arg = name.startswith("nanarg")
    for x in (with_nans((4, 5)), with_nans((4, 5), all_nan_row=False), with_nans((7,), F32),
              build((3, 4), I32), build((3, 4), B), build((2, 5), F64, "special")):
        for ax in ([None, 0, 1, -1] if x.ndim > 1 else [None, 0]) if arg else AXES:
            if x.ndim == 1 and ax in (1, (0, 1)):
                continue
            same(lambda a: vk(a, axis=ax), lambda a: fn(a, axis=ax), [x],
                 what=f"{name}({x.dtype}{list(x.shape)}, axis={ax!r})")
            same(lambda a: vk(a, axis=ax, keepdims=True),
                 lambda a: fn(a, axis=ax, keepdims=True), [x],
                 what=f"{name}({x.dtype}{list(x.shape)}, axis={ax!r}, keepdims)")


@pytest.mark.parametrize("name", NAN_FNS)
def test_nan_reductions_on_size0_and_0d(name):
    fn, vk = getattr(np, name), getattr(vnp, name)
    for shape in [(0,), (2, 0), (0, 3)]:
        x = np.zeros(shape, F64)
        for ax in [None, 0, 1, -1, (0, 1), (1,)]:
            if isinstance(ax, tuple) and name.startswith("nanarg"):
                continue
            same(lambda a: vk(a, axis=ax), lambda a: fn(a, axis=ax), [x],
                 what=f"{name}({list(shape)}, axis={ax!r})")
    for x in (np.array(2.5), np.array(np.nan), np.array(3, I32)):
        for ax in [None, 0, -1, (), (0,), 1]:
            if isinstance(ax, tuple) and name.startswith("nanarg"):
                continue
            same(lambda a: vk(a, axis=ax), lambda a: fn(a, axis=ax), [x],
                 what=f"{name}(0-d {x!r}, axis={ax!r})")


def test_nanargmax_of_an_all_nan_slice_raises_eagerly_and_is_minus_one_traced():
    x = np.array([[np.nan, np.nan], [1.0, np.nan]])
    for name in ("nanargmax", "nanargmin"):
        vk = getattr(vnp, name)
        with pytest.raises(ValueError, match=f"{name}: All-NaN slice encountered"):
            vk(vnp.asarray(x), axis=1)
        with pytest.raises(ValueError, match="All-NaN"):
            vk(vnp.asarray([np.nan, np.nan]))
        assert int(vk(vnp.asarray(x))) == 2                   # not all-nan: fine
        got = vkml.jit(lambda a: vk(a, axis=1))(vnp.asarray(x))
        assert got.numpy().tolist() == [-1, 0]
        assert vkml.jit(lambda a: vk(a, keepdims=True))(vnp.asarray(x[:1])).numpy().tolist() \
            == [[-1]]


@pytest.mark.parametrize("ddof", [0, 1, 2, 3, 5, 0.5])
def test_nanvar_nanstd_ddof_edges(ddof):
    """NumPy's nanvar gives nan where count - ddof <= 0 (var itself gives inf)."""
    for x in (with_nans((4, 3)), np.array([1.0, np.nan, 3.0]), np.array([[2.0, 2.0, np.nan]])):
        for ax in (None, 0, -1):
            for name in ("nanvar", "nanstd"):
                same(lambda a: getattr(vnp, name)(a, axis=ax, ddof=ddof),
                     lambda a: getattr(np, name)(a, axis=ax, ddof=ddof), [x],
                     what=f"{name}({x.tolist()}, axis={ax}, ddof={ddof})")


def test_nan_reductions_dtype_argument():
    x = with_nans((3, 4), F32)
    for name in ("nansum", "nanprod", "nanmean", "nanvar", "nanstd"):
        got = getattr(vnp, name)(vnp.asarray(x), axis=0, dtype=vnp.float64)
        want = run_np(getattr(np, name), x.astype(F64), axis=0)
        assert got.dtype == F64
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, equal_nan=True)
    i = build((3, 4), I32)
    same(lambda a: vnp.nansum(a, dtype=vnp.float32), lambda a: np.nansum(a, dtype=F32), [i])


# --------------------------------------------------------------------------- count_nonzero, ptp


def test_count_nonzero():
    for x in (build((3, 4), I32), build((3, 4), B), build((2, 5), F64, "special"),
              np.zeros((2, 0)), np.array(3.0), np.array(0, I32)):
        for ax in [None, 0, 1, -1, (0, 1), ()]:
            same(lambda a: vnp.count_nonzero(a, axis=ax), lambda a: np.count_nonzero(a, axis=ax),
                 [x], what=f"count_nonzero({x.tolist()}, axis={ax!r})")
            same(lambda a: vnp.count_nonzero(a, axis=ax, keepdims=True),
                 lambda a: np.count_nonzero(a, axis=ax, keepdims=True),
                 [x], what=f"count_nonzero({x.tolist()}, axis={ax!r}, keepdims)")


def test_ptp():
    for x in (build((3, 4), I32), build((3, 4), F64), build((2, 5), F64, "special"),
              np.zeros((2, 0)), np.zeros((0, 3)), np.array(3.0), build((3, 4), B)):
        for ax in [None, 0, 1, -1, (0, 1)]:
            for kd in (False, True):
                same(lambda a: vnp.ptp(a, axis=ax, keepdims=kd),
                     lambda a: np.ptp(a, axis=ax, keepdims=kd), [x],
                     what=f"ptp({x.dtype}{list(x.shape)}, axis={ax!r}, keepdims={kd})")


# --------------------------------------------------------------------------- average


def test_average_matches_numpy():
    x = RNG.standard_normal((3, 4))
    w = RNG.random((3, 4)) + 0.1
    cases = [
        ((x,), {}), ((x,), {"axis": 1}), ((x,), {"axis": (0, 1), "keepdims": True}),
        ((x,), {"weights": w}), ((x,), {"axis": 0, "weights": w}),
        ((x,), {"axis": 1, "weights": w[0]}), ((x,), {"axis": 0, "weights": w[:, 0]}),
        ((x,), {"axis": -1, "weights": w[0], "keepdims": True}),
        ((x,), {"returned": True}), ((x,), {"axis": 0, "returned": True}),
        ((x,), {"axis": 1, "weights": w[0], "returned": True}),
        ((x,), {"weights": w, "returned": True, "keepdims": True}),
        ((build((3, 4), I32),), {"axis": 1, "weights": np.arange(1, 5, dtype=I32)}),
        ((build((3, 4), I32),), {}),
    ]
    for args, kw in cases:
        kw_vk = {k: (vnp.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
        got = vnp.average(*[vnp.asarray(a) for a in args], **kw_vk)
        want = np.average(*args, **kw)
        if kw.get("returned"):
            assert isinstance(got, tuple) and len(got) == 2
            pairs = list(zip(got, want))
        else:
            pairs = [(got, want)]
        for g, wv in pairs:
            wv = np.asarray(wv)
            assert g.shape == wv.shape, (kw, g.shape, wv.shape)
            f64 = args[0].dtype == F64
            assert g.dtype == (F64 if f64 else F32), (kw, g.dtype)
            np.testing.assert_allclose(g.numpy().astype(F64), wv, rtol=1e-12 if f64 else 1e-6,
                                       err_msg=str(kw))


def test_average_errors_as_numpy():
    x = np.ones((3, 4))
    for kw in [{"weights": np.ones(4)}, {"weights": np.ones((3, 1)), "axis": 1},
               {"weights": np.ones(3), "axis": 1}, {"weights": np.zeros((3, 4))},
               {"weights": np.array([1.0, -1.0, 0.0, 0.0]), "axis": 1}]:
        raises_like(lambda: np.average(x, **kw),
                    lambda: vnp.average(vnp.asarray(x), **{k: vnp.asarray(v) if isinstance(
                        v, np.ndarray) else v for k, v in kw.items()}))
    with pytest.raises(ZeroDivisionError, match="average: weights sum to zero"):
        vnp.average(vnp.ones(2), weights=vnp.zeros(2))


# --------------------------------------------------------------------------- where=, initial=, dtype=


WHERE_X = build((3, 4), F64, "special")
MASKS = [np.array([[True, False, True, True], [False, False, False, False],
                   [True, True, False, True]]),
         np.array([True, False, False, True]),         # broadcast along rows
         np.array([[True], [False], [True]]),
         np.zeros((3, 4), bool), True, False]


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "amax", "amin", "mean", "var",
                                  "std", "any", "all"])
def test_where_and_initial_match_numpy(name):
    fn, vk = getattr(np, name), getattr(vnp, name)
    inits = [None] if name in ("mean", "var", "std", "any", "all") else [None, 0.5, -3, 100.0]
    for x in (WHERE_X, build((3, 4), I32), build((3, 4), F32), build((3, 4), B)):
        for m in MASKS:
            for init in inits:
                for ax in (None, 0, 1, (0, 1), ()):
                    kw = {"axis": ax, "where": m}
                    if init is not None:
                        if x.dtype == B and name in ("sum", "prod"):
                            continue   # NumPy casts initial to the bool reduction's int64 sum
                        kw["initial"] = init if x.dtype.kind == "f" else int(init)
                    vkw = dict(kw, where=vnp.asarray(m) if isinstance(m, np.ndarray) else m)
                    same(lambda a: vk(a, **vkw), lambda a: fn(a, **kw), [x],
                         what=f"{name}({x.dtype}, {kw})")
                    same(lambda a: vk(a, keepdims=True, **vkw),
                         lambda a: fn(a, keepdims=True, **kw), [x],
                         what=f"{name}({x.dtype}, {kw}, keepdims)")


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min"])
def test_initial_over_no_elements(name):
    fn, vk = getattr(np, name), getattr(vnp, name)
    for shape in [(0,), (2, 0), (0, 3)]:
        x = np.zeros(shape, F64)
        for ax in (None, 0, 1, -1):
            for init in (None, 2.5, -1.0):
                kw = {"axis": ax} if init is None else {"axis": ax, "initial": init}
                same(lambda a: vk(a, **kw), lambda a: fn(a, **kw), [x],
                     what=f"{name}({list(shape)}, {kw})")
    same(lambda a: vk(a, initial=7), lambda a: fn(a, initial=7), [np.array(3, I32)])


def test_max_with_where_needs_initial_and_bad_masks_raise():
    x = vnp.asarray(WHERE_X)
    for name in ("max", "min"):
        with pytest.raises(ValueError, match=f"{name}: reduction operation .* does not have an "
                                             f"identity, so to use a where mask one has to "
                                             f"specify 'initial'"):
            getattr(vnp, name)(x, where=vnp.ones((3, 4), bool))
    for name in ("sum", "prod", "mean"):
        raises_like(lambda: getattr(np, name)(WHERE_X, where=np.ones((2, 3, 4), bool)),
                    lambda: getattr(vnp, name)(x, where=vnp.ones((2, 3, 4), bool)))
        raises_like(lambda: getattr(np, name)(WHERE_X, where=np.ones(3, bool)),
                    lambda: getattr(vnp, name)(x, where=vnp.ones(3, bool)))


def test_prod_and_sum_dtype():
    x = build((3, 4), I32)
    for dtype in (F32, F64, I32):
        for name, ax in (("prod", 1), ("sum", 0), ("mean", None)):
            got = getattr(vnp, name)(vnp.asarray(x), axis=ax, dtype=dtype)
            want = getattr(np, name)(x, axis=ax, dtype=dtype)
            assert got.dtype == dtype, (name, dtype)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    same(lambda a: vnp.prod(a, dtype=I32), lambda a: np.prod(a, dtype=I32), [build((5,), B)])


# --------------------------------------------------------------------------- ddof, 0-d axes, empty


@pytest.mark.parametrize("ddof", [0, 1, 2, 3])
def test_var_std_ddof_edge_values_with_where(ddof):
    """n counts the elements where= picks: ddof >= n gives inf (nan for a zero sum)."""
    for m in MASKS:
        for ax in (None, 0, 1):
            for name in ("var", "std"):
                same(lambda a: getattr(vnp, name)(a, axis=ax, ddof=ddof, where=vnp.asarray(m)),
                     lambda a: getattr(np, name)(a, axis=ax, ddof=ddof, where=m),
                     [build((3, 4), F64)], what=f"{name}(axis={ax}, ddof={ddof}, where={m})")


@pytest.mark.parametrize("ddof", [0, 1, 2, 3, 4, 7, -1, 0.5])
def test_var_std_ddof_edge_values(ddof):
    for x in (RNG.standard_normal((4, 3)), np.ones((3, 2)), np.array(2.0), np.zeros((0, 3)),
              np.zeros((2, 0)), build((3, 4), I32)):
        for ax in (None, 0, -1, (0, 1)):
            for name in ("var", "std"):
                same(lambda a: getattr(vnp, name)(a, axis=ax, ddof=ddof),
                     lambda a: getattr(np, name)(a, axis=ax, ddof=ddof), [x],
                     what=f"{name}({x.dtype}{list(x.shape)}, axis={ax!r}, ddof={ddof})")


def test_axis_arguments_on_0d_arrays_as_numpy():
    """NumPy's ufunc reductions take axis 0 / -1 of a 0-d array (x.sum(0) is x); a tuple
    naming axis 0, axis 1, and mean/var/std/average/nanmean/... over axis 0 raise AxisError;
    axis=() and None are fine everywhere."""
    x = np.array(2.5)
    for name in ["sum", "prod", "max", "min", "mean", "var", "std", "any", "all", "ptp",
                 "count_nonzero", "nansum", "nanprod", "nanmax", "nanmin", "nanmean", "nanvar",
                 "nanstd", "average"]:
        for ax in (None, (), 0, -1, (0,), 1, (-1,)):
            same(lambda a: getattr(vnp, name)(a, axis=ax), lambda a: getattr(np, name)(a, axis=ax),
                 [x], what=f"{name}(0-d, axis={ax!r})")
    with pytest.raises(np.exceptions.AxisError):
        vnp.asarray(2.5).sum((0,))
    with pytest.raises(np.exceptions.AxisError):
        vnp.asarray(2.5).sum(1)


def test_any_all_over_empty_axes():
    for shape in [(0,), (2, 0), (0, 3), (0, 0)]:
        for ax in (None, 0, 1, -1, (0, 1), ()):
            for name in ("any", "all"):
                same(lambda a: getattr(vnp, name)(a, axis=ax),
                     lambda a: getattr(np, name)(a, axis=ax), [np.zeros(shape, bool)],
                     what=f"{name}({shape}, axis={ax!r})")


def test_reductions_over_lists_of_arrays():
    a, b = vnp.asarray([1.0, 2.0]), vnp.asarray([3.0, 5.0])
    assert vnp.mean([a, b]).item() == 2.75
    assert vnp.std([a, b], axis=0).numpy().tolist() == [1.0, 1.5]
    assert vnp.var((a, b), axis=1).numpy().tolist() == [0.25, 1.0]
    assert vnp.nansum([a, vnp.asarray([np.nan, 1.0])]).item() == 4.0
    assert vnp.max([[a], [b]], axis=(0, 1)).numpy().tolist() == [3.0, 5.0]


# --------------------------------------------------------------------------- gradients


def x64(*shape):
    return vnp.asarray(RNG.standard_normal(shape), F64)


def test_gradients_of_the_nan_reductions():
    x = with_nans((3, 4), all_nan_row=False)
    x[:, 0] = RNG.standard_normal(3)     # every row keeps a value
    a = vnp.asarray(x)
    for f in (lambda v: vnp.nansum(v, axis=1), lambda v: vnp.nanmean(v, axis=0),
              lambda v: vnp.nanvar(v, axis=1, ddof=1),
              lambda v: vnp.nanstd(v, axis=None), lambda v: vnp.nanprod(v, axis=1),
              lambda v: vnp.nanmax(v, axis=1), lambda v: vnp.nanmin(v, axis=0)):
        check_grads(f, (a,), order=2)


def test_gradient_of_nanmean_puts_zero_on_the_nans():
    x = vnp.asarray([1.0, np.nan, 3.0, 4.0], F64)
    g = vkml.grad(lambda v: vnp.nanmean(v))(x).numpy()
    np.testing.assert_allclose(g, [1 / 3, 0.0, 1 / 3, 1 / 3])


def test_gradients_of_average_ptp_and_count_free_reductions():
    a, w = x64(3, 4), vnp.asarray(RNG.random((3, 4)) + 0.5, F64)
    check_grads(lambda v, u: vnp.average(v, axis=1, weights=u), (a, w), order=2)
    check_grads(lambda v, u: vnp.average(v, axis=0, weights=u[:, 0]), (a, w), order=2)
    check_grads(lambda v: vnp.average(v, axis=1, returned=True)[0], (a,), order=2)
    check_grads(lambda v: vnp.ptp(v, axis=0), (a,), order=2)


def test_gradients_of_where_and_initial():
    a = x64(3, 4)
    m = vnp.asarray(MASKS[0])
    check_grads(lambda v: vnp.sum(v, axis=1, where=m, initial=2.0), (a,), order=2)
    check_grads(lambda v: vnp.prod(v, axis=0, where=m, initial=-1.5), (a,), order=2)
    check_grads(lambda v: vnp.mean(v, axis=0, where=MASKS[2]), (a,), order=2)
    m2 = vnp.asarray(MASKS[0] | np.array([[False], [True], [False]]))   # no empty row
    check_grads(lambda v: vnp.var(v, axis=1, where=m2, ddof=1), (a,), order=2)
    check_grads(lambda v: vnp.std(v, axis=None, where=m), (a,), order=2)
    check_grads(lambda v: vnp.max(v, axis=1, where=m, initial=-0.5), (a,), order=2)
    check_grads(lambda v: vnp.min(v, axis=0, where=m, initial=10.0), (a,), order=2)


@pytest.mark.parametrize("ddof", [0, 1, 2])
def test_gradients_of_var_std_with_ddof(ddof):
    a = x64(4, 3)
    check_grads(lambda v: vnp.var(v, axis=0, ddof=ddof), (a,), order=2)
    check_grads(lambda v: vnp.std(v, axis=1, ddof=ddof), (a,), order=2)


@pytest.mark.parametrize("name", ["nansum", "nanprod", "nanmax", "nanmin", "nanmean", "nanvar",
                                  "nanstd"])
def test_nan_reductions_where_and_initial(name):
    fn, vk = getattr(np, name), getattr(vnp, name)
    inits = [None, 0.5, -4.0] if name in ("nansum", "nanprod", "nanmax", "nanmin") else [None]
    x = with_nans((3, 4))
    for data in (x, build((3, 4), I32)):
        for m in MASKS:
            for init in inits:
                for ax in (None, 0, 1):
                    kw = {"axis": ax, "where": m}
                    if init is not None:
                        kw["initial"] = init if data.dtype.kind == "f" else int(init)
                    vkw = dict(kw, where=vnp.asarray(m) if isinstance(m, np.ndarray) else m)
                    same(lambda a: vk(a, **vkw), lambda a: fn(a, **kw), [data],
                         what=f"{name}({data.dtype}, {kw})")
    if name in ("nanmax", "nanmin"):   # initial stands for an all-nan slice, no where needed
        same(lambda a: vk(a, axis=1, initial=-9.0), lambda a: fn(a, axis=1, initial=-9.0), [x])
        same(lambda a: vk(a, axis=0, initial=1.0), lambda a: fn(a, axis=0, initial=1.0),
             [np.zeros((0, 2))])


def test_nan_reductions_refuse_out():
    for name in NAN_FNS + ["ptp"]:
        with pytest.raises(NotImplementedError, match=f"{name}: the 'out' argument"):
            getattr(vnp, name)(vnp.ones(3), out=vnp.zeros(()))


def test_gradients_of_nan_reductions_with_where():
    x = with_nans((3, 4), all_nan_row=False)
    x[:, 0] = RNG.standard_normal(3)
    m = MASKS[0].copy()
    m[:, 0] = True
    a = vnp.asarray(x)
    check_grads(lambda v: vnp.nanmean(v, axis=1, where=m), (a,), order=2)
    check_grads(lambda v: vnp.nanvar(v, axis=1, where=m), (a,), order=2)
    check_grads(lambda v: vnp.nanmax(v, axis=1, where=m, initial=-5.0), (a,), order=2)
