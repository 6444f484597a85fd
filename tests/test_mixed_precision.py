"""vkml/mixed_precision.py (re-exported by vkml.optim): policies, loss scales, and a
mixed-precision training run against the float32 one."""
import ml_dtypes
import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml import optim

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_policy_casts_float_leaves_only():
    p = optim.get_policy("params=float32,compute=bfloat16,output=float32")
    assert (p.param_dtype, p.compute_dtype, p.output_dtype) == (np.float32, BF16, np.float32)
    assert optim.get_policy("f16").compute_dtype == np.float16
    tree = {"w": vnp.ones(2), "i": vnp.asarray([1, 2]), "n": 3}
    c = p.cast_to_compute(tree)
    assert c["w"].dtype == BF16 and c["i"].dtype == np.int32 and c["n"] == 3
    assert p.cast_to_param(c)["w"].dtype == np.float32
    with pytest.raises(ValueError, match="get_policy"):
        optim.get_policy("params=float32,compute=int8")
    with pytest.raises(vkml.DTypeError, match="compute_dtype int32"):
        optim.Policy(np.float32, np.int32, np.float32)


def test_dynamic_loss_scale_rule():
    s = optim.DynamicLossScale(vnp.asarray(8.0), period=2, factor=2, min_loss_scale=2.0)
    g = s.scale({"g": vnp.asarray([1.5])})["g"]
    assert float(g[0]) == 12.0 and float(s.unscale({"g": g})["g"][0]) == 1.5
    seq = []
    for finite in (True, True, True, False, False, False):
        s = s.adjust(vnp.asarray(finite))
        seq.append((float(s.loss_scale), int(s.counter)))
    # doubles after `period` finite steps in a row, halves on an overflow, never below the minimum
    assert seq == [(8.0, 1), (16.0, 0), (16.0, 1), (8.0, 0), (4.0, 0), (2.0, 0)]
    assert not bool(optim.all_finite({"a": vnp.ones(2), "b": vnp.asarray([np.nan])}))
    assert bool(optim.all_finite({"a": vnp.ones(2), "i": vnp.asarray([7])}))
    st = optim.StaticLossScale(4.0)
    assert float(st.unscale(st.scale(vnp.asarray(3.0)))) == 3.0 and st.adjust(vnp.asarray(False)) is st
    assert optim.NoOpLossScale().scale(5) == 5


def _train(precision: str, steps: int = 80):
    """A two-layer MLP regression, float32 master weights, `precision` compute (float16
    with a dynamic loss scale), Adam, one jitted step; returns the float32 losses."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((128, 8)).astype(np.float32)
    # noisy targets: an irreducible loss (~0.09) as real tasks have, which 16-bit
    # rounding of activations (relative 2^-9 for bfloat16) does not reach
    Y = (np.sin(X @ rng.standard_normal((8, 1))) + 0.3 * rng.standard_normal((128, 1))).astype(np.float32)
    params = {"w1": vnp.asarray(0.5 * rng.standard_normal((8, 32)), np.float32), "b1": vnp.zeros(32),
              "w2": vnp.asarray(0.2 * rng.standard_normal((32, 1)), np.float32), "b2": vnp.zeros(1)}
    policy = optim.get_policy(f"params=float32,compute={precision},output=float32")
    opt = optim.adam(1e-2)
    scale = optim.DynamicLossScale(2.0 ** 12) if precision == "float16" else optim.NoOpLossScale()

    def loss_fn(p, x, y):
        p, x = policy.cast_to_compute((p, x))
        h = vnp.tanh(x @ p["w1"] + p["b1"])
        out = policy.cast_to_output(h @ p["w2"] + p["b2"])
        return vnp.mean((out - y) ** 2)

    @vkml.jit
    def step(p, s, scale, x, y):
        loss, g = vkml.value_and_grad(lambda p: scale.scale(loss_fn(p, x, y)))(p)
        loss, g = scale.unscale(loss), scale.unscale(g)
        finite = optim.all_finite(g)
        u, s2 = opt.update(g, s, p)
        p2 = optim.select_tree(finite, optim.apply_updates(p, u), p)
        return p2, optim.select_tree(finite, s2, s), scale.adjust(finite), loss
    s = opt.init(params)
    x, y = vnp.asarray(X), vnp.asarray(Y)
    losses = []
    for _ in range(steps):
        params, s, scale, loss = step(params, s, scale, x, y)
        assert loss.dtype == np.float32 and params["w1"].dtype == np.float32
        losses.append(float(loss))
    return losses


def test_mixed_precision_training_reaches_the_float32_loss():
    f32 = _train("float32")
    assert f32[-1] < 0.5 * f32[0]                  # it learns
    for precision in ("bfloat16", "float16"):
        low = _train(precision)
        assert abs(low[-1] - f32[-1]) <= 0.02 * f32[-1], (precision, low[-1], f32[-1])
        assert low[-1] < 0.5 * low[0]
