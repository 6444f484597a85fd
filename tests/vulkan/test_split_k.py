"""Contractions longer than lavapipe's loop limiter lets one kernel run (`vulkan/split_k.py`):
the products are exact, not partial sums."""
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
