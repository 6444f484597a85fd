"""vkml.optim against the published update formulas (NumPy reimplementations), 5 steps each."""
import math

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml import optim
from vkml.tree_util import tree_map

F64 = np.float64
RNG = np.random.default_rng(11)
C = {"w": RNG.random((2, 3)) + 0.5, "b": RNG.random(3) + 0.5}
D = {"w": RNG.standard_normal((2, 3)), "b": RNG.standard_normal(3)}
P0 = {"w": RNG.standard_normal((2, 3)), "b": RNG.standard_normal(3)}


def loss(p):
    """sum(c p^2 / 2 + d p): gradient c p + d."""
    return sum(((vnp.asarray(C[k]) * p[k] * p[k]) * 0.5 + vnp.asarray(D[k]) * p[k]).sum() for k in p)


def np_grad(p):
    return {k: C[k] * p[k] + D[k] for k in p}


def run(opt, steps=5, params=None):
    params = tree_map(lambda a: vnp.asarray(a), P0 if params is None else params)
    state = opt.init(params)
    for _ in range(steps):
        g = vkml.grad(loss)(params)
        upd, state = opt.update(g, state, params)
        params = optim.apply_updates(params, upd)
    return {k: np.asarray(v) for k, v in params.items()}, state


def close(got, want, rtol=1e-11, atol=1e-13):
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, err_msg=k)


# --------------------------------------------------------------------------- references

def ref_adam(lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, steps=5, mask=None, lr_at=None):
    p = {k: v.copy() for k, v in P0.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    for t in range(1, steps + 1):
        g = np_grad(p)
        rate = lr if lr_at is None else lr_at(t - 1)
        for k in p:
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
            mh, vh = m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)
            u = mh / (np.sqrt(vh) + eps)
            if wd and (mask is None or mask[k]):
                u = u + wd * p[k]
            p[k] = p[k] - rate * u
    return p


def ref_sgd(lr, momentum=0.0, nesterov=False, steps=5):
    p = {k: v.copy() for k, v in P0.items()}
    buf = {k: np.zeros_like(v) for k, v in p.items()}
    for _ in range(steps):
        g = np_grad(p)
        for k in p:
            buf[k] = momentum * buf[k] + g[k]
            d = g[k] + momentum * buf[k] if nesterov else (buf[k] if momentum else g[k])
            p[k] = p[k] - lr * d
    return p


# --------------------------------------------------------------------------- pure optimisers

def test_adam_matches_formula():
    got, state = run(optim.adam(0.05, b1=0.8, b2=0.99, eps=1e-6))
    close(got, ref_adam(0.05, 0.8, 0.99, 1e-6))
    assert int(state[0].count) == 5 and state[0].count.dtype == np.int32


def test_adamw_matches_formula_with_and_without_mask():
    close(run(optim.adamw(0.05, weight_decay=0.1))[0], ref_adam(0.05, wd=0.1))
    mask = {"w": True, "b": False}
    close(run(optim.adamw(0.05, weight_decay=0.1, mask=mask))[0], ref_adam(0.05, wd=0.1, mask=mask))
    close(run(optim.adamw(0.05, weight_decay=0.1, mask=lambda p: {"w": False, "b": True}))[0],
          ref_adam(0.05, wd=0.1, mask={"w": False, "b": True}))


@pytest.mark.parametrize("momentum,nesterov", [(0.0, False), (0.9, False), (0.9, True)])
def test_sgd_matches_formula(momentum, nesterov):
    close(run(optim.sgd(0.1, momentum=momentum, nesterov=nesterov))[0], ref_sgd(0.1, momentum, nesterov))


def test_float32_params_stay_float32():
    p32 = {k: v.astype(np.float32) for k, v in P0.items()}
    got, _ = run(optim.adam(0.05), params=p32)
    assert all(v.dtype == np.float32 for v in got.values())
    close(got, ref_adam(0.05), rtol=2e-5, atol=2e-6)


def test_schedule_as_learning_rate():
    sched = optim.warmup_cosine_decay_schedule(0.0, 0.1, 2, 6, end_value=0.01)
    got, _ = run(optim.adam(sched))
    close(got, ref_adam(None, lr_at=lambda c: float(sched(c))), rtol=1e-6, atol=1e-7)
    got, _ = run(optim.sgd(optim.cosine_decay_schedule(0.1, 4)))
    p = {k: v.copy() for k, v in P0.items()}
    for t in range(5):
        lr = 0.1 * 0.5 * (1 + math.cos(math.pi * min(t, 4) / 4))
        g = np_grad(p)
        p = {k: p[k] - lr * g[k] for k in p}
    close(got, p, rtol=1e-6, atol=1e-7)


def test_schedules():
    cos = optim.cosine_decay_schedule(2.0, 10, alpha=0.1)
    for c in (0, 3, 10, 15):
        want = 2.0 * (0.9 * 0.5 * (1 + math.cos(math.pi * min(c, 10) / 10)) + 0.1)
        assert float(cos(c)) == pytest.approx(want, rel=1e-6, abs=1e-7)
    w = optim.warmup_cosine_decay_schedule(0.1, 1.0, 4, 14, end_value=0.2)
    for c, want in [(0, 0.1), (2, 0.55), (4, 1.0), (9, 0.2 + 0.8 * 0.5), (14, 0.2), (20, 0.2)]:
        assert float(w(vnp.asarray(c))) == pytest.approx(want, rel=1e-6), c
    assert float(optim.constant_schedule(0.3)(7)) == pytest.approx(0.3)
    assert float(optim.linear_schedule(1.0, 0.0, 4, transition_begin=2)(4)) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="decay_steps"):
        optim.warmup_cosine_decay_schedule(0.0, 1.0, 5, 5)


def test_update_traces_without_concrete_values():
    """Schedules and step counts are device values: the whole update traces (jit-ready)."""
    opt = optim.chain(optim.clip_by_global_norm(1.0),
                      optim.adamw(optim.warmup_cosine_decay_schedule(0.0, 0.1, 2, 10)))
    params = tree_map(vnp.asarray, P0)
    state = opt.init(params)
    g = vkml.make_graph(lambda gr, st, p: opt.update(gr, st, p), params, state, params)
    assert len(g.outputs) == 2 + 1 + 2 + 2 + 1     # updates, adam count, mu, nu, schedule count


def test_clip_by_global_norm_and_chain():
    g = {"a": vnp.asarray(np.array([3.0, 0.0])), "b": vnp.asarray(np.array([[4.0]]))}
    clipped, _ = optim.clip_by_global_norm(1.0).update(g, optim.clip_by_global_norm(1.0).init(g))
    np.testing.assert_allclose(np.asarray(clipped["a"]), [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(clipped["b"]), [[0.8]], rtol=1e-6)
    same, _ = optim.clip_by_global_norm(10.0).update(g, None)
    np.testing.assert_array_equal(np.asarray(same["a"]), [3.0, 0.0])
    assert float(optim.global_norm(g)) == pytest.approx(5.0)
    opt = optim.chain(optim.clip_by_global_norm(1.0), optim.sgd(0.5))
    params = {"a": vnp.zeros(2), "b": vnp.zeros((1, 1))}
    upd, state = opt.update(g, opt.init(params), params)
    np.testing.assert_allclose(np.asarray(upd["a"]), [-0.3, 0.0], rtol=1e-6)
    assert isinstance(state, tuple) and len(state) == 2
    zero = {"a": vnp.zeros(2)}
    z, _ = optim.clip_by_global_norm(1.0).update(zero, None)
    assert np.all(np.asarray(z["a"]) == 0)                    # no nan from a zero norm


def test_pure_optimiser_errors():
    with pytest.raises(ValueError, match="needs params"):
        opt = optim.adamw(0.1)
        opt.update({"w": vnp.ones(2)}, opt.init({"w": vnp.ones(2)}))
    with pytest.raises(ValueError, match="nesterov"):
        optim.sgd(0.1, nesterov=True)


# --------------------------------------------------------------------------- stateful (PyTorch)

class Param:
    """The parameter protocol the stateful optimisers use (vkml.Tensor provides it)."""

    def __init__(self, a):
        self.value, self.grad = vnp.asarray(a), None

    def detach(self):
        return self.value

    def _set_value(self, a):
        self.value = a


def run_stateful(make, steps=5, grad_for=("w", "b")):
    ps = {k: Param(v) for k, v in P0.items()}
    opt = make([ps["w"], ps["b"]])
    for _ in range(steps):
        g = np_grad({k: np.asarray(p.value) for k, p in ps.items()})
        opt.zero_grad()
        assert ps["w"].grad is None
        for k in grad_for:
            ps[k].grad = vnp.asarray(g[k])
        opt.step()
    return {k: np.asarray(p.value) for k, p in ps.items()}


def torch_sgd(lr, momentum=0.0, dampening=0.0, wd=0.0, nesterov=False, steps=5):
    p = {k: v.copy() for k, v in P0.items()}
    buf = {}
    for _ in range(steps):
        g = np_grad(p)
        for k in p:
            d = g[k] + wd * p[k]
            if momentum:
                buf[k] = d.copy() if k not in buf else momentum * buf[k] + (1 - dampening) * d
                d = d + momentum * buf[k] if nesterov else buf[k]
            p[k] = p[k] - lr * d
    return p


def torch_adam(lr, betas=(0.9, 0.999), eps=1e-8, wd=0.0, decoupled=False, steps=5):
    b1, b2 = betas
    p = {k: v.copy() for k, v in P0.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    for t in range(1, steps + 1):
        g = np_grad(p)
        for k in p:
            gk = g[k]
            if decoupled:
                p[k] = p[k] * (1 - lr * wd)
            else:
                gk = gk + wd * p[k]
            m[k] = b1 * m[k] + (1 - b1) * gk
            v[k] = b2 * v[k] + (1 - b2) * gk * gk
            denom = np.sqrt(v[k]) / math.sqrt(1 - b2 ** t) + eps
            p[k] = p[k] - lr / (1 - b1 ** t) * m[k] / denom
    return p


@pytest.mark.parametrize("kw", [dict(), dict(momentum=0.9), dict(momentum=0.8, dampening=0.3, weight_decay=0.1),
                                dict(momentum=0.9, nesterov=True, weight_decay=0.05)],
                         ids=["plain", "momentum", "dampening_wd", "nesterov_wd"])
def test_stateful_sgd(kw):
    got = run_stateful(lambda ps: optim.SGD(ps, lr=0.1, **kw))
    close(got, torch_sgd(0.1, kw.get("momentum", 0.0), kw.get("dampening", 0.0),
                         kw.get("weight_decay", 0.0), kw.get("nesterov", False)))


def test_stateful_adam_and_adamw():
    close(run_stateful(lambda ps: optim.Adam(ps, lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
          torch_adam(0.05, (0.8, 0.99), 1e-6, 0.1))
    close(run_stateful(lambda ps: optim.AdamW(ps, lr=0.05, weight_decay=0.1)),
          torch_adam(0.05, wd=0.1, decoupled=True))


def test_stateful_skips_parameters_without_grad_and_validates():
    got = run_stateful(lambda ps: optim.SGD(ps, lr=0.1), grad_for=("w",))
    np.testing.assert_array_equal(got["b"], P0["b"])
    with pytest.raises(TypeError, match="stateful optimisers update vkml.Tensor parameters"):
        optim.Adam([vnp.ones(2)])
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    p = Param(np.ones(2))
    opt = optim.SGD([p], lr=0.1)
    p.grad = vnp.ones(3)
    with pytest.raises(ValueError, match=r"gradient of shape \(3,\) for a parameter of shape \(2,\)"):
        opt.step()
    opt.param_groups[0]["lr"] = 1.0                # PyTorch-style learning-rate change
    p.grad = vnp.ones(2)
    assert opt.step(closure=lambda: 42) == 42
    assert np.asarray(p.value).tolist() == [0.0, 0.0]


def test_stateful_adam_with_vkml_tensors():
    ps = {k: vkml.Tensor(v, requires_grad=True) for k, v in P0.items()}
    opt = optim.Adam([ps["w"], ps["b"]], lr=0.05, weight_decay=0.1)
    for _ in range(5):
        opt.zero_grad()
        loss(ps).backward()
        opt.step()
    assert all(p.requires_grad and p.is_leaf for p in ps.values())
    close({k: np.asarray(p) for k, p in ps.items()}, torch_adam(0.05, wd=0.1))


# ------------------------------------------------------------------------------ state_dict / resume

RESUME = [lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.05),
          lambda ps: optim.SGD(ps, lr=0.1, momentum=0.8, dampening=0.3),
          lambda ps: optim.Adam(ps, lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
          lambda ps: optim.AdamW(ps, lr=0.05, weight_decay=0.1)]


def _train(ps, opt, steps):
    for _ in range(steps):
        opt.zero_grad()
        loss(ps).backward()
        opt.step()


def _tensors(values, dtype=np.float32):
    return {k: vkml.Tensor(np.asarray(v, dtype), requires_grad=True) for k, v in values.items()}


@pytest.mark.parametrize("make", RESUME, ids=["sgd_nesterov", "sgd_dampening", "adam", "adamw"])
@pytest.mark.parametrize("via_numpy", [False, True], ids=["arrays", "numpy"])
def test_resume_is_bit_identical(make, via_numpy):
    straight = _tensors(P0)
    _train(straight, make([straight["w"], straight["b"]]), 10)

    first = _tensors(P0)
    opt = make([first["w"], first["b"]])
    _train(first, opt, 5)
    sd = opt.state_dict()
    if via_numpy:            # as a torch state dict converted to NumPy arrives
        sd = {"state": {k: {n: (np.asarray(v) if n != "step" else np.float32(v)) for n, v in st.items()}
                        for k, st in sd["state"].items()},
              "param_groups": [dict(g, params=list(g["params"])) for g in sd["param_groups"]]}
    saved = {k: np.asarray(v) for k, v in first.items()}          # a checkpoint of the model
    _train(first, opt, 1)                      # a later step does not change the saved state
    resumed = _tensors(saved)
    fresh = make([resumed["w"], resumed["b"]])
    fresh.load_state_dict(sd)
    _train(resumed, fresh, 5)
    for k in P0:
        assert np.array_equal(np.asarray(resumed[k]), np.asarray(straight[k])), k
    blank = _tensors(saved)                    # the control: without the state it differs
    _train(blank, make([blank["w"], blank["b"]]), 5)
    assert not np.array_equal(np.asarray(blank["w"]), np.asarray(straight["w"]))


def test_state_dict_layout_and_hyperparameters():
    ps = _tensors(P0)
    opt = optim.Adam([ps["w"], ps["b"]], lr=0.05)
    assert opt.state_dict()["state"] == {}
    _train(ps, opt, 2)
    opt.param_groups[0]["lr"] = 0.01            # a schedule's change is saved and restored
    sd = opt.state_dict()
    assert sorted(sd["state"]) == [0, 1] and sorted(sd["state"][0]) == ["exp_avg", "exp_avg_sq", "step"]
    assert sd["state"][0]["step"] == 2 and sd["state"][1]["exp_avg"].shape == (3,)
    (g,) = sd["param_groups"]
    assert g["params"] == [0, 1] and g["lr"] == 0.01 and g["betas"] == (0.9, 0.999)
    other = optim.Adam(list(_tensors(P0).values()), lr=1.0)
    other.load_state_dict(sd)
    assert other.param_groups[0]["lr"] == 0.01
    sgd = optim.SGD([ps["w"]], lr=0.1, momentum=0.9)
    _train(ps, sgd, 1)
    assert list(sgd.state_dict()["state"][0]) == ["momentum_buffer"]


def test_load_state_dict_errors():
    ps = _tensors(P0)
    opt = optim.Adam([ps["w"], ps["b"]])
    _train(ps, opt, 1)
    sd = opt.state_dict()
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        optim.Adam([_tensors(P0)["w"]]).load_state_dict(sd)
    swapped = _tensors(P0)
    with pytest.raises(ValueError, match=r"'exp_avg' of parameter 0 has shape \(2, 3\), the parameter \(3,\)"):
        optim.Adam([swapped["b"], swapped["w"]]).load_state_dict(sd)
    with pytest.raises(ValueError, match="'state' and 'param_groups'"):
        opt.load_state_dict({"state": {}})


def test_optimizer_state_through_a_checkpoint_file(tmp_path):
    """opt.state_dict() saved with vkml.nn.save and read back with like=: hyperparameters come
    back as Python values, and with float64 parameters and a float32-exact lr the resumed
    run is bit-identical."""
    from vkml import nn
    make = lambda ps: optim.Adam(ps, lr=0.0625, betas=(0.5, 0.75), eps=2.0 ** -20)
    straight = _tensors(P0, np.float64)
    _train(straight, make([straight["w"], straight["b"]]), 6)
    ps = _tensors(P0, np.float64)
    opt = make([ps["w"], ps["b"]])
    _train(ps, opt, 3)
    nn.save(tmp_path / "opt.npz", opt.state_dict())
    nn.save(tmp_path / "model.npz", dict(ps))
    back = _tensors({k: np.asarray(v) for k, v in nn.load(tmp_path / "model.npz").items()}, np.float64)
    fresh = make([back["w"], back["b"]])
    fresh.load_state_dict(nn.load(tmp_path / "opt.npz", like=opt.state_dict()))
    g = fresh.param_groups[0]
    assert type(g["lr"]) is float and g["betas"] == (0.5, 0.75) and type(fresh.state[id(back["w"])]["step"]) is int
    _train(back, fresh, 3)
    for k in P0:
        assert np.array_equal(np.asarray(back[k]), np.asarray(straight[k])), k
