"""vkml.vulkan.kernels: the source rewrite applied to every kernel on a CPU device."""
import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.vulkan import kernels


def test_hoist_meta_reads_literal_indices_once_before_anything():
    body = ("float f(int i) { return float(meta[2] + i); }\n"
            "void main() {\n  uint i = gidx();\n  if (i >= uint(meta[0])) return;\n"
            "  if (i > 3u) { o[i] = f(meta[1]) + float(meta[0]); }\n  o[i] += float(meta[meta[1] + 4]);\n}\n")
    out = kernels.hoist_meta(body, 1)
    main = out[out.index("void main() {"):]
    assert main.startswith("void main() {\n  int meta_0 = meta[0], meta_1 = meta[1];")
    assert "meta[meta_1 + 4]" in main          # a computed index stays a load
    assert "return float(meta[2] + i);" in out  # other functions are left alone
    assert kernels.hoist_meta("void main() { o[0] = 1.0; }", 1) == "void main() { o[0] = 1.0; }"
    few = "void main() {\n  if (g >= meta[0]) return;\n}\n"
    assert kernels.hoist_meta(few) == few          # fewer than HOIST_MIN reads: left alone


def _programs():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((37, 19)).astype(np.float32)
    w = rng.standard_normal((19, 11)).astype(np.float32)
    y = rng.integers(0, 11, 37).astype(np.int32)

    def f(x, w, y):
        h = vnp.tanh(x @ w + 1.0)
        z = vnp.exp(h - h.max(axis=1, keepdims=True))
        return (z / z.sum(axis=1, keepdims=True), (y[:, None] == vnp.arange(11)).sum(axis=0),
                h.T[::-1] * x[:, :1].T)
    return f, (x, w, y)


@pytest.mark.parametrize("hoist", [True, False])
def test_kernels_agree_with_and_without_hoisting(monkeypatch, hoist):
    """Regions, reductions and a MatMul with an epilogue give the same bits either way."""
    f, args = _programs()
    monkeypatch.setattr(kernels, "HOIST_META", hoist)
    got = vkml.jit(f)(*[vnp.asarray(a) for a in args])
    monkeypatch.setattr(kernels, "HOIST_META", not hoist)
    ref = vkml.jit(f)(*[vnp.asarray(a) for a in args])
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(r))
    x, w, y = (a.astype(np.float64) if a.dtype == np.float32 else a for a in args)
    h = np.tanh(x @ w + 1.0)
    z = np.exp(h - h.max(axis=1, keepdims=True))
    np.testing.assert_allclose(np.asarray(got[0]), z / z.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(got[1]), (y[:, None] == np.arange(11)).sum(axis=0))
