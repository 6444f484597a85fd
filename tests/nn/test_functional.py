"""vkml.nn.functional against NumPy float64 references, forward and gradient."""
import math

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
import vkml.random as vr
from vkml.nn import functional as F
from vkml.test_util import check_grads

RNG = np.random.default_rng(7)
F64 = np.float64


def f32(x):
    return vnp.asarray(np.asarray(x, np.float32))


def f64(x):
    return vnp.asarray(np.asarray(x, F64))


def close32(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got).astype(F64), want, rtol=rtol, atol=atol)


def close64(got, want, rtol=1e-12, atol=1e-13):
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------- activations

def _erf(x):
    return np.vectorize(math.erf)(x)


ACTS = {
    "relu": (F.relu, lambda x: np.maximum(x, 0)),
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    "silu": (F.silu, lambda x: x / (1 + np.exp(-x))),
    "sigmoid": (F.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
}


@pytest.mark.parametrize("name", sorted(ACTS))
def test_activation_forward(name):
    fn, ref = ACTS[name]
    x = RNG.standard_normal((3, 5)) * 3
    close32(fn(f32(x).T), ref(x.astype(np.float32).astype(F64)).T)
    close64(fn(f64(x)), ref(x), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "silu", "sigmoid"])
def test_activation_grad(name):
    fn, _ = ACTS[name]
    check_grads(lambda x: fn(x), (f64(RNG.standard_normal(4)),), order=1)


def test_relu_grad_at_zero_is_zero():
    g = vkml.grad(lambda x: F.relu(x).sum())(f64([-1.0, 0.0, 2.0]))
    assert np.asarray(g).tolist() == [0.0, 0.0, 1.0]


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(f32([1.0]), approximate="fast")


# --------------------------------------------------------------------------- softmax family

def _lse(x, axis, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def test_softmax_and_log_softmax():
    x = RNG.standard_normal((2, 3, 4)) * 4
    for ax in (-1, 1, 0):
        ref = np.exp(x - _lse(x, ax, True))
        close64(F.softmax(f64(x), axis=ax), ref)
        close64(F.log_softmax(f64(x), axis=ax), x - _lse(x, ax, True))
        close32(F.softmax(f32(x), axis=ax), ref, atol=1e-6)


def test_softmax_grads():
    x = f64(RNG.standard_normal((2, 3)))
    w = f64(RNG.standard_normal((2, 3)))
    check_grads(lambda x: F.softmax(x, axis=1) * w, (x,), order=1)
    check_grads(lambda x: F.log_softmax(x, axis=0) * w, (x,), order=1)


def test_logsumexp_values():
    x = RNG.standard_normal((3, 4)) * 5
    close64(F.logsumexp(f64(x)), _lse(x, None))
    close64(F.logsumexp(f64(x), axis=1), _lse(x, 1))
    close64(F.logsumexp(f64(x), axis=(0, 1), keepdims=True), _lse(x, (0, 1), True))
    big = F.logsumexp(f32([1000.0, 1000.0]))
    assert float(big) == pytest.approx(1000 + math.log(2), rel=1e-6)
    rows = np.asarray(F.logsumexp(f64([[-np.inf, -np.inf], [0.0, -np.inf]]), axis=1))
    assert rows[0] == -np.inf and rows[1] == 0.0


def test_logsumexp_gradient_is_softmax():
    x = RNG.standard_normal(5) * 3
    g = vkml.grad(lambda v: F.logsumexp(v))(f64(x))
    close64(g, np.exp(x - _lse(x, 0)))
    check_grads(lambda v: F.logsumexp(v, axis=1), (f64(RNG.standard_normal((2, 3))),), order=1)


# --------------------------------------------------------------------------- losses

def _ce_ref(logits, labels, reduction="mean", smoothing=0.0, ignore=-100):
    """PyTorch's cross_entropy with class axis 1 (or 0 for 1-d logits)."""
    logits = np.asarray(logits, F64)
    ax = 1 if logits.ndim >= 2 else 0
    lp = logits - _lse(logits, ax, True)
    lp = np.moveaxis(lp, ax, -1)
    C = lp.shape[-1]
    if np.issubdtype(np.asarray(labels).dtype, np.floating):
        t = np.moveaxis(np.asarray(labels, F64), ax, -1) * (1 - smoothing) + smoothing / C
        loss = -(t * lp).sum(-1)
        return {"none": loss, "sum": loss.sum(), "mean": loss.mean()}[reduction]
    labels = np.asarray(labels)
    valid = labels != ignore
    safe = np.where(valid, labels, 0)
    nll = -np.take_along_axis(lp, safe[..., None], -1)[..., 0]
    loss = (1 - smoothing) * nll - smoothing * lp.mean(-1)
    loss = np.where(valid, loss, 0.0)
    return {"none": loss, "sum": loss.sum(), "mean": loss.sum() / valid.sum()}[reduction]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy(reduction, smoothing):
    logits = RNG.standard_normal((5, 4)) * 2
    labels = np.array([0, 3, 1, 1, 2], np.int32)
    got = F.cross_entropy(f64(logits), vnp.asarray(labels), reduction=reduction, label_smoothing=smoothing)
    close64(got, _ce_ref(logits, labels, reduction, smoothing))
    got32 = F.cross_entropy(f32(logits), vnp.asarray(labels), reduction=reduction, label_smoothing=smoothing)
    close32(got32, _ce_ref(logits.astype(np.float32), labels, reduction, smoothing), atol=1e-5)


def test_cross_entropy_spatial_ignore_index_and_unbatched():
    logits = RNG.standard_normal((2, 3, 2, 2))
    labels = np.array([[[0, 2], [1, -100]], [[2, 2], [0, 1]]], np.int32)
    for red in ("mean", "none"):
        close64(F.cross_entropy(f64(logits), vnp.asarray(labels), reduction=red, label_smoothing=0.2),
                _ce_ref(logits, labels, red, 0.2))
    one = RNG.standard_normal(4)
    close64(F.cross_entropy(f64(one), vnp.asarray(2)), _ce_ref(one, np.int32(2)))


def test_cross_entropy_probability_targets():
    logits = RNG.standard_normal((3, 4))
    p = RNG.random((3, 4))
    p /= p.sum(1, keepdims=True)
    close64(F.cross_entropy(f64(logits), f64(p), label_smoothing=0.1), _ce_ref(logits, p, "mean", 0.1))


def test_cross_entropy_grad_and_errors():
    labels = vnp.asarray(np.array([1, 0, 2], np.int32))
    logits = RNG.standard_normal((3, 3))
    check_grads(lambda z: F.cross_entropy(z, labels, label_smoothing=0.1), (f64(logits),), order=1)
    g = vkml.grad(lambda z: F.cross_entropy(z, labels, reduction="sum"))(f64(logits))
    sm = np.exp(logits - _lse(logits, 1, True))
    close64(g, sm - np.eye(3)[[1, 0, 2]])
    with pytest.raises(ValueError, match=r"labels of shape \(2,\).*expected labels of shape \(3,\)"):
        F.cross_entropy(f64(logits), vnp.asarray([0, 1]))
    with pytest.raises(TypeError, match="int32 class indices"):
        F.cross_entropy(f64(logits), vnp.asarray([True, False, True]))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(f64(logits), labels, reduction="avg")
    # labels out of [0, C) raise (PyTorch: "Target 3 is out of bounds"), ignore_index aside
    for bad in (3, -1, 10):
        for f in (F.cross_entropy, F.nll_loss):
            with pytest.raises(IndexError, match=rf"^{f.__name__}: label {bad} is out of bounds for 3 classes"):
                f(f64(logits), vnp.asarray([0, bad, 1]))
    assert np.isfinite(float(F.cross_entropy(f64(logits), vnp.asarray([0, -100, 1]))))


def test_mse_loss_and_one_hot():
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3))
    close64(F.mse_loss(f64(a), f64(b)), ((a - b) ** 2).mean())
    close64(F.mse_loss(f64(a), f64(b), reduction="none"), (a - b) ** 2)
    close64(F.mse_loss(f64(a), f64(b), reduction="sum"), ((a - b) ** 2).sum())
    check_grads(lambda p: F.mse_loss(p, f64(b)), (f64(a),), order=1)
    assert np.asarray(F.one_hot(vnp.asarray([2, -1]), 3)).tolist() == [[0, 0, 1], [0, 0, 0]]


def test_nll_loss_matches_cross_entropy():
    logits = RNG.standard_normal((4, 3))
    labels = vnp.asarray(np.array([2, 0, 1, 1], np.int32))
    close64(F.nll_loss(F.log_softmax(f64(logits), axis=1), labels), np.asarray(F.cross_entropy(f64(logits), labels)))


# --------------------------------------------------------------------------- linear, conv

def test_linear():
    x, w, b = RNG.standard_normal((2, 4, 3)), RNG.standard_normal((5, 3)), RNG.standard_normal(5)
    close64(F.linear(f64(x), f64(w), f64(b)), x @ w.T + b)
    close32(F.linear(f32(x), f32(w)), (x @ w.T), atol=1e-5)
    check_grads(lambda x, w, b: F.linear(x, w, b), (f64(x[0]), f64(w), f64(b)), order=1)
    with pytest.raises(ValueError, match="in_features = 3"):
        F.linear(f64(np.ones((2, 4))), f64(w))


def conv_ref(x, w, b=None, stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1):
    N, C, H, W = x.shape
    O, Cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(padding))
    OH = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    OW = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((N, O, OH, OW))
    Og = O // groups
    for g in range(groups):
        xs, ws = xp[:, g * Cg:(g + 1) * Cg], w[g * Og:(g + 1) * Og]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh:i * dh + sh * (OH - 1) + 1:sh, j * dw:j * dw + sw * (OW - 1) + 1:sw]
                out[:, g * Og:(g + 1) * Og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out if b is None else out + b[None, :, None, None]


CONVS = [  # (C, O, k, stride, padding, dilation, groups, H, W)
    (3, 4, (3, 3), 1, 0, 1, 1, 6, 5),
    (2, 3, (3, 2), (2, 1), (1, 2), 1, 1, 7, 6),
    (4, 6, (3, 3), 2, 1, 2, 2, 9, 8),
    (4, 4, (1, 1), 1, 0, 1, 4, 3, 3),
    (6, 4, (2, 3), (1, 2), (0, 1), (2, 1), 2, 6, 7),
]


@pytest.mark.parametrize("cfg", CONVS, ids=lambda c: "C{}O{}k{}s{}p{}d{}g{}".format(*c[:7]))
def test_conv2d_forward(cfg):
    C, O, k, s, p, d, g, H, W = cfg
    x = RNG.standard_normal((2, C, H, W))
    w = RNG.standard_normal((O, C // g) + k)
    b = RNG.standard_normal(O)
    pp = F._pair("t", "p", p, 0)
    want = conv_ref(x, w, b, F._pair("t", "s", s, 1), ((pp[0], pp[0]), (pp[1], pp[1])), F._pair("t", "d", d, 1), g)
    close64(F.conv2d(f64(x), f64(w), f64(b), s, p, d, g), want, rtol=1e-11, atol=1e-12)
    close32(F.conv2d(f32(x), f32(w), f32(b), s, p, d, g), want, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("cfg", [CONVS[1], CONVS[2]], ids=["stride_pad", "dilated_groups"])
def test_conv2d_grad(cfg):
    C, O, k, s, p, d, g, H, W = cfg
    x = f64(RNG.standard_normal((1, C, H, W)))
    w = f64(RNG.standard_normal((O, C // g) + k))
    b = f64(RNG.standard_normal(O))
    check_grads(lambda x, w, b: F.conv2d(x, w, b, s, p, d, g), (x, w, b), order=1)


def test_conv2d_same_padding_unbatched_and_errors():
    x, w = RNG.standard_normal((2, 5, 6)), RNG.standard_normal((3, 2, 2, 4))
    got = F.conv2d(f64(x), f64(w), padding="same")
    assert got.shape == (3, 5, 6)
    close64(got, conv_ref(x[None], w, padding=((0, 1), (1, 2)))[0])
    close64(F.conv2d(f64(x), f64(w), padding="valid"), conv_ref(x[None], w)[0])
    with pytest.raises(ValueError, match=r"groups=2.*weight.shape\[1\] == C // groups"):
        F.conv2d(f64(np.ones((1, 4, 5, 5))), f64(np.ones((2, 4, 3, 3))), groups=2)
    with pytest.raises(ValueError, match="does not fit"):
        F.conv2d(f64(np.ones((1, 1, 2, 2))), f64(np.ones((1, 1, 3, 3))))
    with pytest.raises(ValueError, match="NCHW"):
        F.conv2d(f64(np.ones((4, 4))), f64(np.ones((1, 1, 3, 3))))


def test_conv2d_padding_strings_and_empty_kernels_are_refused():
    x, w = f64(np.ones((1, 1, 5, 5))), f64(np.ones((1, 1, 3, 3)))
    with pytest.raises(ValueError, match="conv2d: padding='same' is not supported for strided convolutions"):
        F.conv2d(x, w, stride=2, padding="same")
    with pytest.raises(ValueError, match=r"conv2d: Invalid padding string 'not_same', should be one of "
                                         r"\{'valid', 'same'\}"):
        F.conv2d(x, w, padding="not_same")
    with pytest.raises(ValueError, match=r"conv2d: weight \(1, 1, 0, 3\) has an empty kernel"):
        F.conv2d(x, f64(np.ones((1, 1, 0, 3))))
    assert F.conv2d(x, w, stride=2, padding="valid").shape == (1, 1, 2, 2)


def test_one_hot_needs_a_positive_int_number_of_classes():
    """As jax.nn.one_hot: PyTorch's -1 (infer) is refused rather than guessed."""
    for n in (-1, 0):
        with pytest.raises(ValueError, match=f"one_hot: num_classes must be a positive int, got {n}"):
            F.one_hot(vnp.asarray([0, 1]), n)
    with pytest.raises(TypeError, match="one_hot: num_classes must be an int, got 2.5"):
        F.one_hot(vnp.asarray([0, 1]), 2.5)
    assert np.asarray(F.one_hot(vnp.asarray([1]), np.int64(2))).tolist() == [[0, 1]]


# --------------------------------------------------------------------------- pooling

def _windows(x, k, s, p, fill):
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=fill)
    OH = (xp.shape[2] - k[0]) // s[0] + 1
    OW = (xp.shape[3] - k[1]) // s[1] + 1
    w = np.stack([xp[:, :, i:i + s[0] * (OH - 1) + 1:s[0], j:j + s[1] * (OW - 1) + 1:s[1]]
                  for i in range(k[0]) for j in range(k[1])], axis=-1)
    return w


def test_max_pool2d_keeps_int32():
    """The max of integers is an integer: int32 in, int32 out, exactly NumPy's max (padding
    is INT_MIN, so it never wins); bool input pools as int32."""
    x = RNG.integers(-2**31, 2**31 - 1, size=(2, 3, 5, 6), dtype=np.int64).astype(np.int32)
    for k, s, p in [((2, 2), (2, 2), (0, 0)), ((3, 2), (2, 1), (1, 1)), ((3, 3), (1, 1), (1, 1))]:
        got = F.max_pool2d(vnp.asarray(x), k, stride=s, padding=p)
        want = _windows(x.astype(np.int64), k, s, p, np.iinfo(np.int32).min).max(-1).astype(np.int32)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(np.asarray(got), want)
    low = np.full((1, 1, 2, 2), np.iinfo(np.int32).min, np.int32)
    np.testing.assert_array_equal(np.asarray(F.max_pool2d(vnp.asarray(low), 2, stride=1, padding=1)),
                                  np.full((1, 1, 3, 3), np.iinfo(np.int32).min))
    b = RNG.random((1, 2, 4, 4)) < 0.3
    got = F.max_pool2d(vnp.asarray(b), 2)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), _windows(b.astype(np.int32), (2, 2), (2, 2), (0, 0), 0).max(-1))
    got = F.max_pool2d(vnp.asarray(x[0]), 2)                   # unbatched CHW
    assert got.dtype == np.int32 and got.shape == (3, 2, 3)


def test_max_pool2d():
    x = RNG.standard_normal((2, 3, 7, 6))
    close64(F.max_pool2d(f64(x), 2), _windows(x, (2, 2), (2, 2), (0, 0), -np.inf).max(-1))
    close64(F.max_pool2d(f64(x), (3, 2), stride=(2, 1), padding=1),
            _windows(x, (3, 2), (2, 1), (1, 1), -np.inf).max(-1))
    close32(F.max_pool2d(f32(x)[:, :, ::2], 2), _windows(x[:, :, ::2].astype(np.float32), (2, 2), (2, 2), (0, 0), -np.inf).max(-1))
    check_grads(lambda v: F.max_pool2d(v, 2, stride=1), (f64(RNG.standard_normal((1, 2, 4, 4))),),
                order=1)


@pytest.mark.parametrize("include", [True, False])
def test_avg_pool2d(include):
    x = RNG.standard_normal((2, 2, 6, 5))
    k, s, p = (3, 2), (2, 2), (1, 1)
    sums = _windows(x, k, s, p, 0.0).sum(-1)
    cnt = _windows(np.ones((1, 1, 6, 5)), k, s, p, 0.0).sum(-1) if not include else k[0] * k[1]
    close64(F.avg_pool2d(f64(x), k, s, p, count_include_pad=include), sums / cnt)
    close32(F.avg_pool2d(f32(x), k, s, p, count_include_pad=include), sums / cnt, atol=1e-6)
    close64(F.avg_pool2d(f64(x), 2), _windows(x, (2, 2), (2, 2), (0, 0), 0.0).mean(-1))
    check_grads(lambda v: F.avg_pool2d(v, k, s, p, count_include_pad=include),
                (f64(RNG.standard_normal((1, 1, 4, 5))),), order=1)


def test_pool_errors():
    with pytest.raises(ValueError, match="at most half the kernel"):
        F.max_pool2d(f64(np.ones((1, 1, 4, 4))), 2, padding=2)
    # ceil_mode is supported now (tests below); a 5x5 input pools to 3x3 with it
    assert F.avg_pool2d(f64(np.ones((1, 1, 5, 5))), 2, ceil_mode=True).shape == (1, 1, 3, 3)


# --------------------------------------------------------------------------- normalisation

def test_batch_norm_train_and_eval():
    x = RNG.standard_normal((4, 3, 2, 2)) * 2 + 1
    w, b = RNG.standard_normal(3), RNG.standard_normal(3)
    rm, rv = RNG.standard_normal(3), RNG.random(3) + 0.5
    mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
    sh = (1, 3, 1, 1)
    want = (x - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + 1e-5) * w.reshape(sh) + b.reshape(sh)
    y, nm, nv = F.batch_norm(f64(x), f64(rm), f64(rv), f64(w), f64(b), training=True, momentum=0.2,
                             return_running=True)
    close64(y, want)
    close64(nm, 0.8 * rm + 0.2 * mean)
    close64(nv, 0.8 * rv + 0.2 * x.var((0, 2, 3), ddof=1))
    ev = (x - rm.reshape(sh)) / np.sqrt(rv.reshape(sh) + 1e-3) * w.reshape(sh) + b.reshape(sh)
    close64(F.batch_norm(f64(x), f64(rm), f64(rv), f64(w), f64(b), eps=1e-3), ev)
    x2 = RNG.standard_normal((5, 2))
    close64(F.batch_norm(f64(x2), training=True), (x2 - x2.mean(0)) / np.sqrt(x2.var(0) + 1e-5))
    close32(F.batch_norm(f32(x), training=True), (x - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + 1e-5),
            atol=1e-5)


def test_batch_norm_grads_and_errors():
    x = f64(RNG.standard_normal((3, 2, 2, 2)))
    w, b = f64(RNG.standard_normal(2)), f64(RNG.standard_normal(2))
    check_grads(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), (x, w, b),
                order=1)
    rm, rv = f64([0.1, 0.2]), f64([1.5, 0.5])
    g = vkml.grad(lambda rm: F.batch_norm(x, rm, rv, training=False).sum())(rm)
    assert np.all(np.asarray(g) == 0)     # running statistics get no gradient
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(f64(np.ones((1, 2))), training=True)
    with pytest.raises(ValueError, match=r"running_mean must have shape \(2,\)"):
        F.batch_norm(x, f64([0.0]), rv)


def test_layer_norm():
    x = RNG.standard_normal((2, 3, 4))
    w, b = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    m, v = x.mean((1, 2), keepdims=True), x.var((1, 2), keepdims=True)
    close64(F.layer_norm(f64(x), (3, 4), f64(w), f64(b)), (x - m) / np.sqrt(v + 1e-5) * w + b)
    m1, v1 = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    close64(F.layer_norm(f64(x), 4, eps=1e-3), (x - m1) / np.sqrt(v1 + 1e-3))
    close32(F.layer_norm(f32(x), 4), (x - m1) / np.sqrt(v1 + 1e-5), atol=1e-5)
    check_grads(lambda x, w, b: F.layer_norm(x, 4, w, b), (f64(x[0]), f64(w[0]), f64(b[0])),
                order=1)
    with pytest.raises(ValueError, match=r"normalized_shape \(3,\) must be the trailing dims"):
        F.layer_norm(f64(x), 3)


# --------------------------------------------------------------------------- dropout, embedding

def test_dropout_rate_scale_and_modes():
    x = vnp.ones((100, 100))
    y = np.asarray(F.dropout(x, 0.3, vr.key(1)))
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.02          # 10^4 draws: 4.6 standard deviations
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)
    assert np.array_equal(np.asarray(F.dropout(x, 0.3, vr.key(1))), y)      # same key, same mask
    assert not np.array_equal(np.asarray(F.dropout(x, 0.3, vr.key(2))), y)
    assert F.dropout(x, 0.3, None, training=False) is x
    assert np.all(np.asarray(F.dropout(x, 1.0, vr.key(0))) == 0)
    with pytest.raises(ValueError, match="needs a random key"):
        F.dropout(x, 0.5)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        F.dropout(x, 1.5, vr.key(0))
    # gradient: the mask scaled by 1 / (1 - p)
    g = vkml.grad(lambda v: F.dropout(v, 0.25, vr.key(3)).sum())(f64(np.ones(50)))
    mask = np.asarray(F.dropout(f64(np.ones(50)), 0.25, vr.key(3))) != 0
    close64(g, mask / 0.75)


def test_embedding():
    w = RNG.standard_normal((5, 3))
    ids = np.array([[0, 4, 4], [2, 1, 0]], np.int32)
    close64(F.embedding(vnp.asarray(ids), f64(w)), w[ids])
    with pytest.raises(IndexError, match=rf"^embedding: index {w.shape[0]} is out of bounds for axis 0"):
        F.embedding(vnp.asarray([0, w.shape[0]]), f64(w))
    g = vkml.grad(lambda w: (F.embedding(vnp.asarray(ids), w) * f64(np.arange(3.0))).sum())(f64(w))
    want = np.zeros((5, 3))
    np.add.at(want, ids.ravel(), np.arange(3.0))
    close64(g, want)
    with pytest.raises(TypeError, match="integers"):
        F.embedding(f64([0.0]), f64(w))


# --------------------------------------------------------------------------- PyTorch's other activations
# references: torch.nn.functional's documented formulas, in float64

def _softplus_ref(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.log1p(np.exp(np.minimum(beta * x, threshold))) / beta)


_SA, _SS = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
MORE_ACTS = {
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    "elu": (lambda x: F.elu(x, 1.5), lambda x: np.where(x > 0, x, 1.5 * np.expm1(x))),
    "celu": (lambda x: F.celu(x, 2.0), lambda x: np.maximum(x, 0) + np.minimum(0, 2.0 * np.expm1(x / 2.0))),
    "selu": (F.selu, lambda x: _SS * (np.maximum(x, 0) + np.minimum(0, _SA * np.expm1(x)))),
    "softplus": (F.softplus, _softplus_ref),
    "softplus_beta": (lambda x: F.softplus(x, 2.0, 3.0), lambda x: _softplus_ref(x, 2.0, 3.0)),
    "softsign": (F.softsign, lambda x: x / (1 + np.abs(x))),
    "hardsigmoid": (F.hardsigmoid, lambda x: np.clip(x + 3, 0, 6) / 6),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "hardtanh": (lambda x: F.hardtanh(x, -2.0, 1.5), lambda x: np.clip(x, -2.0, 1.5)),
    "relu6": (F.relu6, lambda x: np.clip(x, 0, 6)),
    "mish": (F.mish, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    "logsigmoid": (F.logsigmoid, lambda x: -np.log1p(np.exp(-x))),
}


@pytest.mark.parametrize("name", sorted(MORE_ACTS))
def test_more_activations_forward(name):
    fn, ref = MORE_ACTS[name]
    x = RNG.standard_normal((3, 7)) * 4
    close32(fn(f32(x)), ref(x.astype(np.float32).astype(F64)), rtol=2e-6, atol=2e-6)
    close64(fn(f64(x)), ref(x))


@pytest.mark.parametrize("name", ["elu", "celu", "selu", "softplus", "softsign", "mish", "logsigmoid"])
def test_more_activations_second_order(name):
    fn, _ = MORE_ACTS[name]
    x = RNG.standard_normal(5) * 2
    check_grads(fn, (f64(np.where(np.abs(x) < 0.1, 0.5, x)),), order=2)


@pytest.mark.parametrize("name", ["leaky_relu", "hardsigmoid", "hardswish", "hardtanh", "relu6"])
def test_piecewise_activations_grad(name):
    fn, _ = MORE_ACTS[name]
    # points away from the kinks (0, +-3, the clip bounds) so finite differences are exact
    check_grads(fn, (f64([-4.5, -2.5, -0.7, 0.4, 1.2, 2.2, 7.0]),), order=1)


def test_softplus_extremes_and_logsigmoid_is_finite():
    x = f32([-200.0, -30.0, 0.0, 30.0, 200.0])
    assert np.all(np.isfinite(F.softplus(x).numpy())) and F.softplus(x).numpy()[-1] == 200.0
    close32(F.logsigmoid(x), [-200.0, -30.0, -math.log(2), -9.357623e-14, 0.0], atol=1e-6)
    g = vkml.grad(lambda v: F.softplus(v).sum())(f32([-200.0, 200.0]))
    assert np.asarray(g).tolist() == [0.0, 1.0]


def test_glu_and_softmin():
    x = RNG.standard_normal((4, 6))
    a, b = x[..., :3], x[..., 3:]
    close64(F.glu(f64(x)), a / (1 + np.exp(-b)))
    close64(F.glu(f64(x), dim=0), x[:2] / (1 + np.exp(-x[2:])))
    check_grads(lambda v: F.glu(v, 0), (f64(x),), order=2)
    e = np.exp(-x - np.max(-x, axis=1, keepdims=True))
    close64(F.softmin(f64(x), dim=1), e / e.sum(1, keepdims=True))
    close64(F.softmin(f64(x)), e / e.sum(1, keepdims=True))      # implicit dim 1 for 2-d
    with pytest.raises(vkml.numpy.ShapeError, match="glu: Halving dimension must be even"):
        F.glu(f64(np.ones((2, 3))))


# --------------------------------------------------------------------------- regression, binary, divergence losses

def _red(l, reduction):
    return {"mean": np.mean, "sum": np.sum, "none": lambda v: v}[reduction](l)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy(reduction):
    p = RNG.uniform(0.05, 0.95, (4, 3))
    t = RNG.uniform(size=(4, 3))
    w = RNG.uniform(size=(3,))
    ref = -(t * np.log(p) + (1 - t) * np.log1p(-p)) * w
    close64(F.binary_cross_entropy(f64(p), f64(t), weight=f64(w), reduction=reduction), _red(ref, reduction))
    check_grads(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction), (f64(p), f64(t)), order=1)
    # log clamped at -100, as PyTorch: p = 0 or 1 gives a finite loss
    close64(F.binary_cross_entropy(f64([0.0, 1.0]), f64([1.0, 0.0]), reduction="none"), [100.0, 100.0])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy_with_logits(reduction):
    x = RNG.standard_normal((4, 3)) * 3
    t = RNG.uniform(size=(4, 3))
    w, pw = RNG.uniform(size=(4, 1)), RNG.uniform(0.5, 3, (3,))
    ls = lambda v: -np.log1p(np.exp(-v))
    ref = -(pw * t * ls(x) + (1 - t) * ls(-x)) * w
    got = F.binary_cross_entropy_with_logits(f64(x), f64(t), weight=f64(w), reduction=reduction,
                                             pos_weight=f64(pw))
    close64(got, _red(ref, reduction))
    check_grads(lambda a, b: F.binary_cross_entropy_with_logits(a, b, pos_weight=f64(pw)),
                (f64(x), f64(t)), order=1)
    assert np.isfinite(float(F.binary_cross_entropy_with_logits(f32([-500.0, 500.0]), f32([1.0, 0.0]))))


def test_huber_and_smooth_l1():
    x, y = RNG.standard_normal(9) * 2, RNG.standard_normal(9)
    d = x - y
    a = np.abs(d)
    close64(F.huber_loss(f64(x), f64(y), delta=0.7, reduction="none"),
            np.where(a < 0.7, 0.5 * d * d, 0.7 * (a - 0.35)))
    close64(F.smooth_l1_loss(f64(x), f64(y), beta=0.7, reduction="sum"),
            np.sum(np.where(a < 0.7, 0.5 * d * d / 0.7, a - 0.35)))
    close64(F.smooth_l1_loss(f64(x), f64(y), beta=0.0), np.mean(a))
    close64(F.huber_loss(f64(x), f64(y)), np.mean(np.where(a < 1, 0.5 * d * d, a - 0.5)))
    check_grads(lambda u: F.huber_loss(u, f64(y), delta=0.7), (f64(x),), order=1)
    check_grads(lambda u: F.smooth_l1_loss(u, f64(y), beta=0.7), (f64(x),), order=1)


@pytest.mark.parametrize("reduction", ["mean", "sum", "batchmean", "none"])
def test_kl_div(reduction):
    lp = np.log(RNG.dirichlet(np.ones(5), 3))
    t = RNG.dirichlet(np.ones(5), 3)
    t[0, 1] = 0.0
    pt = np.where(t > 0, t * (np.log(np.where(t > 0, t, 1)) - lp), 0.0)
    want = pt.sum() / 3 if reduction == "batchmean" else _red(pt, reduction)
    close64(F.kl_div(f64(lp), f64(t), reduction=reduction), want)
    lt = np.log(t + 0.1)
    close64(F.kl_div(f64(lp), f64(lt), reduction=reduction, log_target=True),
            (np.exp(lt) * (lt - lp)).sum() / 3 if reduction == "batchmean"
            else _red(np.exp(lt) * (lt - lp), reduction))
    g = vkml.grad(lambda a, b: F.kl_div(a, b, reduction="sum"), argnums=(0, 1))(f64(lp), f64(t))
    assert np.all(np.isfinite(np.asarray(g[1])))
    check_grads(lambda a: F.kl_div(a, f64(t), reduction=reduction), (f64(lp),), order=1)


def test_normalize_and_cosine_similarity():
    x, y = RNG.standard_normal((4, 5)), RNG.standard_normal((4, 5))
    x[1] = 0.0
    for p in (1, 2, 3):
        n = np.sum(np.abs(x) ** p, axis=1, keepdims=True) ** (1 / p)
        close64(F.normalize(f64(x), p=p), x / np.maximum(n, 1e-12))
    close64(F.normalize(f64(x), dim=0), x / np.linalg.norm(x, axis=0, keepdims=True))
    nx = np.maximum(np.linalg.norm(x, axis=1), 1e-8)
    ny = np.maximum(np.linalg.norm(y, axis=1), 1e-8)
    close64(F.cosine_similarity(f64(x), f64(y)), np.sum(x * y, 1) / (nx * ny))
    close64(F.cosine_similarity(f64(x), f64(y[:1]), dim=-1),
            np.sum(x * y[:1], 1) / (nx * np.linalg.norm(y[0])))
    x[1] = 0.3
    check_grads(lambda a, b: F.cosine_similarity(a, b), (f64(x), f64(y)), order=2)
    check_grads(lambda a: F.normalize(a), (f64(x),), order=1)


def _ce_weight_ref(x, lab, w, reduction, eps, ignore):
    C = x.shape[1]
    lp = x - _lse(x, 1, keepdims=True)
    valid = lab != ignore
    safe = np.where(valid, lab, 0)
    nll = np.where(valid, -w[safe] * lp[np.arange(len(lab)), safe], 0.0)
    smooth = np.where(valid, -(lp * w).sum(1), 0.0)
    if reduction == "none":
        return (1 - eps) * nll + eps / C * smooth
    if reduction == "sum":
        return (1 - eps) * nll.sum() + eps / C * smooth.sum()
    den = np.sum(np.where(valid, w[safe], 0.0))
    return (1 - eps) * nll.sum() / den + eps / C * smooth.sum() / den


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_cross_entropy_and_nll_class_weights(reduction, eps):
    x = RNG.standard_normal((5, 4)) * 2
    lab = np.array([0, 3, 2, 1, 2], np.int32)
    w = RNG.uniform(0.2, 2.0, 4)
    want = _ce_weight_ref(x, lab, w, reduction, eps, 2)
    got = F.cross_entropy(f64(x), vnp.asarray(lab), reduction=reduction, label_smoothing=eps,
                          ignore_index=2, weight=f64(w))
    close64(got, want)
    if eps == 0.0:
        close64(F.nll_loss(F.log_softmax(f64(x), axis=1), vnp.asarray(lab), reduction=reduction,
                           ignore_index=2, weight=f64(w)), want)
    check_grads(lambda a: F.cross_entropy(a, vnp.asarray(lab), label_smoothing=eps, weight=f64(w)),
                (f64(x),), order=1)


def test_cross_entropy_weighted_probabilities_and_bad_weight():
    x = RNG.standard_normal((3, 4))
    t = RNG.dirichlet(np.ones(4), 3)
    w = RNG.uniform(0.2, 2.0, 4)
    lp = x - _lse(x, 1, keepdims=True)
    close64(F.cross_entropy(f64(x), f64(t), weight=f64(w)), np.mean(-(t * w * lp).sum(1)))
    with pytest.raises(vkml.numpy.ShapeError, match=r"cross_entropy: weight must have shape \(4,\)"):
        F.cross_entropy(f64(x), vnp.asarray(np.zeros(3, np.int32)), weight=f64(np.ones(3)))


# --------------------------------------------------------------------------- padding modes, resizing, pooling variants

@pytest.mark.parametrize("mode,np_mode", [("constant", "constant"), ("reflect", "reflect"),
                                          ("replicate", "edge"), ("circular", "wrap")])
def test_pad_modes(mode, np_mode):
    x = RNG.standard_normal((2, 3, 5, 6))
    got = F.pad(f64(x), (2, 1, 3, 4), mode=mode)
    close64(got, np.pad(x, ((0, 0), (0, 0), (3, 4), (2, 1)), mode=np_mode))
    check_grads(lambda a: F.pad(a, (2, 1, 1, 0), mode=mode), (f64(x[:1, :1]),), order=1)


def test_pad_constant_value_cropping_and_errors():
    x = RNG.standard_normal((2, 4, 5))
    close64(F.pad(f64(x), (1, -2, 0, 2), value=3.0),
            np.pad(x[:, :, :3], ((0, 0), (0, 2), (1, 0)), constant_values=3.0))
    with pytest.raises(ValueError, match="reflect"):
        F.pad(f64(x), (5, 0), mode="reflect")
    with pytest.raises(ValueError, match="even number"):
        F.pad(f64(x), (1, 2, 3))


def _nearest_ref(n_in, n_out, scale):
    s = np.float32(1 / scale) if scale else np.float32(n_in) / np.float32(n_out)
    return np.minimum(np.floor(np.arange(n_out, dtype=np.float32) * s).astype(int), n_in - 1)


def _linear_ref(x, axis, n_out, scale, align):
    """torch's upsample_linear1d along one axis, element by element."""
    n_in = x.shape[axis]
    out = []
    for i in range(n_out):
        if align:
            src = i * ((n_in - 1) / (n_out - 1)) if n_out > 1 else 0.0
        else:
            src = max((1 / scale if scale else n_in / n_out) * (i + 0.5) - 0.5, 0.0)
        i0 = min(int(math.floor(src)), n_in - 1)
        i1 = i0 + 1 if i0 < n_in - 1 else i0
        lam = src - i0
        out.append(np.take(x, i0, axis) * (1 - lam) + np.take(x, i1, axis) * lam)
    return np.stack(out, axis)


@pytest.mark.parametrize("kw", [dict(size=(7, 9)), dict(scale_factor=2), dict(scale_factor=(0.5, 1.7)),
                                dict(size=(3, 4))])
def test_interpolate(kw):
    x = RNG.standard_normal((2, 3, 5, 6))
    if "size" in kw:
        out, sc = kw["size"], (None, None)
    else:
        sf = kw["scale_factor"] if isinstance(kw["scale_factor"], tuple) else (kw["scale_factor"],) * 2
        out, sc = (int(5 * sf[0]), int(6 * sf[1])), sf
    ih, iw = _nearest_ref(5, out[0], sc[0]), _nearest_ref(6, out[1], sc[1])
    close64(F.interpolate(f64(x), **kw), x[:, :, ih][:, :, :, iw])
    for align in (False, True):
        want = _linear_ref(_linear_ref(x, 2, out[0], sc[0], align), 3, out[1], sc[1], align)
        close64(F.interpolate(f64(x), mode="bilinear", align_corners=align, **kw), want)
    check_grads(lambda a: F.interpolate(a, mode="bilinear", **kw), (f64(x[:1, :1]),), order=1)


def test_interpolate_linear_and_errors():
    x = RNG.standard_normal((2, 3, 5))
    close64(F.interpolate(f64(x), size=11, mode="linear"), _linear_ref(x, 2, 11, None, False))
    close64(F.interpolate(f64(x), size=11), x[:, :, _nearest_ref(5, 11, None)])
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(f64(x), size=4, align_corners=True)
    with pytest.raises(ValueError, match="bilinear"):
        F.interpolate(f64(x), size=4, mode="bilinear")
    with pytest.raises(NotImplementedError, match="bicubic"):
        F.interpolate(f64(x[None]), size=4, mode="bicubic")


@pytest.mark.parametrize("os", [(2, 3), (5, 6), 3, (None, 4)])
def test_adaptive_avg_pool2d(os):
    x = RNG.standard_normal((2, 3, 5, 6))
    oh, ow = (os, os) if isinstance(os, int) else os
    oh, ow = oh or 5, ow or 6
    want = np.zeros((2, 3, oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, h1 = (i * 5) // oh, -((-(i + 1) * 5) // oh)
            w0, w1 = (j * 6) // ow, -((-(j + 1) * 6) // ow)
            want[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean((2, 3))
    close64(F.adaptive_avg_pool2d(f64(x), os), want)
    check_grads(lambda a: F.adaptive_avg_pool2d(a, os), (f64(x[:1, :1]),), order=1)


def _pool_out(n, k, s, p, d, ceil):
    o = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    return o - 1 if ceil and (o - 1) * s >= n + p else o


def max_pool_ref(x, k, s, p, d, ceil):
    N, C, H, W = x.shape
    oh, ow = _pool_out(H, k[0], s[0], p[0], d[0], ceil), _pool_out(W, k[1], s[1], p[1], d[1], ceil)
    val, idx = np.zeros((N, C, oh, ow)), np.zeros((N, C, oh, ow), int)
    for i in range(oh):
        for j in range(ow):
            best, at = np.full((N, C), -np.inf), np.zeros((N, C), int)
            for a in range(k[0]):
                for b in range(k[1]):
                    r, c = i * s[0] - p[0] + a * d[0], j * s[1] - p[1] + b * d[1]
                    if 0 <= r < H and 0 <= c < W:
                        v = x[:, :, r, c]
                        upd = v > best
                        best, at = np.where(upd, v, best), np.where(upd, r * W + c, at)
            val[:, :, i, j], idx[:, :, i, j] = best, at
    return val, idx


def avg_pool_ceil_ref(x, k, s, p, include, divisor=None):
    N, C, H, W = x.shape
    oh, ow = _pool_out(H, k[0], s[0], p[0], 1, True), _pool_out(W, k[1], s[1], p[1], 1, True)
    out = np.zeros((N, C, oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s[0] - p[0], j * s[1] - p[1]
            h1, w1 = min(h0 + k[0], H + p[0]), min(w0 + k[1], W + p[1])
            size = (h1 - h0) * (w1 - w0)
            h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, H), min(w1, W)
            tot = x[:, :, h0:h1, w0:w1].sum((2, 3))
            out[:, :, i, j] = tot / (divisor or (size if include else (h1 - h0) * (w1 - w0)))
    return out


@pytest.mark.parametrize("cfg", [((3, 3), (2, 2), (1, 1), (1, 1)), ((2, 2), (2, 2), (0, 0), (1, 1)),
                                 ((3, 3), (3, 3), (1, 1), (2, 2)), ((2, 3), (2, 1), (1, 0), (1, 1))])
def test_max_pool2d_ceil_mode_and_indices(cfg):
    k, s, p, d = cfg
    # distinct values 0.1 apart: no window holds a near-tie, where a finite difference would
    # cross the max's kink (a shared generator's draws made that depend on test order)
    x = np.random.default_rng(7).permutation(2 * 3 * 7 * 8).reshape(2, 3, 7, 8) / 10.0 - 16.8
    for ceil in (False, True):
        val, idx = F.max_pool2d(f64(x), k, s, p, d, ceil_mode=ceil, return_indices=True)
        wv, wi = max_pool_ref(x, k, s, p, d, ceil)
        close64(val, wv)
        assert idx.dtype == np.int32 and np.array_equal(idx.numpy(), wi)
    close64(F.max_pool2d(f64(x), k, s, p, d, ceil_mode=True), max_pool_ref(x, k, s, p, d, True)[0])
    check_grads(lambda a: F.max_pool2d(a, k, s, p, d, ceil_mode=True), (f64(x[:1, :1]),), order=1)


@pytest.mark.parametrize("include", [True, False])
def test_avg_pool2d_ceil_mode(include):
    x = RNG.standard_normal((2, 3, 7, 8))
    for k, s, p in [((3, 3), (2, 2), (1, 1)), ((2, 3), (2, 1), (1, 0)), ((2, 2), (3, 3), (0, 0))]:
        close64(F.avg_pool2d(f64(x), k, s, p, ceil_mode=True, count_include_pad=include),
                avg_pool_ceil_ref(x, k, s, p, include))
    close64(F.avg_pool2d(f64(x), 3, 2, 1, ceil_mode=True, divisor_override=2),
            avg_pool_ceil_ref(x, (3, 3), (2, 2), (1, 1), True, divisor=2))
    check_grads(lambda a: F.avg_pool2d(a, 3, 2, 1, ceil_mode=True, count_include_pad=include),
                (f64(x[:1, :1]),), order=1)
