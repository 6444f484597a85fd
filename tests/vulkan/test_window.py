"""Window kernels beyond the registry cases: hand-checked layouts and tie-breaking, the
adjoint identities that the gradient rules rely on, and bitwise reproducibility."""
import numpy as np
import pytest

import vkml.numpy as vnp
from vkml.array import bind
from vkml.trace.ops import OpKind
from vkml.trace.shapes import ShapeError

from tests.ops.cases_window import col2im_ref, im2col_ref, maxpool_bwd_ref, out_hw, win

RNG = np.random.default_rng(7)

# (input NCHW shape, window attributes): non-square, strided, padded, dilated, overlapping
CONFIGS = [
    ((2, 3, 5, 4), win((2, 2))),
    ((1, 2, 7, 6), win((2, 3), (2, 1), (1, 2), (1, 2))),
    ((2, 2, 5, 5), win((3, 3), (1, 1), (1, 1), (1, 1))),
    ((1, 3, 8, 7), win((3, 2), (2, 3), (0, 1), (2, 1))),
    ((1, 1, 7, 7), win((2, 2), (3, 3))),
]


def _run(op, xs, **attrs) -> np.ndarray:
    return np.asarray(bind(op, [vnp.asarray(x) for x in xs], **attrs))


def _cols_shape(shape, a):
    oh, ow = out_hw(shape[2:], a["kernel"], a["stride"], a["padding"], a["dilation"])
    return (shape[0], shape[1] * a["kernel"][0] * a["kernel"][1], oh * ow)


def test_im2col_unfold_layout_by_hand():
    x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    got = _run(OpKind.Im2Col, [x], **win((2, 2)))
    # row = kernel offset i*kw + j, column = window oh*OW + ow (PyTorch unfold)
    want = [[0, 1, 3, 4], [1, 2, 4, 5], [3, 4, 6, 7], [4, 5, 7, 8]]
    np.testing.assert_array_equal(got[0], want)


def test_im2col_zero_padding_by_hand():
    x = np.full((1, 1, 1, 1), 5.0, np.float32)
    got = _run(OpKind.Im2Col, [x], **win((2, 2), padding=(1, 1)))
    # four windows around the single pixel; it sits at offset 3, 2, 1, 0 in them
    np.testing.assert_array_equal(got[0], [[0, 0, 0, 5], [0, 0, 5, 0], [0, 5, 0, 0], [5, 0, 0, 0]])


@pytest.mark.parametrize("shape,a", CONFIGS)
def test_col2im_is_adjoint_of_im2col_float64(shape, a):
    x = RNG.standard_normal(shape)
    c = RNG.standard_normal(_cols_shape(shape, a))
    lhs = np.vdot(_run(OpKind.Im2Col, [x], **a), c)
    rhs = np.vdot(x, _run(OpKind.Col2Im, [c], output_size=shape[2:], **a))
    assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs)), (lhs, rhs)


@pytest.mark.parametrize("shape,a", CONFIGS)
def test_maxpool_backward_is_adjoint_of_the_selection_float64(shape, a):
    # max pooling is y = S x for the 0/1 selection S at x; its backward must be S^T g
    x = RNG.standard_normal(shape)
    y = _run(OpKind.MaxPool2d, [x], **a)
    g = RNG.standard_normal(y.shape)
    dx = _run(OpKind.MaxPool2dBackward, [x, g], **a)
    assert abs(np.vdot(y, g) - np.vdot(x, dx)) <= 1e-12 * max(1.0, abs(np.vdot(y, g)))


def test_maxpool_backward_ties_go_to_first_maximum_by_hand():
    x = np.ones((1, 1, 3, 3), np.float32)
    g = np.array([[[[1, 2], [4, 8]]]], np.float32)
    dx = _run(OpKind.MaxPool2dBackward, [x, g], **win((2, 2)))
    # every window is all-equal: each gradient lands on its window's top-left pixel
    np.testing.assert_array_equal(dx[0, 0], [[1, 2, 0], [4, 8, 0], [0, 0, 0]])


def test_maxpool_backward_shared_argmax_sums_in_overlap():
    x = np.zeros((1, 1, 3, 3), np.float64)
    x[0, 0, 1, 1] = 1.0   # the maximum of all four overlapping 2x2 windows
    g = np.array([[[[1, 2], [4, 8]]]], np.float64)
    dx = _run(OpKind.MaxPool2dBackward, [x, g], **win((2, 2)))
    want = np.zeros((3, 3))
    want[1, 1] = 15
    np.testing.assert_array_equal(dx[0, 0], want)


def test_maxpool_nan_propagates_and_takes_the_gradient():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 0, 1] = np.nan
    a = win((2, 2), (2, 2))
    y = _run(OpKind.MaxPool2d, [x], **a)
    assert np.isnan(y[0, 0, 0, 0]) and not np.isnan(y[0, 0].ravel()[1:]).any()
    np.testing.assert_array_equal(y[0, 0].ravel()[1:], [7, 13, 15])
    dx = _run(OpKind.MaxPool2dBackward, [x, np.ones_like(y)], **a)
    assert dx[0, 0, 0, 1] == 1 and dx[0, 0, 1, 1] == 0 and dx.sum() == 4


def test_maxpool_padding_is_minus_infinity():
    x = np.array([[[[-3.0, -2.0], [-4.0, -5.0]]]])
    a = win((1, 1), padding=(1, 1))   # windows wholly in the padding see only -inf
    y = _run(OpKind.MaxPool2d, [x], **a)
    want = np.full((4, 4), -np.inf)
    want[1:3, 1:3] = x[0, 0]
    np.testing.assert_array_equal(y[0, 0], want)
    dx = _run(OpKind.MaxPool2dBackward, [x, np.ones_like(y)], **a)
    np.testing.assert_array_equal(dx, np.ones_like(x))


def test_maxpool_of_minus_infinity_routes_to_first_element():
    x = np.full((1, 1, 2, 3), -np.inf, np.float32)
    dx = _run(OpKind.MaxPool2dBackward, [x, np.ones((1, 1, 1, 2), np.float32)], **win((2, 2)))
    np.testing.assert_array_equal(dx[0, 0], [[1, 1, 0], [0, 0, 0]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gathers_are_bitwise_reproducible(dtype):
    shape, a = CONFIGS[2]
    x = np.round(RNG.integers(0, 3, shape)).astype(dtype)        # many ties
    c = (RNG.standard_normal(_cols_shape(shape, a)) * 1e3).astype(dtype)
    g = (RNG.standard_normal((shape[0], shape[1]) + out_hw(shape[2:], **a)) * 1e3).astype(dtype)
    f1 = [_run(OpKind.Col2Im, [c], output_size=shape[2:], **a),
          _run(OpKind.MaxPool2dBackward, [x, g], **a)]
    f2 = [_run(OpKind.Col2Im, [c], output_size=shape[2:], **a),
          _run(OpKind.MaxPool2dBackward, [x, g], **a)]
    for u, v in zip(f1, f2):
        assert u.tobytes() == v.tobytes()
    np.testing.assert_allclose(f1[0], col2im_ref(c.astype(np.float64), shape[2:], **a),
                               rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-3)
    np.testing.assert_array_equal(f1[1], maxpool_bwd_ref(x, g, **a).astype(dtype))


def test_shape_errors_name_the_operator():
    x = vnp.asarray(np.zeros((1, 1, 4, 4), np.float32))
    with pytest.raises(ShapeError, match="MaxPool2dBackward"):
        bind(OpKind.MaxPool2dBackward, [x, vnp.asarray(np.zeros((1, 1, 3, 3), np.float32))],
             **win((2, 2), (2, 2)))
    with pytest.raises(ShapeError, match="Col2Im"):
        bind(OpKind.Col2Im, [vnp.asarray(np.zeros((1, 4, 5), np.float32))], output_size=(4, 4),
             **win((2, 2)))
    with pytest.raises(ShapeError, match="Im2Col"):
        bind(OpKind.Im2Col, [vnp.asarray(np.zeros((1, 1, 2, 2), np.float32))], **win((3, 3)))



@pytest.mark.parametrize("wide", [True, False], ids=["wide", "one-per-thread"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,a", CONFIGS + [((2, 3, 8, 8), win((3, 3), (1, 1), (1, 1))),     # L = 64
                                               ((1, 2, 6, 6), win((3, 3), (1, 1), (1, 1))),     # L = 36
                                               ((1, 2, 9, 7), win((3, 3), (2, 2), (1, 0)))])   # L = 15
def test_im2col_matches_numpy(shape, a, dtype, wide):
    """Im2Col against a NumPy unfold, with W columns per thread (rows of L % 8 == 0, 4, or
    neither) and with one element per thread (`Profile.im2col_wide` off)."""
    from vkml.vulkan.device import using
    x = RNG.standard_normal(shape).astype(dtype)
    want = im2col_ref(x, a["kernel"], a["stride"], a["padding"], a["dilation"])
    with using(im2col_wide=wide):
        np.testing.assert_array_equal(_run(OpKind.Im2Col, [x], **a), want)


def test_window_kernels_merged_keep_their_bits():
    """Independent window kernels (the four operators, float32 and float64) run merged on
    a device that merges dispatches, with the same bits as dispatches of their own."""
    import vkml
    from vkml.vulkan import merge, runtime
    a = win((3, 3), (1, 1), (1, 1))
    xs = [vnp.asarray(RNG.standard_normal((2, 3, 8, 8)).astype(d)) for d in (np.float32, np.float64)]

    def fn(x32, x64):
        out = []
        for x in (x32, x64):
            y = bind(OpKind.MaxPool2d, [x], **a)
            cols = bind(OpKind.Im2Col, [x], **a)
            out += [y, cols, bind(OpKind.Col2Im, [cols], output_size=(8, 8), **a),
                    bind(OpKind.MaxPool2dBackward, [x, y], **a)]
        return out
    got = vkml.jit(fn)(*xs)
    lo_m = vkml.jit(fn).lower(*xs)
    with merge.disabled():
        want = vkml.jit(fn)(*xs)
        lo_s = vkml.jit(fn).lower(*xs)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    if merge.active(runtime.get().dev.profile):
        assert lo_m.dispatch_count < lo_s.dispatch_count, (lo_m, lo_s)
