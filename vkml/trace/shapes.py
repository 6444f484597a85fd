"""Shape arithmetic shared by the registry's shape rules, and ShapeError."""
from __future__ import annotations

from typing import Iterable, Sequence

Shape = tuple[int, ...]


class ShapeError(ValueError):
    """Operand shapes an operator cannot take; the message names the op and the shapes.

    >>> import vkml.numpy as vnp
    >>> vnp.add(vnp.ones((2, 3)), vnp.ones((4,)))  # doctest: +SKIP
    Traceback (most recent call last):
    vkml.ShapeError: add: shapes (2, 3) and (4,) do not broadcast ...
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


def normalize_axis(op: str, axis: int, ndim: int) -> int:
    """One axis in [-ndim, ndim) to [0, ndim), or ShapeError."""
    if not isinstance(axis, (int,)) or isinstance(axis, bool):
        raise ShapeError(f"{op}: axis {axis!r} is not an integer")
    if not -ndim <= axis < max(ndim, 1) or (ndim == 0 and axis not in (0, -1)):
        raise ShapeError(f"{op}: axis {axis} is out of range for an array of rank {ndim}; "
                         f"valid axes are {-ndim}..{ndim - 1}")
    return axis % ndim if ndim else 0


def normalize_axes(op: str, axis, ndim: int) -> tuple[int, ...]:
    """None (all axes), an int, or a sequence of ints, to a sorted tuple of distinct axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, Iterable) and not isinstance(axis, (str, bytes)):
        axes = [normalize_axis(op, int(a) if hasattr(a, "__index__") else a, ndim) for a in axis]
    else:
        axes = [normalize_axis(op, axis, ndim)]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(axes))


def size_of(shape: Sequence[int]) -> int:
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
