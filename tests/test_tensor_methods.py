"""torch's Tensor methods on vkml.Tensor (api.md, "PyTorch face"), against small NumPy float64
reference semantics of torch's meaning; gradients from backward() against NumPy's central
differences of the same reference (inputs kept away from kinks and ties)."""
import math

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml import nn
from vkml.tensor_methods import MaxResult, MinResult

RNG = np.random.default_rng(5)
X23 = RNG.standard_normal((2, 3))
X234 = RNG.standard_normal((2, 3, 4))
POS = RNG.random((2, 3)) + 0.5
# distinct values, far apart: no ties for max/min/argmax, no kinks for abs/relu/clamp
SPREAD = np.array([[0.7, -1.3, 2.1], [-0.4, 1.6, -2.2]])


def T(x, rg=True):
    return vkml.Tensor(np.asarray(x, np.float64), requires_grad=rg)


def np_softmax(x, d):
    e = np.exp(x - x.max(d, keepdims=True))
    return e / e.sum(d, keepdims=True)


def np_chunk(x, n, d):
    size = -(-x.shape[d] // n)
    return np.split(x, range(size, x.shape[d], size), axis=d)


# (id, input, vkml method call, NumPy reference of torch's semantics); every case is
# differentiable: outputs that are tuples are concatenated flat for the gradient check
CASES = [
    ("exp", X23, lambda t: t.exp(), np.exp),
    ("log", POS, lambda t: t.log(), np.log),
    ("sqrt", POS, lambda t: t.sqrt(), np.sqrt),
    ("tanh", X23, lambda t: t.tanh(), np.tanh),
    ("sigmoid", X23, lambda t: t.sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    ("relu", SPREAD, lambda t: t.relu(), lambda x: np.maximum(x, 0)),
    ("abs", SPREAD, lambda t: t.abs(), np.abs),
    ("neg", X23, lambda t: t.neg(), np.negative),
    ("pow", POS, lambda t: t.pow(2.5), lambda x: x ** 2.5),
    ("clamp", SPREAD, lambda t: t.clamp(-1.0, 1.0), lambda x: np.clip(x, -1, 1)),
    ("clamp_min", SPREAD, lambda t: t.clamp(min=0.0), lambda x: np.maximum(x, 0)),
    ("permute", X234, lambda t: t.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
    ("permute_tuple", X234, lambda t: t.permute((1, 2, 0)), lambda x: x.transpose(1, 2, 0)),
    ("transpose", X234, lambda t: t.transpose(0, 2), lambda x: np.swapaxes(x, 0, 2)),
    ("transpose_neg", X234, lambda t: t.transpose(-1, 1), lambda x: np.swapaxes(x, -1, 1)),
    ("view", X234, lambda t: t.view(4, -1), lambda x: x.reshape(4, 6)),
    ("view_tuple", X234, lambda t: t.view((6, 4)), lambda x: x.reshape(6, 4)),
    ("reshape", X234, lambda t: t.reshape(3, 8), lambda x: x.reshape(3, 8)),
    ("unsqueeze", X23, lambda t: t.unsqueeze(1), lambda x: x[:, None]),
    ("unsqueeze_neg", X23, lambda t: t.unsqueeze(-1), lambda x: x[..., None]),
    ("squeeze_all", X23.reshape(2, 1, 3, 1), lambda t: t.squeeze(), lambda x: x.reshape(2, 3)),
    ("squeeze_dim", X23.reshape(2, 1, 3), lambda t: t.squeeze(1), lambda x: x.reshape(2, 3)),
    ("squeeze_not_one", X23, lambda t: t.squeeze(0), lambda x: x),      # torch: a no-op
    ("squeeze_tuple", X23.reshape(1, 2, 1, 3), lambda t: t.squeeze((0, 2, 3)), lambda x: x.reshape(2, 3)),
    ("flatten", X234, lambda t: t.flatten(), lambda x: x.reshape(-1)),
    ("flatten_1", X234, lambda t: t.flatten(1), lambda x: x.reshape(2, 12)),
    ("flatten_0_1", X234, lambda t: t.flatten(0, 1), lambda x: x.reshape(6, 4)),
    ("flatten_0d", np.array(1.5), lambda t: t.flatten(), lambda x: x.reshape(1)),
    ("expand", X23[:1], lambda t: t.expand(4, 3), lambda x: np.broadcast_to(x, (4, 3))),
    ("expand_keep_new", X23[:, :1], lambda t: t.expand(5, -1, 3), lambda x: np.broadcast_to(x, (5, 2, 3))),
    ("repeat", X23, lambda t: t.repeat(2, 3), lambda x: np.tile(x, (2, 3))),
    ("repeat_new_dim", X23, lambda t: t.repeat(2, 1, 2), lambda x: np.tile(x, (2, 1, 2))),
    ("chunk", X234, lambda t: t.chunk(3, 2), lambda x: np_chunk(x, 3, 2)),        # 4 -> 2, 2
    ("chunk_uneven", X23, lambda t: t.chunk(2, 1), lambda x: np_chunk(x, 2, 1)),  # 3 -> 2, 1
    ("split_int", X234, lambda t: t.split(3, -1), lambda x: [x[..., :3], x[..., 3:]]),
    ("split_list", X234, lambda t: t.split([1, 2], 1), lambda x: [x[:, :1], x[:, 1:]]),
    ("matmul", X23, lambda t: t.matmul(T(X23.T, False)), lambda x: x @ X23.T),
    ("mm", X23, lambda t: t.mm(T(POS.T, False)), lambda x: x @ POS.T),
    ("bmm", X234, lambda t: t.bmm(T(X234.transpose(0, 2, 1), False)),
     lambda x: x @ X234.transpose(0, 2, 1)),
    ("sum", X234, lambda t: t.sum(), np.sum),
    ("sum_dim", X234, lambda t: t.sum(dim=1), lambda x: x.sum(1)),
    ("sum_dims_keep", X234, lambda t: t.sum(dim=(0, 2), keepdim=True), lambda x: x.sum((0, 2), keepdims=True)),
    ("sum_axis", X234, lambda t: t.sum(axis=-1, keepdims=True), lambda x: x.sum(-1, keepdims=True)),
    ("mean_dim", X234, lambda t: t.mean(dim=-1, keepdim=True), lambda x: x.mean(-1, keepdims=True)),
    ("max_all", SPREAD, lambda t: t.max(), np.max),
    ("max_dim", SPREAD, lambda t: t.max(dim=1).values, lambda x: x.max(1)),
    ("max_dim_keep", SPREAD, lambda t: t.max(0, keepdim=True)[0], lambda x: x.max(0, keepdims=True)),
    ("min_dim", SPREAD, lambda t: t.min(dim=0).values, lambda x: x.min(0)),
    ("max_other", SPREAD, lambda t: t.max(T(-SPREAD, False)), lambda x: np.maximum(x, -SPREAD)),
    ("std", X234, lambda t: t.std(), lambda x: x.std(ddof=1)),
    ("std_dim", X234, lambda t: t.std(dim=2), lambda x: x.std(2, ddof=1)),
    ("std_biased", X234, lambda t: t.std(1, unbiased=False, keepdim=True), lambda x: x.std(1, keepdims=True)),
    ("var_dim", X234, lambda t: t.var(dim=(0, 1)), lambda x: x.var((0, 1), ddof=1)),
    ("var_correction", X234, lambda t: t.var(0, correction=0), lambda x: x.var(0)),
    ("masked_fill", X23, lambda t: t.masked_fill(vnp.asarray(SPREAD > 0), -5.0),
     lambda x: np.where(SPREAD > 0, -5.0, x)),
    ("where", X23, lambda t: t.where(vnp.asarray(SPREAD > 0), 0.5), lambda x: np.where(SPREAD > 0, x, 0.5)),
    ("double", X23, lambda t: t.double() * 3.0, lambda x: 3 * x),
    ("to", X23, lambda t: t.to(vnp.float64, copy=True), lambda x: x),
    ("clone", X23, lambda t: t.clone() * 2.0, lambda x: x * 2),
    ("contiguous", X23, lambda t: t.contiguous(), lambda x: x),
    ("mT", X234, lambda t: t.mT, lambda x: np.swapaxes(x, -1, -2)),
    ("t", X23, lambda t: t.t(), lambda x: x.T),
    ("t_1d", X23[0], lambda t: t.t(), lambda x: x),
    ("softmax", X234, lambda t: t.softmax(1), lambda x: np_softmax(x, 1)),
    ("log_softmax", X234, lambda t: t.log_softmax(-1), lambda x: np.log(np_softmax(x, -1))),
    ("norm", X234, lambda t: t.norm(), lambda x: np.sqrt((x * x).sum())),
    ("norm_dim", X234, lambda t: t.norm(dim=1, keepdim=True), lambda x: np.sqrt((x * x).sum(1, keepdims=True))),
    ("norm_1", X234, lambda t: t.norm(1, dim=-1), lambda x: np.abs(x).sum(-1)),
    ("norm_3", X234, lambda t: t.norm(3), lambda x: (np.abs(x) ** 3).sum() ** (1 / 3)),
    ("norm_inf", SPREAD, lambda t: t.norm(math.inf, dim=0), lambda x: np.abs(x).max(0)),
    ("cat", X23, lambda t: vkml.cat([t, t * 2.0], dim=1), lambda x: np.concatenate([x, 2 * x], 1)),
    ("cat_array", X23, lambda t: vkml.cat([vnp.asarray(POS), t]), lambda x: np.concatenate([POS, x])),
    ("stack", X23, lambda t: vkml.stack([t, t.exp()], dim=-1), lambda x: np.stack([x, np.exp(x)], -1)),
]


def _flat(v):
    if isinstance(v, (tuple, list)):
        return np.concatenate([np.asarray(a, np.float64).reshape(-1) for a in v])
    return np.asarray(v, np.float64).reshape(-1)


@pytest.mark.parametrize("x, method, ref", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_method_value_and_gradient(x, method, ref):
    t = T(x)
    out = method(t)
    want = ref(np.asarray(x, np.float64))
    outs = out if isinstance(out, tuple) else (out,)
    wants = want if isinstance(want, (tuple, list)) else (want,)
    assert len(outs) == len(wants)
    for o, w in zip(outs, wants):
        assert isinstance(o, vkml.Tensor) and o.requires_grad
        assert o.shape == np.shape(w), (o.shape, np.shape(w))
        np.testing.assert_allclose(np.asarray(o), w, rtol=1e-12, atol=1e-12)
    # the gradient of sum(out * R) against central differences of the reference
    r = RNG.standard_normal(_flat(want).shape)
    pieces = [vnp.asarray(r[a:b].reshape(np.shape(w))) for a, b, w in
              zip(np.cumsum([0] + [np.size(w) for w in wants])[:-1], np.cumsum([np.size(w) for w in wants]),
                  wants)]
    loss = sum((o * p).sum() for o, p in zip(outs, pieces))
    loss.backward()
    x = np.asarray(x, np.float64)
    fd = np.zeros(x.size)
    eps = 1e-6
    for i in range(x.size):
        d = np.zeros(x.size)
        d[i] = eps
        hi, lo = ref(x + d.reshape(x.shape)), ref(x - d.reshape(x.shape))
        fd[i] = (_flat(hi) - _flat(lo)) @ r / (2 * eps)
    np.testing.assert_allclose(np.asarray(t.grad).reshape(-1), fd, rtol=1e-6, atol=1e-7)


def test_max_min_pairs_and_indices():
    t = T(SPREAD)
    v, i = t.max(dim=1)
    assert isinstance(t.max(1), MaxResult) and isinstance(t.min(1), MinResult)
    assert np.asarray(i).tolist() == SPREAD.argmax(1).tolist() and not i.requires_grad
    assert np.asarray(v).tolist() == SPREAD.max(1).tolist()
    vals, idx = t.min(0, keepdim=True)
    assert idx.shape == (1, 3) and np.asarray(idx).tolist() == [SPREAD.argmin(0).tolist()]
    assert t.argmax().item() == SPREAD.argmax()                 # of the flattened tensor
    assert np.asarray(t.argmax(dim=0, keepdim=True)).tolist() == [SPREAD.argmax(0).tolist()]
    assert np.asarray(t.argmin(1)).tolist() == SPREAD.argmin(1).tolist()
    # the gradient of max(dim).values goes to the index it names
    t.max(dim=1).values.sum().backward()
    want = np.zeros_like(SPREAD)
    want[np.arange(2), SPREAD.argmax(1)] = 1
    np.testing.assert_array_equal(np.asarray(t.grad), want)
    # with ties too (torch's rule): the first index gets it all, while max() over every
    # element shares it among the ties
    ties = T([[1.0, 5.0, 5.0], [2.0, 0.0, 2.0]])
    v, i = ties.max(dim=1, keepdim=True)
    assert np.asarray(i).tolist() == [[1], [0]] and np.asarray(v).tolist() == [[5.0], [2.0]]
    v.sum().backward()
    np.testing.assert_array_equal(np.asarray(ties.grad), [[0, 1, 0], [1, 0, 0]])
    ties.grad = None
    ties.min(0).values.sum().backward()
    np.testing.assert_array_equal(np.asarray(ties.grad), [[1, 0, 0], [0, 1, 1]])
    ties.grad = None
    ties.max().backward()
    np.testing.assert_array_equal(np.asarray(ties.grad), [[0, 0.5, 0.5], [0, 0, 0]])
    assert T(np.zeros((2, 3))).argmax(keepdim=True).shape == (1, 1)
    v, i = T(3.0).max(dim=0)
    assert float(v) == 3.0 and int(i) == 0


def test_size_dim_numel_item_tolist():
    t = T(X234, rg=False)
    assert t.size() == (2, 3, 4) and t.size(-1) == 4 and t.size(0) == 2
    assert t.size == 24 and t.numel() == 24 and t.dim() == 3 and t.ndimension() == 3
    with pytest.raises(IndexError):
        t.size(3)
    assert T([2.5]).item() == 2.5 and T(1.5).tolist() == 1.5
    assert T([[1.0, 2.0]]).tolist() == [[1.0, 2.0]]
    assert isinstance(t.numpy(), np.ndarray) and np.array_equal(t.numpy(), X234)


def test_comparisons():
    t, o = T(SPREAD, False), T(np.zeros((2, 3)) + 0.7, False)
    for name, fn in [("lt", np.less), ("gt", np.greater), ("le", np.less_equal),
                     ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)]:
        got = getattr(t, name)(o)
        assert got.dtype == np.bool_ and not got.requires_grad
        np.testing.assert_array_equal(np.asarray(got), fn(SPREAD, 0.7), err_msg=name)
        np.testing.assert_array_equal(np.asarray(getattr(t, name)(0.7)), fn(SPREAD, 0.7), err_msg=name)


def test_casts():
    t = T(X23)
    assert t.float().dtype == np.float32 and t.float().requires_grad
    assert t.double() is t and t.to(np.float64) is t
    assert t.long().dtype == np.int32 and not t.long().requires_grad
    assert t.half().dtype == np.float16 and t.to("float16").dtype == np.float16
    assert t.bfloat16().dtype == vnp.bfloat16 and t.to("bfloat16").dtype == vnp.bfloat16
    with pytest.raises(TypeError, match="to: takes a dtype"):
        t.to("cuda")
    # the gradient through a cast comes back in the leaf's dtype
    r = RNG.standard_normal((2, 3))
    (t.float() * vnp.asarray(r, np.float32)).sum().backward()
    assert t.grad.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(t.grad), r.astype(np.float32).astype(np.float64))
    assert np.array_equal(np.asarray(t.to(np.float32)), X23.astype(np.float32))
    d = t.detach()
    assert not d.requires_grad and d.is_leaf and np.array_equal(np.asarray(d), X23)
    c = t.clone()
    assert c is not t and c.requires_grad and not c.is_leaf


def test_shape_errors():
    t = T(X23, False)
    with pytest.raises(vkml.ShapeError, match="expand"):
        t.expand(2, 4)
    with pytest.raises(vkml.ShapeError, match="repeat"):
        t.repeat(2)
    with pytest.raises(vkml.ShapeError, match="split"):
        t.split([1, 1], 1)
    with pytest.raises(vkml.ShapeError, match="mm"):
        t.mm(T(X234, False))
    with pytest.raises(vkml.ShapeError, match="bmm"):
        T(X234, False).bmm(T(X234[:1].transpose(0, 2, 1), False))
    with pytest.raises(vkml.ShapeError, match="t: expects"):
        T(X234, False).t()
    with pytest.raises(vkml.ShapeError, match="permute"):
        t.permute(1, 0, 2)
    with pytest.raises(np.exceptions.AxisError):
        t.unsqueeze(3)
    with pytest.raises(TypeError, match="dim= or axis="):
        t.sum(dim=0, axis=0)
    with pytest.raises(vkml.DTypeError, match="softmax"):
        vkml.Tensor([1, 2]).softmax(0)
    with pytest.raises(vkml.DTypeError, match="masked_fill: mask must be bool"):
        t.masked_fill(vnp.ones((2, 3)), 0.0)


# ------------------------------------------------------------------------------ in place


def test_inplace_ops_on_tensors_outside_the_tape():
    a = T(X23, False)
    assert a.add_(1.0) is a
    np.testing.assert_allclose(np.asarray(a), X23 + 1)
    a.add_(T(POS, False), alpha=2.0)
    np.testing.assert_allclose(np.asarray(a), X23 + 1 + 2 * POS, rtol=1e-15)
    a.mul_(vnp.asarray(POS))
    np.testing.assert_allclose(np.asarray(a), (X23 + 1 + 2 * POS) * POS, rtol=1e-15)
    a.clamp_(-0.5, 0.5)
    np.testing.assert_allclose(np.asarray(a), np.clip((X23 + 1 + 2 * POS) * POS, -0.5, 0.5), rtol=1e-15)
    a.copy_(T(X23[0], False))                        # broadcast, as torch
    np.testing.assert_array_equal(np.asarray(a), np.broadcast_to(X23[0], (2, 3)))
    a.copy_(vnp.ones((2, 3), np.float32))            # cast to a's dtype
    assert a.dtype == np.float64 and np.asarray(a).tolist() == [[1.0] * 3] * 2
    a.zero_()
    assert np.asarray(a).tolist() == [[0.0] * 3] * 2
    i = vkml.Tensor([1, 2])
    with pytest.raises(vkml.DTypeError, match="add_"):
        i.add_(0.5)
    with pytest.raises(vkml.ShapeError, match="do not broadcast"):
        a.add_(T(np.ones(4), False))
    with pytest.raises(vkml.ShapeError, match=r"add_: a value of shape \(2, 2, 3\) does not broadcast"):
        a.add_(T(np.ones((2, 2, 3)), False))
    # a result computed without grad is a leaf outside the tape
    b = T(X23, False) * 2.0
    b.mul_(0.5)
    np.testing.assert_allclose(np.asarray(b), X23, rtol=1e-15)


def test_inplace_on_the_tape_raises_torchs_error():
    w = T(X23)
    for op in (lambda: w.add_(1.0), lambda: w.mul_(2.0), lambda: w.zero_(), lambda: w.copy_(X23),
               lambda: w.clamp_(0.0, 1.0)):
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in "
                                               "an in-place operation."):
            op()
    np.testing.assert_array_equal(np.asarray(w), X23)   # nothing changed
    h = w * 2.0
    with pytest.raises(RuntimeError, match="has history"):
        h.add_(1.0)
    # under no_grad a leaf that requires grad may be updated, as torch's optimisers do
    with vkml.no_grad():
        w.add_(1.0)
    np.testing.assert_allclose(np.asarray(w), X23 + 1)
    assert w.requires_grad and w.is_leaf


def test_backward_refuses_a_value_changed_in_place_after_recording():
    w, c = T(X23), T(POS, False)
    y = (w * c).sum()
    c.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    y = (w * c).sum()                     # recorded after the change: fine
    y.backward()
    np.testing.assert_allclose(np.asarray(w.grad), 2 * POS, rtol=1e-15)


# ------------------------------------------------------------------------------ cat, stack, dim=


def test_cat_stack_accept_tensors_and_arrays():
    a, b = T(X23), vnp.asarray(POS)
    c = vkml.cat([a, b], dim=0)
    assert isinstance(c, vkml.Tensor) and c.requires_grad and c.shape == (4, 3)
    assert type(vkml.cat([b, b], axis=1)) is vkml.Array and vkml.cat([b, b], 1).shape == (2, 6)
    s = vkml.stack((b, b), dim=1)
    assert s.shape == (2, 2, 3) and np.array_equal(np.asarray(s), np.stack([POS, POS], 1))
    with pytest.raises(TypeError, match="sequence"):
        vkml.cat(a)


def test_functional_takes_dim_beside_axis():
    x = vnp.asarray(X234)
    F = nn.functional
    for f in (F.softmax, F.log_softmax):
        np.testing.assert_array_equal(np.asarray(f(x, dim=1)), np.asarray(f(x, axis=1)))
        np.testing.assert_array_equal(np.asarray(f(x, dim=-1)), np.asarray(f(x)))
        with pytest.raises(TypeError, match="dim= or axis="):
            f(x, axis=1, dim=1)
    np.testing.assert_allclose(np.asarray(F.logsumexp(x, dim=2)),
                               np.log(np.exp(X234).sum(2)), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(F.softmax(x, dim=0)), np_softmax(X234, 0), rtol=1e-13)


def test_norm_at_zero_has_zero_gradient():
    z = T(np.zeros((2, 3)))
    n = z.norm()
    assert float(n) == 0.0
    n.backward()
    np.testing.assert_array_equal(np.asarray(z.grad), np.zeros((2, 3)))
    z.grad = None
    z.norm(dim=1).sum().backward()
    np.testing.assert_array_equal(np.asarray(z.grad), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="norm: p='nuc'"):
        z.norm("nuc")
