"""Float32 operands read as uniform texel buffers (CPU devices: lavapipe loads a storage
buffer lane by lane behind a branch, a texel as one gather). The texel and storage-buffer
paths of each kernel family must agree bit for bit, and a view that does not start on a
texel boundary must fall back to a storage buffer."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.vulkan import device, runtime
from vkml.vulkan.kernels import TEXEL_FORMATS
from vkml.vulkan.lower import elementwise as ew

RNG = np.random.default_rng(11)


def _both(f, *args):
    """f jitted with texels on and off (fresh compiles): (texel result, storage result).
    Reductions read their inputs through `elementwise.texel_format` too."""
    out = []
    for on in (True, False):
        with device.using(texels=on, matmul_texels=on):
            out.append(vkml.tree_util.tree_map(np.asarray, vkml.jit(f)(*args)))
    return out


x = RNG.standard_normal((96, 40)).astype(np.float32)
y = RNG.standard_normal((40,)).astype(np.float32)
i = RNG.integers(-5, 5, (96, 40)).astype(np.int32)

CASES = {
    "wide": lambda a, b, n: vnp.tanh(a) * 2 + 1,
    "broadcast row": lambda a, b, n: a * b,
    "transpose (gather)": lambda a, b, n: a.T + 1,
    "mixed dtypes": lambda a, b, n: a + n.astype(vnp.float32),
    "column sum + epilogue": lambda a, b, n: vnp.sum(a * a, axis=0) * 0.5 + b,
    "row max": lambda a, b, n: vnp.max(a, axis=1),
    "argmax": lambda a, b, n: vnp.argmax(a + b, axis=0),
    "full sum": lambda a, b, n: vnp.sum(vnp.exp(a)),
    "prod": lambda a, b, n: vnp.prod(a[:8] * 0.5 + 1, axis=0),
    "matmul + bias": lambda a, b, n: vnp.maximum(a @ a.T[:40, :40] + b, 0.0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_texel_and_storage_paths_agree_bitwise(case):
    got, want = _both(CASES[case], vnp.asarray(x), vnp.asarray(y), vnp.asarray(i))
    np.testing.assert_array_equal(got, want)


def test_large_elementwise_and_reduction_paths_agree():
    """Wide (8 elements per thread: two 4-element texels) and multi-round kernels."""
    big = RNG.standard_normal(1 << 18).astype(np.float32)
    f = lambda v: (vnp.sqrt(vnp.abs(v)) - v, vnp.sum(v * 2, axis=0))
    (g1, g2), (w1, w2) = _both(f, vnp.asarray(big))
    np.testing.assert_array_equal(g1, w1)
    np.testing.assert_array_equal(g2, w2)


def test_cpu_devices_read_float32_through_texels():
    """On a CPU device the fused elementwise kernel binds its float32 leaf as a texel
    buffer and its int32 leaf as a storage buffer; elsewhere every binding is storage."""
    f = vkml.jit(lambda a, n: a * 2 + n.astype(vnp.float32))
    args = (vnp.asarray(x), vnp.asarray(i))
    f(*args)
    c = f._entry(args)[0][0]
    k = c.lowered.dispatches[-1].kernel
    cpu = runtime.get().dev.profile.cpu
    if cpu:
        assert [f is not None for f in k.texels[1:]] == [True, False], k.texels
    else:
        assert not any(f is not None for f in k.texels)
    # a reduction's fused prologue leaf and a MatMul's operands likewise
    for g in (lambda a: vnp.sum(a * a, axis=0), lambda a: a @ a.T):
        jg = vkml.jit(g)
        jg(args[0])
        for d in jg._entry(args[:1])[0][0].lowered.dispatches:
            assert any(f is not None for f in d.kernel.texels) == cpu, (d.kernel.name, d.kernel.texels)


def test_views_off_a_texel_boundary_use_storage_buffers():
    dev = SimpleNamespace(is_cpu=True, texel_alignment=16, max_texels=1 << 27)
    v = lambda off, n, dt=np.float32: SimpleNamespace(offset=off, nbytes=n, dtype=np.dtype(dt))
    assert ew.texel_format(dev, v(256, 64), 4) == TEXEL_FORMATS[4]
    assert ew.texel_format(dev, v(256, 64), 8) == TEXEL_FORMATS[8]
    assert ew.texel_format(dev, v(260, 64), 1) is None        # offset not a multiple of 16
    assert ew.texel_format(dev, v(256, 8), 4) is None         # less than one texel
    assert ew.texel_format(dev, v(256, 64, np.int32), 4) is None
    assert ew.texel_format(SimpleNamespace(**{**vars(dev), "is_cpu": False}), v(256, 64), 4) is None
