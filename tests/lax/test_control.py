"""vkml.lax control flow against the same computation unrolled in Python (values against
NumPy float64, gradients against the unrolled loop's), its composition with grad, jvp,
hessian-vector products, vmap, jit and checkpoint, trace counts and JAX's errors."""
import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml import lax
from vkml.test_util import check_grads

R = np.random.default_rng(7)
F64 = np.float64
T = 6
W0 = R.normal(size=(3, 3)) * 0.6
XS0 = R.normal(size=(T, 3))
H0 = R.normal(size=3)


def cell(W, h, x):
    return vnp.tanh(h @ W + x)


def np_cell(W, h, x):
    return np.tanh(h @ W + x)


def loss_scan(W, xs, h0, **kw):
    def f(c, x):
        h, n = c
        h2 = cell(W, h, x)
        return (h2, n + 1), {"h": h2, "s": (h2 * h2).sum()}
    (h, n), ys = lax.scan(f, (h0, vnp.asarray(0)), xs, **kw)
    return (h * h).sum() + (ys["h"] * xs).sum() + ys["s"].sum()


def loss_loop(W, xs, h0, reverse=False):
    h, tot = h0, 0.0
    steps = range(xs.shape[0] - 1, -1, -1) if reverse else range(xs.shape[0])
    for t in steps:
        h = cell(W, h, xs[t])
        tot = tot + (h * xs[t]).sum() + (h * h).sum()
    return (h * h).sum() + tot


def np_loss(W, xs, h0, reverse=False):
    h, tot = h0, 0.0
    for t in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
        h = np_cell(W, h, xs[t])
        tot += (h * xs[t]).sum() + (h * h).sum()
    return (h * h).sum() + tot


ARGS = [vnp.asarray(W0), vnp.asarray(XS0), vnp.asarray(H0)]


@pytest.mark.parametrize("kw", [{}, {"reverse": True}, {"unroll": 4}, {"unroll": True},
                                {"remat": "sqrt"}, {"remat": "sqrt", "reverse": True},
                                {"remat": "sqrt", "unroll": 2}, {"remat": "sqrt", "unroll": 3, "reverse": True}],
                         ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain")
def test_scan_values_and_gradients_match_the_unrolled_loop(kw):
    rev = kw.get("reverse", False)
    got = float(loss_scan(*ARGS, **kw))
    np.testing.assert_allclose(got, np_loss(W0, XS0, H0, rev), rtol=1e-13)
    g = vkml.grad(lambda *a: loss_scan(*a, **kw), argnums=(0, 1, 2))(*ARGS)
    want = vkml.grad(lambda *a: loss_loop(*a, reverse=rev), argnums=(0, 1, 2))(*ARGS)
    for a, b in zip(g, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-13)


def test_scan_stacks_pytrees_and_reverse_keeps_positions():
    (h, n), ys = lax.scan(lambda c, x: ((c[0] + x, c[1] + 1), {"a": c[0], "b": (x * 2,)}),
                          (vnp.zeros(2, dtype=F64), vnp.asarray(0)), vnp.asarray(XS0[:, :2]), reverse=True)
    cs = np.cumsum(XS0[::-1, :2], axis=0)[::-1]
    np.testing.assert_allclose(np.asarray(h), XS0[:, :2].sum(0), rtol=1e-14)
    assert int(n) == T and np.asarray(n).dtype == np.int32
    np.testing.assert_allclose(np.asarray(ys["a"]), np.concatenate([cs[1:], np.zeros((1, 2))]), atol=1e-14)
    np.testing.assert_allclose(np.asarray(ys["b"][0]), 2 * XS0[:, :2], rtol=1e-14)


def test_scan_without_xs_and_of_length_zero():
    c, ys = lax.scan(lambda c, _: (c * 2.0, c), vnp.asarray(1.0, F64), None, length=5)
    assert float(c) == 32.0 and np.asarray(ys).tolist() == [1.0, 2.0, 4.0, 8.0, 16.0]
    c, ys = lax.scan(lambda c, x: (c + x, c), vnp.asarray(3.0), vnp.zeros((0, 2)).sum(1))
    assert float(c) == 3.0 and ys.shape == (0,)


def test_checks_grads_order_two_through_scan():
    def f(W, h0):
        return lax.scan(lambda h, x: (cell(W, h, x), None), h0, ARGS[1][:3])[0].sum()
    check_grads(f, [ARGS[0], ARGS[2]], order=2)


def test_hessian_vector_product_and_jvp_through_scan():
    v = vnp.asarray(R.normal(size=(3, 3)))
    hv = vkml.grad(lambda W: (vkml.grad(loss_scan)(W, *ARGS[1:]) * v).sum())(ARGS[0])
    want = vkml.grad(lambda W: (vkml.grad(loss_loop)(W, *ARGS[1:]) * v).sum())(ARGS[0])
    np.testing.assert_allclose(np.asarray(hv), np.asarray(want), rtol=1e-11, atol=1e-12)
    y, t = vkml.jvp(lambda W: loss_scan(W, *ARGS[1:]), (ARGS[0],), (v,))
    y2, t2 = vkml.jvp(lambda W: loss_loop(W, *ARGS[1:]), (ARGS[0],), (v,))
    np.testing.assert_allclose([float(y), float(t)], [float(y2), float(t2)], rtol=1e-12)


def test_vmap_of_scan_batches_the_body():
    Ws = vnp.asarray(R.normal(size=(3, 3, 3)) * 0.5)
    xb = vnp.asarray(R.normal(size=(3, T, 3)))
    got = vkml.vmap(loss_scan, in_axes=(0, 0, None))(Ws, xb, ARGS[2])
    want = [np_loss(np.asarray(Ws)[i], np.asarray(xb)[i], H0) for i in range(3)]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-13)
    g = vkml.vmap(vkml.grad(loss_scan), in_axes=(0, None, None))(Ws, *ARGS[1:])
    for i in range(3):
        np.testing.assert_allclose(np.asarray(g)[i], np.asarray(vkml.grad(loss_loop)(Ws[i], *ARGS[1:])),
                                   rtol=1e-12, atol=1e-13)


def test_jit_of_scan_traces_the_body_once_whatever_the_length():
    calls = []

    def f(h, x):
        calls.append(1)
        return cell(ARGS[0], h, x), h.sum()
    for n in (4, 40):
        calls.clear()
        jf = vkml.jit(lambda xs: lax.scan(f, ARGS[2], xs))
        xs = vnp.asarray(R.normal(size=(n, 3)))
        h, ys = jf(xs)
        hh = H0
        for t in range(n):
            hh = np_cell(W0, hh, np.asarray(xs)[t])
        np.testing.assert_allclose(np.asarray(h), hh, rtol=1e-13)
        jf(xs)
        assert len(calls) == 1 and jf.trace_count == 1
        # the loop is one item of the program: its size does not grow with the length
        lo = jf.lower(xs)
        assert lo.dispatch_count <= 3, lo
    calls.clear()
    vkml.jit(vkml.grad(lambda xs: lax.scan(f, ARGS[2], xs, unroll=3)[1].sum()))(xs)
    assert len(calls) == 1


def test_checkpoint_in_the_body_and_sqrt_remat_memory():
    def body(h, x):
        return vkml.checkpoint(lambda h, x: cell(ARGS[0], h, x))(h, x), None
    g = vkml.grad(lambda h0: lax.scan(body, h0, ARGS[1])[0].sum())(ARGS[2])
    want = vkml.grad(lambda h0: loss_loop(ARGS[0], ARGS[1][:0], h0) * 0 + _loop_h(h0).sum())(ARGS[2])
    np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-12)

    def peak(n, remat):
        # a state of 4096 floats carried n steps (no scanned arrays): what the gradient
        # keeps is carries
        f = lambda s, p: lax.scan(lambda c, _: (vnp.sin(c) * p, None), s, None, length=n, remat=remat)[0].sum()  # noqa: E731
        s = vnp.ones(4096)
        return vkml.jit(vkml.grad(f)).lower(s, vnp.asarray(0.9)).peak_bytes
    full, root = peak(64, None), peak(64, "sqrt")
    assert root < full / 2, (root, full)
    assert peak(256, "sqrt") < 2 * root      # 4x the steps, less than 2x the memory


def _loop_h(h0):
    h = h0
    for t in range(T):
        h = cell(ARGS[0], h, ARGS[1][t])
    return h


def test_fori_loop_is_a_differentiable_scan():
    f = lambda x: lax.fori_loop(1, 5, lambda i, v: v * v * 0.5 + i, x)  # noqa: E731
    x = vnp.asarray(0.7, F64)
    v = 0.7
    for i in range(1, 5):
        v = v * v * 0.5 + i
    np.testing.assert_allclose(float(f(x)), v, rtol=1e-14)
    check_grads(f, [x], order=2)
    assert float(vkml.jit(f)(x)) == float(f(x))
    assert float(lax.fori_loop(3, 1, lambda i, v: v + 1.0, 2.0)) == 2.0


def test_while_loop_runs_to_its_predicate():
    out = lax.while_loop(lambda c: c[0] < 37, lambda c: (c[0] + 1, c[1] * 1.1), (vnp.asarray(0), vnp.asarray(1.0, F64)))
    assert int(out[0]) == 37
    np.testing.assert_allclose(float(out[1]), 1.1 ** 37, rtol=1e-13)
    assert float(lax.while_loop(lambda x: x > 5.0, lambda x: x - 1.0, vnp.asarray(2.0))) == 2.0
    with pytest.raises(TypeError, match="boolean scalar"):
        lax.while_loop(lambda x: x, lambda x: x + 1.0, vnp.asarray(0.0))
    with pytest.raises(TypeError, match="body_fun output and input must have identical types"):
        lax.while_loop(lambda x: x < 3, lambda x: x + 1.0, vnp.asarray(0))


def test_cond_and_switch_select_differentiate_and_batch():
    tf, ff = (lambda x: vnp.sin(x) * 3.0), (lambda x: x * x)
    x = vnp.asarray(0.8, F64)
    for p in (True, False):
        np.testing.assert_allclose(float(lax.cond(p, tf, ff, x)), (np.sin(0.8) * 3 if p else 0.64), rtol=1e-14)
        g = vkml.grad(lambda x: lax.cond(x > 0.5 if p else x < 0.5, tf, ff, x))(x)
        np.testing.assert_allclose(float(g), 3 * np.cos(0.8) if p else 1.6, rtol=1e-14)
    xs = vnp.asarray([0.2, 0.9, -1.0], F64)
    got = vkml.vmap(lambda x: lax.cond(x > 0.5, tf, ff, x))(xs)
    np.testing.assert_allclose(np.asarray(got), np.where(np.asarray(xs) > 0.5, 3 * np.sin(np.asarray(xs)), np.asarray(xs) ** 2), rtol=1e-14)
    fs = [lambda x: x + 1.0, lambda x: x * 2.0, lambda x: -x]
    assert [float(lax.switch(i, fs, 3.0)) for i in (-2, 0, 1, 2, 9)] == [4.0, 4.0, 6.0, -3.0, -3.0]
    idx = vnp.asarray([0, 1, 2, 7])
    got = vkml.vmap(lambda i, x: lax.switch(i, fs, x))(idx, vnp.asarray([1.0, 1.0, 1.0, 1.0]))
    assert np.asarray(got).tolist() == [2.0, 2.0, -1.0, -1.0]
    assert float(vkml.jit(lambda i, x: lax.switch(i, fs, x))(vnp.asarray(1), vnp.asarray(5.0))) == 10.0
    g = vkml.grad(lambda x: lax.switch(vnp.asarray(1), fs, x) + lax.switch(vnp.asarray(2), fs, x))(x)
    assert float(g) == 1.0


def test_map_and_associative_scan():
    xs = vnp.asarray(R.normal(size=(5, 2)))
    np.testing.assert_allclose(np.asarray(lax.map(lambda x: x.sum() * 2.0, xs)), np.asarray(xs).sum(1) * 2, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(lax.map(lambda x: x * 2.0, xs, batch_size=2)), np.asarray(xs) * 2)
    v = R.normal(size=(7, 2))
    np.testing.assert_allclose(np.asarray(lax.associative_scan(vnp.add, vnp.asarray(v))), np.cumsum(v, 0), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(lax.associative_scan(vnp.add, vnp.asarray(v), reverse=True)),
                               np.cumsum(v[::-1], 0)[::-1], rtol=1e-13)
    np.testing.assert_allclose(np.asarray(lax.associative_scan(vnp.add, vnp.asarray(v), axis=1)), np.cumsum(v, 1), rtol=1e-13)

    # affine maps x -> a x + b composed in order: not commutative
    def compose(f, g):
        return (g[0] * f[0], g[0] * f[1] + g[1])
    a, b = R.normal(size=7), R.normal(size=7)
    A, Bv = lax.associative_scan(compose, (vnp.asarray(a), vnp.asarray(b)))
    wa, wb, ca, cb = [], [], 1.0, 0.0
    for ai, bi in zip(a, b):
        ca, cb = ai * ca, ai * cb + bi
        wa.append(ca)
        wb.append(cb)
    np.testing.assert_allclose(np.asarray(A), wa, rtol=1e-13)
    np.testing.assert_allclose(np.asarray(Bv), wb, rtol=1e-13)


def test_jax_errors():
    xs = vnp.ones((3, 2))
    with pytest.raises(TypeError, match="carry output and input must have identical types.*float32\\[\\].*float32\\[2\\]"):
        lax.scan(lambda c, x: (c + x, None), 0.0, xs)
    with pytest.raises(TypeError, match="carry output and input must have identical types.*int32.*float32"):
        lax.scan(lambda c, x: (c + 0.5, None), vnp.asarray(0), xs)
    with pytest.raises(TypeError, match="pytree structure"):
        lax.scan(lambda c, x: ((c, c), None), 0.0, xs)
    with pytest.raises(TypeError, match="must return a pair"):
        lax.scan(lambda c, x: c, 0.0, xs)
    with pytest.raises(ValueError, match="different leading axis sizes: 3, 4"):
        lax.scan(lambda c, x: (c, None), 0.0, (xs, vnp.ones(4)))
    with pytest.raises(ValueError, match="length argument 5 disagrees"):
        lax.scan(lambda c, x: (c, None), 0.0, xs, length=5)
    with pytest.raises(ValueError, match="no values to scan over"):
        lax.scan(lambda c, x: (c, None), 0.0, None)
    with pytest.raises(ValueError, match="no leading axis"):
        lax.scan(lambda c, x: (c, None), 0.0, vnp.asarray(1.0))
    with pytest.raises(TypeError, match="true_fun and false_fun output must have identical types"):
        lax.cond(True, lambda x: x, lambda x: x.astype(int), vnp.ones(2))
    with pytest.raises(TypeError, match="true_fun and false_fun output.*pytree structure"):
        vkml.jit(lambda p: lax.cond(p, lambda: (1.0, 2.0), lambda: 1.0))(vnp.asarray(True))
    with pytest.raises(TypeError, match="predicate must be a scalar"):
        lax.cond(vnp.ones(2) > 0, lambda: 1.0, lambda: 2.0)
    with pytest.raises(ValueError, match="empty branch sequence"):
        lax.switch(0, [], 1.0)
    with pytest.raises(TypeError, match="branch 0 and branch 1 output must have identical types"):
        lax.switch(0, [lambda x: x, lambda x: x[:1]], vnp.ones(2))
    with pytest.raises(ValueError, match="same size along axis"):
        lax.associative_scan(lambda a, b: a, (vnp.ones(2), vnp.ones(3)))


def test_checkpoint_around_a_scan_and_the_profile_of_a_loop():
    f = lambda W: loss_scan(W, *ARGS[1:])  # noqa: E731
    g = vkml.grad(vkml.checkpoint(f))(ARGS[0])
    np.testing.assert_allclose(np.asarray(g), np.asarray(vkml.grad(f)(ARGS[0])), rtol=1e-13)
    jf = vkml.jit(lambda xs: lax.scan(lambda c, x: (c + x, c), ARGS[2], xs))
    names = [n for n, s in jf.profile(ARGS[1])]
    assert names and all(s >= 0 for _, s in jf.profile(ARGS[1][:0]))


def test_while_loop_differentiates_under_grad_and_jvp():
    def f(x, w):
        c = lax.while_loop(lambda c: c[0] < 10.0, lambda c: (c[0] * 1.5 + w, c[1] + 1), (x, vnp.asarray(0)))
        return c[0] * c[1].astype(F64)

    def ref(x, w):
        n = 0
        while x < 10.0:
            x, n = x * 1.5 + w, n + 1
        return x * n
    x, w = vnp.asarray(1.0, F64), vnp.asarray(0.3, F64)
    assert float(f(x, w)) == pytest.approx(ref(1.0, 0.3), rel=1e-14)    # a GPU may fuse a*b+c
    e = 1e-6
    dx = (ref(1.0 + e, 0.3) - ref(1.0 - e, 0.3)) / (2 * e)
    dw = (ref(1.0, 0.3 + e) - ref(1.0, 0.3 - e)) / (2 * e)
    y, t = vkml.jvp(f, (x, w), (vnp.asarray(1.0, F64), vnp.asarray(0.0, F64)))
    np.testing.assert_allclose(float(t), dx, rtol=1e-7)
    g = vkml.grad(f, argnums=(0, 1))(x, w)
    np.testing.assert_allclose([float(g[0]), float(g[1])], [dx, dw], rtol=1e-7)
    # nested: the trip count from the outer gradient's values
    h = vkml.grad(lambda x: vkml.grad(lambda x: f(x, w) ** 2)(x))(x)
    # 5 steps: f = 5 x_5 with x_5 = 1.5 ** 5 x + b, so (f ** 2)'' = 2 (5 * 1.5 ** 5) ** 2
    np.testing.assert_allclose(float(h), 2 * (5 * 1.5 ** 5) ** 2, rtol=1e-12)


def test_unroll_puts_that_many_steps_in_one_loop_iteration():
    from vkml.trace.ops import OpKind

    def scans(u):
        g = vkml.make_graph(lambda xs: lax.scan(lambda h, x: (cell(ARGS[0], h, x), h), ARGS[2], xs,
                                                unroll=u), ARGS[1])
        return [(n.attrs["length"], sum(m.op is OpKind.MatMul for m in n.attrs["body"].nodes))
                for n in g.nodes if n.op is OpKind.Scan]
    assert scans(1) == [(T, 1)]
    assert scans(3) == [(2, 3)]                  # 6 steps: two iterations of three
    assert scans(4) == [(1, 4), (2, 1)]          # one of four, then the remaining two
    assert scans(True) == [(1, T)]


def test_unroll_applies_inside_the_sqrt_blocks():
    from vkml.trace.ops import OpKind

    def inner(u):
        g = vkml.make_graph(lambda xs: lax.scan(lambda h, x: (cell(ARGS[0], h, x), h), ARGS[2], xs,
                                                unroll=u, remat="sqrt"), ARGS[1])
        outer = [n for n in g.nodes if n.op is OpKind.Scan]
        return [(n.attrs["length"], [(m.attrs["length"], sum(q.op is OpKind.MatMul for q in m.attrs["body"].nodes))
                                     for m in n.attrs["body"].nodes if m.op is OpKind.Scan]) for n in outer]
    # 6 steps: blocks of ceil(sqrt 6) = 3 steps; unroll 2 rounds a block up to 4 (one
    # block of two iterations of two steps, then the remaining two steps as a plain scan)
    assert inner(1) == [(2, [(3, 1)])]
    assert inner(3) == [(2, [(1, 3)])]
    assert inner(2) == [(1, [(2, 2)]), (2, [])]


def _np_while(x, w):
    """The loop of `_while` in Python float64: (value, steps)."""
    n = 0
    while x < 10.0:
        x, n = x * x * w + 0.5, n + 1
    return x, n


def _while(x, w):
    c = lax.while_loop(lambda c: c[0] < 10.0, lambda c: (c[0] * c[0] * w + 0.5, c[1] + 1), (x, vnp.asarray(0)))
    return c[0], c[1]


def test_jit_of_while_loop_with_a_data_dependent_trip_count():
    calls = []

    def f(x, w):
        calls.append(1)
        return _while(x, w)
    jf = vkml.jit(f)
    # trip counts 0, 1, a few, and past the first chunks of steps (1 + 2 + 4 + ...)
    for x0, w0 in [(12.0, 1.5), (9.0, 1.5), (1.0, 1.5), (0.1, 0.9), (1.0, 0.502)]:
        got, n = jf(vnp.asarray(x0, F64), vnp.asarray(w0, F64))
        want, m = _np_while(x0, w0)
        assert int(n) == m
        np.testing.assert_allclose(float(got), want, rtol=1e-12)
    assert len(calls) == 1          # one trace for every trip count (jit caching)
    assert _np_while(1.0, 0.502)[1] > 40
    # fori_loop with traced bounds is this loop too
    jl = vkml.jit(lambda lo, hi, v: lax.fori_loop(lo, hi, lambda i, v: v * 0.5 + i, v))
    for lo, hi in [(0, 0), (2, 9), (0, 50)]:
        v = 1.0
        for i in range(lo, hi):
            v = v * 0.5 + i
        np.testing.assert_allclose(float(jl(lo, hi, vnp.asarray(1.0, F64))), v, rtol=1e-14)


def test_vmap_of_while_loop_runs_each_lane_to_its_own_predicate():
    x0 = np.array([12.0, 9.0, 1.0, 0.1, 3.0])
    w0 = np.array([1.5, 1.5, 1.5, 0.9, 1.05])
    vf = vkml.vmap(_while)
    for fn in (vf, vkml.jit(vf)):
        got, n = fn(vnp.asarray(x0, F64), vnp.asarray(w0, F64))
        want = [_np_while(a, b) for a, b in zip(x0, w0)]
        assert np.asarray(n).tolist() == [m for _, m in want]
        np.testing.assert_allclose(np.asarray(got), [v for v, _ in want], rtol=1e-14)
    # one lane's constant unbatched, two vmaps deep
    vv = vkml.jit(vkml.vmap(vkml.vmap(_while, in_axes=(0, None)), in_axes=(0, None)))
    got, n = vv(vnp.asarray(x0.reshape(5, 1) * [1.0, 0.5], F64), vnp.asarray(1.5, F64))
    want = np.array([[_np_while(a, 1.5)[1] for a in row] for row in x0.reshape(5, 1) * [1.0, 0.5]])
    assert np.asarray(n).tolist() == want.tolist()


def test_jvp_through_while_loop_under_jit_and_vmap():
    def jv(x, w, tx, tw):
        return vkml.jvp(lambda x, w: _while(x, w)[0], (x, w), (tx, tw))
    e = 1e-6
    for x0, w0 in [(1.0, 1.5), (12.0, 1.5), (0.1, 0.9)]:
        args = [vnp.asarray(v, F64) for v in (x0, w0)]
        one, zero = vnp.asarray(1.0, F64), vnp.asarray(0.0, F64)
        y, tx = vkml.jit(jv)(*args, one, zero)
        _, tw = vkml.jit(jv)(*args, zero, one)
        np.testing.assert_allclose(float(y), _np_while(x0, w0)[0], rtol=1e-14)
        dx = (_np_while(x0 + e, w0)[0] - _np_while(x0 - e, w0)[0]) / (2 * e)
        dw = (_np_while(x0, w0 + e)[0] - _np_while(x0, w0 - e)[0]) / (2 * e)
        np.testing.assert_allclose([float(tx), float(tw)], [dx, dw], rtol=1e-7, atol=1e-9)
    x0 = np.array([1.0, 0.1])
    y, t = vkml.vmap(jv, in_axes=(0, None, 0, None))(vnp.asarray(x0, F64), vnp.asarray(1.5, F64),
                                                    vnp.ones(2, F64), vnp.asarray(0.0, F64))
    dx = [(_np_while(a + e, 1.5)[0] - _np_while(a - e, 1.5)[0]) / (2 * e) for a in x0]
    np.testing.assert_allclose(np.asarray(t), dx, rtol=1e-7)


def test_while_loop_nested_in_scan_and_cond_under_jit():
    def body(c, xk):
        v = lax.while_loop(lambda v: v < xk, lambda v: v * 2.0, c)
        return v - xk, v
    xs = np.array([3.0, 10.0, 1.0, 7.0])
    c, ys = vkml.jit(lambda c, xs: lax.scan(body, c, xs))(vnp.asarray(1.0, F64), vnp.asarray(xs, F64))
    v, want = 1.0, []
    for xk in xs:
        while v < xk:
            v *= 2.0
        want.append(v)
        v -= xk
    np.testing.assert_allclose(np.asarray(ys), want, rtol=1e-15)
    assert float(c) == v
    f = vkml.jit(lambda p, x: lax.cond(p > 0, lambda x: lax.while_loop(lambda v: v < 10.0, lambda v: v * 3.0, x),
                                       lambda x: -x, x))
    assert float(f(1, vnp.asarray(1.0, F64))) == 27.0 and float(f(0, vnp.asarray(1.0, F64))) == -1.0


def test_while_loop_errors_under_jit(monkeypatch):
    loop = lambda x: lax.while_loop(lambda v: v < 10.0, lambda v: v * 2.0, x)  # noqa: E731
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for lax.while_loop"):
        vkml.jit(vkml.grad(loop))(vnp.asarray(1.0))
    with pytest.raises(TypeError, match="boolean scalar"):
        vkml.jit(lambda x: lax.while_loop(lambda v: v, lambda v: v + 1.0, x))(vnp.asarray(1.0))
    with pytest.raises(TypeError, match="body_fun output and input must have identical types"):
        vkml.jit(lambda x: lax.while_loop(lambda v: v < 3.0, lambda v: (v, v), x))(vnp.asarray(1.0))
    # a loop that never ends: bounded when asked to be, with a message naming it
    from vkml.vulkan import dispatch
    monkeypatch.setattr(dispatch, "WHILE_MAX_STEPS", 200)
    with pytest.raises(RuntimeError, match="cond_fun still holds after .* steps"):
        vkml.jit(lambda x: lax.while_loop(lambda v: v > -1.0, lambda v: v + 1.0, x))(vnp.asarray(0.0))


def test_a_hoisted_weight_gradient_reads_the_slice_cotangent_stored_once():
    # h (2, 3): the weight's cotangent sum_t h_t^T d_t is one matmul after the loop, and
    # d_t, the scanned slice's cotangent as well, is one stacked output of the reverse scan
    from vkml.trace.ops import OpKind
    xs, h0 = vnp.asarray(R.normal(size=(T, 2, 3))), vnp.asarray(R.normal(size=(2, 3)))

    def loss(W, xs):
        return lax.scan(lambda h, x: (cell(W, h, x), h), h0, xs)[0].sum()

    def loop(W, xs):
        h = h0
        for t in range(T):
            h = cell(W, h, xs[t])
        return h.sum()
    g = vkml.make_graph(vkml.grad(loss, argnums=(0, 1)), ARGS[0], xs)
    (rev,) = [n for n in g.nodes if n.op is OpKind.Scan and n.attrs["reverse"]]
    outs = rev.attrs["body"].outputs
    assert len({o.id for o in outs}) == len(outs)
    got = vkml.jit(vkml.grad(loss, argnums=(0, 1)))(ARGS[0], xs)
    want = vkml.grad(loop, argnums=(0, 1))(ARGS[0], xs)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-13)
