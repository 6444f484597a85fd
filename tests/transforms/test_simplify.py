"""simplify(for_execution=True) on what a compiled program runs: an Arange it reads is
computed once, at compile time, not by a kernel at every call."""
import numpy as np

import vkml
import vkml.numpy as vnp
from vkml.trace.ops import OpKind


def _kernels(jf, *args) -> list[str]:
    return [n for d in jf._entry(args)[0][0].lowered.dispatches for n in d.kernel.name.split("+")]


def test_an_arange_read_inside_a_program_becomes_a_constant():
    y = vnp.asarray(np.array([2, 0, 1, 2], np.int32))
    jf = vkml.jit(lambda y: (y[:, None] == vnp.arange(3)).astype(vnp.float32) * 2.0)
    got = np.asarray(jf(y))
    np.testing.assert_array_equal(got, (np.array([2, 0, 1, 2])[:, None] == np.arange(3)) * 2.0)
    assert not any(k.startswith("Arange") for k in _kernels(jf, y))
    assert any(n.op is OpKind.Const for n in jf.lower(y).graph.nodes)
    # the next call replays the same program with the same constant
    np.testing.assert_array_equal(np.asarray(jf(y)), got)


def test_an_arange_that_is_an_output_still_runs():
    jf = vkml.jit(lambda x: (vnp.arange(5, dtype=vnp.float32), x + 1))
    x = vnp.asarray(np.ones(2, np.float32))
    a, b = jf(x)
    np.testing.assert_array_equal(np.asarray(a), np.arange(5))
    assert any(k.startswith("Arange") for k in _kernels(jf, x))
    np.testing.assert_array_equal(np.asarray(vnp.arange(4)), np.arange(4))     # eager


def test_an_arange_under_grad_and_vmap():
    f = lambda w: vnp.sum(w * vnp.arange(4, dtype=vnp.float32))
    g = vkml.jit(vkml.grad(f))(vnp.asarray(np.ones(4, np.float32)))
    np.testing.assert_array_equal(np.asarray(g), np.arange(4))
    v = vkml.jit(vkml.vmap(f))(vnp.asarray(np.ones((3, 4), np.float32)))
    np.testing.assert_array_equal(np.asarray(v), [6.0, 6.0, 6.0])
