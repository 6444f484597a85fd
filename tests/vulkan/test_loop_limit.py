"""Work longer than lavapipe's loop limiter lets one invocation run (it ends every loop of an
invocation after 65535 heads, silently): long contractions (`vulkan/split_k.py`) and
scatters with long runs of one destination (`lower/index.py`) are exact, not partial."""
from __future__ import annotations

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.trace.graph import Graph
from vkml.vulkan.split_k import max_k, split_k

R = np.random.default_rng(7)


@pytest.mark.parametrize("K,ta", [((1 << 20) + 5, False), ((1 << 19) + 3, True)])
def test_long_contraction_is_exact(K, ta):
    # small integers: every partial sum is exact in float32, so any lost term shows
    a = R.integers(-2, 3, (2, 3, K)).astype(np.float32)
    b = R.integers(-2, 3, (K, 2)).astype(np.float32)
    A = vnp.asarray(np.swapaxes(a, -1, -2).copy() if ta else a)
    f = vkml.jit(lambda A, B: (vnp.swapaxes(A, -1, -2) if ta else A) @ B)
    np.testing.assert_array_equal(np.asarray(f(A, vnp.asarray(b)), np.float64), a.astype(np.float64) @ b)


def test_rewrite_pads_and_sums_and_leaves_short_products():
    g = vkml.make_graph(lambda a, b: a @ b, vnp.ones((2, 10)), vnp.ones((10, 3)))
    assert split_k(g, 16) is g and split_k(g, 0) is g
    s = split_k(g, 4)
    mm = [n for n in s.nodes if n.op.value == "MatMul"][0]
    assert mm.shape == (3, 2, 3) and s.outputs[0].shape == (2, 3)
    assert isinstance(s, Graph) and max_k(65535, 16) == 262140


@pytest.mark.parametrize("reduce", ["add", "max"])
def test_scatter_with_a_long_run_of_one_destination(reduce):
    n = (1 << 17) + 9                  # about 43k contributions per destination, 2^17 to the last
    idx = np.concatenate([R.integers(0, 3, n - (1 << 17)), np.full(1 << 17, 3)]).astype(np.int32)
    x = R.integers(0, 5, n).astype(np.float32)
    x[-1] = 7.0                        # the last term of the longest run decides its max
    got = getattr(vnp.zeros(4).at[vnp.asarray(idx)], reduce)(vnp.asarray(x))
    want = np.zeros(4)
    (np.add if reduce == "add" else np.maximum).at(want, idx, x.astype(np.float64))
    np.testing.assert_array_equal(np.asarray(got, np.float64), want)


def test_int_scatter_with_a_long_run_is_exact():
    idx = np.zeros((1 << 17) + 1, np.int32)
    got = vnp.zeros(2, dtype=vnp.int32).at[vnp.asarray(idx)].add(vnp.ones(idx.size, dtype=vnp.int32))
    assert np.asarray(got).tolist() == [idx.size, 0]


def test_window_larger_than_the_loop_limit():
    import vkml.nn.functional as F
    n = 260                            # a 260 x 260 window: 67,860 loop heads in one invocation
    x = R.integers(0, 5, (1, 2, n, n)).astype(np.float32)
    x[0, 0, -1, -1], x[0, 1, 3, 2] = 9.0, 8.0
    X = vnp.asarray(x)
    y, i = F.max_pool2d(X, n, return_indices=True)
    np.testing.assert_array_equal(np.asarray(y).ravel(), [9.0, 8.0])
    np.testing.assert_array_equal(np.asarray(i).ravel(), [n * n - 1, 3 * n + 2])
    scale = vnp.asarray(np.array([2.0, 3.0], np.float32).reshape(1, 2, 1, 1))
    g = np.asarray(vkml.grad(lambda v: vnp.sum(F.max_pool2d(v, n) * scale))(X))
    want = np.zeros_like(x)
    want[0, 0, -1, -1], want[0, 1, 3, 2] = 2.0, 3.0
    np.testing.assert_array_equal(g, want)
    # the convolution's input gradient (Col2Im) walks the same window
    w = R.integers(-1, 2, (1, 2, n, n)).astype(np.float32)
    gx = vkml.grad(lambda v: vnp.sum(F.conv2d(v, vnp.asarray(w))))(X)
    np.testing.assert_array_equal(np.asarray(gx), w)


@pytest.mark.parametrize("shape", [(64, 30000)])
def test_softmax_rows_longer_than_one_thread_may_sweep(shape):
    import vkml.nn.functional as F
    x = R.normal(size=shape).astype(np.float32)
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(F.softmax(vnp.asarray(x), axis=-1)), want, rtol=2e-5, atol=1e-9)
