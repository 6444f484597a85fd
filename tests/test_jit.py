"""vkml.jit: same values as eager, the trace cache, donation, nesting with grad, module
state, and the memory plan of a deep MLP.

Every jitted function is compared with the same function run eagerly (op by op), so a
wrong compiled program, a stale cache entry or a misplaced buffer shows as a value error.
"""
import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
import vkml.random as vr
from vkml import nn, optim
from vkml.jit import DonatedArrayError, StaticArgumentError
from vkml.nn import functional as F
from vkml.tree_util import tree_leaves, tree_map
from vkml.vulkan import compiled as compiled_mod
from vkml.vulkan.executor import plan
from vkml.vulkan.memory import ALIGN

RNG = np.random.default_rng(5)


@pytest.fixture(params=["copied", "bound"])
def binding(request, monkeypatch):
    """Run a test with every argument and result copied through the compiled slots, then
    with every one bound in place (the path large arrays take)."""
    monkeypatch.setattr(compiled_mod, "DIRECT_MIN", 0 if request.param == "bound" else 1 << 60)
    return request.param


def arr(*shape, dtype=np.float32, lo=-1.0, hi=1.0):
    return vnp.asarray((RNG.uniform(lo, hi, shape)).astype(dtype))


def assert_trees_close(got, want, rtol=1e-5, atol=1e-6):
    g, w = tree_leaves(got), tree_leaves(want)
    assert len(g) == len(w), (len(g), len(w))
    for k, (a, b) in enumerate(zip(g, w)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (k, a.shape, b.shape, a.dtype, b.dtype)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"leaf {k}")


# --------------------------------------------------------------------------- values


def _mlp_loss(p, x):
    h = vnp.tanh(x @ p["w1"] + p["b1"])
    return vnp.mean((h @ p["w2"]) ** 2)


FUNCTIONS = {
    "elementwise": (lambda x: vnp.tanh(2 * x + 1) * vnp.exp(-x) + vnp.sqrt(x + 1.5) - x * x,
                    lambda: (arr(5, 7),)),
    "broadcast_reduce": (lambda x, y: (x[:, None] * y).sum(axis=0) / y.max(),
                         lambda: (arr(4), arr(4, 3, lo=0.5, hi=1.0))),
    "noncontiguous": (lambda x: vnp.exp(x.T[::2]) @ x[:3], lambda: (arr(3, 6),)),
    "grad": (vkml.grad(lambda x: vnp.sum(vnp.sin(x) * x ** 3)), lambda: (arr(6),)),
    "value_and_grad_pytree": (vkml.value_and_grad(_mlp_loss),
                              lambda: ({"w1": arr(3, 5), "b1": arr(5), "w2": arr(5, 2)}, arr(4, 3))),
    "hessian": (vkml.hessian(lambda v: vnp.sum(vnp.sin(v) * v[0]) + vnp.sum(v ** 3)),
                lambda: (arr(3),)),
    "pytree_out": (lambda d: {"s": d["a"].sum(), "t": (d["a"] * d["b"], [d["b"] - 1.0])},
                   lambda: ({"a": arr(2, 3), "b": arr(3)},)),
    "float64": (lambda x: vnp.log1p(x * x) @ x.T, lambda: (arr(3, 4, dtype=np.float64),)),
    "int32": (lambda i, j: vnp.maximum(i * 3 - j, 2) + (i == j), lambda: (vnp.asarray(np.arange(6, dtype=np.int32)),
                                                     vnp.asarray(np.arange(6, 0, -1, dtype=np.int32)))),
    "passthrough_and_const": (lambda x, y: (x, y * 2.0, vnp.ones(2)), lambda: (arr(3), arr(2))),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_jit_matches_eager(name, binding):
    f, make = FUNCTIONS[name]
    args = make()
    want = f(*args)
    jf = vkml.jit(f)
    tol = dict(rtol=1e-12, atol=1e-12) if name == "float64" else dict(rtol=1e-5, atol=1e-6)
    assert_trees_close(jf(*args), want, **tol)
    assert_trees_close(jf(*args), want, **tol)        # the replayed recording, too
    assert jf.trace_count == 1


def test_replay_sees_new_values():
    """A replay copies the new arguments in: it must not return the first call's results."""
    jf = vkml.jit(lambda x, y: vnp.exp(x) * y)
    for _ in range(3):
        x, y = arr(4, 3), arr(3)
        np.testing.assert_allclose(jf(x, y).numpy(), np.exp(x.numpy()) * y.numpy(), rtol=1e-6)
    assert jf.trace_count == 1


def test_python_scalar_argument_is_dynamic():
    jf = vkml.jit(lambda x, s: x * s)
    x = arr(3)
    np.testing.assert_allclose(jf(x, 2.0).numpy(), 2 * x.numpy(), rtol=1e-6)
    np.testing.assert_allclose(jf(x, 3.0).numpy(), 3 * x.numpy(), rtol=1e-6)
    assert jf.trace_count == 1


# --------------------------------------------------------------------------- the trace cache


def test_identical_signature_does_not_retrace():
    jf = vkml.jit(lambda d: d["x"] * 2 + d["y"].sum())
    for _ in range(4):
        jf({"x": arr(2, 3), "y": arr(5)})
    assert jf.trace_count == 1
    assert len(jf.cache) == 1


def test_new_shape_dtype_or_structure_retraces():
    jf = vkml.jit(lambda x: x * 2)
    jf(arr(3))
    jf(arr(3))
    assert jf.trace_count == 1
    jf(arr(4))                                   # new shape
    assert jf.trace_count == 2
    out = jf(arr(4, dtype=np.float64))           # new dtype
    assert jf.trace_count == 3 and out.dtype == np.float64
    jf(arr(3))                                   # back to the first signature: cached
    assert jf.trace_count == 3
    jg = vkml.jit(lambda t: sum(tree_leaves(t)))
    jg((arr(2), arr(2)))
    jg([arr(2), arr(2)])                         # same leaves, other container: retraces
    jg({"a": arr(2), "b": arr(2)})
    assert jg.trace_count == 3


def test_static_args_key_the_cache():
    calls = []

    def f(x, n, mode):
        if x.is_traced:
            calls.append((n, mode))
        y = x
        for _ in range(n):
            y = vnp.sin(y) if mode == "sin" else vnp.cos(y)
        return y

    jf = vkml.jit(f, static_argnums=(1, 2))
    x = arr(5)
    for n, mode in [(2, "sin"), (2, "sin"), (3, "sin"), (2, "cos"), (3, "sin"), (2, "cos")]:
        np.testing.assert_allclose(jf(x, n, mode).numpy(), f(x, n, mode).numpy(), rtol=1e-6)
    assert jf.trace_count == 3
    assert calls == [(2, "sin"), (3, "sin"), (2, "cos")]
    neg = vkml.jit(f, static_argnums=(-2, -1))   # negative static positions name the same args
    neg(x, 2, "sin")
    neg(x, 2, "sin")
    assert neg.trace_count == 1
    with pytest.raises(TypeError, match="static argument 1 .*not hashable"):
        vkml.jit(lambda x, a: x, static_argnums=1)(x, [1, 2])


def test_module_config_is_static():
    """A module's configuration (here the training flag) is part of the signature."""
    bn = nn.BatchNorm2d(2)
    x = arr(3, 2, 2, 2)
    jf = vkml.jit(lambda m, x: m(x))
    jf(bn, x)
    bn.eval()
    np.testing.assert_allclose(jf(bn, x).numpy(), bn(x).numpy(), rtol=1e-5, atol=1e-6)
    assert jf.trace_count == 2


# --------------------------------------------------------------------------- donation


def test_donated_input_cannot_be_read(binding):
    jf = vkml.jit(lambda a, b: a * 2 + b, donate_argnums=0)
    a, b = arr(4), arr(4)
    an, bn_ = a.numpy(), b.numpy()
    out = jf(a, b)
    np.testing.assert_allclose(out.numpy(), 2 * an + bn_, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), bn_)    # not donated: intact
    for use in (lambda: a.numpy(), lambda: a + 1, lambda: float(a.sum()), lambda: jf(a, b), repr):
        with pytest.raises(DonatedArrayError, match=r"float32\[4\]\) was donated"):
            use() if use is not repr else repr(a)
    assert issubclass(DonatedArrayError, RuntimeError)


def test_plain_array_calls_take_the_fast_path_and_keep_every_check(binding):
    """Calls whose arguments are all concrete Arrays skip pytree handling once compiled;
    they must still neither re-trace, nor accept a donated array, nor run eagerly inside
    another transform."""
    jf = vkml.jit(lambda a, b: (a * b, a - b))
    a, b = arr(5), arr(5)
    for _ in range(3):
        p, m = jf(a, b)
        np.testing.assert_allclose(p.numpy(), a.numpy() * b.numpy(), rtol=1e-6)
        np.testing.assert_allclose(m.numpy(), a.numpy() - b.numpy(), rtol=1e-6)
    assert jf.trace_count == 1
    assert jf._plain                      # the fast path's cache was filled
    jf(arr(6), arr(6))                    # a new shape still traces
    assert jf.trace_count == 2
    step = vkml.jit(lambda a: a * 2, donate_argnums=0)
    c = arr(5)
    step(c)
    with pytest.raises(DonatedArrayError):
        jf(c, b)
    # inside grad, a concrete array as argument: jit is traced into the enclosing graph
    g = vkml.grad(lambda s: (jf(a, b)[0] * s).sum())(vnp.asarray(np.float32(2.0)))
    np.testing.assert_allclose(float(g), float((a.numpy() * b.numpy()).sum()), rtol=1e-5)


def test_donated_buffer_never_clobbers_another_output(binding):
    """An input returned unchanged keeps its buffer even when donated; the same array given
    twice is not taken over as an output buffer."""
    jf = vkml.jit(lambda a, b: (a, a + b, b * 3), donate_argnums=(0, 1))
    a, b = arr(3), arr(3)
    an, bn_ = a.numpy(), b.numpy()
    r0, r1, r2 = jf(a, b)
    np.testing.assert_allclose(r0.numpy(), an)
    np.testing.assert_allclose(r1.numpy(), an + bn_, rtol=1e-6)
    np.testing.assert_allclose(r2.numpy(), 3 * bn_, rtol=1e-6)
    jg = vkml.jit(lambda a, b: (a * 2, b + 1), donate_argnums=0)
    c = arr(3)
    cn = c.numpy()
    r0, r1 = jg(c, c)                             # donated and passed again, undonated
    np.testing.assert_allclose(r0.numpy(), 2 * cn, rtol=1e-6)
    np.testing.assert_allclose(r1.numpy(), cn + 1, rtol=1e-6)
    np.testing.assert_allclose(c.numpy(), cn)      # still readable: it was also undonated


def _train_setup():
    model = nn.Sequential(nn.Linear(6, 16, key=vr.key(1)), nn.ReLU(), nn.Linear(16, 3, key=vr.key(2)))
    opt = optim.sgd(0.1, momentum=0.9)
    x = arr(8, 6)
    y = vnp.asarray(RNG.integers(0, 3, 8).astype(np.int32))

    def step(model, state, x, y):
        loss, g = vkml.value_and_grad(lambda m: F.cross_entropy(m(x), y))(model)
        upd, state = opt.update(g, state, model)
        return optim.apply_updates(model, upd), state, loss
    return model, opt, x, y, step


def test_donated_training_step_matches_undonated_and_eager(binding):
    model, opt, x, y, step = _train_setup()
    w0 = model[0].weight.numpy()
    runs = {}
    for name, f in [("eager", step), ("jit", vkml.jit(step)),
                    ("donated", vkml.jit(step, donate_argnums=(0, 1)))]:
        m, s = tree_map(lambda a: a * 1.0, model), opt.init(model)   # fresh arrays to give up
        losses = []
        for _ in range(4):
            old = tree_leaves((m, s))
            m, s, loss = f(m, s, x, y)
            losses.append(float(loss))
        if name == "donated":
            assert f.trace_count == 1
            with pytest.raises(DonatedArrayError):
                old[0].numpy()
        runs[name] = (m, s, losses)
    for name in ("jit", "donated"):
        assert_trees_close(runs[name][0], runs["eager"][0])
        assert_trees_close(runs[name][1], runs["eager"][1])
        np.testing.assert_allclose(runs[name][2], runs["eager"][2], rtol=1e-5)
    assert runs["eager"][2][-1] < runs["eager"][2][0]          # it trains
    np.testing.assert_array_equal(model[0].weight.numpy(), w0)   # the copies were donated


def test_transfer_commands_path(monkeypatch, binding):
    """Device-local memory (a GPU) is copied with transfer commands submitted with the
    recording; lavapipe's memory is host-mapped, so force that path here."""
    monkeypatch.setattr(compiled_mod, "_split_copies", lambda pairs: ([], [p for p in pairs if p[2]]))
    model, opt, x, y, step = _train_setup()
    m, s = tree_map(lambda a: a * 1.0, model), opt.init(model)
    me, se = tree_map(lambda a: a * 1.0, model), opt.init(model)
    js = vkml.jit(step, donate_argnums=(0, 1))
    for _ in range(2):
        m, s, loss = js(m, s, x, y)
        me, se, le = step(me, se, x, y)
        np.testing.assert_allclose(float(loss), float(le), rtol=1e-5)
    assert_trees_close(m, me)
    r0, r1 = vkml.jit(lambda a: (a, a * 2))(x)          # passthrough, no transfers of it
    np.testing.assert_allclose(r1.numpy(), 2 * x.numpy(), rtol=1e-6)
    assert r0 is x
    assert float(vkml.jit(lambda: vnp.ones(3).sum())()) == 3.0


def _chain(v):
    return vnp.tanh(2 * v + 1) * vnp.exp(-v) + vnp.sqrt(v + 1) - v * v


def _chain_np(v):
    v = v.astype(np.float64)
    return np.tanh(2 * v + 1) * np.exp(-v) + np.sqrt(v + 1) - v * v


def test_large_arrays_are_bound_and_the_recording_replayed():
    """A steady loop on large arrays replays one recording: the argument is bound where it
    lies and each result, freed before the next call, leaves its range to the next one."""
    x = arr(1 << 15, lo=0, hi=1)          # 128 KiB: bound, not copied
    f = vkml.jit(_chain)
    for _ in range(6):
        y = f(x)
        np.testing.assert_allclose(y.numpy(), _chain_np(x.numpy()), rtol=2e-6, atol=1e-6)
        del y
    c = f._entry((x,))[0][0]
    assert c.direct and c.misses <= 2 and not c.slots, (c.direct, c.misses, c.slots)


@pytest.mark.parametrize("rebind", [0, 4])
def test_bound_results_held_by_the_caller_stay_distinct(monkeypatch, rebind):
    """Results kept alive and fresh arguments each call make a new binding every call: each
    result is still its own, and after a few such calls a signature of more than
    REBIND_DISPATCHES dispatches copies instead; a smaller one keeps binding."""
    from vkml.vulkan import compiled
    monkeypatch.setattr(compiled, "REBIND_DISPATCHES", rebind)
    f = vkml.jit(lambda v: (v * 2.0, v.sum()))
    xs, outs = [], []
    for k in range(3 * 4 + 4):
        xs.append(arr(1 << 15))
        outs.append(f(xs[-1]))
    for x, (d, s) in zip(xs, outs):
        np.testing.assert_allclose(d.numpy(), 2 * x.numpy(), rtol=1e-6)
        np.testing.assert_allclose(float(s), x.numpy().astype(np.float64).sum(), rtol=1e-4, atol=1e-3)
    c = f._entry((xs[0],))[0][0]
    assert c.direct == (len(c.lowered.dispatches) <= rebind) and len(c.recordings) <= 4


def test_bound_and_copied_arguments_mix():
    """A large array is bound while a small one (a fresh Python scalar) is copied, so the
    scalar changing every call does not make a new recording."""
    x = arr(1 << 15)
    f = vkml.jit(lambda v, s: v * s)
    for k in range(5):
        y = f(x, float(k))
        np.testing.assert_allclose(y.numpy(), x.numpy() * k, rtol=1e-6)
        del y
    c = f._entry((x, 1.0))[0][0]
    assert c.misses <= 2 and c.direct


# --------------------------------------------------------------------------- nesting


def test_jit_inside_grad():
    g = lambda x: vnp.sum(vnp.exp(x) * vnp.sin(x))
    jg = vkml.jit(g)
    x = arr(5)
    assert_trees_close(vkml.grad(jg)(x), vkml.grad(g)(x))
    assert_trees_close(vkml.grad(vkml.grad(lambda s: jg(x * s)))(vnp.asarray(0.7)),
                       vkml.grad(vkml.grad(lambda s: g(x * s)))(vnp.asarray(0.7)), rtol=1e-4)
    # jit of a function that calls a jitted function, all inside grad
    outer = vkml.jit(lambda x: jg(x) * 2.0)
    assert_trees_close(vkml.grad(outer)(x), vkml.grad(lambda x: g(x) * 2.0)(x))
    assert_trees_close(vkml.jit(vkml.grad(outer))(x), vkml.grad(lambda x: g(x) * 2.0)(x))


def test_grad_inside_jit():
    f = lambda w, x: vnp.sum(vnp.tanh(x @ w) ** 2)
    w, x = arr(3, 2), arr(4, 3)
    jg = vkml.jit(vkml.grad(f, argnums=(0, 1)))
    assert_trees_close(jg(w, x), vkml.grad(f, argnums=(0, 1))(w, x))
    # a Python loop of grad steps, compiled as one program
    def descend(w, x):
        for _ in range(3):
            w = w - 0.1 * vkml.grad(f)(w, x)
        return w
    assert_trees_close(vkml.jit(descend)(w, x), descend(w, x))


def test_jit_under_vjp_and_jvp():
    g = lambda x: vnp.tanh(x) * x
    jg = vkml.jit(g)
    x, t = arr(4), arr(4)
    assert_trees_close(vkml.jvp(jg, (x,), (t,)), vkml.jvp(g, (x,), (t,)))
    y, back = vkml.vjp(jg, x)
    assert_trees_close(back(t), vkml.vjp(g, x)[1](t))


# --------------------------------------------------------------------------- module state


def _bn_net():
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, key=vr.key(3)), nn.BatchNorm2d(3), nn.ReLU())


def _bn_step(model, x):
    """A pure training step: the forward pass's running statistics come back in the aux
    model, which the update is applied to."""
    (loss, new), g = vkml.value_and_grad(lambda m: (vnp.mean(m(x) ** 2), m), has_aux=True)(model)
    return optim.apply_updates(new, tree_map(lambda a: -0.05 * a, g)), loss


def _stats(m):
    return [np.asarray(v).copy() for v in m.buffers()]


def test_batchnorm_running_stats_in_jitted_train_step():
    x = arr(4, 2, 5, 5)
    eager, jitted = _bn_net(), _bn_net()
    js = vkml.jit(_bn_step)
    for _ in range(3):
        before = _stats(jitted)
        eager, le = _bn_step(eager, x)
        old, (jitted, lj) = jitted, js(jitted, x)
        np.testing.assert_allclose(float(lj), float(le), rtol=1e-5)
        for a, b in zip(_stats(old), before):     # the argument is left as it was
            assert np.array_equal(a, b)
    assert js.trace_count == 1
    for name in ("running_mean", "running_var"):
        got, want = getattr(jitted[1], name), getattr(eager[1], name)
        assert got._trace is None
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    assert not np.allclose(jitted[1].running_var.numpy(), 1.0)     # it did move


def test_state_comes_back_with_each_calls_model():
    """One compiled signature serves two models of the same structure: each call returns
    that call's model with its own new running statistics, and changes neither argument."""
    x1, x2 = arr(4, 3, 2, 2), arr(4, 3, 2, 2, lo=1.0, hi=3.0)
    a, b = nn.BatchNorm2d(3), nn.BatchNorm2d(3)
    ra, rb = nn.BatchNorm2d(3), nn.BatchNorm2d(3)
    jf = vkml.jit(lambda m, x: (m(x).sum(), m))
    _, na = jf(a, x1)
    _, nb = jf(b, x2)
    assert jf.trace_count == 1
    ra(x1), rb(x2)      # eagerly the module is updated in place, as in PyTorch
    for got, want, arg in ((na, ra, a), (nb, rb, b)):
        np.testing.assert_allclose(got.running_mean.numpy(), want.running_mean.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got.running_var.numpy(), want.running_var.numpy(), rtol=1e-5, atol=1e-6)
        assert np.all(arg.running_mean.numpy() == 0) and np.all(arg.running_var.numpy() == 1)


def test_state_of_jit_nested_in_grad():
    x = arr(4, 3, 2, 2)
    a, ref = nn.BatchNorm2d(3), nn.BatchNorm2d(3)
    inner = vkml.jit(lambda m, x: (vnp.sum(m(x) ** 2), m))
    g, new = vkml.grad(inner, has_aux=True)(a, x)
    gr, want = vkml.grad(lambda m, x: (vnp.sum(m(x) ** 2), m), has_aux=True)(ref, x)
    assert_trees_close(g, gr, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(new.running_mean.numpy(), want.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    assert new.running_mean._trace is None
    assert np.all(a.running_mean.numpy() == 0) and np.all(ref.running_mean.numpy() == 0)


# --------------------------------------------------------------------------- memory plan

L_DEEP = 32
WIDTH = 16          # batch = width: every activation is 16x16 float32, s = 1 KiB (4 ALIGN)
S = WIDTH * WIDTH * 4


def _deep_mlp(L):
    rng = np.random.default_rng(9)
    params = [(vnp.asarray(rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) * 0.25),
               vnp.asarray(rng.standard_normal(WIDTH, dtype=np.float32) * 0.1)) for _ in range(L)]
    x = vnp.asarray(rng.standard_normal((WIDTH, WIDTH), dtype=np.float32))
    return params, x


def _forward(params, x):
    h = x
    for w, b in params:
        h = vnp.tanh(h @ w + b)
    return h


def _loss(params, x):
    h = _forward(params, x)
    return vnp.sum(h * h)


def _rounded(nbytes):
    return -(-max(nbytes, 4) // ALIGN) * ALIGN


def _param_bytes(params):
    return sum(_rounded(a.size * 4) for a in tree_leaves(params))


def test_memory_plan_forward_two_largest_layers():
    """Forward pass of a 32-layer tanh MLP, batch = width = 16: every value is s = 1 KiB.

    Bound proved: peak_bytes <= params + x + h_L + S_a + S_b, where S_a, S_b are the two
    largest layers' live sets, a layer's live set being the bytes of the values it creates
    (x@W, +b, tanh: 3s each). Proof: while layer l runs, the only live intermediates are
    layer l's own values and its input h_{l-1}, a value of layer l-1 (nothing earlier is
    read again), so at most S_l + S_{l-1} bytes are live; and since every intermediate has
    the same size, first-fit placement puts each at a multiple of s and never fragments,
    so the arena is the most bytes live at once. (Fusion only removes values from the
    arena: x@W+b and tanh fused keep fewer than three of a layer's values.)
    """
    params, x = _deep_mlp(L_DEEP)
    lo = vkml.jit(_forward).lower(params, x)
    p = plan(lo.graph)
    assert lo.peak_bytes == lo.arena_bytes + p.input_bytes + p.output_bytes
    assert p.input_bytes == _param_bytes(params) + S and p.output_bytes == S
    bound = _param_bytes(params) + S + S + 2 * (3 * S)
    assert lo.peak_bytes <= bound, (lo.peak_bytes, bound, lo.arena_bytes)


_FB_REASON = (
    "the executor runs nodes in Graph order, a DFS from the outputs taken in output order "
    "(loss, dW_1, db_1, dW_2, ...): dW_1 pulls in the whole cotangent chain down from layer "
    "32 before any other dW_l is computed, so every layer's cotangent (kept for its own dW_l) "
    "is live at once beside every saved activation: arena about 65 s against a bound of about "
    "40 s (67 s and 41 s before fusion). The same graph with its outputs visited last layer "
    "first plans to about 35 s (test_memory_plan_bound_is_reachable).")


def _fb_bound():
    """(arena bound, peak bound) of the forward+backward test, and the Lowering."""
    one = vkml.jit(vkml.value_and_grad(_loss)).lower(*_deep_mlp(1))
    params, x = _deep_mlp(L_DEEP)
    lo = vkml.jit(vkml.value_and_grad(_loss)).lower(params, x)
    arena = (L_DEEP - 1) * S + 2 * one.arena_bytes
    inputs = _param_bytes(params) + S
    outputs = _param_bytes(params) + ALIGN          # the gradients and the loss
    return arena, inputs + outputs + arena, lo


def test_memory_plan_forward_backward_two_largest_layers():
    """Forward + backward (value_and_grad of sum(h_L^2)) of the 32-layer tanh MLP, s = 1 KiB.

    Bound: peak_bytes <= params + x + (gradients + loss) + (L-1) s + 2 S_1, where S_1 is the
    arena the planner gives the same network with one layer: one layer's whole live set
    (forward, loss, backward). Why it is achievable: the backward reads one forward value
    per layer, its activation h_l (tanh' = 1 - h_l^2, and layer l+1's dW = h_l^T dz), so
    the (L-1) s of h_1..h_{L-1} must all be live when the backward starts; a schedule that
    finishes each layer's backward (cotangent, dW, db) before going down a layer frees
    h_{l-1} and the layer's cotangent as it goes, and at any time holds the working sets of
    at most two layers (the one in progress and the cotangent it was handed), each at most
    S_1. Only the scalar constant differs from s in size, and S_1 includes its fragmentation.
    """
    arena_bound, bound, lo = _fb_bound()
    assert lo.arena_bytes <= arena_bound, (lo.arena_bytes / S, arena_bound / S)
    assert lo.peak_bytes <= bound


# --------------------------------------------------------------------------- static names, keywords


def _steps(x, n, mode="sin"):
    seen = (type(n), mode)
    y = x
    for _ in range(n):
        y = vnp.sin(y) if mode == "sin" else vnp.cos(y)
    return y, seen


def _steps_np(x, n, mode="sin"):
    for _ in range(n):
        x = np.sin(x) if mode == "sin" else np.cos(x)
    return x


def test_static_argnames_by_name_and_by_position():
    calls = []

    def f(x, n, mode="sin"):
        y, seen = _steps(x, n, mode)
        calls.append(seen)
        return y
    x = arr(4, dtype=np.float64)
    jf = vkml.jit(f, static_argnames=("n", "mode"))
    assert jf.static_argnums == (1, 2) and jf.static_argnames == ("mode", "n")
    for args, kw in [((x,), dict(n=2)), ((x,), dict(n=2)), ((x,), dict(n=3, mode="cos")),
                     ((x, 3), dict(mode="cos")), ((x, 3, "cos"), {}), ((x, 3, "cos"), {})]:
        full = dict(zip(("n", "mode"), args[1:]), **kw)
        np.testing.assert_allclose(jf(*args, **kw).numpy(), _steps_np(x.numpy(), **full), rtol=1e-14)
    # one trace per distinct way of passing the static values (as JAX: by name and by
    # position are different signatures), none for a repeated one
    assert jf.trace_count == 4
    assert calls == [(int, "sin"), (int, "cos"), (int, "cos"), (int, "cos")]
    # static_argnums alone: the parameter is static when passed by name too
    jn = vkml.jit(f, static_argnums=(1, -1))
    assert jn.static_argnums == (1, 2) and jn.static_argnames == ("mode", "n")
    np.testing.assert_allclose(jn(x, n=2, mode="cos").numpy(), _steps_np(x.numpy(), 2, "cos"), rtol=1e-14)
    # decorator form
    jd = vkml.jit(static_argnames="n")(lambda x, n: x * n if n > 1 else x)
    np.testing.assert_allclose(jd(x, n=3).numpy(), 3 * x.numpy(), rtol=1e-15)


def test_static_values_key_the_cache_by_type_and_value():
    seen = []

    def f(x, n):
        seen.append(type(n))
        return x * n
    jf = vkml.jit(f, static_argnums=1)
    x = arr(3)
    jf(x, 2), jf(x, 2.0), jf(x, True), jf(x, 2)
    assert seen == [int, float, bool] and jf.trace_count == 3


def test_keyword_arguments_are_traced_unless_static():
    def f(x, y=None, s=1.0, *, k):
        return x * y + s * k
    jf = vkml.jit(f)
    x, y, k = arr(3), arr(3), arr(3)
    for s in (1.0, 2.5, -1.0):       # a new value of a traced Python float does not retrace
        np.testing.assert_allclose(jf(x, y=y, s=s, k=k).numpy(), x.numpy() * y.numpy() + s * k.numpy(),
                                   rtol=1e-6)
    assert jf.trace_count == 1
    jf(x, y=y, s=1.0, k=arr(4, 3))   # a new shape of a keyword argument: traced again
    assert jf.trace_count == 2
    np.testing.assert_allclose(jf(x, y, k=k).numpy(), x.numpy() * y.numpy() + k.numpy(), rtol=1e-6)
    # a keyword argument used in Python control flow must be static by name
    g = lambda x, *, n: x * n if n > 2 else x     # noqa: E731
    with pytest.raises(vkml.ConcretizationError, match="mark the argument static"):
        vkml.jit(g)(x, n=3)
    np.testing.assert_allclose(vkml.jit(g, static_argnames="n")(x, n=3).numpy(), 3 * x.numpy(), rtol=1e-6)
    # keyword arguments reach lower() and profile() too
    assert vkml.jit(f).lower(x, y=y, k=k).kernel_count >= 1


def test_python_scalars_traced_as_jax_weak_types_give_eager_dtypes():
    """A non-static Python scalar is traced as a 0-d int32/float32/bool array. On vkml's
    dtypes (bool < int32 < float32 < float64) that gives every result the dtype JAX's weak
    typing gives, which is what eager vkml computes: checked against eager per pair."""
    ops = [lambda a, s: a * s, lambda a, s: a + s, lambda a, s: s - a, lambda a, s: vnp.maximum(a, s)]
    arrays = [vnp.asarray(np.array([1, 0], np.int32)), vnp.asarray(np.array([True, False])),
              arr(2), arr(2, dtype=np.float64)]
    for op in ops:
        jop = vkml.jit(op)
        for x in arrays:
            for s in (2, 1.5, True):
                if x.dtype == np.bool_ and s is True and op is ops[2]:
                    continue   # bool minus bool is refused eagerly and under jit alike
                want, got = op(x, s), jop(x, s)
                assert got.dtype == want.dtype, (x.dtype, type(s), got.dtype, want.dtype)
                np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert vkml.jit(lambda s: s)(3).dtype == np.int32
    assert vkml.jit(lambda s: s)(3.0).dtype == np.float32


def test_static_argument_errors():
    x = arr(3)
    for call in (lambda: vkml.jit(lambda x, a: x, static_argnums=1)(x, [1, 2]),
                 lambda: vkml.jit(lambda x, a: x, static_argnames="a")(x, a={"k": 1})):
        with pytest.raises(StaticArgumentError, match=r"jit: static argument (1|'a') of type (list|dict) is "
                                                      r"not hashable .*must be hashable") as e:
            call()
        assert isinstance(e.value, TypeError) and isinstance(e.value, ValueError)   # JAX: ValueError
    with pytest.raises(ValueError, match=r"static_argnums=\(2,\), but <lambda> takes 2 positional"):
        vkml.jit(lambda x, n: x, static_argnums=2)
    with pytest.raises(TypeError, match="static_argnames must be a str"):
        vkml.jit(lambda x, n: x, static_argnames=(1,))
    # a function of *args: positions are counted per call, negative ones from its end
    js = vkml.jit(lambda *xs: xs[0] * xs[-1] if xs[-1] > 1 else xs[0], static_argnums=-1)
    np.testing.assert_allclose(js(x, 3).numpy(), 3 * x.numpy(), rtol=1e-6)
    np.testing.assert_allclose(js(x, x, 0).numpy(), x.numpy(), rtol=1e-6)


def test_static_compositions_with_grad_and_vmap():
    f = lambda x, n: vnp.sum(_steps(x, n)[0] ** 2)          # noqa: E731
    x = arr(4, dtype=np.float64)
    xv = x.numpy()

    def grad_np(n, xv=xv):     # d/dx sum(sin^n(x)^2), by the chain rule down the n sines
        y, d = xv, np.ones_like(xv)
        for _ in range(n):
            d, y = d * np.cos(y), np.sin(y)
        return 2 * y * d
    jg = vkml.jit(vkml.grad(f), static_argnums=1)
    for n in (1, 3, 1):
        np.testing.assert_allclose(jg(x, n).numpy(), grad_np(n), rtol=1e-13)
    assert jg.trace_count == 2
    np.testing.assert_allclose(vkml.grad(vkml.jit(f, static_argnums=1))(x, 3).numpy(), grad_np(3), rtol=1e-13)
    np.testing.assert_allclose(vkml.grad(vkml.jit(f, static_argnames="n"))(x, n=2).numpy(), grad_np(2),
                               rtol=1e-13)
    jv = vkml.jit(lambda xs, n: vkml.vmap(vkml.grad(f), in_axes=(0, None))(xs, n), static_argnames="n")
    xs = arr(3, 4, dtype=np.float64)
    got = jv(xs, n=2).numpy()
    for r in range(3):
        np.testing.assert_allclose(got[r], grad_np(2, xs.numpy()[r]), rtol=1e-13)
