"""The word copy and fill kernels (`vkml/vulkan/lower/copies.py`): every movement operator
(one kernel each with fusion off) and Full, bit for bit against NumPy, on small shapes (one
word an invocation), large ones (8, 4 or 2 words an invocation, several rounds, the
range check of each round) and layouts that make either side a wide access or a strided
one: unaligned offsets (Concat, Pad), steps and negative strides (Slice, Flip), stride 0
(Expand), float64 as word pairs. Both the texel and storage-buffer source and the 8- and
4-word widths run (`device.using`)."""
from __future__ import annotations

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.trace import dtypes as dt
from vkml.vulkan import fusion
from vkml.vulkan.device import using

RNG = np.random.default_rng(5)
# the profile variants: (8 words as u64vec4 and texel sources) and (4 words, storage buffers)
VARIANTS = {"wide+texels": dict(wide_loads=True, texels=True),
            "vec4+storage": dict(wide_loads=False, texels=False)}


def _data(shape, dtype):
    d = np.dtype(dtype)
    if d == np.bool_:
        return RNG.random(shape) < 0.5
    if d.kind == "i":
        return RNG.integers(-2**31, 2**31 - 1, shape, dtype=np.int64).astype(d)
    return RNG.standard_normal(shape).astype(d)


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" or a.dtype == dt.bfloat16 else a


def _run(f, *args, **profile):
    """f jitted with one kernel per node, under the profile changes."""
    with using(**profile), fusion.disabled():
        return vkml.tree_util.tree_map(np.asarray, vkml.jit(f)(*[vnp.asarray(a) for a in args]))


def _check(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool", "float64", "float16", "bfloat16"])
def test_small_concat_pad_flip_every_dtype(dtype):
    """Odd sizes on every axis: one word an invocation, offsets anywhere."""
    d = dt.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    a, b, c = _data((3, 5, 7), d), _data((3, 2, 7), d), _data((3, 5, 1), d)

    def f(a, b, c):
        return (vnp.concatenate([a, b, a], axis=1), vnp.concatenate([c, a, c], axis=2),
                vnp.concatenate([a, a[:1]], axis=0), vnp.pad(a, ((1, 0), (0, 2), (3, 1))),
                vnp.flip(a, axis=(0, 2)), a.transpose(2, 0, 1))
    want = (np.concatenate([a, b, a], axis=1), np.concatenate([c, a, c], axis=2),
            np.concatenate([a, a[:1]], axis=0), np.pad(a, ((1, 0), (0, 2), (3, 1))),
            np.flip(a, axis=(0, 2)), a.transpose(2, 0, 1))
    for g, w in zip(_run(f, a, b, c), want):
        _check(g, w)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_large_movements_float32(variant):
    """Wide and strided sides: aligned (40 + 24) and unaligned (12 + 20, 7 + 9) Concat
    offsets, a transpose (a strided source), steps, flips, broadcasts, an unaligned Pad
    and a strided SliceBackward (the gradient of a stepped slice)."""
    x = _data((600, 64), np.float32)
    x.view(np.uint32)[0, :3] = [0x7F800001, 0xFFC00123, 0x80000000]     # NaN payloads, -0.0
    parts = [_data((600, k), np.float32) for k in (40, 24, 12, 20, 7, 9)]
    row, col = _data((1, 64), np.float32), _data((600, 1), np.float32)

    def f(x, p0, p1, p2, p3, p4, p5, row, col):
        return (vnp.concatenate([p0, p1], axis=1), vnp.concatenate([p2, p3, p2], axis=1),
                vnp.concatenate([p4, p5], axis=1), x.T, x[1::2, 3::3], vnp.flip(x, axis=0),
                vnp.flip(x, axis=1), vnp.broadcast_to(row, (600, 64)), vnp.broadcast_to(col, (600, 64)),
                vnp.pad(x, ((3, 1), (5, 2)), constant_values=-2.5))
    want = (np.concatenate(parts[:2], axis=1), np.concatenate([parts[2], parts[3], parts[2]], axis=1),
            np.concatenate(parts[4:], axis=1), x.T, x[1::2, 3::3], np.flip(x, axis=0), np.flip(x, axis=1),
            np.broadcast_to(row, (600, 64)), np.broadcast_to(col, (600, 64)),
            np.pad(x, ((3, 1), (5, 2)), constant_values=-2.5))
    got = _run(f, x, *parts, row, col, **VARIANTS[variant])
    for i, (g, w) in enumerate(zip(got, want)):
        _check(g, w)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_slice_backward_large(variant):
    """The gradient of a stepped, offset slice: a fill and a copy to a strided output."""
    x = _data((300, 128), np.float32)
    g = _data((150, 41), np.float32)

    def f(x, g):
        return vkml.vjp(lambda v: v[1::2, 5::3], x)[1](g)[0]
    want = np.zeros_like(x)
    want[1::2, 5::3] = g
    _check(_run(f, x, g, **VARIANTS[variant]), want)


def test_rounds_and_tails():
    """Over 2^16 groups of 8 words: four rounds an invocation, the last workgroup cut off
    in its rounds (70001 + 3 rows of 8; a Pad's copy runs after its fill, so a round
    past the end would show in the padding), and (2, 4)-word-wide float64 copies."""
    a, b = _data((70001, 8), np.float32), _data((3, 8), np.float32)
    c, e = _data((20001, 6), np.float64), _data((20001, 2), np.float64)
    got = _run(lambda a, b, c, e: (vnp.concatenate([a, b]), vnp.concatenate([b, a]),
                                   vnp.concatenate([c, e], axis=1), c.T,
                                   vnp.pad(a, ((0, 1), (0, 0)), constant_values=7.0)), a, b, c, e)
    want = (np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([c, e], axis=1), c.T,
            np.pad(a, ((0, 1), (0, 0)), constant_values=7.0))
    for g, w in zip(got, want):
        _check(g, w)


@pytest.mark.parametrize("dtype", ["int32", "bool", "float64"])
def test_large_concat_and_transpose_other_dtypes(dtype):
    a, b = _data((513, 48), np.dtype(dtype)), _data((513, 16), np.dtype(dtype))
    got = _run(lambda a, b: (vnp.concatenate([a, b], axis=1), a.T), a, b)
    _check(got[0], np.concatenate([a, b], axis=1))
    _check(got[1], a.T)


@pytest.mark.parametrize("dtype,value", [("float64", -1.5), ("float32", 2.25), ("int32", -7),
                                         ("bool", True), ("float16", 0.333), ("bfloat16", -3.0)])
@pytest.mark.parametrize("n", [5, 40001, 1 << 17])
def test_full(dtype, value, n):
    """Full as W-word stores: a float64 value's two words in order, a 16-bit value's pair
    (an odd count keeps the one-element kernel), every size's last group."""
    d = dt.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    got = _run(lambda z: vnp.full((n,), value, d), np.zeros(1, np.float32))
    _check(got, np.full((n,), value, d))


def test_movements_use_the_word_copy():
    """Concat, Pad and Full lower to the many-words kernels on large arrays (their meta
    counts groups of words, `nv`): not the one-element strided copy."""
    x = vnp.asarray(_data((2048, 96), np.float32))
    f = vkml.jit(lambda x: (vnp.concatenate([x, x], axis=1), vnp.pad(x, ((0, 0), (8, 8)))))
    f(x)
    (compiled, _), _, _ = f._entry((x,), {})
    names = {}
    for ds in compiled.lowered.dispatches:
        for part in ds.kernel.name.split("+"):
            names.setdefault(part, []).append(ds.kernel.program)
    assert {"Concat", "Pad", "Full"} <= set(names), names
    progs = [ds.kernel.program for ds in compiled.lowered.dispatches]
    assert all("nv" in dict(p.meta.fields) for p in progs if p.name in ("Concat", "Pad", "Full")), \
        [(p.name, p.meta.fields) for p in progs]
