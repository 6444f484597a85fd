"""New kernels compiled on helper devices before their first dispatch (`vulkan/precompile.py`):
only on lavapipe, only for batches of new kernels, and without changing any result."""
from __future__ import annotations

import time

import numpy as np

import vkml
import vkml.numpy as vnp
from vkml.vulkan import precompile, runtime

R = np.random.default_rng(3)


def _fresh(c: float):
    """A function whose kernels this process has not compiled (c is baked into them)."""
    return lambda a, b: (vnp.sum(vnp.tanh(a * c) + b, axis=0), vnp.exp(a - c) @ b, vnp.max(a * b + c, axis=1))


def _want(a, b, c):
    return (np.sum(np.tanh(a * c) + b, axis=0), np.exp(a - c) @ b, np.max(a * b + c, axis=1))


def test_new_kernels_are_compiled_ahead_and_give_the_same_results(monkeypatch):
    monkeypatch.setenv("VKML_PRECOMPILE", "1")      # tests/conftest.py turns it off
    rt = runtime.get()
    a = R.standard_normal((96, 96)).astype(np.float32)
    b = R.standard_normal((96, 96)).astype(np.float32)
    c = 0.5 + (time.time_ns() % 10**9) / 10**9      # new kernels whatever the SPIR-V cache holds
    stats = rt.kernels.stats
    before = stats.precompiled
    got = vkml.jit(_fresh(c))(vnp.asarray(a), vnp.asarray(b))
    for g, w in zip(got, _want(a.astype(np.float64), b.astype(np.float64), c)):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=2e-5, atol=2e-4)
    if precompile.wanted(rt.dev) and rt.kernels.workers > 1:
        assert stats.precompiled > before          # compiled on the helpers
    else:
        assert stats.precompiled == before
    # turned off: nothing more is compiled ahead, and the results are the same
    monkeypatch.setenv("VKML_PRECOMPILE", "0")
    assert not precompile.wanted(rt.dev)
    mid = stats.precompiled
    c2 = c + 0.25
    got = vkml.jit(_fresh(c2))(vnp.asarray(a), vnp.asarray(b))
    for g, w in zip(got, _want(a.astype(np.float64), b.astype(np.float64), c2)):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=2e-5, atol=2e-4)
    assert stats.precompiled == mid


def test_wanted_only_on_lavapipe_with_mesas_cache(monkeypatch):
    from types import SimpleNamespace as NS
    monkeypatch.setenv("VKML_PRECOMPILE", "1")
    lvp = NS(driver="lavapipe", device_info=lambda: None)
    assert precompile.wanted(lvp) and not precompile.wanted(NS(driver="nvidia", device_info=lambda: None))
    monkeypatch.setenv("MESA_SHADER_CACHE_DISABLE", "true")
    assert not precompile.wanted(lvp)


def test_texel_hints_follow_the_views():
    from types import SimpleNamespace as NS
    from vkml.vulkan.kernels import TEXEL_BYTES, TEXEL_FORMATS
    f = TEXEL_FORMATS[1]
    views = [NS(nbytes=4 * 1000, region=-1), NS(nbytes=1 << 20, region=-1), NS(nbytes=64, region=-1)]
    ds = NS(kernel=NS(texels=(f, f, None)), views=views)
    # 4000 bytes: bits 8-15 are 0x0f; a megabyte: zero; buffers not known: power-of-two blocks
    assert precompile.texel_hint(ds, TEXEL_BYTES) == ((f, False, True), (f, True, True))
