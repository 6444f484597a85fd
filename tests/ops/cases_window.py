"""Cases for the window family (Im2Col, Col2Im, MaxPool2d, MaxPool2dBackward) against
loop-based NumPy references written from the definitions (PyTorch unfold/fold layout,
max pooling with -inf padding, gradient to the first maximum of each window).
"""
import numpy as np

from vkml.array import bind
from vkml.trace.ops import OpKind

from .cases import Case, rand, tol

I2C, C2I, MP, MPB = OpKind.Im2Col, OpKind.Col2Im, OpKind.MaxPool2d, OpKind.MaxPool2dBackward


def out_hw(hw, kernel, stride, padding, dilation):
    return tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                 for n, k, s, p, d in zip(hw, kernel, stride, padding, dilation))


def _windows(H, W, kernel, stride, padding, dilation):
    """Yield (oh, ow, [(ki, kj, h, w) in row-major window order, padding included])."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    OH, OW = out_hw((H, W), kernel, stride, padding, dilation)
    for oh in range(OH):
        for ow in range(OW):
            yield oh, ow, [(i, j, oh * sh - ph + i * dh, ow * sw - pw + j * dw)
                           for i in range(kh) for j in range(kw)]


def im2col_ref(x, kernel, stride, padding, dilation):
    N, C, H, W = x.shape
    kh, kw = kernel
    OH, OW = out_hw((H, W), kernel, stride, padding, dilation)
    out = np.zeros((N, C * kh * kw, OH * OW), x.dtype)
    for oh, ow, cells in _windows(H, W, kernel, stride, padding, dilation):
        for i, j, h, w in cells:
            if 0 <= h < H and 0 <= w < W:
                out[:, np.arange(C) * kh * kw + i * kw + j, oh * OW + ow] = x[:, :, h, w]
    return out


def col2im_ref(cols, output_size, kernel, stride, padding, dilation):
    N, CK, L = cols.shape
    kh, kw = kernel
    H, W = output_size
    C = CK // (kh * kw)
    OH, OW = out_hw((H, W), kernel, stride, padding, dilation)
    out = np.zeros((N, C, H, W), cols.dtype)
    for oh, ow, cells in _windows(H, W, kernel, stride, padding, dilation):
        for i, j, h, w in cells:
            if 0 <= h < H and 0 <= w < W:
                out[:, :, h, w] += cols[:, np.arange(C) * kh * kw + i * kw + j, oh * OW + ow]
    return out


def _first_max(x, cells):
    """(value, (h, w)) of the first maximum among in-range cells; a NaN wins at once."""
    best, at = -np.inf, None
    for _, _, h, w in cells:
        if not (0 <= h < x.shape[0] and 0 <= w < x.shape[1]):
            continue
        v = x[h, w]
        if at is None or (not np.isnan(best) and (v > best or np.isnan(v))):
            best, at = v, (h, w)
    return best, at


def maxpool_ref(x, kernel, stride, padding, dilation):
    N, C, H, W = x.shape
    OH, OW = out_hw((H, W), kernel, stride, padding, dilation)
    low = np.iinfo(x.dtype).min if x.dtype.kind == "i" else -np.inf   # int32: INT_MIN
    out = np.full((N, C, OH, OW), low, x.dtype)
    for n in range(N):
        for c in range(C):
            for oh, ow, cells in _windows(H, W, kernel, stride, padding, dilation):
                out[n, c, oh, ow] = _first_max(x[n, c], cells)[0]
    return out


def maxpool_bwd_ref(x, g, kernel, stride, padding, dilation):
    N, C, H, W = x.shape
    dx = np.zeros_like(x)
    for n in range(N):
        for c in range(C):
            for oh, ow, cells in _windows(H, W, kernel, stride, padding, dilation):
                _, at = _first_max(x[n, c], cells)
                if at is not None:
                    dx[n, c, at[0], at[1]] += g[n, c, oh, ow]
    return dx


def win(kernel=(2, 2), stride=(1, 1), padding=(0, 0), dilation=(1, 1)) -> dict:
    return dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation)


def _id(x):
    return x


def _i2c(name, x, a, prep=_id):
    rt, at = tol(x.dtype)
    return Case(I2C, name, lambda x: bind(I2C, [prep(x)], **a),
                lambda x: im2col_ref(prep(x), **a), [x], rtol=rt, atol=at, exact=True)


def _c2i(name, cols, size, a, prep=_id):
    rt, at = tol(cols.dtype)
    return Case(C2I, name, lambda c: bind(C2I, [prep(c)], output_size=size, **a),
                lambda c: col2im_ref(prep(c), size, **a), [cols], rtol=rt, atol=at)


def _mp(name, x, a, prep=_id):
    return Case(MP, name, lambda x: bind(MP, [prep(x)], **a),
                lambda x: maxpool_ref(prep(x), **a), [x], exact=True)


def _mpb(name, x, a, prep=_id, g=None):
    """g defaults to random values on a 1/8 grid, so sums over windows are exact."""
    px = prep(np.asarray(x))
    OH, OW = out_hw(px.shape[2:], a["kernel"], a["stride"], a["padding"], a["dilation"])
    if g is None:
        g = (np.round(rand(px.shape[:2] + (OH, OW), np.float64) * 8) / 8).astype(x.dtype)
    return Case(MPB, name, lambda x, g: bind(MPB, [prep(x), g], **a),
                lambda x, g: maxpool_bwd_ref(prep(x), g, **a), [x, g], exact=True)


def _cols(N, C, hw, a, dtype=np.float32):
    OH, OW = out_hw(hw, a["kernel"], a["stride"], a["padding"], a["dilation"])
    kh, kw = a["kernel"]
    return rand((N, C * kh * kw, OH * OW), dtype)


def _ties(shape, dtype=np.float32):
    """Integers in {0, 1, 2}: many equal values inside and across windows."""
    return rand(shape, np.int32, 0, 2).astype(dtype)


_HT = lambda x: x.transpose(0, 1, 3, 2)      # noqa: E731  non-contiguous: swap H and W
_HS = lambda x: x[:, :, ::2]                 # noqa: E731  non-contiguous: every other row

_A = win((2, 3), (2, 1), (1, 2), (1, 2))       # non-square, strided, padded, dilated
_B = win((3, 3), (1, 1), (1, 1), (1, 1))       # overlapping windows, stride < kernel
_D = win((3, 2), (2, 3), (0, 1), (2, 1))

CASES = [
    _i2c("f32-basic", rand((2, 3, 5, 4)), win()),
    _i2c("f32-nonsquare-stride-pad-dil", rand((1, 2, 7, 6)), _A),
    _i2c("f64-overlap", rand((2, 2, 5, 5), np.float64), _B),
    _i2c("f64-mixed", rand((1, 3, 8, 7), np.float64), _D),
    _i2c("f32-transposed-input", rand((2, 2, 4, 6)), _A, _HT),
    _i2c("f64-strided-input", rand((1, 2, 9, 5), np.float64), _B, _HS),
    _i2c("f32-size1-spatial", rand((2, 3, 1, 1)), win((1, 1))),
    _i2c("f32-zero-batch", rand((0, 2, 4, 4)), _B),
    _i2c("f32-zero-channels", rand((2, 0, 4, 4)), win()),

    _c2i("f32-basic", _cols(2, 3, (5, 4), win()), (5, 4), win()),
    _c2i("f32-nonsquare-stride-pad-dil", _cols(1, 2, (7, 6), _A), (7, 6), _A),
    _c2i("f64-overlap", _cols(2, 2, (5, 5), _B, np.float64), (5, 5), _B),
    _c2i("f64-mixed", _cols(1, 3, (8, 7), _D, np.float64), (8, 7), _D),
    _c2i("f32-strided-input", rand((2, 4, 2 * 12)), (4, 5), win((2, 2), (1, 1)),
         lambda c: c[:, :, ::2]),
    _c2i("f32-stride-gaps", _cols(1, 2, (7, 7), win((2, 2), (3, 3))), (7, 7),
         win((2, 2), (3, 3))),
    _c2i("f32-size1", _cols(1, 1, (1, 1), win((1, 1))), (1, 1), win((1, 1))),
    _c2i("f64-zero-batch", _cols(0, 2, (4, 4), _B, np.float64), (4, 4), _B),

    _mp("f32-basic", rand((2, 3, 4, 6)), win((2, 2), (2, 2))),
    _mp("f32-nonsquare-stride-pad-dil", rand((1, 2, 7, 6)), _A),
    _mp("f64-overlap", rand((2, 2, 5, 5), np.float64), _B),
    _mp("f32-negative-with-padding", -1 - np.abs(rand((1, 2, 5, 4))), _B),
    _mp("f64-nan-propagates", np.where(rand((1, 2, 6, 6)) > 1.5, np.nan,
                                       rand((1, 2, 6, 6))).astype(np.float64), _B),
    _mp("f32-ties", _ties((2, 2, 5, 5)), _B),
    _mp("f32-transposed-input", rand((2, 2, 4, 6)), _D, _HT),
    _mp("f64-strided-input", rand((1, 2, 9, 5), np.float64), _A, _HS),
    _mp("f32-size1", rand((3, 1, 1, 1)), win((1, 1))),
    _mp("f32-zero-batch", rand((0, 2, 4, 4)), _B),
    # int32 stays int32 (exactly NumPy's max); padding never wins, even over INT_MIN itself
    _mp("i32-overlap", rand((2, 2, 5, 5), np.int32, -1000, 1000), _B),
    _mp("i32-extremes-with-padding", np.array([[[[-2**31, -2**31 + 1], [2**31 - 1, -2**31]]]], np.int32),
        win((2, 2), (1, 1), (1, 1))),
    _mp("i32-nonsquare-stride-pad-dil", rand((1, 2, 7, 6), np.int32, -50, -1), _A),
    _mp("i32-transposed-input", _ties((2, 2, 4, 6), np.int32), _D, _HT),

    _mpb("f32-basic", rand((2, 3, 4, 6)), win((2, 2), (2, 2))),
    _mpb("f32-all-equal", np.ones((1, 2, 5, 5), np.float32), _B),
    _mpb("f64-all-equal-strided", np.full((1, 1, 6, 7), 3.0), win((3, 2), (2, 1))),
    _mpb("f32-ties-overlap", _ties((2, 2, 6, 5)), _B),
    _mpb("f64-ties-nonsquare-pad-dil", _ties((1, 2, 7, 6), np.float64), _A),
    _mpb("f64-ties-mixed", _ties((1, 2, 8, 7), np.float64), _D),
    _mpb("f32-negative-with-padding", -1 - np.abs(rand((1, 2, 5, 4))), _B),
    _mpb("f64-nan-first-wins", np.where(rand((1, 1, 6, 6)) > 1.0, np.nan,
                                        _ties((1, 1, 6, 6))).astype(np.float64), _B),
    _mpb("f32-transposed-input", _ties((2, 2, 4, 6)), _D, _HT),
    _mpb("f64-strided-input", _ties((1, 2, 9, 5), np.float64), _B, _HS),
    _mpb("f32-size1", rand((3, 1, 1, 1)), win((1, 1))),
    _mpb("f32-zero-batch", rand((0, 2, 4, 4)), _B),
]
