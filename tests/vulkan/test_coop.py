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
