"""Bounds of fused values (`vkml.vulkan.lower.ranges`) and the sin/cos they let a kernel
call without the Payne-Hanek path: the bounds hold on random inputs, and the kernels give
the same bits as the full functions."""
from __future__ import annotations

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.trace.ops import OpKind
from vkml.transforms.simplify import simplify
from vkml.vulkan.lower import ranges
from vkml.vulkan.regions import build_region

rng = np.random.default_rng(0)

CHAINS = {
    "tanh*3+1": lambda m, x: m.tanh(x) * 3.0 + 1.0,
    "sin-sin": lambda m, x: m.sin(m.sin(x)) - 0.5,
    "abs-neg": lambda m, x: -m.abs(m.cos(x) * 7.0),
    "exp(-|s|)": lambda m, x: m.exp(-m.abs(m.sin(x) * 4.0)),
    "relu-max": lambda m, x: m.maximum(m.maximum(m.tanh(x), 0.0) * 2.0, m.cos(x)),
    "sigmoid*s": lambda m, x: ((1.0 / (1.0 + m.exp(-x))) if m is np else vkml.nn.functional.sigmoid(x)) * m.sin(x),
    "log1p|t|": lambda m, x: m.log1p(m.abs(m.tanh(x))) * 100.0,
    "t*t-t": lambda m, x: m.tanh(x) * m.tanh(x) - m.cos(x * 3.0),
    "t/(|t|+1)": lambda m, x: m.tanh(x) * 5.0 / (m.abs(m.tanh(x) * 5.0) + 1.0),
    "1/(2+s)": lambda m, x: m.reciprocal(m.sin(x) + 2.0) * 3.0,
    "where": lambda m, x: m.where(x > 0.5, m.tanh(x) * 9.0, m.cos(x) - 3.0),
    "sqrt-log": lambda m, x: m.sqrt(m.abs(m.sin(x)) * 8.0) + m.log(m.cos(x) + 1.5),
    "rsqrt": lambda m, x: (vnp.rsqrt(m.exp(-m.abs(x)) + 0.25) if m is vnp else 1.0 / np.sqrt(np.exp(-np.abs(x)) + 0.25)),
    "expm1-floor": lambda m, x: m.expm1(m.tanh(x) * 4.0) + m.floor(m.sin(x) * 6.5),
    "pow3": lambda m, x: (m.tanh(x) * 2.0 - 0.5) ** 3,
    "atan2": lambda m, x: m.arctan2(m.sin(x), m.cos(x) * 0.5) * 100.0,
    "cast16": lambda m, x: (m.tanh(x) * 3000.0).astype(m.float16).astype(m.float32) * 1.3,
    "gelu": lambda m, x: vkml.nn.functional.gelu(m.tanh(x) * 3.0) * 2.0,
    # one value's factors: bounded whatever x is
    "softsign": lambda m, x: x * 7.0 / (m.abs(x * 7.0) + 1.0),
    "x*tanh(x)": lambda m, x: m.minimum(x * m.tanh(x), 0.5),
    "x*x": lambda m, x: -m.minimum(x * x, 9.0),
    "silu": lambda m, x: m.minimum(x / (1.0 + m.exp(-x)), 2.0),
}


def _region(fn):
    # simplified, as every graph that runs is (one value, one node)
    g = simplify(vkml.make_graph(lambda x: fn(vnp, x), vnp.ones(8, dtype=vnp.float32)))
    return build_region(g.outputs[0], lambda n: n.op is not OpKind.Input)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_the_root_bound_holds_on_random_inputs(name):
    fn = CHAINS[name]
    lo, hi = ranges.bounds(_region(fn))[-1]
    assert np.isfinite(lo) and np.isfinite(hi), (lo, hi)
    x = np.concatenate([rng.normal(scale=s, size=20000) for s in (1.0, 30.0, 1e4)]).astype(np.float32)
    got = np.asarray(vkml.jit(lambda v: fn(vnp, v))(vnp.asarray(x)))
    assert lo <= got.min() and got.max() <= hi, (name, lo, hi, got.min(), got.max())


def test_a_product_of_two_values_is_not_taken_for_a_square():
    b = ranges.bounds(_region(lambda m, x: m.minimum(x * m.tanh(x * 2.0), 0.5)))
    assert b[-1][0] == -ranges.INF, b[-1]          # x tanh(2x) >= 0 too, but not proved
    b = ranges.bounds(_region(lambda m, x: x / (m.abs(x * 2.0) + 1.0)))
    assert b[-1] == ranges.ANY, b[-1]


def test_unknown_values_stay_unbounded():
    b = ranges.bounds(_region(lambda m, x: m.exp(x) * m.sin(x)))
    assert b[0] == ranges.ANY                    # the load
    assert b[-1] == ranges.ANY                   # exp(x) is unbounded above, times [-1, 1]


def _kernel_sources(f, *args):
    f(*args)
    return "".join(d.kernel.program.render() for d in f._entry(args)[0][0].lowered.dispatches)


def test_a_bounded_argument_calls_the_short_form_with_the_same_bits():
    x = np.concatenate([rng.normal(scale=s, size=4096) for s in (1.0, 50.0)]).astype(np.float32)
    xs = vnp.asarray(x)
    fused = vkml.jit(lambda v: vnp.sin(vnp.tanh(v) * 3000.0) + vnp.cos(vnp.tanh(v) * 2.5))
    src = _kernel_sources(fused, xs)
    assert "vk_sin_cw(" in src and "vk_cos_cw(" in src
    assert "vk_f_rem_pio2_ph" not in src         # no Payne-Hanek code left to compile
    # the same arguments computed in kernels of their own reach the full functions
    a = vkml.jit(lambda v: vnp.tanh(v) * 3000.0)(xs)
    b = vkml.jit(lambda v: vnp.tanh(v) * 2.5)(xs)
    full = vkml.jit(lambda p, q: vnp.sin(p) + vnp.cos(q))
    assert "vk_sin(" in _kernel_sources(full, a, b)
    np.testing.assert_array_equal(np.asarray(fused(xs)), np.asarray(full(a, b)))


def test_an_unbounded_argument_keeps_the_full_function():
    x = vnp.asarray(np.array([1e5, -3e7, 0.5, 4095.0, 4097.0], np.float32))
    f = vkml.jit(lambda v: vnp.sin(v * 2.0) + vnp.cos(v))
    src = _kernel_sources(f, x)
    calls = [l for l in src.splitlines() if l.startswith("  precise float v")]
    assert any("vk_sin(" in l for l in calls) and any("vk_cos(" in l for l in calls), calls
    assert not any("_cw(" in l for l in calls) and "vk_f_rem_pio2_ph" in src
    want = np.sin(np.asarray(x, np.float64) * 2.0) + np.cos(np.asarray(x, np.float64))
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=0, atol=4e-7 * 2)


def test_float32_overflow_counts_as_unbounded():
    # exp(tanh(x) * 90) overflows float32 near x = inf although its float64 bound does not
    b = ranges.bounds(_region(lambda m, x: m.sin(m.exp(m.tanh(x) * 90.0) * 1e-37)))
    assert b[-2] == (0.0, ranges.INF) or b[-2][1] == ranges.INF, b[-2]
    x = vnp.asarray(np.array([10.0, -10.0, 0.0, np.inf, -np.inf], np.float32))
    got = np.asarray(vkml.jit(lambda v: vnp.sin(vnp.exp(vnp.tanh(v) * 90.0) * 1e-37))(x))
    with np.errstate(over="ignore", invalid="ignore"):
        x32 = np.asarray(x, np.float32)
        want = np.sin((np.exp(np.tanh(x32) * np.float32(90)) * np.float32(1e-37)).astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_a_constant_is_bounded_as_the_kernel_holds_it():
    # 4000.0001 is 4000.0 in float32: the bound (and so the kernel) follows the float32 value
    lo, hi = ranges.bounds(_region(lambda m, x: m.tanh(x) * 4000.0001))[-1]
    assert hi == 4000.0 and lo == -4000.0


# values the float64 bound holds finite or nonzero that float32 or float16 does not: the
# escaped infinity passes a maximum, which hands sin the other, huge operand
ESCAPES = {
    "exp underflow": lambda v: vnp.maximum(vnp.log(vnp.exp(vnp.tanh(v) * 2.0 - 106.0)), vnp.tanh(v) * 3e7 - 6e7),
    "float16 overflow": lambda v: vnp.maximum((vnp.tanh(v) * 1e5).astype(vnp.float16).astype(vnp.float32) * 1e-5,
                                              vnp.tanh(v) * 3e7 - 6e7),
    "division by an underflow": lambda v: vnp.maximum(1e-20 / vnp.exp(vnp.tanh(v) * 2.5 - 102.5) * -1e-24,
                                                      vnp.tanh(v) * 3e7 - 6e7),
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_underflow_and_float16_overflow_do_not_prove_a_bound(name):
    arg = ESCAPES[name]
    x = vnp.asarray(np.linspace(-1, 1, 8, dtype=np.float32))
    fused = vkml.jit(lambda v: vnp.sin(arg(v)))
    got = np.asarray(fused(x))
    a = np.asarray(vkml.jit(arg)(x))
    np.testing.assert_array_equal(got, np.asarray(vkml.jit(vnp.sin)(vnp.asarray(a))))
    with np.errstate(invalid="ignore"):           # sin(inf) is nan for NumPy too
        want = np.sin(a.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("e", [0.5, 1.5, 3])
def test_integer_pow_of_any_exponent_is_bounded_or_left_alone(e):
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    f = vkml.jit(lambda v: vnp.cos(vnp.abs(vnp.tanh(v) * 2.0) ** e) + vnp.sin(v ** e))
    got = np.asarray(f(vnp.asarray(x)))
    with np.errstate(invalid="ignore"):
        xd = x.astype(np.float64)
        want = np.cos(np.abs(np.tanh(xd) * 2.0) ** e) + np.sin(xd ** e)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)     # x^e rounded in float32: 27 * 2^-24
    lo, hi = ranges.bounds(_region(lambda m, v: m.abs(m.tanh(v) * 2.0) ** e))[-1]
    assert 0.0 <= lo and hi <= 2.0 ** e, (lo, hi)
