"""The transforms against hand-derived values, the known traps, and the design note's errors."""
import math

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.array import bind
from vkml.trace.ops import OpKind

F64 = np.float64


def f64(x):
    return vnp.asarray(np.asarray(x, F64))


# ------------------------------------------------------------------ hand-derived values

def test_hessian_of_quadratic_form():
    A = np.array([[2.0, 1.0, 0.5], [0.0, 3.0, -1.0], [1.0, 2.0, 4.0]])
    f = lambda x: x @ (f64(A) @ x)
    H = np.asarray(vkml.hessian(f)(f64([0.3, -0.2, 1.0])))
    np.testing.assert_allclose(H, A + A.T, rtol=1e-12)


def test_third_derivative_of_polynomial():
    p = lambda x: 2 * x ** 5 - 3 * x ** 3 + x
    d3 = vkml.grad(vkml.grad(vkml.grad(p)))
    x = 1.3
    assert float(d3(f64(x))) == pytest.approx(120 * x * x - 18, rel=1e-12)


def test_jacfwd_equals_jacrev():
    def f(x):
        return vnp.stack([vnp.sin(x[0]) * x[1], x[0] * x[1] * x[2], vnp.exp(x[2]) - x[0], (x * x).sum()])
    x = f64([0.4, -1.1, 0.7])
    np.testing.assert_allclose(np.asarray(vkml.jacfwd(f)(x)), np.asarray(vkml.jacrev(f)(x)), rtol=1e-12)
    assert vkml.jacrev(f)(x).shape == (4, 3)


def test_pytrees_argnums_and_has_aux():
    def loss(params, x, scale):
        y = vnp.tanh(x @ params["w"] + params["b"])
        return (y * y).sum() * scale, {"y": y}
    p = {"w": f64(np.arange(6).reshape(3, 2) * 0.1), "b": f64([0.1, -0.2])}
    x = f64(np.ones((4, 3)))
    (g_p, g_s), aux = vkml.grad(loss, argnums=(0, 2), has_aux=True)(p, x, f64(2.0))
    assert set(g_p) == {"w", "b"} and g_p["w"].shape == (3, 2) and g_s.shape == ()
    y = np.tanh(np.ones((4, 3)) @ (np.arange(6).reshape(3, 2) * 0.1) + [0.1, -0.2])
    np.testing.assert_allclose(np.asarray(aux["y"]), y, rtol=1e-12)
    dy = 2 * y * (1 - y * y) * 2.0
    np.testing.assert_allclose(np.asarray(g_p["w"]), np.ones((4, 3)).T @ dy, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g_p["b"]), dy.sum(0), rtol=1e-12)
    assert float(g_s) == pytest.approx((y * y).sum(), rel=1e-12)
    v, g = vkml.value_and_grad(lambda p: loss(p, x, 1.0)[0])(p)
    assert float(v) == pytest.approx((y * y).sum(), rel=1e-12)


def test_vjp_jvp_consistency():
    def f(x, y):
        return vnp.sin(x) * y[:3] + vnp.exp(y[3:] * x)
    x, y = f64([0.1, 0.5, -0.3]), f64([1.0, 2.0, -1.0, 0.3, 0.2, 0.1])
    rng = np.random.default_rng(0)
    tx, ty = f64(rng.normal(size=3)), f64(rng.normal(size=6))
    ct = f64(rng.normal(size=3))
    out, back = vkml.vjp(f, x, y)
    cx, cy = back(ct)
    _, tout = vkml.jvp(f, (x, y), (tx, ty))
    lhs = np.vdot(np.asarray(cx), np.asarray(tx)) + np.vdot(np.asarray(cy), np.asarray(ty))
    assert lhs == pytest.approx(float(np.vdot(np.asarray(ct), np.asarray(tout))), rel=1e-12)


# ------------------------------------------------------------------ the known traps

def test_double_where_is_nan_free():
    def f(x):
        safe = vnp.where(x > 0, x, 1.0)
        return vnp.where(x > 0, vnp.sqrt(safe), 0.0).sum()
    g = np.asarray(vkml.grad(f)(f64([0.0, 4.0])))
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, [0.0, 0.25])


def test_logsumexp_with_minus_inf_entries():
    def lse(x):
        m = vkml.stop_gradient(vnp.max(x))
        return vnp.log(vnp.exp(x - m).sum()) + m
    x = f64([0.5, -np.inf, 1.5, -np.inf])
    assert float(lse(x)) == pytest.approx(np.log(np.exp(0.5) + np.exp(1.5)))
    g = np.asarray(vkml.grad(lse)(x))
    e = np.exp([0.5, 1.5]) / np.exp([0.5, 1.5]).sum()
    np.testing.assert_allclose(g, [e[0], 0.0, e[1], 0.0], rtol=1e-12)
    gs = np.asarray(vkml.grad(lambda x: bind(OpKind.LogSoftmax, [x], axis=0)[0])(x))
    assert np.all(np.isfinite(gs))


def test_prod_gradient_with_zeros():
    g = lambda v: np.asarray(vkml.grad(lambda x: vnp.prod(x))(f64(v)))
    np.testing.assert_allclose(g([2.0, 3.0, 4.0]), [12.0, 8.0, 6.0])
    np.testing.assert_allclose(g([2.0, 0.0, 4.0]), [0.0, 8.0, 0.0])
    np.testing.assert_allclose(g([0.0, 3.0, 0.0]), [0.0, 0.0, 0.0])


def test_tie_conventions():
    gmax = np.asarray(vkml.grad(lambda x: vnp.max(x))(f64([1.0, 3.0, 3.0, 2.0])))
    np.testing.assert_allclose(gmax, [0.0, 0.5, 0.5, 0.0])
    ga, gb = vkml.grad(lambda a, b: vnp.maximum(a, b).sum(), argnums=(0, 1))(f64([1.0, 2.0, 3.0]), f64([1.0, 5.0, 0.0]))
    np.testing.assert_allclose(np.asarray(ga), [0.5, 0.0, 1.0])
    np.testing.assert_allclose(np.asarray(gb), [0.5, 1.0, 0.0])
    relu = lambda x: bind(OpKind.Relu, [x]).sum()
    np.testing.assert_allclose(np.asarray(vkml.grad(relu)(f64([-1.0, 0.0, 2.0]))), [0.0, 0.0, 1.0])


def test_input_used_three_times_accumulates():
    g = vkml.grad(lambda x: x * 2.0 + vnp.sin(x) + x * x)(f64(0.5))
    assert float(g) == pytest.approx(2.0 + math.cos(0.5) + 1.0, rel=1e-12)


def test_perturbation_confusion():
    d = vkml.grad(lambda x: x * vkml.grad(lambda y: x + y)(f64(1.0)))(f64(1.0))
    assert float(d) == 1.0


def test_unused_input_gets_zeros():
    g = vkml.grad(lambda x, y: (x * 2.0).sum(), argnums=1)(f64([1.0]), f64([[1.0, 2.0]]))
    np.testing.assert_array_equal(np.asarray(g), np.zeros((1, 2)))


def test_broadcast_gradients_sum_back():
    g = vkml.grad(lambda b: (f64(np.ones((4, 3))) * b).sum())(f64(np.ones((1, 3))))
    np.testing.assert_array_equal(np.asarray(g), [[4.0, 4.0, 4.0]])


def test_stop_gradient_and_no_grad():
    assert float(vkml.grad(lambda x: x * vkml.stop_gradient(x))(f64(3.0))) == 3.0

    def f(x):
        with vkml.no_grad():
            c = x * 2.0
        return c * x
    assert float(vkml.grad(f)(f64(3.0))) == 6.0


def test_custom_vjp():
    @vkml.custom_vjp
    def log1pexp(x):
        return vnp.log(1.0 + vnp.exp(x))

    def fwd(x):
        return log1pexp(x), x

    def bwd(x, g):
        return (g * (1.0 - 1.0 / (1.0 + vnp.exp(x))),)
    log1pexp.defvjp(fwd, bwd)
    x = f64([0.0, 2.0, 800.0])
    g = np.asarray(vkml.grad(lambda x: log1pexp(x).sum())(x))
    np.testing.assert_allclose(g, [0.5, 1 / (1 + np.exp(-2.0)), 1.0], rtol=1e-12)   # finite at 800
    h = np.asarray(vkml.grad(lambda x: vkml.grad(lambda y: log1pexp(y).sum())(x).sum())(x[:2]))
    s = 1 / (1 + np.exp(-np.array([0.0, 2.0])))
    np.testing.assert_allclose(h, s * (1 - s), rtol=1e-10)


def _custom(bwd, fwd=None):
    @vkml.custom_vjp
    def f(x, p):
        return vnp.sin(x) * p["w"]
    f.defvjp(fwd or (lambda x, p: (f(x, p), (x, p["w"]))), bwd)
    return f


@pytest.mark.parametrize("bwd, err, msg", [
    (lambda r, g: (g[:1], {"w": g.sum()}), ValueError,
     r"custom_vjp f: bwd returned a cotangent of shape \(1,\) float64 for argument 0 of shape "
     r"\(2,\) float64; each cotangent must have its argument's shape and dtype"),
    (lambda r, g: (g.astype(np.float32), {"w": g.sum()}), ValueError,
     r"shape \(2,\) float32 for argument 0 of shape \(2,\) float64"),
    (lambda r, g: (g, {"w": g}), ValueError, r"shape \(2,\) float64 for argument 1 of shape \(\) float64"),
    (lambda r, g: (g,), ValueError, r"custom_vjp f: bwd must return a tuple with one cotangent per "
                                    r"argument \(2\), got a tuple of length 1"),
    (lambda r, g: g, TypeError, r"one cotangent per argument \(2\), got Array"),
    (lambda r, g: (g, (g.sum(),)), ValueError, r"bwd's cotangent for argument 1 has structure .* but "
                                               r"the argument has structure"),
    (lambda r, g: (g, {"v": g.sum()}), TypeError, "bwd's cotangent for argument 1 has structure"),
])
def test_custom_vjp_bwd_with_wrong_cotangents_is_refused_clearly(bwd, err, msg):
    f = _custom(bwd)
    x, p = f64([0.5, 1.0]), {"w": f64(2.0)}
    with pytest.raises(err, match=msg):
        vkml.grad(lambda x, p: f(x, p).sum())(x, p)


def test_custom_vjp_bwd_may_return_none_for_zero_subtrees():
    f = _custom(lambda r, g: (g * vnp.cos(r[0]) * r[1], None))
    x, p = f64([0.5, 1.0]), {"w": f64(2.0)}
    gx, gp = vkml.grad(lambda x, p: f(x, p).sum(), argnums=(0, 1))(x, p)
    np.testing.assert_allclose(np.asarray(gx), 2 * np.cos([0.5, 1.0]), rtol=1e-12)
    assert float(gp["w"]) == 0.0
    f = _custom(lambda r, g: (None, {"w": None}))
    assert np.all(np.asarray(vkml.grad(lambda x, p: f(x, p).sum())(x, p)) == 0)


# ------------------------------------------------------------------ checkpoint

def _chain(n, ckpt, seg=1):
    """n tanh layers; with ckpt, each run of `seg` layers is one checkpointed segment."""
    def layer(x):
        return vnp.tanh(vnp.sin(x) * 1.5 + x)

    def segment(x):
        for _ in range(seg):
            x = layer(x)
        return x
    segment = vkml.checkpoint(segment) if ckpt else segment

    def f(x):
        for _ in range(n // seg):
            x = segment(x)
        return (x * x).sum()
    return f


def test_checkpoint_same_gradients_and_hessian():
    x = f64(np.linspace(-1, 1, 5))
    np.testing.assert_allclose(np.asarray(vkml.grad(_chain(4, True))(x)),
                               np.asarray(vkml.grad(_chain(4, False))(x)), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(vkml.hessian(_chain(2, True))(x)),
                               np.asarray(vkml.hessian(_chain(2, False))(x)), rtol=1e-12)


def test_checkpoint_policies_and_rand_replay():
    from vkml import random
    def f(w, x):
        h = vnp.tanh(x @ w)
        noise = random.uniform(random.key(3), h.shape)
        return (h * noise).sum()
    w, x = f64(np.ones((3, 2)) * 0.1), f64(np.ones((4, 3)))
    want = np.asarray(vkml.grad(f)(w, x))
    for policy in ("nothing_saveable", "dots_saveable"):
        got = np.asarray(vkml.grad(vkml.checkpoint(f, policy=policy))(w, x))
        np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(ValueError, match="policy"):
        vkml.checkpoint(f, policy="bogus")


def _peak(f, x):
    from vkml.vulkan import runtime
    vkml.grad(f)(x)
    return runtime.get().executor.last_plan.peak_bytes


def test_checkpoint_lowers_planned_peak_on_32_layer_chain():
    """Each layer's backward needs only its input and output (cos(x), tanh'), so the win
    comes from segments: 4 checkpointed segments of 8 layers keep 4 boundaries plus one
    segment's recomputation alive instead of all 32 layer outputs."""
    x = f64(np.linspace(-1, 1, 4096))
    plain, ckpt = _peak(_chain(32, False), x), _peak(_chain(32, True, seg=8), x)
    print(f"32-layer tanh chain, planned peak: {plain} B plain, {ckpt} B checkpointed "
          f"({100 * (1 - ckpt / plain):.0f}% lower)")
    assert ckpt < 0.6 * plain, (ckpt, plain)


# ------------------------------------------------------------------ simplification

def _count(f, *args):
    from vkml.graphs import trace_flat
    return trace_flat(f, args)[0].op_count()


def test_nested_grad_node_counts_stay_small():
    def f(x):   # 10 ops
        return (vnp.sin(x) * vnp.exp(x) + vnp.tanh(x * x) - x / (x * x + 1.0)).sum()
    x = f64([0.3, 0.5])
    h = _count(vkml.hessian(f), x)
    p = lambda x: vnp.sin(x) * x * x
    g3 = _count(vkml.grad(vkml.grad(vkml.grad(p))), f64(0.4))
    print(f"hessian of a 10-op function: {h} nodes; grad(grad(grad(f))): {g3} nodes")
    assert h < 400 and g3 < 120, (h, g3)


# ------------------------------------------------------------------ errors

def test_integer_input_to_grad():
    with pytest.raises(vkml.DTypeError, match="int32"):
        vkml.grad(lambda x: (x * 2).sum())(vnp.asarray([1, 2]))


def test_integer_root():
    with pytest.raises(vkml.DTypeError, match="int32"):
        vkml.grad(lambda x: vnp.argmax(x))(f64([1.0, 2.0]))


def test_non_scalar_output():
    with pytest.raises(TypeError, match=r"\(3,\)"):
        vkml.grad(lambda x: x * 2.0)(f64([1.0, 2.0, 3.0]))


def test_sign_has_a_zero_gradient_as_in_jax():
    """jax.grad(jnp.sign)(x) == 0 everywhere, the step at 0 included."""
    x = f64([1.5, -2.0, 0.0])
    np.testing.assert_array_equal(np.asarray(vkml.grad(lambda x: vnp.sign(x).sum())(x)), np.zeros(3))
    np.testing.assert_array_equal(np.asarray(vkml.grad(lambda x: (vnp.sign(x) * x).sum())(x)),
                                  np.sign(np.asarray(x)))
    t = vkml.Tensor(np.array([1.5, -2.0]), requires_grad=True)
    (vnp.sign(t) * t * t).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), 2 * np.abs([1.5, -2.0]))


def test_op_without_rule_names_it_and_its_advice_works(monkeypatch):
    """Every op of the registry with a float output has a rule now; an op without one
    (Sign made rule-less here) gets a message whose advice, followed, works."""
    import dataclasses
    from vkml.trace.ops import SPECS, Grad, OpKind
    monkeypatch.setitem(SPECS, OpKind.Sign, dataclasses.replace(SPECS[OpKind.Sign], grad=Grad.DISCONTINUOUS))
    x = f64([1.0, -2.0])
    with pytest.raises(NotImplementedError, match=r"Sign has no gradient rule .*wrap its output \(not its "
                                                  r"input\) in vkml.stop_gradient: stop_gradient\(sign\(x\)\)"):
        vkml.grad(lambda x: (vnp.sign(x) * x).sum())(x)
    with pytest.raises(NotImplementedError, match="Sign"):    # the input: the walk still reaches Sign
        vkml.grad(lambda x: (vnp.sign(vkml.stop_gradient(x)) * x).sum())(x)
    g = vkml.grad(lambda x: (vkml.stop_gradient(vnp.sign(x)) * x).sum())(x)
    np.testing.assert_array_equal(np.asarray(g), [1.0, -1.0])


def test_custom_vjp_residual_no_output_reaches_and_under_jit_and_vmap():
    @vkml.custom_vjp
    def s(x):
        return vnp.sin(x)
    s.defvjp(lambda x: (vnp.sin(x), (vnp.cos(x),)), lambda r, g: (g * r[0],))
    x = f64([0.0, 1.0])
    want = np.cos([0.0, 1.0])
    np.testing.assert_allclose(np.asarray(vkml.grad(lambda x: s(x).sum())(x)), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(vkml.grad(lambda x: vkml.jit(lambda y: s(y).sum())(x))(x)),
                               want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(vkml.vmap(vkml.grad(s))(x)), want, rtol=1e-12)
    h = vkml.grad(lambda x: vkml.grad(lambda y: s(y).sum())(x).sum())(x)
    np.testing.assert_allclose(np.asarray(h), -np.sin([0.0, 1.0]), rtol=1e-12)


# ------------------------------------------------------------------ arguments outside argnums

def _power_loop(x, n, mode="pow"):
    """x ** n by a Python loop n long, negated for mode "neg": only works when n and mode
    reach f as Python values (JAX passes arguments outside argnums through untraced)."""
    assert type(n) is int and isinstance(mode, str), (type(n), type(mode))
    y = x
    for _ in range(n - 1):
        y = y * x
    if n > 2:                      # control flow on the passed int
        y = y + 0.0 * x
    return (-y if mode == "neg" else y).sum()


def test_non_differentiated_arguments_reach_f_untraced():
    xv = np.array([0.5, -1.5, 2.0])
    x = f64(xv)
    for n in (1, 2, 3, 5):
        np.testing.assert_allclose(vkml.grad(_power_loop)(x, n).numpy(), n * xv ** (n - 1), rtol=1e-14)
    np.testing.assert_allclose(vkml.grad(_power_loop)(x, 3, "neg").numpy(), -3 * xv ** 2, rtol=1e-14)
    # keyword arguments are passed through too
    np.testing.assert_allclose(vkml.grad(_power_loop)(x, n=4, mode="neg").numpy(), -4 * xv ** 3, rtol=1e-14)
    v, g = vkml.value_and_grad(_power_loop)(x, 3)
    assert v.item() == pytest.approx((xv ** 3).sum(), rel=1e-14)
    np.testing.assert_allclose(g.numpy(), 3 * xv ** 2, rtol=1e-14)


def test_passed_through_values_keep_their_python_and_concrete_nature():
    seen = {}

    def f(x, cfg, w, nothing, flag):
        seen.update(cfg=cfg, w_traced=w.is_traced, w0=float(w.numpy()[0]), nothing=nothing, flag=flag)
        scale = cfg["scale"] * (2 if flag else 1)
        return (x * scale * w).sum() if cfg["name"] == "mul" else x.sum()
    w = f64([3.0, 4.0])
    g = vkml.grad(f)(f64([1.0, 1.0]), {"scale": 1.5, "name": "mul"}, w, None, True)
    np.testing.assert_allclose(g.numpy(), [9.0, 12.0], rtol=1e-15)
    # the dict of Python values, the concrete array (readable on the host) and None arrive as given
    assert seen == {"cfg": {"scale": 1.5, "name": "mul"}, "w_traced": False, "w0": 3.0,
                    "nothing": None, "flag": True}


def test_argnums_order_and_pass_through_between_them():
    def f(a, n, b):
        return (a ** n * b).sum()
    av, bv = np.array([1.5, 2.0]), np.array([3.0, -1.0])
    gb, ga = vkml.grad(f, argnums=(2, 0))(f64(av), 3, f64(bv))
    np.testing.assert_allclose(ga.numpy(), 3 * av ** 2 * bv, rtol=1e-14)
    np.testing.assert_allclose(gb.numpy(), av ** 3, rtol=1e-14)
    (g_last,) = vkml.grad(f, argnums=(-1,))(f64(av), 2, f64(bv))
    np.testing.assert_allclose(g_last.numpy(), av ** 2, rtol=1e-14)
    # has_aux with the aux computed from the passed-through int
    g, aux = vkml.grad(lambda a, n: ((a ** n).sum(), a * n), has_aux=True)(f64(av), 2)
    np.testing.assert_allclose(g.numpy(), 2 * av, rtol=1e-14)
    np.testing.assert_allclose(aux.numpy(), 2 * av, rtol=1e-14)
    # a Python float is a differentiable argument (float32, as JAX's weak float)
    assert vkml.grad(lambda x, n: x ** n)(3.0, 2).item() == 6.0


def test_jacobians_and_hessian_pass_arguments_through():
    xv = np.array([0.5, 1.5, -2.0])
    x = f64(xv)
    pw = lambda x, n: x ** n if n > 1 else x * 1.0    # noqa: E731
    for jac in (vkml.jacrev, vkml.jacfwd):
        np.testing.assert_allclose(jac(pw)(x, 3).numpy(), np.diag(3 * xv ** 2), rtol=1e-14)
        np.testing.assert_allclose(jac(pw)(x, 1).numpy(), np.eye(3), rtol=1e-14)
        j = jac(lambda n, x: x ** n, argnums=1)(4, x)
        np.testing.assert_allclose(j.numpy(), np.diag(4 * xv ** 3), rtol=1e-14)
    h = vkml.hessian(_power_loop)(x, 4)
    np.testing.assert_allclose(h.numpy(), np.diag(12 * xv ** 2), rtol=1e-14)
    h = vkml.hessian(_power_loop)(x, 3, mode="neg")
    np.testing.assert_allclose(h.numpy(), np.diag(-6 * xv), rtol=1e-14)


def test_pass_through_composes_with_jit_and_vmap():
    xv = np.array([0.5, 1.5, -2.0])
    x = f64(xv)
    jg = vkml.jit(vkml.grad(_power_loop), static_argnums=1)
    for n in (2, 3, 2):
        np.testing.assert_allclose(jg(x, n).numpy(), n * xv ** (n - 1), rtol=1e-14)
    assert jg.trace_count == 2
    gj = vkml.grad(vkml.jit(_power_loop, static_argnums=1))
    np.testing.assert_allclose(gj(x, 3).numpy(), 3 * xv ** 2, rtol=1e-14)
    gn = vkml.grad(vkml.jit(_power_loop, static_argnames=("n", "mode")))
    np.testing.assert_allclose(gn(x, n=3, mode="neg").numpy(), -3 * xv ** 2, rtol=1e-14)
    per = vkml.vmap(vkml.grad(lambda x, n: x ** n), in_axes=(0, None))(x, 3)
    np.testing.assert_allclose(per.numpy(), 3 * xv ** 2, rtol=1e-14)
    gg = vkml.grad(vkml.grad(lambda x, n: x ** n))(f64(2.0), 4)           # 12 x^2
    assert gg.item() == pytest.approx(48.0, rel=1e-14)


@pytest.mark.parametrize("name,transform", [("grad", vkml.grad), ("grad", vkml.value_and_grad),
                                            ("jacrev", vkml.jacrev), ("jacfwd", vkml.jacfwd)])
def test_differentiating_a_non_float_argument_names_it(name, transform):
    calls = []

    def f(x, n):
        calls.append(1)
        return (x * n).sum()
    x = f64([1.0, 2.0])
    with pytest.raises(vkml.DTypeError, match=rf"^{name}: argument 1 is in argnums=1, but it has dtype "
                                              r"int32 \(shape \(\)\); .*float32, float64"):
        transform(f, argnums=1)(x, 3)
    with pytest.raises(TypeError, match=rf"^{name}: argument 1 is in argnums=\(0, 1\), but it has dtype "
                                        r"bool \(shape \(2,\)\)"):
        transform(f, argnums=(0, 1))(x, vnp.asarray([True, False]))
    with pytest.raises(vkml.DTypeError, match=rf"^{name}: argument 0 is in argnums=0, but its leaf "
                                              r"\['k'\] has dtype int32 \(shape \(2,\)\)"):
        transform(lambda d: d["w"].sum())({"k": np.array([1, 2]), "w": x})
    with pytest.raises(TypeError, match=rf"^{name}: argument 1 is in argnums=1, but it is a str, not "
                                        r"an array"):
        transform(f, argnums=1)(x, "three")
    with pytest.raises(TypeError, match=rf"^{name}: differentiating with respect to argnums=2 needs at "
                                        r"least 3 positional arguments, but the function was called with 2"):
        transform(f, argnums=2)(x, 3)
    with pytest.raises(TypeError, match=rf"^{name}: argnums must be an int or a sequence of ints"):
        transform(f, argnums="x")(x, 3)
    assert calls == []          # refused before f ran
