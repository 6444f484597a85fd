"""Shape arithmetic shared by the registry's shape rules, and ShapeError."""
from __future__ import annotations

import operator
from typing import Iterable, Sequence

import numpy as np

Shape = tuple[int, ...]


class ShapeError(ValueError):
    """Operand shapes an operator cannot take; the message names the op and the shapes.

    >>> import vkml.numpy as vnp
    >>> vnp.add(vnp.ones((2, 3)), vnp.ones((4,)))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    vkml.trace.shapes.ShapeError: Add: shapes (2, 3) and (4,) do not broadcast (axis -1 ...
    """


def broadcast_shapes(op: str, *shapes: Sequence[int]) -> Shape:
    """NumPy broadcasting of shapes, or ShapeError naming op and every shape."""
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(nd):
        dims = {s[len(s) - nd + i] for s in shapes if len(s) - nd + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            shown = " and ".join(str(tuple(s)) for s in shapes)
            raise ShapeError(f"{op}: shapes {shown} do not broadcast (axis {i - nd} has sizes "
                             f"{sorted(dims)}); sizes must match or be 1")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


class AxisError(ShapeError, np.exceptions.AxisError):
    """An axis out of range for an array's rank. As NumPy's AxisError (which it subclasses,
    so `except numpy.exceptions.AxisError` catches it) it is both a ValueError and an
    IndexError; as a ShapeError the message names the op.

    >>> try:
    ...     normalize_axis("sum", 2, 2)
    ... except IndexError as e:
    ...     print(e)
    sum: axis 2 is out of range for an array of rank 2; valid axes are -2..1
    """

    def __init__(self, msg: str):
        ShapeError.__init__(self, msg)
        np.exceptions.AxisError.__init__(self, msg)   # its one-argument form: the message


def axis_index(op: str, axis) -> int:
    """An axis as an int (Python or NumPy integer, anything with __index__ but bool), else
    TypeError as NumPy raises for axis=1.0 or axis=True."""
    if isinstance(axis, (bool, np.bool_)) or not hasattr(axis, "__index__"):
        raise TypeError(f"{op}: axis {axis!r} ({type(axis).__name__}) is not an integer; "
                        f"axes are ints (or a tuple of ints where the function takes several)")
    return operator.index(axis)


def normalize_axis(op: str, axis, ndim: int) -> int:
    """One axis in [-ndim, ndim) to [0, ndim); AxisError outside (a 0-d array has no axes),
    TypeError for a non-integer."""
    axis = axis_index(op, axis)
    if not -ndim <= axis < ndim:
        valid = f"valid axes are {-ndim}..{ndim - 1}" if ndim else "a 0-d array has no axes"
        raise AxisError(f"{op}: axis {axis} is out of range for an array of rank {ndim}; {valid}")
    return axis % ndim


def normalize_axes(op: str, axis, ndim: int, scalar_0d: bool = False) -> tuple[int, ...]:
    """None (all axes), an int, or a sequence of ints, to a sorted tuple of distinct axes.

    scalar_0d: NumPy's ufunc reductions (sum, prod, max, min, any, all) and squeeze take a
    lone int axis 0 or -1 on a 0-d array as "no axes" (mean, var, flip and tuple axes do
    not: AxisError there, as in NumPy).

    >>> normalize_axes("sum", -1, 0, scalar_0d=True), normalize_axes("sum", (1, -3), 3)
    ((), (0, 1))
    """
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, Iterable) and not isinstance(axis, (str, bytes)):
        axes = [normalize_axis(op, a, ndim) for a in axis]
    elif scalar_0d and ndim == 0 and axis_index(op, axis) in (0, -1):
        return ()
    else:
        axes = [normalize_axis(op, axis, ndim)]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(axes))


def size_of(shape: Sequence[int]) -> int:
    """The number of elements of an array of this shape (1 for a 0-d one).

    >>> size_of((2, 3, 4)), size_of(())
    (24, 1)
    """
    n = 1
    for d in shape:
        n *= d
    return n


def contiguous_strides(shape: Sequence[int]) -> Shape:
    """C-order element strides."""
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return tuple(reversed(st))


def conv_out(op: str, size: int, k: int, stride: int, pad: int, dil: int) -> int:
    """Output extent of a sliding window along one spatial axis, or ShapeError."""
    eff = dil * (k - 1) + 1
    n = (size + 2 * pad - eff) // stride + 1
    if n <= 0:
        raise ShapeError(f"{op}: window {k} (dilation {dil}, effective {eff}) does not fit an input "
                         f"of extent {size} with padding {pad}; need size + 2*padding >= {eff}")
    return n
