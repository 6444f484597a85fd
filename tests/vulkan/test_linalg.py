"""The factorisation kernels' launch shape (`vulkan/lower/linalg.py`): one invocation per
small matrix on CPU devices, in workgroups of one SIMD group, so a batch spreads over
lavapipe's threads; batches around a group's edge are exact against NumPy."""
import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
import vkml.numpy.linalg as vla
import vkml.scipy.linalg as vsl
from vkml.vulkan import runtime
from vkml.vulkan.lower import linalg

RNG = np.random.default_rng(7)


def _spd(b, n):
    a = RNG.standard_normal((b, n, n))
    return a @ a.transpose(0, 2, 1) + n * np.eye(n)


@pytest.mark.parametrize("batch", [1, 15, 16, 17, 37])
def test_batches_across_workgroup_edges(batch):
    a = _spd(batch, 12)
    b = RNG.standard_normal((batch, 12, 3))
    A, B = vnp.asarray(a, vnp.float32), vnp.asarray(b, vnp.float32)
    np.testing.assert_allclose(np.asarray(vla.cholesky(A)), np.linalg.cholesky(a), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(np.asarray(vla.solve(A, B)), np.linalg.solve(a, b), rtol=1e-4, atol=1e-5)
    lu, piv = vsl.lu_factor(A)
    x = np.asarray(vsl.lu_solve((lu, piv), B))
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-4, atol=1e-5)


def test_private_kernels_launch_one_simd_group_a_workgroup():
    dev = runtime.get().dev
    G = linalg.private_group(dev)
    a = vnp.asarray(_spd(64, 8), vnp.float32)
    f = vkml.jit(vla.cholesky)
    f(a)
    chol = [d for d in f._entry((a,))[0][0].lowered.dispatches if d.kernel.name.startswith("Cholesky")]
    assert len(chol) == 1
    if dev.profile.cpu:
        assert G == min(max(dev.subgroup_size, 8), linalg.PRIVATE_GROUP)
        assert chol[0].kernel.program.local_size == G and chol[0].groups == -(-64 // G)
    else:
        assert G == linalg.PRIVATE_GROUP
