"""Cases for the movement family: Reshape, Permute, Expand, Slice, Pad, Concat, Flip and
SliceBackward, each on every dtype of its spec.

Movement ops are pure data motion, so every case compares exactly. The kernels address
operands through offsets and (possibly negative or zero) strides, so the cases aim at the
layouts that get those wrong: size-0 and size-1 axes (dropped when axes are merged),
negative steps, offsets into the middle of a buffer, and inputs that are themselves the
result of another movement (`x.T`, `x[::2]`) so they are not the original upload.
"""
from __future__ import annotations

import numpy as np

from vkml.array import bind
from vkml.trace.ops import OpKind

from .cases import Case, rand

DTYPES = (np.float32, np.float64, np.int32, np.bool_)
CASES: list[Case] = []


def _name(dtype) -> str:
    return np.dtype(dtype).name


def _add(op, name, fn, ref, args, dtype):
    CASES.append(Case(op, f"{name}-{_name(dtype)}", fn, ref, args, exact=True, dtype=dtype))


def _slice_attrs(shape, index):
    """The slice.indices form of starts/stops/steps, which the Slice spec takes."""
    rs = [s.indices(d) for s, d in zip(index, shape)]
    return tuple(r[0] for r in rs), tuple(r[1] for r in rs), tuple(r[2] for r in rs)


# ------------------------------------------------------------------------- Reshape
def _reshape_cases(d):
    op = OpKind.Reshape
    _add(op, "3d-to-2d", lambda x: bind(op, [x], shape=(6, 4)),
         lambda x: x.reshape(6, 4), [rand((2, 3, 4), d)], d)
    _add(op, "to-0d", lambda x: bind(op, [x], shape=()),
         lambda x: x.reshape(()), [rand((1, 1), d)], d)
    _add(op, "from-0d-with-ones", lambda x: bind(op, [x], shape=(1, 1, 1)),
         lambda x: x.reshape(1, 1, 1), [rand((), d)], d)
    _add(op, "size0", lambda x: bind(op, [x], shape=(3, 0, 2)),
         lambda x: x.reshape(3, 0, 2), [rand((0, 6), d)], d)
    # a transposed input: Reshape must read the permuted copy in its own C order
    _add(op, "of-transposed", lambda x: bind(op, [x.T], shape=(15,)),
         lambda x: x.T.reshape(15), [rand((3, 5), d)], d)


# ------------------------------------------------------------------------- Permute
def _permute_cases(d):
    op = OpKind.Permute
    _add(op, "3d", lambda x: bind(op, [x], perm=(2, 0, 1)),
         lambda x: x.transpose(2, 0, 1), [rand((2, 3, 4), d)], d)
    _add(op, "4d-size1", lambda x: bind(op, [x], perm=(3, 1, 0, 2)),
         lambda x: x.transpose(3, 1, 0, 2), [rand((3, 1, 4, 2), d)], d)
    _add(op, "size0", lambda x: bind(op, [x], perm=(1, 2, 0)),
         lambda x: x.transpose(1, 2, 0), [rand((2, 0, 3), d)], d)
    _add(op, "of-strided-slice", lambda x: bind(op, [x[::2, 1:]], perm=(1, 0)),
         lambda x: x[::2, 1:].T, [rand((7, 5), d)], d)
    # one above the 256-thread workgroup so a second group is needed
    _add(op, "257x3", lambda x: bind(op, [x], perm=(1, 0)),
         lambda x: x.T, [rand((257, 3), d)], d)


# ------------------------------------------------------------------------- Expand
def _expand_cases(d):
    op = OpKind.Expand
    _add(op, "middle-axis", lambda x: bind(op, [x], shape=(3, 4, 2)),
         lambda x: np.broadcast_to(x, (3, 4, 2)), [rand((3, 1, 2), d)], d)
    _add(op, "new-leading-axes", lambda x: bind(op, [x], shape=(2, 3, 5)),
         lambda x: np.broadcast_to(x, (2, 3, 5)), [rand((5,), d)], d)
    _add(op, "from-0d", lambda x: bind(op, [x], shape=(2, 3)),
         lambda x: np.broadcast_to(x, (2, 3)), [rand((), d)], d)
    _add(op, "to-size0", lambda x: bind(op, [x], shape=(0, 4)),
         lambda x: np.broadcast_to(x, (0, 4)), [rand((1, 4), d)], d)
    _add(op, "of-transposed", lambda x: bind(op, [x.T], shape=(2, 4, 3)),
         lambda x: np.broadcast_to(x.T, (2, 4, 3)), [rand((3, 4), d)], d)


# ------------------------------------------------------------------------- Slice
def _slice_case(d, name, shape, index, prep=None):
    op = OpKind.Slice
    prep = prep or (lambda x: x)

    def fn(x):
        x = prep(x)
        st, sp, stp = _slice_attrs(x.shape, index)
        return bind(op, [x], starts=st, stops=sp, steps=stp)

    _add(op, name, fn, lambda x: prep(x)[index], [rand(shape, d)], d)


def _slice_cases(d):
    _slice_case(d, "steps", (9, 6), (slice(1, 8, 3), slice(0, 6, 2)))
    _slice_case(d, "negative-steps", (7, 5, 3), (slice(None, None, -2), slice(3, 0, -1),
                                                 slice(None)))
    _slice_case(d, "negative-to-start", (6,), (slice(4, None, -3),))
    _slice_case(d, "empty-result", (4, 5), (slice(3, 1), slice(None)))
    _slice_case(d, "empty-negative", (4, 5), (slice(None), slice(1, 3, -1)))
    _slice_case(d, "size0-input", (0, 3), (slice(None), slice(1, 3)))
    # slice.indices(0) with a negative step gives start -1: still a valid, empty slice
    _slice_case(d, "reversed-size0", (0, 3), (slice(None, None, -1), slice(None, None, -2)))
    _slice_case(d, "size1-axes", (1, 5, 1), (slice(None), slice(4, 5), slice(None)))
    _slice_case(d, "of-transposed", (5, 8), (slice(6, 1, -2), slice(1, None)),
                prep=lambda x: x.T)


# ------------------------------------------------------------------------- Pad
_PAD_VALUE = {np.float32: 2.5, np.float64: -1.25, np.int32: 7, np.bool_: True}


def _pad_case(d, name, shape, pads, value=None, prep=None):
    op = OpKind.Pad
    prep = prep or (lambda x: x)
    v = _PAD_VALUE[d] if value is None else value
    _add(op, name, lambda x: bind(op, [prep(x)], pads=pads, value=v),
         lambda x: np.pad(prep(x), pads, constant_values=v), [rand(shape, d)], d)


def _pad_cases(d):
    _pad_case(d, "2d", (3, 4), ((1, 2), (0, 3)))
    _pad_case(d, "zero-value", (2, 3, 2), ((0, 0), (2, 1), (1, 0)), value=False if d is np.bool_ else 0)
    _pad_case(d, "size0-input", (0, 2), ((1, 1), (2, 0)))
    _pad_case(d, "size1-axes", (1, 3, 1), ((2, 0), (0, 0), (1, 1)))
    _pad_case(d, "of-flipped", (4, 3), ((1, 0), (0, 2)), prep=lambda x: x[::-1])


# ------------------------------------------------------------------------- Concat
def _concat_cases(d):
    op = OpKind.Concat
    _add(op, "3-inputs-axis0", lambda a, b, c: bind(op, [a, b, c], axis=0),
         lambda a, b, c: np.concatenate([a, b, c], 0),
         [rand((2, 3), d), rand((1, 3), d), rand((4, 3), d)], d)
    _add(op, "3-inputs-axis1-mixed", lambda a, b, c: bind(op, [a, b, c], axis=1),
         lambda a, b, c: np.concatenate([a, b, c], 1),
         [rand((2, 3, 2), d), rand((2, 1, 2), d), rand((2, 5, 2), d)], d)
    # the middle input contributes nothing; the next one must still land at offset 2
    _add(op, "with-empty-input", lambda a, b, c: bind(op, [a, b, c], axis=1),
         lambda a, b, c: np.concatenate([a, b, c], 1),
         [rand((3, 2), d), rand((3, 0), d), rand((3, 4), d)], d)
    _add(op, "last-axis-noncontiguous", lambda a, b, c: bind(op, [a.T, b[::2], c], axis=1),
         lambda a, b, c: np.concatenate([a.T, b[::2], c], 1),
         [rand((2, 4), d), rand((8, 3), d), rand((4, 1), d)], d)
    _add(op, "size0-other-axis", lambda a, b, c: bind(op, [a, b, c], axis=1),
         lambda a, b, c: np.concatenate([a, b, c], 1),
         [rand((0, 2), d), rand((0, 3), d), rand((0, 1), d)], d)


# ------------------------------------------------------------------------- Flip
def _flip_cases(d):
    op = OpKind.Flip
    _add(op, "one-axis", lambda x: bind(op, [x], axes=(1,)),
         lambda x: np.flip(x, 1), [rand((3, 5, 2), d)], d)
    _add(op, "all-axes", lambda x: bind(op, [x], axes=(0, 1, 2)),
         lambda x: np.flip(x), [rand((3, 4, 2), d)], d)
    _add(op, "size1-and-size0", lambda x: bind(op, [x], axes=(0, 1)),
         lambda x: np.flip(x, (0, 1)), [rand((1, 0, 3), d)], d)
    _add(op, "size1-axis", lambda x: bind(op, [x], axes=(0, 2)),
         lambda x: np.flip(x, (0, 2)), [rand((1, 4, 3), d)], d)
    _add(op, "of-transposed", lambda x: bind(op, [x.T], axes=(0,)),
         lambda x: np.flip(x.T, 0), [rand((3, 6), d)], d)


# ------------------------------------------------------------------------- SliceBackward
def _slice_bwd_case(d, name, shape, index, transposed=False):
    """Scatter a gradient into zeros of `shape`; with `transposed` the gradient arrives as
    the transpose of an array of the transposed shape (a permuted copy, not the upload)."""
    op = OpKind.SliceBackward
    prep = (lambda g: g.T) if transposed else (lambda g: g)
    st, sp, stp = _slice_attrs(shape, index)
    gshape = np.zeros(shape)[index].shape

    def ref(g):
        z = np.zeros(shape, dtype=g.dtype)
        z[index] = prep(g)
        return z

    _add(op, name, lambda g: bind(op, [prep(g)], shape=shape, starts=st, stops=sp, steps=stp),
         ref, [rand(gshape[::-1] if transposed else gshape, d)], d)


def _slice_bwd_cases(d):
    _slice_bwd_case(d, "steps", (7, 6), (slice(1, 7, 2), slice(0, 5, 3)))
    _slice_bwd_case(d, "negative-steps", (5, 4, 2), (slice(None, None, -2), slice(3, 0, -1),
                                                     slice(None)))
    _slice_bwd_case(d, "empty-gradient", (3, 4), (slice(2, 2), slice(None)))
    _slice_bwd_case(d, "reversed-size0", (0, 2), (slice(None, None, -1), slice(None)))
    _slice_bwd_case(d, "size1-axes", (1, 6, 1), (slice(None), slice(5, 0, -4), slice(None)))
    _slice_bwd_case(d, "of-transposed", (6, 5), (slice(1, 6, 2), slice(4, None, -1)),
                    transposed=True)


for _d in DTYPES:
    _reshape_cases(_d)
    _permute_cases(_d)
    _expand_cases(_d)
    _slice_cases(_d)
    _pad_cases(_d)
    _concat_cases(_d)
    _flip_cases(_d)
    _slice_bwd_cases(_d)
