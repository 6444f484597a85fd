"""float16 MatMul on tensor cores (`lower/matmul/coop.py`): on a device with cooperative
matrices the products run there; elsewhere the same calls take the float32 kernels
(`widen`). Either way the results are NumPy's float32 product rounded once to float16."""
from __future__ import annotations

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.trace import dtypes as dt
from vkml.vulkan import compile as vkc, runtime
from vkml.vulkan.lower.matmul import coop

F16 = np.float16


def _coop_device() -> bool:
    return runtime.get().dev.profile.matmul_coop


def _close_f16(got: np.ndarray, want32: np.ndarray, scale: np.ndarray) -> None:
    """got (float16) within one float16 ulp of the float32 product want32, plus what
    float32 accumulation in another order may move it: 2^-20 of scale (|A| @ |B|)."""
    want = want32.astype(F16)
    ulp = np.spacing(np.abs(want)).astype(np.float32) + scale * 2.0 ** -20
    err = np.abs(got.astype(np.float32) - want.astype(np.float32))
    assert got.dtype == F16 and got.shape == want.shape
    assert np.all(err <= ulp), f"max error {err.max()} at {np.unravel_index(np.argmax(err - ulp), err.shape)}"


@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("out", [dt.float16, dt.float32])
def test_kernels_compile(ta, tb, out):
    # every layout's GLSL is valid SPIR-V on any machine (glslang), tensor cores or not
    for t in (coop.COOP_TILE, coop.COOP_MID, coop.COOP_SMALL, coop.COOP_TILE._replace(fn=8),
              coop.COOP_MID._replace(fn=8), coop.COOP_SMALL._replace(fn=8)):
        assert vkc.spirv(coop.program(t, 1, ta, tb, out).render(), "coop")[:4] == b"\x03\x02\x23\x07"


@pytest.mark.parametrize("shape_a, shape_b", [((64, 32), (32, 48)), ((104, 40), (40, 72)),
                                              ((3, 136, 64), (3, 64, 200))])
def test_float16_matmul(shape_a, shape_b):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape_a).astype(F16)
    b = rng.standard_normal(shape_b).astype(F16)
    f = vkml.jit(lambda x, y: x @ y)
    got = np.asarray(f(vnp.asarray(a), vnp.asarray(b)))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    _close_f16(got, a32 @ b32, np.abs(a32) @ np.abs(b32))
    names = [n for n, _ in f.profile(vnp.asarray(a), vnp.asarray(b))]
    assert any(n.startswith("MatMul_coop") for n in names) == _coop_device(), names


def test_transposed_operands_and_gradient():
    # the gradient reads x and the cotangent transposed (fusion folds the transposes)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((48, 64)).astype(F16)
    w = rng.standard_normal((64, 32)).astype(F16)

    def loss(w, x):
        return (x @ w).astype(vnp.float32).sum()
    g = np.asarray(vkml.jit(vkml.grad(loss))(vnp.asarray(w), vnp.asarray(x)))
    # d/dw sum(x @ w) = x^T @ ones: the column sums of x, rounded once to float16
    x32 = x.astype(np.float32)
    _close_f16(g, x32.T @ np.ones((48, 32), np.float32), np.abs(x32).T @ np.ones((48, 32), np.float32))
    b = rng.standard_normal((24, 48)).astype(F16)
    y = np.asarray(vkml.jit(lambda p, q: p.T @ q.T)(vnp.asarray(x), vnp.asarray(b)))
    b32 = b.astype(np.float32)
    _close_f16(y, x32.T @ b32.T, np.abs(x32).T @ np.abs(b32).T)


def test_results_round_to_nearest_even():
    # exact float32 sums just past, at and between float16 halfway points: one tile wholly
    # inside the matrices (its results stored straight from the fragments) and rows
    # that only the nearest-even rounding gets right
    u = 2.0 ** -11                           # half a float16 ulp at 1
    rows = [[1, u, 2.0 ** -20], [1, u], [1, 3 * u], [1, u, -(2.0 ** -20)], [-1, -u, -(2.0 ** -20)],
            [2048, 1], [2048, 1, 2.0 ** -10], [65504, 16]]
    a = np.zeros((64, 16), F16)
    for i in range(64):
        r = rows[i % len(rows)]
        a[i, :len(r)] = r
    b = np.ones((16, 64), F16)
    got = np.asarray(vkml.jit(lambda x, y: x @ y)(vnp.asarray(a), vnp.asarray(b)))
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(F16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_shapes_tensor_cores_do_not_take_stay_on_float32_kernels():
    # K = 12 is no multiple of 8: widened to the float32 kernels on every device
    rng = np.random.default_rng(2)
    a = rng.standard_normal((16, 12)).astype(F16)
    b = rng.standard_normal((12, 24)).astype(F16)
    f = vkml.jit(lambda x, y: x @ y)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    _close_f16(np.asarray(f(vnp.asarray(a), vnp.asarray(b))), a32 @ b32, np.abs(a32) @ np.abs(b32))
    assert not any(n.startswith("MatMul_coop") for n, _ in f.profile(vnp.asarray(a), vnp.asarray(b)))


def test_choice_of_tile_and_fragments():
    # 16x8 fragments only where the device lists them; the small tile below a workgroup
    # per multiprocessor
    assert coop.choose(4096, 4096, 1, shapes=(coop.SHAPES[8],)).fn == 8
    assert coop.choose(4096, 4096, 1, shapes=(coop.SHAPES[16],)).fn == 16
    assert coop.choose(512, 512, 1)[:5] == tuple(coop.COOP_SMALL[:5])
    assert coop.choose(2048, 2048, 1)[:5] == tuple(coop.COOP_MID[:5])
    assert coop.choose(512, 512, 64)[:5] == tuple(coop.COOP_TILE[:5])


def test_eligibility():
    assert coop.eligible(8, 8, 8, False, False)
    assert not coop.eligible(8, 8, 12, False, False)      # K must be a multiple of 8
    assert not coop.eligible(12, 8, 8, True, False)       # A stored (K, M): M too
    assert coop.eligible(12, 12, 8, False, True)          # B stored (N, K): N free
    assert not coop.eligible(12, 12, 8, False, False)     # B stored (K, N): N too


def _epilogue_group(f, *args):
    # the schedule a tensor-core device gives f: the MatMul group with an epilogue
    import dataclasses
    from vkml.vulkan import fusion
    from vkml.vulkan.widen import widen
    prof = dataclasses.replace(runtime.get().dev.profile, matmul_coop=True, matmul_epilogues=True)
    on, fusion.COOP_EPILOGUES = fusion.COOP_EPILOGUES, True
    try:
        groups = fusion.schedule(widen(vkml.make_graph(f, *args), True, True), profile=prof)
    finally:
        fusion.COOP_EPILOGUES = on
    return groups, [g for g in groups if g.node is not None and g.epilogue is not None]


def _bias_relu_update(x, w, b, w2, v):
    # float16 products' two epilogues in a mixed-precision step: bias + ReLU stored as
    # float16, and a float32 update read back from the float16 value
    h = vnp.maximum(x @ w + b, 0)
    return h, v - 0.5 * (x @ w2).astype(vnp.float32)


@pytest.mark.parametrize("ta, tb", [(False, False), (True, True)])
def test_epilogue_kernels_compile(ta, tb):
    # the fused epilogue (16-bit and float32 leaves, 16-bit or float32 stores) is valid
    # SPIR-V on any machine; it takes the staging tile's stores (no direct ones)
    from vkml.vulkan.lower.matmul.epilogue import operands
    args = (vnp.ones((64, 32), dtype=vnp.float16), vnp.ones((32, 48), dtype=vnp.float16),
            vnp.ones(48, dtype=vnp.float16), vnp.ones((32, 48), dtype=vnp.float16), vnp.ones((64, 48)))
    groups, epis = _epilogue_group(_bias_relu_update, *args)
    assert len(epis) == 2 and len(groups) == 2, [str(g) for g in groups]
    for g in epis:
        reg = g.epilogue
        epi = operands((reg, [None if l is g.node else "view" for l in reg.leaves]), g.node)[0]
        src = coop.program(coop.COOP_MID._replace(fn=8), 1, ta, tb, reg.dtype, epi, dt.float16).render()
        assert "epi(" in src and "lp_round_f16(v)" in src and "float16_t(acc" not in src
        assert vkc.spirv(src, "coop")[:4] == b"\x03\x02\x23\x07"


def test_float64_epilogues_stay_apart():
    # the tensor-core kernel has no float64 math: such a region is a kernel of its own
    args = (vnp.ones((64, 32), dtype=vnp.float16), vnp.ones((32, 48), dtype=vnp.float16),
            vnp.ones((64, 48), dtype=vnp.float64))
    assert not _epilogue_group(lambda x, w, v: v + (x @ w).astype(vnp.float64), *args)[1]


def test_fused_epilogues_match_numpy(monkeypatch):
    # bias + ReLU in float16 and a float32 update from the rounded product, against NumPy:
    # one tensor-core kernel each where the device has them (epilogues turned on: they are
    # off by default, `fusion.COOP_EPILOGUES`), the float32 kernels elsewhere
    from vkml.vulkan import fusion
    monkeypatch.setattr(fusion, "COOP_EPILOGUES", True)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((136, 64)).astype(F16)
    w = rng.standard_normal((64, 200)).astype(F16)
    b = rng.standard_normal(200).astype(F16)
    w2 = rng.standard_normal((64, 200)).astype(F16)
    v = rng.standard_normal((136, 200)).astype(np.float32)
    f = vkml.jit(_bias_relu_update)
    ins = [vnp.asarray(t) for t in (x, w, b, w2, v)]
    h, u = (np.asarray(r) for r in f(*ins))
    x32 = x.astype(np.float32)

    def product(w):
        # the product may round to a float16 neighbour where float32 sums in another
        # order straddle a halfway point: one product ulp (pulp), then the epilogue's
        w32 = w.astype(np.float32)
        prod = (x32 @ w32).astype(F16).astype(np.float32)
        return prod, np.spacing(np.abs(prod.astype(F16))).astype(np.float32) + (np.abs(x32) @ np.abs(w32)) * 2.0 ** -20
    prod, pulp = product(w)
    want_h = np.maximum(prod + b.astype(np.float32), 0).astype(F16)
    err = np.abs(h.astype(np.float32) - want_h.astype(np.float32))
    assert h.dtype == F16 and np.all(err <= pulp + np.spacing(np.abs(want_h)).astype(np.float32))
    prod, pulp = product(w2)
    want_u = v - np.float32(0.5) * prod
    assert u.dtype == np.float32 and np.all(np.abs(u - want_u) <= 0.5 * pulp + 1e-6 * np.abs(want_u))
    names = [n for n, _ in f.profile(*ins)]
    if _coop_device():
        assert sorted(names) == ["MatMul_coop_epi", "MatMul_coop_epi"], names
    else:
        assert not any(n.startswith("MatMul_coop") for n in names), names


def test_conv2d_and_attention_take_tensor_cores():
    # conv2d's Im2Col product (K = C*kh*kw and the output pixels multiples of 8) and both
    # products of attention run on tensor cores where the device has them
    from vkml.nn import functional as F
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 8, 8, 8)).astype(F16)
    k = rng.standard_normal((16, 8, 3, 3)).astype(F16)
    conv = vkml.jit(lambda a, c: F.conv2d(a, c, padding=1))
    got = np.asarray(conv(vnp.asarray(x), vnp.asarray(k)))
    xp = np.pad(x.astype(np.float32), ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, :, i:i + 8, j:j + 8] for i in range(3) for j in range(3)], 2)  # N C 9 H W
    cols = cols.reshape(2, 72, 64)
    k32 = k.reshape(16, 72).astype(np.float32)
    _close_f16(got.reshape(2, 16, 64), k32 @ cols, np.abs(k32) @ np.abs(cols))
    names = [n for n, _ in conv.profile(vnp.asarray(x), vnp.asarray(k))]
    assert any(n.startswith("MatMul_coop") for n in names) == _coop_device(), names

    q, kk, v = (rng.standard_normal((2, 16, 32)).astype(F16) for _ in range(3))
    att = vkml.jit(F.scaled_dot_product_attention)
    out = np.asarray(att(*(vnp.asarray(t) for t in (q, kk, v))))
    q32, k32, v32 = (t.astype(np.float32) for t in (q, kk, v))
    s = (q32 @ k32.transpose(0, 2, 1)).astype(F16).astype(np.float32) / np.float32(np.sqrt(32))
    p = np.exp(s - s.max(-1, keepdims=True))
    p = (p / p.sum(-1, keepdims=True)).astype(F16).astype(np.float32)
    want = p @ v32
    # float16 scores and weights: a few ulps of the scores move the weights by ~2^-9
    assert out.dtype == F16 and np.allclose(out.astype(np.float32), want, rtol=1e-2, atol=1e-2)
    names = [n for n, _ in att.profile(*(vnp.asarray(t) for t in (q, kk, v)))]
    assert sum(n.startswith("MatMul_coop") for n in names) == (2 if _coop_device() else 0), names
