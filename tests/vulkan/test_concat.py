"""The Concat kernel (`lower/movement.py`): one dispatch of up to CONCAT_PIECES inputs, each
output element read from its piece at the right row and column offset, four at a time
where every piece's row splits in fours; against np.concatenate (exact)."""
import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.vulkan.lower import movement

RNG = np.random.default_rng(0)

CASES = [
    ([(32, 128)] * 4, 1),            # the LSTM gate gradients: vec4, texel reads
    ([(3, 5), (3, 2), (3, 7)], 1),   # rows that do not split in fours: one element a thread
    ([(2, 3, 4), (2, 1, 4)], 1),     # an inner axis after the concatenated one
    ([(5,), (3,)], 0),
    ([(2, 3), (4, 3)], 0),
    ([(1, 3)] * 11, 0),              # more inputs than one kernel binds: two kernels
    ([(4, 4)] * 10, 1),              # ... side by side in every row
    ([(2, 0), (2, 3)], 1),           # an empty piece
]


@pytest.mark.parametrize("shapes,axis", CASES, ids=lambda c: str(c))
def test_concat_matches_numpy(shapes, axis):
    arrs = [(RNG.normal(size=s) * 10).astype(np.float32) for s in shapes]
    want = np.concatenate(arrs, axis=axis)
    got = vkml.jit(lambda *xs: vnp.concatenate(list(xs), axis=axis))(*map(vnp.asarray, arrs))
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.bool_])
def test_concat_other_dtypes(dtype):
    arrs = [(RNG.normal(size=s) * 10).astype(dtype) for s in [(3, 8), (3, 4), (3, 2)]]
    got = vnp.concatenate([vnp.asarray(a) for a in arrs], axis=1)
    assert np.asarray(got).dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(arrs, axis=1))


def test_concat_is_one_dispatch_per_eight_inputs():
    xs = [vnp.ones((4, 4)) for _ in range(10)]
    lo = vkml.jit(lambda *a: vnp.concatenate(list(a), axis=1)).lower(*xs)
    assert movement.CONCAT_PIECES == 8 and lo.dispatch_count == 2
    lo = vkml.jit(lambda *a: vnp.concatenate(list(a), axis=1)).lower(*xs[:4])
    assert lo.dispatch_count == 1
