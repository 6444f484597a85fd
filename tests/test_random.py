"""vkml.random: determinism, key derivation, distributions, and Philox known answers.

Statistical checks use bounds of 6 standard errors on samples of ~10^5, so a correct
generator fails them with probability ~1e-9 while a wrong scaling, a lost bit or a
reused stream is caught. Everything is seeded, so a pass or failure is reproducible.
"""
import math

import numpy as np
import pytest

import vkml.numpy as vnp
import vkml.random as vr
from vkml.graphs import execute, trace_flat
from vkml.trace.dtypes import DTypeError
from vkml.trace.shapes import ShapeError

from tests.ops.cases_rand import philox4x32_10, rand_ref, rand_words

N = 100_000


def _np(a):
    return np.asarray(a)


# ------------------------------------------------------------------ Philox known answers


@pytest.mark.parametrize("ctr, key, want", [
    # Random123 kat_vectors, philox4x32_10
    ([0, 0, 0, 0], [0, 0], [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]),
    ([0xffffffff] * 4, [0xffffffff] * 2, [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]),
    ([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0],
     [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]),
])
def test_reference_philox_known_answers(ctr, key, want):
    got = [int(w) for w in philox4x32_10(ctr, key)]
    assert got == want, [hex(g) for g in got]


def test_device_known_answer():
    """Element 0 under key (0, 0) is the KAT block with zero counter: words 0 and 1."""
    k = vnp.asarray(np.zeros(2, np.int32))
    assert int(_np(vr.bits(k, (1,)))[0]) & 0xFFFFFFFF == 0x6627e8d5
    assert float(_np(vr.uniform(k, (1,)))[0]) == (0x6627e8d5 >> 8) * 2.0 ** -24
    want64 = ((0x6627e8d5 >> 11) * 2.0 ** 32 + 0xe169c58d) * 2.0 ** -53
    assert float(_np(vr.uniform(k, (1,), dtype="float64"))[0]) == want64


# ------------------------------------------------------------------ keys


def test_key_words():
    assert _np(vr.key(0)).tolist() == [0, 0]
    assert _np(vr.key(5)).tolist() == [0, 5]
    assert _np(vr.key((3 << 32) + 7)).tolist() == [3, 7]
    assert _np(vr.key(-1)).tolist() == [-1, -1]
    assert _np(vr.key(2**64 - 1)).tolist() == [-1, -1]
    assert _np(vr.PRNGKey(9)).tolist() == [0, 9]
    assert vr.key(0).dtype == np.int32 and vr.key(0).shape == (2,)
    with pytest.raises(OverflowError):
        vr.key(2**64)
    with pytest.raises(TypeError, match="seed"):
        vr.key(1.5)


def test_bad_key_is_refused_with_a_clear_error():
    with pytest.raises(TypeError, match=r"uniform.*shape \(2,\)"):
        vr.uniform(vnp.zeros(3, "int32"), (2,))
    with pytest.raises(TypeError, match="int32"):
        vr.normal(vnp.zeros(2), (2,))
    with pytest.raises(DTypeError, match="float"):
        vr.uniform(vr.key(0), (2,), dtype="int32")


def test_same_key_same_numbers():
    k = vr.key(42)
    a, b = _np(vr.uniform(k, (1000,))), _np(vr.uniform(vr.key(42), (1000,)))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(_np(vr.normal(k, (64,))), _np(vr.normal(k, (64,))))
    np.testing.assert_array_equal(_np(vr.split(k, 4)), _np(vr.split(k, 4)))
    np.testing.assert_array_equal(_np(vr.fold_in(k, 3)), _np(vr.fold_in(k, 3)))
    # the draws are the reference's, bit for bit
    np.testing.assert_array_equal(a, rand_ref(_np(k), (1000,), np.float32))


def test_different_keys_differ():
    draws = [_np(vr.bits(vr.key(s), (256,))) for s in (0, 1, 2, 1 << 32, -1)]
    for i in range(len(draws)):
        for j in range(i + 1, len(draws)):
            # 32-bit words from independent streams agree in ~256 / 2^32 places
            assert (draws[i] == draws[j]).sum() == 0, (i, j)


def test_split_keys_are_new_and_independent():
    k = vr.key(0)
    ks = _np(vr.split(k, 8))
    assert ks.shape == (8, 2) and ks.dtype == np.int32
    assert len({tuple(r) for r in ks}) == 8
    # children are not the parent's own draws (no stream reuse), nor the parent itself
    parent_words = set(_np(vr.bits(k, (64,))).tolist())
    assert not parent_words & set(ks.ravel().tolist())
    assert tuple(_np(k)) not in {tuple(r) for r in ks}
    # a child split from a child stays fresh too
    grand = _np(vr.split(vnp.asarray(ks[0]), 8))
    assert not {tuple(r) for r in grand} & {tuple(r) for r in ks}
    # draws of sibling keys are uncorrelated
    u = np.stack([_np(vr.uniform(vnp.asarray(r), (N // 4,))) for r in ks[:4]])
    c = np.corrcoef(u)
    off = c[~np.eye(4, dtype=bool)]
    assert np.abs(off).max() < 6 / math.sqrt(N // 4), c
    # the alias and the default
    assert vr.split(k).shape == (2, 2)
    np.testing.assert_array_equal(_np(vr.split(k, n=3)), _np(vr.split(k, 3)))
    assert vr.split(k, 0).shape == (0, 2)


def test_fold_in():
    k = vr.key(0)
    fs = [tuple(_np(vr.fold_in(k, d))) for d in (0, 1, 2, 2**31, 2**32 - 1)]
    assert len(set(fs)) == len(fs)
    # data is taken mod 2^32, and a traced-style int32 scalar array gives the same key
    assert tuple(_np(vr.fold_in(k, -1))) == fs[-1]
    assert tuple(_np(vr.fold_in(k, vnp.asarray(np.int32(2))))) == fs[2]
    # nothing collides with the parent, its split children, or nearby seeds' keys
    others = {tuple(_np(k))} | {tuple(r) for r in _np(vr.split(k, 4))}
    others |= {tuple(_np(vr.key(s))) for s in range(4)}
    assert not set(fs) & others
    assert tuple(_np(vr.fold_in(vr.key(1), 0))) not in fs


# ------------------------------------------------------------------ distributions


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_uniform_moments(dtype):
    u = _np(vr.uniform(vr.key(1), (N,), dtype=dtype))
    assert u.dtype == np.dtype(dtype) and u.shape == (N,)
    assert u.min() >= 0.0 and u.max() < 1.0
    se_mean = math.sqrt(1 / 12 / N)
    assert abs(u.mean() - 0.5) < 6 * se_mean
    # Var(U) = 1/12; the sample variance's standard error is sqrt((1/80 - 1/144) / N)
    assert abs(u.var() - 1 / 12) < 6 * math.sqrt((1 / 80 - 1 / 144) / N)
    # every bit the format promises is random: low mantissa bits are not stuck
    scale = 2.0 ** (24 if dtype == "float32" else 53)
    m = (u.astype(np.float64) * scale).astype(np.uint64)
    assert (m & np.uint64(1)).mean() == pytest.approx(0.5, abs=6 * 0.5 / math.sqrt(N))
    # 10-bin histogram: chi-square with 9 degrees of freedom, far tail at 50
    counts = np.bincount((u * 10).astype(int), minlength=10)
    chi2 = ((counts - N / 10) ** 2 / (N / 10)).sum()
    assert chi2 < 50, counts


def test_uniform_bounds_and_shapes():
    k = vr.key(3)
    u = _np(vr.uniform(k, (N // 10,), minval=-2.0, maxval=3.0))
    assert u.min() >= -2.0 and u.max() < 3.0
    assert abs(u.mean() - 0.5) < 6 * 5 * math.sqrt(1 / 12 / (N // 10))
    # array bounds broadcast against the shape
    lo = vnp.asarray([0.0, 10.0, 100.0])
    v = _np(vr.uniform(k, (1000, 3), minval=lo, maxval=lo + 1.0))
    assert v.shape == (1000, 3)
    assert (v >= [0, 10, 100]).all() and (v < [1, 11, 101]).all()
    # the unit draw is scaled exactly as the formula says
    base = rand_ref(_np(k), (N // 10,), np.float32)
    np.testing.assert_allclose(u, base * np.float32(5.0) - np.float32(2.0), rtol=1e-6, atol=1e-6)
    assert vr.uniform(k).shape == () and vr.uniform(k, 5).shape == (5,)
    assert vr.uniform(k, (0, 3)).shape == (0, 3)
    with pytest.raises(ShapeError):
        vr.uniform(k, (2,), minval=vnp.zeros(3))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_moments(dtype):
    z = _np(vr.normal(vr.key(2), (N,), dtype=dtype)).astype(np.float64)
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 6 / math.sqrt(N)
    assert abs(z.var() - 1) < 6 * math.sqrt(2 / N)
    skew = (z ** 3).mean()
    kurt = (z ** 4).mean()
    assert abs(skew) < 6 * math.sqrt(15 / N)
    assert abs(kurt - 3) < 6 * math.sqrt(96 / N)
    # tail mass beyond 2 sigma: 4.55%
    p2 = (np.abs(z) > 2).mean()
    assert abs(p2 - 0.0455) < 6 * math.sqrt(0.0455 * 0.9545 / N)


def test_normal_is_box_muller_of_the_reference_draws():
    k = vr.key(5)
    z = _np(vr.normal(k, (3, 4)))
    u = rand_ref(_np(k), (2, 3, 4), np.float64)
    want = np.sqrt(-2 * np.log(1 - u[0])) * np.cos(2 * np.pi * u[1])
    np.testing.assert_allclose(z, want, rtol=2e-5, atol=2e-5)
    # the extreme draw (u = 0) stays finite: log never sees 0
    assert vr.normal(k).shape == () and vr.normal(k, (0,)).shape == (0,)


def test_bernoulli_rate():
    b = _np(vr.bernoulli(vr.key(4), 0.3, (N,)))
    assert b.dtype == np.bool_
    assert abs(b.mean() - 0.3) < 6 * math.sqrt(0.3 * 0.7 / N)
    assert not _np(vr.bernoulli(vr.key(4), 0.0, (1000,))).any()
    assert _np(vr.bernoulli(vr.key(4), 1.0, (1000,))).all()
    # p as an array: shape defaults to p's, per-element rates
    p = vnp.asarray([0.1, 0.9])
    assert vr.bernoulli(vr.key(4), p).shape == (2,)
    bb = _np(vr.bernoulli(vr.key(4), p, (N // 10, 2)))
    assert abs(bb[:, 0].mean() - 0.1) < 6 * math.sqrt(0.09 / (N // 10))
    assert abs(bb[:, 1].mean() - 0.9) < 6 * math.sqrt(0.09 / (N // 10))
    with pytest.raises(ShapeError):
        vr.bernoulli(vr.key(4), p, (3,))


def _randint_ref(key, shape, lo, hi):
    """minval + floor(R * span / 2^48), R = the top 12 bits of four draws' word 0."""
    n = int(np.prod(shape, dtype=np.int64))
    w0, _ = rand_words(key, 4 * n)
    limbs = (w0 >> np.uint32(20)).astype(object).reshape(4, n)
    r = limbs[0] + limbs[1] * 4096 + limbs[2] * 4096 ** 2 + limbs[3] * 4096 ** 3
    lo = np.broadcast_to(np.asarray(lo, dtype=object), shape).reshape(n)
    hi = np.broadcast_to(np.asarray(hi, dtype=object), shape).reshape(n)
    span = np.maximum(hi - lo, 1)
    return np.array([int(a + (b * s >> 48)) for a, b, s in zip(lo, r, span)],
                    dtype=np.int64).reshape(shape)


@pytest.mark.parametrize("lo, hi", [(0, 10), (-5, 3), (0, 1), (7, 7 + 4097), (-2**31, 2**31),
                                    (0, 2**31 - 1), (-1000, 2**31)])
def test_randint_exact(lo, hi):
    k = vr.key(11)
    got = _np(vr.randint(k, (5, 40), lo, hi))
    assert got.dtype == np.int32
    assert got.min() >= lo and got.max() < hi
    np.testing.assert_array_equal(got, _randint_ref(_np(k), (5, 40), lo, min(hi, 2**31)))


def test_randint_array_bounds_and_distribution():
    k = vr.key(12)
    # hi == lo gives lo; the last two spans exceed 2^31 (taken as unsigned)
    lo = np.array([0, -7, 100, 5, -2**31 + 1, -2**31], np.int32)
    hi = np.array([3, 9, 101, 5, 2**30, 2**31 - 1], np.int32)
    got = _np(vr.randint(k, (200, 6), vnp.asarray(lo), vnp.asarray(hi)))
    np.testing.assert_array_equal(got, _randint_ref(_np(k), (200, 6), lo.astype(object), hi.astype(object)))
    assert (got >= lo).all() and (got[:, [0, 1, 2, 4, 5]] < hi[[0, 1, 2, 4, 5]]).all()
    r = _np(vr.randint(k, (N,), 0, 6))
    counts = np.bincount(r, minlength=6)
    assert counts.size == 6 and ((counts - N / 6) ** 2 / (N / 6)).sum() < 40, counts
    assert _np(vr.randint(k, (4,), 5, 5)).tolist() == [5] * 4
    assert vr.randint(k, (0, 2), 0, 3).shape == (0, 2)


def test_permutation_is_a_permutation():
    k = vr.key(6)
    for n in (0, 1, 2, 17, 300):
        p = _np(vr.permutation(k, n))
        assert p.dtype == np.int32
        np.testing.assert_array_equal(np.sort(p), np.arange(n))
    a = _np(vr.permutation(k, 300))
    assert not (a == np.arange(300)).all()
    assert not (a == _np(vr.permutation(vr.key(7), 300))).all()
    np.testing.assert_array_equal(a, _np(vr.permutation(k, 300)))
    # no drift of values with position, and the first position is uniform across keys
    assert abs(np.corrcoef(a, np.arange(300))[0, 1]) < 6 / math.sqrt(300)
    firsts = np.array([int(_np(vr.permutation(vnp.asarray(kk), 4))[0]) for kk in _np(vr.split(k, 60))])
    assert np.bincount(firsts, minlength=4).min() >= 3, np.bincount(firsts)
    # an array is shuffled along an axis
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = _np(vr.permutation(k, vnp.asarray(x), axis=1))
    np.testing.assert_array_equal(np.sort(y, axis=1), x)
    np.testing.assert_array_equal(y[1] - y[0], np.full(4, 4.0))   # columns move together


def test_choice():
    k = vr.key(8)
    c = _np(vr.choice(k, 5, (N // 10,)))
    assert c.min() >= 0 and c.max() < 5
    s = _np(vr.choice(k, 10, (10,), replace=False))
    np.testing.assert_array_equal(np.sort(s), np.arange(10))
    pop = vnp.asarray([10.0, 20.0, 30.0])
    assert set(_np(vr.choice(k, pop, (50,))).tolist()) <= {10.0, 20.0, 30.0}
    w = _np(vr.choice(k, 3, (N // 10,), p=vnp.asarray([0.2, 0.0, 0.8])))
    assert (w != 1).all()
    assert abs((w == 0).mean() - 0.2) < 6 * math.sqrt(0.16 / (N // 10))
    with pytest.raises(ValueError):
        vr.choice(k, 3, (4,), replace=False)


def test_draws_trace_like_ordinary_ops():
    """Under a trace (what jit/vmap build on) a key is just an int32 input."""
    def f(k):
        k1, k2 = vr.split(k)
        return vr.uniform(k1, (3,)), vr.normal(vr.fold_in(k2, 1), (2,))
    k = vr.key(13)
    graph, _, captured, leaves = trace_flat(f, [k])
    got = execute(graph, list(leaves) + list(captured))
    want = f(k)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_np(g), _np(w))


# ------------------------------------------------------------------ categorical


def test_categorical_frequencies_match_softmax():
    logits = np.array([0.5, -1.0, 2.0, 0.0, -3.0])
    p = np.exp(logits) / np.exp(logits).sum()
    draws = _np(vr.categorical(vr.key(3), vnp.asarray(logits.astype(np.float32)), shape=(N,)))
    assert draws.dtype == np.int32 and draws.min() >= 0 and draws.max() <= 4
    freq = np.bincount(draws, minlength=5) / N
    assert np.all(np.abs(freq - p) < 6 * np.sqrt(p * (1 - p) / N))


def test_categorical_axis_batch_and_shape():
    logits = np.full((3, 4), -1e9, np.float32)
    logits[[0, 1, 2], [2, 0, 3]] = 0.0       # one certain category per row
    assert _np(vr.categorical(vr.key(0), vnp.asarray(logits))).tolist() == [2, 0, 3]
    assert _np(vr.categorical(vr.key(0), vnp.asarray(logits.T), axis=0)).tolist() == [2, 0, 3]
    many = _np(vr.categorical(vr.key(1), vnp.asarray(logits), shape=(5, 3)))
    assert many.shape == (5, 3) and (many == [2, 0, 3]).all()
    # leading axes of shape draw independently: a uniform row gives different draws
    u = _np(vr.categorical(vr.key(2), vnp.zeros((1, 6)), shape=(200, 1)))
    assert u.shape == (200, 1) and len(set(u.ravel().tolist())) == 6
    same = vr.categorical(vr.key(2), vnp.zeros((1, 6)), shape=(200, 1))
    assert np.array_equal(_np(same), u)
    with pytest.raises(ShapeError, match="must end with the logits' batch shape"):
        vr.categorical(vr.key(0), vnp.asarray(logits), shape=(4,))
    with pytest.raises(ShapeError, match="axis 2 is out of range"):
        vr.categorical(vr.key(0), vnp.asarray(logits), axis=2)
