"""Layers and functions of current models (attention, the other convolutions and
normalisations, recurrent layers, containers) against NumPy float64 transcriptions of
torch's documented formulas; gradients against finite differences (check_grads)."""
import math

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
import vkml.nn as nn
import vkml.random as vr
from vkml.nn import functional as F
from vkml.test_util import check_grads

RNG = np.random.default_rng(11)
F64 = np.float64


def f64(x):
    return vnp.asarray(np.asarray(x, F64))


def close(got, want, rtol=1e-11, atol=1e-12):
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol)


def randn(*shape):
    return RNG.standard_normal(shape)


def load(m, state):
    """Set a module's arrays from NumPy float64 arrays keyed as torch names them."""
    own = m.state_dict()
    assert sorted(own) == sorted(state), (sorted(own), sorted(state))
    for k, v in state.items():
        assert tuple(own[k].shape) == v.shape, (k, own[k].shape, v.shape)
    m.load_state_dict({k: f64(v) for k, v in state.items()})   # in place, as torch's
    return m


# --------------------------------------------------------------------------- attention

def _softmax(s):
    e = np.exp(s - np.max(s, axis=-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def sdpa_ref(q, k, v, mask=None, causal=False, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    L, S = s.shape[-2:]
    if causal:
        s = np.where(np.tril(np.ones((L, S), bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    return _softmax(s) @ v


def test_sdpa_forward():
    q, k, v = randn(2, 3, 5, 4), randn(2, 3, 6, 4), randn(2, 3, 6, 7)
    close(F.scaled_dot_product_attention(f64(q), f64(k), f64(v)), sdpa_ref(q, k, v))
    close(F.scaled_dot_product_attention(f64(q), f64(k), f64(v), is_causal=True, scale=0.3),
          sdpa_ref(q, k, v, causal=True, scale=0.3))
    bm = RNG.uniform(size=(5, 6)) > 0.4
    bm[:, 0] = True
    close(F.scaled_dot_product_attention(f64(q), f64(k), f64(v), attn_mask=vnp.asarray(bm)),
          sdpa_ref(q, k, v, bm))
    fm = randn(3, 5, 6)
    close(F.scaled_dot_product_attention(f64(q), f64(k), f64(v), fm), sdpa_ref(q, k, v, fm))
    q32 = vnp.asarray(q.astype(np.float32))
    got = F.scaled_dot_product_attention(q32, q32, q32, is_causal=True)
    assert got.dtype == np.float32
    close(got, sdpa_ref(*(q.astype(np.float32).astype(F64),) * 3, causal=True), rtol=1e-5, atol=1e-6)


def test_sdpa_grouped_query_heads():
    q, k, v = randn(2, 6, 5, 4), randn(2, 2, 7, 4), randn(2, 2, 7, 3)
    want = sdpa_ref(q, np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1), causal=True)
    close(F.scaled_dot_product_attention(f64(q), f64(k), f64(v), is_causal=True, enable_gqa=True), want)
    with pytest.raises(vnp.ShapeError, match="enable_gqa"):
        F.scaled_dot_product_attention(f64(q[:, :5]), f64(k), f64(v), enable_gqa=True)


def test_sdpa_grads_dropout_and_errors():
    q, k, v = randn(2, 4, 3), randn(2, 5, 3), randn(2, 5, 2)
    fm = randn(4, 5)
    check_grads(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, fm, is_causal=True),
                (f64(q), f64(k), f64(v)), order=1)
    # dropout: the same key drops the same weights; the expectation is the plain output
    a = F.scaled_dot_product_attention(f64(q), f64(k), f64(v), dropout_p=0.5, dropout_key=vr.key(1))
    b = F.scaled_dot_product_attention(f64(q), f64(k), f64(v), dropout_p=0.5, dropout_key=vr.key(1))
    assert np.array_equal(a.numpy(), b.numpy())
    with pytest.raises(ValueError, match="dropout_key"):
        F.scaled_dot_product_attention(f64(q), f64(k), f64(v), dropout_p=0.1)
    with pytest.raises(vnp.ShapeError, match="scaled_dot_product_attention"):
        F.scaled_dot_product_attention(f64(q), f64(k[..., :2]), f64(v))
    with pytest.raises(vnp.ShapeError, match="attn_mask"):
        F.scaled_dot_product_attention(f64(q), f64(k), f64(v), attn_mask=f64(np.ones((3, 3))))


def test_sdpa_is_one_program_under_jit():
    q = f64(randn(2, 4, 3))
    f = vkml.jit(lambda a: F.scaled_dot_product_attention(a, a, a, is_causal=True))
    close(f(q), sdpa_ref(*(np.asarray(q),) * 3, causal=True))
    # the scores' matmul, the scale-and-mask chain fused into the softmax, the values' matmul
    assert f.lower(q).kernel_count <= 3
    g = vkml.jit(lambda a, m: F.scaled_dot_product_attention(a, a, a, attn_mask=m))
    assert g.lower(q, f64(randn(4, 4))).kernel_count <= 3


def mha_ref(p, q, k, v, H, kpm=None, am=None):
    """torch.nn.MultiheadAttention, batch second (T, N, E), same kdim/vdim."""
    E = q.shape[-1]
    W, B = p["in_proj_weight"], p["in_proj_bias"]
    qp, kp, vp = (x @ W[i * E:(i + 1) * E].T + B[i * E:(i + 1) * E] for i, x in enumerate((q, k, v)))
    L, N, _ = q.shape
    S, D = k.shape[0], E // H
    sp = lambda t: t.reshape(t.shape[0], N, H, D).transpose(1, 2, 0, 3)
    s = sp(qp) @ np.swapaxes(sp(kp), -1, -2) / math.sqrt(D)
    if am is not None:
        s = s + (np.where(am, -np.inf, 0.0) if am.dtype == bool else am)
    if kpm is not None:
        s = s + np.where(kpm, -np.inf, 0.0)[:, None, None, :]
    w = _softmax(s)
    o = (w @ sp(vp)).transpose(2, 0, 1, 3).reshape(L, N, E)
    return o @ p["out_proj.weight"].T + p["out_proj.bias"], w.mean(1)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention(batch_first):
    E, H = 6, 3
    p = {"in_proj_weight": randn(3 * E, E), "in_proj_bias": randn(3 * E),
         "out_proj.weight": randn(E, E), "out_proj.bias": randn(E)}
    m = load(nn.MultiheadAttention(E, H, batch_first=batch_first, dtype=F64), p)
    q, k = randn(4, 2, E), randn(5, 2, E)
    v = randn(5, 2, E)
    kpm = np.array([[False, True, False, False, True], [False] * 5])
    am = randn(4, 5)
    want_o, want_w = mha_ref(p, q, k, v, H, kpm, am)
    tr = (lambda t: np.swapaxes(t, 0, 1)) if batch_first else (lambda t: t)
    o, w = m(f64(tr(q)), f64(tr(k)), f64(tr(v)), key_padding_mask=vnp.asarray(kpm), attn_mask=f64(am))
    close(o, tr(want_o))
    close(w, want_w)
    o, w = m(f64(tr(q)), f64(tr(k)), f64(tr(v)), need_weights=False)
    close(o, tr(mha_ref(p, q, k, v, H)[0]))
    assert w is None
    check_grads(lambda mm, x: mm[0](x, x, x, need_weights=False)[0], ([m], f64(tr(q))), order=1)


def test_multihead_attention_parameters_and_variants():
    m = nn.MultiheadAttention(8, 2, kdim=3, vdim=5, add_bias_kv=True)
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == {
        "q_proj_weight": (8, 8), "k_proj_weight": (8, 3), "v_proj_weight": (8, 5),
        "in_proj_bias": (24,), "out_proj.weight": (8, 8), "out_proj.bias": (8,),
        "bias_k": (1, 1, 8), "bias_v": (1, 1, 8)}
    o, w = m(vnp.ones((4, 2, 8)), vnp.ones((6, 2, 3)), vnp.ones((6, 2, 5)), average_attn_weights=False)
    assert o.shape == (4, 2, 8) and w.shape == (2, 2, 4, 7)     # the bias_k column joins S
    o, w = nn.MultiheadAttention(4, 2)(vnp.ones((3, 4)), vnp.ones((5, 4)), vnp.ones((5, 4)))
    assert o.shape == (3, 4) and w.shape == (3, 5)              # unbatched
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(vnp.ShapeError, match="attn_mask"):
        nn.MultiheadAttention(4, 2)(vnp.ones((3, 1, 4)), vnp.ones((5, 1, 4)), vnp.ones((5, 1, 4)),
                                    attn_mask=vnp.ones((3, 3)))


# --------------------------------------------------------------------------- convolutions

def conv1d_ref(x, w, b, s=1, p=0, d=1, g=1):
    N, C, Lx = x.shape
    O, Cg, k = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (p, p)))
    Lo = (Lx + 2 * p - d * (k - 1) - 1) // s + 1
    out = np.zeros((N, O, Lo))
    og = O // g
    for o in range(O):
        gi = o // og
        for t in range(Lo):
            win = x[:, gi * Cg:(gi + 1) * Cg, t * s:t * s + d * (k - 1) + 1:d]
            out[:, o, t] = np.einsum("nck,ck->n", win, w[o])
    return out + (0 if b is None else b[None, :, None])


def conv_t2d_ref(x, w, b, s, p, op, g, d):
    """The definition: each input pixel scatters weight * value into the output."""
    N, C, H, W = x.shape
    _, Og, kh, kw = w.shape
    Ho = (H - 1) * s[0] - 2 * p[0] + d[0] * (kh - 1) + op[0] + 1
    Wo = (W - 1) * s[1] - 2 * p[1] + d[1] * (kw - 1) + op[1] + 1
    full = np.zeros((N, Og * g, Ho + 2 * p[0] + kh * d[0], Wo + 2 * p[1] + kw * d[1]))
    cg = C // g
    for c in range(C):
        gi = c // cg
        for i in range(H):
            for j in range(W):
                for a in range(kh):
                    for bb in range(kw):
                        full[:, gi * Og:(gi + 1) * Og, i * s[0] + a * d[0], j * s[1] + bb * d[1]] += \
                            x[:, c, i, j][:, None] * w[c, :, a, bb][None, :]
    out = full[:, :, p[0]:p[0] + Ho, p[1]:p[1] + Wo]
    return out + (0 if b is None else b[None, :, None, None])


def test_conv1d():
    x, w, b = randn(2, 4, 11), randn(6, 2, 3), randn(6)
    close(F.conv1d(f64(x), f64(w), f64(b), stride=2, padding=1, dilation=2, groups=2),
          conv1d_ref(x, w, b, 2, 1, 2, 2))
    close(F.conv1d(f64(x[0]), f64(w[:, :, :]), None, groups=2), conv1d_ref(x[:1], w, None, g=2)[0])
    m = load(nn.Conv1d(4, 6, 3, padding=1, dtype=F64), {"weight": randn(6, 4, 3), "bias": randn(6)})
    close(m(f64(x)), conv1d_ref(x, np.asarray(m.weight), np.asarray(m.bias), p=1))
    assert nn.Conv1d(4, 6, 3, padding="same")(vnp.ones((1, 4, 7))).shape == (1, 6, 7)
    check_grads(lambda a, ww: F.conv1d(a, ww, stride=2, groups=2), (f64(x), f64(w)), order=1)


@pytest.mark.parametrize("cfg", [
    dict(s=(1, 1), p=(0, 0), op=(0, 0), g=1, d=(1, 1)),
    dict(s=(2, 3), p=(1, 0), op=(1, 2), g=2, d=(1, 2)),
])
def test_conv_transpose2d(cfg):
    x, w, b = randn(2, 4, 3, 4), randn(4, 3, 3, 2), randn(3 * cfg["g"])
    want = conv_t2d_ref(x, w, b, cfg["s"], cfg["p"], cfg["op"], cfg["g"], cfg["d"])
    got = F.conv_transpose2d(f64(x), f64(w), f64(b), stride=cfg["s"], padding=cfg["p"],
                             output_padding=cfg["op"], groups=cfg["g"], dilation=cfg["d"])
    close(got, want)
    check_grads(lambda a, ww: F.conv_transpose2d(a, ww, stride=cfg["s"], padding=cfg["p"],
                                                 output_padding=cfg["op"], groups=cfg["g"],
                                                 dilation=cfg["d"]), (f64(x), f64(w)), order=1)


def test_conv_transpose_layers():
    m = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dtype=F64)
    assert m.weight.shape == (4, 3, 3, 3) and m.bias.shape == (6,)
    x = randn(1, 4, 3, 3)
    close(m(f64(x)), conv_t2d_ref(x, np.asarray(m.weight), np.asarray(m.bias), (2, 2), (1, 1), (1, 1), 2, (1, 1)))
    assert m(f64(x), output_size=(5, 5)).shape == (1, 6, 5, 5)
    with pytest.raises(ValueError, match="output_size"):
        m(f64(x), output_size=(9, 9))
    m1 = nn.ConvTranspose1d(2, 3, 3, stride=2, dtype=F64)
    x1 = randn(2, 2, 5)
    want = conv_t2d_ref(x1[:, :, None], np.asarray(m1.weight)[:, :, None], np.asarray(m1.bias),
                        (1, 2), (0, 0), (0, 0), 1, (1, 1))[:, :, 0]
    close(m1(f64(x1)), want)
    with pytest.raises(ValueError, match="output_padding"):
        F.conv_transpose2d(f64(x), f64(np.ones((4, 1, 3, 3))), stride=2, output_padding=2)


# --------------------------------------------------------------------------- normalisation

def test_group_norm():
    x, w, b = randn(2, 6, 4, 3), randn(6), randn(6)
    g = x.reshape(2, 3, -1)
    y = ((g - g.mean(2, keepdims=True)) / np.sqrt(g.var(2, keepdims=True) + 1e-5)).reshape(x.shape)
    close(F.group_norm(f64(x), 3, f64(w), f64(b)), y * w[:, None, None] + b[:, None, None])
    m = load(nn.GroupNorm(3, 6, dtype=F64), {"weight": w, "bias": b})
    close(m(f64(x)), y * w[:, None, None] + b[:, None, None])
    check_grads(lambda a, ww: F.group_norm(a, 2, ww), (f64(x[:, :, :2, :2]), f64(w)), order=1)
    with pytest.raises(ValueError, match="divisible by num_groups"):
        F.group_norm(f64(x), 4)


def test_rms_norm():
    x, w = randn(3, 4, 5), randn(4, 5)
    want = x / np.sqrt((x * x).mean((1, 2), keepdims=True) + np.finfo(F64).eps) * w
    close(F.rms_norm(f64(x), (4, 5), f64(w)), want)
    x32 = x.astype(np.float32)
    close(F.rms_norm(vnp.asarray(x32), 5, eps=1e-3),
          x32 / np.sqrt((x32.astype(F64) ** 2).mean(-1, keepdims=True) + 1e-3), rtol=2e-6, atol=1e-6)
    m = load(nn.RMSNorm(5, dtype=F64), {"weight": w[0]})
    close(m(f64(x)), x / np.sqrt((x * x).mean(-1, keepdims=True) + np.finfo(F64).eps) * w[0])
    check_grads(lambda a, ww: F.rms_norm(a, 5, ww, 1e-6), (f64(x), f64(w[0])), order=1)


def test_instance_norm_and_running_stats():
    x, w, b = randn(2, 3, 4, 5), randn(3), randn(3)
    mu, var = x.mean((2, 3), keepdims=True), x.var((2, 3), keepdims=True)
    y = (x - mu) / np.sqrt(var + 1e-5)
    c = (slice(None), None, None)
    close(F.instance_norm(f64(x), weight=f64(w), bias=f64(b)), y * w[c] + b[c])
    m = load(nn.InstanceNorm2d(3, affine=True, track_running_stats=True, dtype=F64),
             {"weight": w, "bias": b, "running_mean": np.zeros(3), "running_var": np.ones(3)})
    close(m(f64(x)), y * w[c] + b[c])
    rm = 0.1 * mu.reshape(2, 3).mean(0)
    rv = 0.9 + 0.1 * (var.reshape(2, 3) * 20 / 19).mean(0)
    close(m.running_mean, rm)
    close(m.running_var, rv)
    m.eval()
    close(m(f64(x[0])), (x[0] - rm[c]) / np.sqrt(rv[c] + 1e-5) * w[c] + b[c])
    plain = nn.InstanceNorm2d(3)
    assert plain.state_dict() == {} and plain.weight is None
    check_grads(lambda a, ww: F.instance_norm(a, weight=ww), (f64(x[:, :, :2, :3]), f64(w)), order=1)


# --------------------------------------------------------------------------- containers

def test_module_list_and_dict():
    ml = nn.ModuleList([nn.Linear(2, 3), nn.Linear(3, 4)])
    ml.append(nn.Linear(4, 1))
    assert len(ml) == 3 and [l.out_features for l in ml] == [3, 4, 1] and ml[-1].in_features == 4
    assert list(ml.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"]
    assert len(ml[1:]) == 2
    md = nn.ModuleDict({"enc": nn.Linear(2, 4), "dec": nn.ModuleList([nn.Linear(4, 2)])})
    assert list(md.keys()) == ["enc", "dec"] and "enc" in md and len(md) == 2
    assert list(md.state_dict()) == ["enc.weight", "enc.bias", "dec.0.weight", "dec.0.bias"]
    g = vkml.grad(lambda m, x: m["dec"][0](m["enc"](x)).sum())(md, vnp.ones((3, 2)))
    assert isinstance(g, nn.ModuleDict) and g["enc"].weight.shape == (4, 2)
    assert len(md.parameters()) == 4 and len(ml.parameters()) == 6
    with pytest.raises(KeyError, match="not allowed"):
        md["keys"] = nn.Linear(1, 1)
    with pytest.raises(TypeError, match="not a Module"):
        ml.append(3)
    assert isinstance(nn.Identity()(vnp.ones(2)), vkml.Array)


# --------------------------------------------------------------------------- recurrent layers

def _sig(v):
    return 1 / (1 + np.exp(-v))


def lstm_step_ref(x, h, c, wi, wh, bi, bh):
    i, f, g, o = np.split(x @ wi.T + bi + h @ wh.T + bh, 4, axis=-1)
    c = _sig(f) * c + _sig(i) * np.tanh(g)
    return _sig(o) * np.tanh(c), c


def gru_step_ref(x, h, wi, wh, bi, bh):
    xr, xz, xn = np.split(x @ wi.T + bi, 3, axis=-1)
    hr, hz, hn = np.split(h @ wh.T + bh, 3, axis=-1)
    r, z = _sig(xr + hr), _sig(xz + hz)
    n = np.tanh(xn + r * hn)
    return (1 - z) * n + z * h


def rnn_ref(kind, p, x, h0, c0, layers, bidir):
    """torch's documented recurrence, layer by layer, (L, N, I) input."""
    D = 2 if bidir else 1
    hn, cn = [], []
    for l in range(layers):
        outs = []
        for d, sfx in enumerate(["", "_reverse"][:D]):
            w = [p[f"{n}_l{l}{sfx}"] for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            h, c = h0[l * D + d], c0[l * D + d]
            seq = [None] * len(x)
            for t in (range(len(x) - 1, -1, -1) if d else range(len(x))):
                if kind == "LSTM":
                    h, c = lstm_step_ref(x[t], h, c, *w)
                else:
                    h = gru_step_ref(x[t], h, *w)
                seq[t] = h
            outs.append(np.stack(seq))
            hn.append(h)
            cn.append(c)
        x = np.concatenate(outs, -1)
    return x, np.stack(hn), np.stack(cn)


def _rnn_params(kind, I, H, layers, bidir):
    G = 4 if kind == "LSTM" else 3
    D = 2 if bidir else 1
    p = {}
    for l in range(layers):
        for sfx in ["", "_reverse"][:D]:
            p[f"weight_ih_l{l}{sfx}"] = randn(G * H, I if l == 0 else D * H) * 0.5
            p[f"weight_hh_l{l}{sfx}"] = randn(G * H, H) * 0.5
            p[f"bias_ih_l{l}{sfx}"] = randn(G * H) * 0.5
            p[f"bias_hh_l{l}{sfx}"] = randn(G * H) * 0.5
    return p


def test_cells():
    x, h, c = randn(2, 3), randn(2, 4), randn(2, 4)
    w = {"weight_ih": randn(16, 3), "weight_hh": randn(16, 4), "bias_ih": randn(16), "bias_hh": randn(16)}
    m = load(nn.LSTMCell(3, 4, dtype=F64), w)
    h1, c1 = m(f64(x), (f64(h), f64(c)))
    wh, wc = lstm_step_ref(x, h, c, *w.values())
    close(h1, wh)
    close(c1, wc)
    close(m(f64(x[0]))[1], lstm_step_ref(x[:1], 0 * h[:1], 0 * c[:1], *w.values())[1][0])
    w3 = {k: v[:12] for k, v in w.items()}
    g = load(nn.GRUCell(3, 4, dtype=F64), w3)
    close(g(f64(x), f64(h)), gru_step_ref(x, h, *w3.values()))
    check_grads(lambda mm, a, b: mm[0](a, b), ([g], f64(x), f64(h)), order=1)
    with pytest.raises(vnp.ShapeError, match="GRUCell: hidden state"):
        g(f64(x), f64(h[:, :3]))
    b = nn.LSTMCell(3, 4, bias=False)
    assert sorted(b.state_dict()) == ["weight_hh", "weight_ih"]


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("cfg", [dict(num_layers=1), dict(num_layers=2, bidirectional=True, batch_first=True)])
def test_lstm_gru(kind, cfg):
    layers, bidir, bf = cfg.get("num_layers"), cfg.get("bidirectional", False), cfg.get("batch_first", False)
    D = 2 if bidir else 1
    p = _rnn_params(kind, 3, 4, layers, bidir)
    m = load(getattr(nn, kind)(3, 4, dtype=F64, **cfg), p)
    assert list(m.state_dict()) == list(p)       # torch's order too
    x = randn(5, 2, 3)
    h0, c0 = randn(layers * D, 2, 4), randn(layers * D, 2, 4)
    want_o, want_h, want_c = rnn_ref(kind, p, x, h0, c0 if kind == "LSTM" else 0 * h0, layers, bidir)
    xin = f64(np.swapaxes(x, 0, 1) if bf else x)
    if kind == "LSTM":
        o, (h, c) = m(xin, (f64(h0), f64(c0)))
        close(c, want_c)
    else:
        o, h = m(xin, f64(h0))
    close(o, np.swapaxes(want_o, 0, 1) if bf else want_o)
    close(h, want_h)
    o1 = m(f64(x[:, 0]))[0]                                   # unbatched, zero initial state
    zero = np.zeros((layers * D, 1, 4))
    close(o1, rnn_ref(kind, p, x[:, :1], zero, zero, layers, bidir)[0][:, 0])
    if layers == 1:    # the gradients of the deeper stack are the same rules, more slowly
        check_grads(lambda mm, a: mm[0](a)[0], ([m], f64(x[:3])), order=1)


def test_rnn_dropout_and_errors():
    m = nn.GRU(3, 4, num_layers=2, dropout=0.5)
    with pytest.raises(ValueError, match="key="):
        m(vnp.ones((2, 1, 3)))
    a = m(vnp.ones((2, 1, 3)), key=vr.key(0))[0]
    assert a.shape == (2, 1, 4)
    m.eval()
    assert m(vnp.ones((2, 1, 3)))[0].shape == (2, 1, 4)
    with pytest.raises(vnp.ShapeError, match="LSTM: input"):
        nn.LSTM(3, 4)(vnp.ones((2, 1, 5)))
    with pytest.raises(NotImplementedError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=2)


def test_lstm_under_jit_matches_eager():
    m = nn.LSTM(3, 4, dtype=F64)
    x = f64(randn(4, 2, 3))
    f = vkml.jit(lambda mm, a: mm(a)[0])
    close(f(m, x), m(x)[0])


# --------------------------------------------------------------------------- activation layers

@pytest.mark.parametrize("layer,fn", [
    (nn.LeakyReLU(0.2), lambda x: F.leaky_relu(x, 0.2)), (nn.ELU(0.5), lambda x: F.elu(x, 0.5)),
    (nn.CELU(2.0), lambda x: F.celu(x, 2.0)), (nn.SELU(), F.selu),
    (nn.Softplus(2.0, 5.0), lambda x: F.softplus(x, 2.0, 5.0)), (nn.Softsign(), F.softsign),
    (nn.Hardsigmoid(), F.hardsigmoid), (nn.Hardswish(), F.hardswish),
    (nn.Hardtanh(-0.5, 2.0), lambda x: F.hardtanh(x, -0.5, 2.0)), (nn.ReLU6(), F.relu6),
    (nn.Mish(), F.mish), (nn.LogSigmoid(), F.logsigmoid), (nn.GLU(1), lambda x: F.glu(x, 1)),
    (nn.Softmin(1), lambda x: F.softmin(x, 1)), (nn.Softmax(), lambda x: F.softmax(x, 1)),
    (nn.LogSoftmax(0), lambda x: F.log_softmax(x, 0)),
    (nn.AdaptiveAvgPool2d((1, 2)), lambda x: F.adaptive_avg_pool2d(x, (1, 2))),
    (nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
     lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True))])
def test_activation_layers_call_their_function(layer, fn):
    x = f64(randn(1, 2, 4, 6) * 3)
    assert np.array_equal(layer(x).numpy(), fn(x).numpy())
    assert layer.state_dict() == {}
