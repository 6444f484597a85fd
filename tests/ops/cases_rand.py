"""Cases for Rand: Philox-4x32-10 draws compared bit for bit with a NumPy reimplementation.

The reference below is written from the Philox paper (Salmon et al., SC'11) and checked
against the Random123 known-answer vectors in tests/test_random.py. Element i of a Rand
output is the Philox block of counter (i, 0, 0, 0) under the key's two words; int32 is
word 0, float32 its top 24 bits * 2^-24, float64 53 bits of words 0 and 1 * 2^-53. Every
case is exact: the same bits on every device is part of the contract.
"""
from __future__ import annotations

import numpy as np

from vkml.array import bind
from vkml.trace.ops import OpKind

from .cases import Case

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK = 0xFFFFFFFF


def philox4x32_10(counter, key) -> list[np.ndarray]:
    """Philox-4x32-10 on arrays: counter is 4 uint32 arrays (or ints), key 2 ints."""
    c = [np.asarray(x, dtype=np.uint32) for x in counter]
    k0, k1 = int(key[0]) & _MASK, int(key[1]) & _MASK
    for r in range(10):
        if r:
            k0, k1 = (k0 + _W0) & _MASK, (k1 + _W1) & _MASK
        p0 = _M0 * c[0].astype(np.uint64)
        p1 = _M1 * c[2].astype(np.uint64)
        hi0, lo0 = (p0 >> np.uint64(32)).astype(np.uint32), p0.astype(np.uint32)
        hi1, lo1 = (p1 >> np.uint64(32)).astype(np.uint32), p1.astype(np.uint32)
        c = [hi1 ^ c[1] ^ np.uint32(k0), lo1, hi0 ^ c[3] ^ np.uint32(k1), lo0]
    return c


def rand_words(key, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Words 0 and 1 (uint32) of the blocks for elements 0..n-1 under key."""
    key = np.asarray(key).astype(np.int64)
    i = np.arange(n, dtype=np.uint32)
    z = np.zeros(n, dtype=np.uint32)
    w = philox4x32_10([i, z, z, z], (key[0], key[1]))
    return w[0], w[1]


def rand_ref(key, shape, dtype) -> np.ndarray:
    """What Rand(key, shape, dtype) must produce, exactly."""
    n = int(np.prod(shape, dtype=np.int64))
    w0, w1 = rand_words(key, n)
    d = np.dtype(dtype)
    if d == np.int32:
        out = w0.view(np.int32)
    elif d == np.float32:
        out = (w0 >> np.uint32(8)).astype(np.float64) * 2.0 ** -24
    else:
        out = ((w0 >> np.uint32(11)).astype(np.float64) * 2.0 ** 32 + w1.astype(np.float64)) * 2.0 ** -53
    return out.astype(d).reshape(shape)


CASES: list[Case] = []
_KEYS = np.random.default_rng(7).integers(-2**31, 2**31, size=(4, 2)).astype(np.int32)


def _add(name, fn, ref, args, dtype):
    CASES.append(Case(OpKind.Rand, f"{name}-{np.dtype(dtype).name}", fn, ref, args, exact=True,
                      dtype=dtype))


def _rand(k, shape, d):
    return bind(OpKind.Rand, [k], shape=shape, dtype=np.dtype(d))


for _d in (np.int32, np.float32, np.float64):
    for _name, _shape, _key in [
        ("1d", (7,), _KEYS[0]),
        ("2d-multi-group", (37, 11), _KEYS[1]),        # > 256 threads: several workgroups
        ("0d", (), _KEYS[2]),
        ("size0", (0, 4), _KEYS[3]),
        ("size1-dims", (1, 3, 1), _KEYS[0]),
        ("zero-key", (4,), np.zeros(2, np.int32)),     # Random123 KAT block at element 0
        ("ones-key", (5,), np.full(2, -1, np.int32)),   # key words 0xffffffff
    ]:
        _add(_name, (lambda s, d: lambda k: _rand(k, s, d))(_shape, _d),
             (lambda s, d: lambda k: rand_ref(k, s, d))(_shape, _d), [_key], _d)
    # keys that are not the original upload: a strided slice and a column of a transpose
    _add("strided-key", (lambda d: lambda k: _rand(k[::2], (3, 2), d))(_d),
         (lambda d: lambda k: rand_ref(k[::2], (3, 2), d))(_d), [_KEYS[:2].reshape(4)], _d)
    _add("transposed-key", (lambda d: lambda k: _rand(k.T[1], (6,), d))(_d),
         (lambda d: lambda k: rand_ref(k.T[1], (6,), d))(_d), [_KEYS[2:4].T.copy()], _d)
