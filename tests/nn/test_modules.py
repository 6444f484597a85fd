"""vkml.nn modules: pytree behaviour, PyTorch's face, initialisation, and each layer's forward."""
import math

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
import vkml.random as vr
from vkml import nn
from vkml.nn import functional as F
from vkml.tree_util import tree_flatten, tree_leaves, tree_map, tree_structure

RNG = np.random.default_rng(3)
F64 = np.float64


def f64(x):
    return vnp.asarray(np.asarray(x, F64))


def close64(got, want, rtol=1e-12, atol=1e-13):
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol)


def small_cnn(key=None):
    k = vr.split(vr.key(0) if key is None else key, 3)
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, key=k[0]), nn.BatchNorm2d(3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.5),
                         nn.Linear(12, 4, key=k[1]), nn.GELU(), nn.LayerNorm(4),
                         nn.Linear(4, 2, key=k[2]))


# --------------------------------------------------------------------------- pytree behaviour

def test_parameters_names_and_order():
    m = small_cnn()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.weight", "0.bias", "1.weight", "1.bias", "6.weight", "6.bias", "8.weight",
                     "8.bias", "9.weight", "9.bias"]
    assert [n for n, _ in m.named_buffers()] == ["1.running_mean", "1.running_var",
                                                 "1.num_batches_tracked"]
    assert [p.shape for p in m.parameters()][:2] == [(3, 2, 3, 3), (3,)]
    # the pytree's leaves are the parameters and buffers, in the same walk order
    assert len(tree_leaves(m)) == 13
    assert list(m.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                    "1.running_var", "1.num_batches_tracked", "6.weight", "6.bias",
                                    "8.weight", "8.bias", "9.weight", "9.bias"]
    assert all(a is b for a, b in zip(tree_leaves(m), m.state_dict().values()))


def test_treedef_is_hashable_static_and_equal_across_instances():
    a, b = small_cnn(vr.key(1)), small_cnn(vr.key(2))
    ta, tb = tree_structure(a), tree_structure(b)
    assert ta == tb and hash(ta) == hash(tb)
    assert tree_structure(nn.Linear(3, 2)) != tree_structure(nn.Linear(3, 2, bias=False))
    assert tree_structure(nn.Conv2d(1, 1, 3)) != tree_structure(nn.Conv2d(1, 1, 3, stride=2))
    a.eval()
    assert tree_structure(a) != tb           # the training flag is static structure
    leaves, td = tree_flatten(a)
    back = td.unflatten(leaves)
    assert type(back) is nn.Sequential and back.training is False and back.layers[1].training is False
    assert back.layers[0].padding == (1, 1) and back.layers[0].weight is a.layers[0].weight


def test_tree_map_keeps_structure_with_non_array_leaves():
    m = nn.Linear(3, 2)
    ranks = tree_map(lambda p: p.ndim, m)          # int leaves stay children, not configuration
    assert ranks.weight == 2 and tree_structure(ranks) == tree_structure(m)
    mask = m.parameter_mask()
    assert tree_leaves(mask) == [True, True]
    bn = nn.BatchNorm2d(2)
    assert tree_leaves(bn.parameter_mask()) == [True, True, False, False, False]


def test_grad_returns_model_shaped_tree():
    m = nn.Sequential(nn.Linear(3, 4, key=vr.key(5), dtype=np.float64), nn.ReLU(),
                      nn.Linear(4, 1, key=vr.key(6), dtype=np.float64))
    x = f64(RNG.standard_normal((6, 3)))
    y = f64(RNG.standard_normal((6, 1)))
    g = vkml.grad(lambda m, x, y: F.mse_loss(m(x), y))(m, x, y)
    assert type(g) is nn.Sequential and type(g.layers[0]) is nn.Linear
    assert [p.shape for p in g.parameters()] == [(4, 3), (4,), (1, 4), (1,)]
    # against the hand-derived gradient
    W1, b1 = np.asarray(m.layers[0].weight), np.asarray(m.layers[0].bias)
    W2, b2 = np.asarray(m.layers[2].weight), np.asarray(m.layers[2].bias)
    X, Y = np.asarray(x), np.asarray(y)
    h = X @ W1.T + b1
    r = np.maximum(h, 0)
    out = r @ W2.T + b2
    d = 2 * (out - Y) / out.size
    close64(g.layers[2].weight, d.T @ r)
    close64(g.layers[2].bias, d.sum(0))
    dh = (d @ W2) * (h > 0)
    close64(g.layers[0].weight, dh.T @ X)
    close64(g.layers[0].bias, dh.sum(0))


def test_train_eval_and_repr():
    m = small_cnn()
    assert all(s.training for s in m.modules())
    assert m.eval() is m and not any(s.training for s in m.modules())
    m.train()
    assert all(s.training for s in m.modules())
    r = repr(m)
    assert "(0): Conv2d(in_channels=2, out_channels=3, kernel_size=(3, 3)" in r
    assert "BatchNorm2d(num_features=3" in r and "Dropout(p=0.5)" in r


def test_zero_grad_clears_tensor_like_parameters():
    class P(vkml.Array):    # an Array subclass with a .grad, as vkml.Tensor will be
        pass
    m = nn.Linear(2, 2)
    w = m.weight
    m.weight = P._concrete(w._buf, w.shape, w.dtype)
    m.weight.grad = w
    m.zero_grad()           # plain Array bias: nothing to clear
    assert m.weight.grad is None


def test_user_subclass_is_a_pytree():
    class MLP(nn.Module):
        def __init__(self, key):
            k1, k2 = vr.split(key)
            self.hidden = 5                                   # configuration: static
            self.l1 = nn.Linear(2, self.hidden, key=k1)
            self.blocks = [nn.ReLU(), nn.Linear(self.hidden, 1, key=k2)]

        def forward(self, x):
            x = self.l1(x)
            for b in self.blocks:
                x = b(x)
            return x
    m = MLP(vr.key(0))
    assert [n for n, _ in m.named_parameters()] == ["l1.weight", "l1.bias", "blocks.1.weight", "blocks.1.bias"]
    g = vkml.grad(lambda m: m(vnp.ones((3, 2))).sum())(m)
    assert type(g) is MLP and g.hidden == 5 and g.blocks[1].weight.shape == (1, 5)


# --------------------------------------------------------------------------- initialisation

def test_linear_and_conv_init_follow_pytorch_defaults():
    lin = nn.Linear(64, 200, key=vr.key(3))
    w, b = np.asarray(lin.weight), np.asarray(lin.bias)
    bound = 1 / math.sqrt(64)
    assert w.shape == (200, 64) and np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound     # U(-b, b) has std b / sqrt(3)
    assert np.abs(b).max() <= bound
    conv = nn.Conv2d(4, 8, (3, 2), groups=2, key=vr.key(4))
    cb = 1 / math.sqrt(2 * 3 * 2)
    cw = np.asarray(conv.weight)
    assert cw.shape == (8, 2, 3, 2) and np.abs(cw).max() <= cb and np.abs(cw).max() > 0.8 * cb
    # same key, same weights; different key, different weights
    assert np.array_equal(np.asarray(nn.Linear(64, 200, key=vr.key(3)).weight), w)
    assert not np.array_equal(np.asarray(nn.Linear(64, 200, key=vr.key(9)).weight), w)
    assert nn.Linear(3, 2).weight.dtype == np.float32
    assert nn.Linear(3, 2, dtype=np.float64).weight.dtype == np.float64
    emb = np.asarray(nn.Embedding(100, 50, key=vr.key(1)).weight)
    assert abs(emb.mean()) < 0.05 and abs(emb.std() - 1) < 0.05
    ln = nn.LayerNorm((2, 3))
    assert np.all(np.asarray(ln.weight) == 1) and np.all(np.asarray(ln.bias) == 0)


# --------------------------------------------------------------------------- layers

def test_batchnorm2d_running_statistics_and_eval():
    bn = nn.BatchNorm2d(2, momentum=0.1, dtype=np.float64)
    rm, rv = np.zeros(2), np.ones(2)
    for step in range(2):
        x = RNG.standard_normal((3, 2, 2, 2)) * (step + 1) + step
        y = bn(f64(x))
        mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
        close64(y, (x - mean[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5))
        rm = 0.9 * rm + 0.1 * mean
        rv = 0.9 * rv + 0.1 * x.var((0, 2, 3), ddof=1)
        close64(bn.running_mean, rm)
        close64(bn.running_var, rv)
    bn.eval()
    x = RNG.standard_normal((2, 2, 3, 3))
    close64(bn(f64(x)), (x - rm[None, :, None, None]) / np.sqrt(rv[None, :, None, None] + 1e-5))
    close64(bn.running_mean, rm)                     # eval mode leaves them alone
    with pytest.raises(ValueError, match=r"BatchNorm2d\(2\): input must be NCHW with 2 channels"):
        bn(f64(np.ones((2, 3, 2, 2))))
    nostats = nn.BatchNorm2d(2, track_running_stats=False, affine=False).eval()
    assert nostats.running_mean is None and tree_leaves(nostats) == []
    x = RNG.standard_normal((3, 2, 2, 2))
    close64(nostats(f64(x)), (x - x.mean((0, 2, 3), keepdims=True)) / np.sqrt(x.var((0, 2, 3), keepdims=True) + 1e-5),
            rtol=1e-6, atol=1e-6)


def test_batchnorm2d_float32_stats_stay_float32_and_get_no_gradient():
    bn = nn.BatchNorm2d(3)
    bn(f64(RNG.standard_normal((2, 3, 2, 2))))
    assert bn.running_mean.dtype == np.float32 and bn.running_var.dtype == np.float32
    bn.eval()
    g = vkml.grad(lambda m: m(vnp.ones((1, 3, 2, 2))).sum())(bn)
    assert np.all(np.asarray(g.running_mean) == 0) and np.all(np.asarray(g.running_var) == 0)


def test_dropout_module_needs_key_in_train_mode():
    d = nn.Dropout(0.5)
    x = vnp.ones((20, 20))
    with pytest.raises(ValueError, match=r"Dropout\(p=0.5\) in train mode needs a random key"):
        d(x)
    y = np.asarray(d(x, key=vr.key(0)))
    assert set(np.unique(y).tolist()) <= {0.0, 2.0}
    assert d.eval()(x) is x
    net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Dropout(0.5))
    a = np.asarray(net(vnp.ones((3, 4)), key=vr.key(1)))
    assert np.array_equal(a, np.asarray(net(vnp.ones((3, 4)), key=vr.key(1))))
    with pytest.raises(ValueError, match="needs a random key"):
        net(vnp.ones((3, 4)))


@pytest.mark.parametrize("make, err, msg", [
    (lambda: nn.Conv2d(1, 1, 3, stride=2, padding="same"), ValueError,
     "Conv2d: padding='same' is not supported for strided convolutions"),
    (lambda: nn.Conv2d(1, 1, 3, padding="not_same"), ValueError,
     r"Conv2d: Invalid padding string 'not_same', should be one of \{'valid', 'same'\}"),
    (lambda: nn.Conv2d(1, 1, 0), ValueError, "Conv2d: kernel_size 0 must be an int or a pair of ints >= 1"),
    (lambda: nn.Conv2d(1, 1, (3, 0)), ValueError, r"Conv2d: kernel_size \(3, 0\) must be"),
    (lambda: nn.Conv2d(1, 1, 3, stride=0), ValueError, "Conv2d: stride 0 must be"),
    (lambda: nn.Conv2d(-1, 1, 3), ValueError, "Conv2d: in_channels -1 must be a non-negative int"),
    (lambda: nn.Conv2d(2.5, 2, 3), ValueError, "Conv2d: in_channels 2.5 must be a non-negative int"),
    (lambda: nn.Conv2d(2, 2, 3, groups=0), ValueError, "Conv2d: groups=0 must be a positive int"),
    (lambda: nn.Linear(-1, 3), ValueError, "Linear: in_features -1 must be a non-negative int"),
    (lambda: nn.Linear(3, -2), ValueError, "Linear: out_features -2 must be a non-negative int"),
    (lambda: nn.Dropout(-0.1), ValueError, r"Dropout: probability p=-0.1 must be in \[0, 1\]"),
    (lambda: nn.Dropout(1.5), ValueError, r"Dropout: probability p=1.5 must be in \[0, 1\]"),
    (lambda: nn.Dropout(float("nan")), ValueError, r"Dropout: probability p=nan must be in \[0, 1\]"),
    (lambda: nn.Dropout("a"), TypeError, "Dropout: probability p must be a float in"),
    (lambda: nn.Embedding(-1, 3), ValueError, "Embedding: num_embeddings -1 must be a non-negative int"),
    (lambda: nn.Embedding(3, -1), ValueError, "Embedding: embedding_dim -1 must be a non-negative int"),
    (lambda: nn.BatchNorm2d(-1), ValueError, "BatchNorm2d: num_features -1 must be"),
    (lambda: nn.MaxPool2d(0), ValueError, "MaxPool2d: kernel_size 0 must be"),
    (lambda: nn.MaxPool2d(2, padding=2), ValueError, r"MaxPool2d: padding \(2, 2\) must be at most half"),
    (lambda: nn.AvgPool2d(3, padding=2), ValueError, r"AvgPool2d: padding \(2, 2\) must be at most half"),
    (lambda: nn.Flatten("a"), TypeError, "Flatten: start_dim must be an int"),
])
def test_constructors_refuse_bad_arguments(make, err, msg):
    """Checked at construction, as PyTorch does, not at the first forward pass."""
    with pytest.raises(err, match=msg):
        make()


def test_layers_match_functional():
    x = f64(RNG.standard_normal((2, 2, 4, 4)))
    conv = nn.Conv2d(2, 4, 3, stride=1, padding=1, dilation=1, groups=2, dtype=np.float64)
    close64(conv(x), np.asarray(F.conv2d(x, conv.weight, conv.bias, 1, 1, 1, 2)))
    close64(nn.MaxPool2d(2)(x), np.asarray(F.max_pool2d(x, 2)))
    close64(nn.AvgPool2d(3, 1, 1, count_include_pad=False)(x),
            np.asarray(F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)))
    assert nn.Flatten()(x).shape == (2, 32) and nn.Flatten(0, 1)(x).shape == (4, 4, 4)
    assert nn.Flatten()(vnp.zeros((0, 3, 2))).shape == (0, 6)
    close64(nn.ReLU()(x), np.maximum(np.asarray(x), 0))
    close64(nn.GELU("tanh")(x), np.asarray(F.gelu(x, approximate=True)))
    emb = nn.Embedding(6, 3)
    assert nn.Embedding(6, 3)(vnp.asarray([[1, 5]])).shape == (1, 2, 3)
    close64(emb(vnp.asarray([2])), np.asarray(emb.weight)[[2]], rtol=0)
    ln = nn.LayerNorm(4, dtype=np.float64)
    close64(ln(x), np.asarray(F.layer_norm(x, 4)))
    seq = nn.Sequential(nn.Identity(), lambda v: v * 2.0)
    assert isinstance(seq[1], nn.Lambda) and len(seq) == 2
    close64(seq(x), 2 * np.asarray(x))
    with pytest.raises(TypeError, match="neither a Module nor a function"):
        nn.Sequential(3)


def test_cnn_trains_end_to_end_with_pure_optimiser():
    import vkml.optim as optim
    model = small_cnn(vr.key(7))
    x = vnp.asarray(RNG.standard_normal((4, 2, 4, 4)).astype(np.float32))
    y = vnp.asarray(np.array([0, 1, 1, 0], np.int32))

    def loss(m, x, y, key):
        return F.cross_entropy(m(x, key=key), y)
    opt = optim.adamw(1e-2)
    state = opt.init(model)
    keys = vr.split(vr.key(11), 6)
    losses = []
    for i in range(6):
        v, g = vkml.value_and_grad(loss)(model, x, y, keys[i])
        upd, state = opt.update(g, state, model)
        # running statistics get a zero gradient and adamw does not decay them
        assert np.all(np.asarray(upd.layers[1].running_var) == 0)
        assert np.all(np.asarray(upd.layers[1].running_mean) == 0)
        model = optim.apply_updates(model, upd)
        losses.append(float(v))
    assert type(model) is nn.Sequential and losses[-1] < losses[0]


def test_state_dict_round_trip():
    a, b = small_cnn(vr.key(1)), small_cnn(vr.key(2))
    b.layers[1].running_mean = vnp.full((3,), 0.5)
    inner = a.layers[0]
    a.load_state_dict(b.state_dict())
    assert a.layers[0] is inner                   # submodules are updated in place
    for (n1, v1), (n2, v2) in zip(a.state_dict().items(), b.state_dict().items()):
        assert n1 == n2 and np.array_equal(np.asarray(v1), np.asarray(v2))
    sd = b.state_dict()
    del sd["0.bias"]
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "0.bias"'):
        a.load_state_dict(sd)
    sd = b.state_dict()
    sd["0.bias"] = vnp.zeros((4,))
    with pytest.raises(ValueError, match=r"size mismatch for 0.bias: copying a param with shape \(4,\) "
                                         r"from checkpoint, the shape in current model is \(3,\)"):
        a.load_state_dict(sd)


def _bn_stats(x, rm, rv, momentum=0.1):
    """PyTorch's running-statistics update, in float64 NumPy."""
    return ((1 - momentum) * rm + momentum * x.mean((0, 2, 3)),
            (1 - momentum) * rv + momentum * x.var((0, 2, 3), ddof=1))


def test_transforms_leave_the_models_statistics_alone_and_return_the_new_ones():
    """A transformed function is pure: the model passed in keeps its running statistics
    bit for bit, and the model the function returns holds the new ones."""
    x = RNG.standard_normal((3, 2, 2, 2))
    net = nn.Sequential(nn.Identity(), nn.BatchNorm2d(2, dtype=F64))
    rm0, rv0 = np.array([0.5, -0.25]), np.array([2.0, 0.5])
    net.layers[1].running_mean, net.layers[1].running_var = f64(rm0), f64(rv0)
    before = [np.asarray(b).copy() for b in net.buffers()]
    m1, v1 = _bn_stats(x, rm0, rv0)
    m2, v2 = _bn_stats(x, m1, v1)

    def unchanged():
        for b, was in zip(net.buffers(), before):
            assert not b.is_traced and np.asarray(b).tobytes() == was.tobytes()

    def close_stats(m, want_m, want_v):
        close64(m.layers[1].running_mean, want_m)
        close64(m.layers[1].running_var, want_v)
        assert not m.layers[1].running_mean.is_traced

    _, new = vkml.jit(lambda m, x: (m(x), m))(net, f64(x))
    unchanged()
    close_stats(new, m1, v1)
    # two forward passes in one loss: two updates, on the traced copy only
    g, new = vkml.grad(lambda m, x: ((m(x) * m(x)).sum(), m), has_aux=True)(net, f64(x))
    unchanged()
    close_stats(new, m2, v2)
    vkml.grad(lambda m, x: (m(x) ** 2).sum())(net, f64(x))
    unchanged()
    (_, new), _ = vkml.value_and_grad(lambda m, x: ((m(x) ** 2).sum(), m), has_aux=True)(net, f64(x))
    unchanged()
    close_stats(new, m1, v1)
    vkml.vmap(lambda m, x: m(x[None]).sum(), in_axes=(None, 0))(net, f64(x))
    unchanged()

    @vkml.jit
    def step(m, x):     # the pure training step: the update goes to the returned model
        (loss, m), g = vkml.value_and_grad(lambda mm: ((mm(x) ** 2).sum(), mm), has_aux=True)(m)
        return vkml.optim.apply_updates(m, tree_map(lambda a: -0.1 * a, g)), loss
    new, _ = step(net, f64(x))
    unchanged()
    close_stats(new, m1, v1)

    def outer(m):       # nested transforms change nothing outside either
        gi = vkml.grad(lambda mm: (mm(f64(x)) ** 2).sum())(m)
        return (gi.layers[1].weight ** 2).sum()
    vkml.grad(outer)(net)
    unchanged()
    # a module the function closes over keeps its state (and never holds a tracer)
    vkml.grad(lambda x: net(x).sum())(f64(x))
    vkml.jit(lambda x: net(x).sum())(f64(x))
    unchanged()
    # the PyTorch face: called eagerly, the module is updated in place
    net(f64(x))
    close_stats(net, m1, v1)


def test_batchnorm_in_the_tensor_path_updates_in_place_and_backpropagates():
    """The torch-style loop: Tensor parameters, loss.backward(), optim.SGD; the running
    statistics move in place, get no gradient, and the gradients match vkml.grad's."""
    k = vr.split(vr.key(4), 2)
    net = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, key=k[0], dtype=F64), nn.BatchNorm2d(3, dtype=F64),
                        nn.ReLU(), nn.Flatten(), nn.Linear(3 * 16, 2, key=k[1], dtype=F64))
    xn = RNG.standard_normal((4, 2, 4, 4))
    x = f64(xn)
    g, want = vkml.grad(lambda m: ((m(x) ** 2).mean(), m), has_aux=True)(net)
    assert np.all(np.asarray(net.layers[1].running_mean) == 0)
    params = [np.asarray(p).copy() for p in net.parameters()]
    opt = vkml.optim.SGD(net.parameters(), lr=0.1)
    opt.zero_grad()
    loss = (net(x) ** 2).mean()
    loss.backward()
    for p, gp in zip(net.parameters(), g.parameters()):
        close64(p.grad, np.asarray(gp), rtol=1e-10, atol=1e-12)
    bn = net.layers[1]
    for name in ("running_mean", "running_var"):
        v = getattr(bn, name)
        close64(v, np.asarray(getattr(want.layers[1], name)))
        assert not getattr(v, "requires_grad", False) and getattr(v, "grad", None) is None
    h = np.asarray(net.layers[0](x))
    close64(bn.running_mean, _bn_stats(h, np.zeros(3), np.ones(3))[0], rtol=1e-10, atol=1e-12)
    opt.step()
    for p, was, gp in zip(net.parameters(), params, g.parameters()):
        close64(p, was - 0.1 * np.asarray(gp), rtol=1e-10, atol=1e-12)


