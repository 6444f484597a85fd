"""Padding modes, resizing and the pooling variants: F.pad (constant, reflect, replicate,
circular), F.interpolate (nearest, linear/bilinear with align_corners),
adaptive_avg_pool2d, and max_pool2d / avg_pool2d with ceil_mode (and max_pool2d's
return_indices).

Resizing and adaptive pooling are linear maps along each spatial axis, so each is a
matmul with a constant (out, in) matrix built from the shapes alone: one kernel per axis,
and the gradient is the transposed matmul. Non-constant padding is slices, flips and a
concatenation.

>>> import vkml.numpy as vnp
>>> pad(vnp.asarray([[1.0, 2.0, 3.0]]), (2, 1), mode="reflect").numpy().tolist()
[[3.0, 2.0, 1.0, 2.0, 3.0, 2.0]]
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from .. import numpy as vnp
from ..array import Array, bind
from ..trace import dtypes as dt
from ..trace.ops import OpKind
from ..trace.shapes import ShapeError

__all__ = ["pad", "interpolate", "adaptive_avg_pool2d"]


# --------------------------------------------------------------------------- pad


def _slice(x: Array, axis: int, lo: int, hi: int) -> Array:
    idx = [slice(None)] * x.ndim
    idx[axis] = slice(lo, hi)
    return x[tuple(idx)]


def pad(input: Any, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Array:
    """torch's F.pad: pad = (left, right) for the last axis, then (top, bottom) for the one
    before, and so on. mode "constant" fills with value (default 0; negative amounts
    crop), "reflect" mirrors without repeating the edge, "replicate" repeats the edge,
    "circular" wraps around.

    >>> pad(vnp.asarray([[1.0, 2.0]]), (1, 2), mode="replicate").numpy().tolist()
    [[1.0, 1.0, 2.0, 2.0, 2.0]]
    """
    x = vnp.asarray(input)
    p = tuple(pad)
    if len(p) % 2 or len(p) // 2 > x.ndim or not all(isinstance(v, (int, np.integer)) for v in p):
        raise ValueError(f"pad: padding {p} must be an even number of ints, at most 2 per dimension "
                         f"of the input (shape {x.shape})")
    pairs = [(x.ndim - 1 - i, int(p[2 * i]), int(p[2 * i + 1])) for i in range(len(p) // 2)]
    if mode == "constant":
        fill = 0 if value is None else value
        widths = [[0, 0] for _ in range(x.ndim)]
        for ax, lo, hi in pairs:
            if lo < 0 or hi < 0:       # torch crops with negative padding
                x = _slice(x, ax, max(-lo, 0), x.shape[ax] - max(-hi, 0))
            widths[ax] = [max(lo, 0), max(hi, 0)]
        return vnp.pad(x, widths, constant_values=fill)
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad: mode {mode!r} is not one of 'constant', 'reflect', "
                                  f"'replicate', 'circular'")
    if value not in (None, 0):
        raise ValueError(f"pad: value= applies to mode 'constant' only, got mode {mode!r}")
    for ax, lo, hi in pairs:
        n = x.shape[ax]
        if lo < 0 or hi < 0:
            raise ValueError(f"pad: mode {mode!r} needs non-negative padding, got {p}")
        if mode == "reflect" and (lo >= n or hi >= n):
            raise ValueError(f"pad: padding ({lo}, {hi}) for mode 'reflect' must be less than the "
                             f"dimension's size {n} (input {x.shape})")
        if mode == "circular" and (lo > n or hi > n):
            raise ValueError(f"pad: padding ({lo}, {hi}) for mode 'circular' must be at most the "
                             f"dimension's size {n} (input {x.shape})")
        if mode == "replicate" and n == 0 and (lo or hi):
            raise ValueError(f"pad: mode 'replicate' cannot pad an empty dimension (input {x.shape})")
        parts = []
        if lo:
            if mode == "reflect":
                parts.append(vnp.flip(_slice(x, ax, 1, lo + 1), ax))
            elif mode == "replicate":
                e = _slice(x, ax, 0, 1)
                parts.append(vnp.concatenate([e] * lo, axis=ax))
            else:
                parts.append(_slice(x, ax, n - lo, n))
        parts.append(x)
        if hi:
            if mode == "reflect":
                parts.append(vnp.flip(_slice(x, ax, n - 1 - hi, n - 1), ax))
            elif mode == "replicate":
                e = _slice(x, ax, n - 1, n)
                parts.append(vnp.concatenate([e] * hi, axis=ax))
            else:
                parts.append(_slice(x, ax, 0, hi))
        x = vnp.concatenate(parts, axis=ax) if len(parts) > 1 else x
    return x


# --------------------------------------------------------------------------- resampling


def _along(x: Array, axis: int, m: np.ndarray) -> Array:
    """Apply the (out, in) matrix m along axis (a matmul with the axis moved last)."""
    mt = vnp.asarray(np.ascontiguousarray(m.T).astype(x.dtype))        # (in, out)
    if axis == x.ndim - 1:
        return vnp.matmul(x, mt)
    y = vnp.matmul(vnp.moveaxis(x, axis, -1), mt)
    return vnp.moveaxis(y, -1, axis)


def _nearest_matrix(n_in: int, n_out: int, scale: float | None) -> np.ndarray:
    # torch's nearest: src = min(floor(dst * s), n_in - 1), s = 1 / scale_factor when given,
    # else n_in / n_out, computed in float32 as its kernel does
    s = np.float32(1.0 / scale) if scale else np.float32(n_in) / np.float32(n_out)
    src = np.minimum(np.floor(np.arange(n_out, dtype=np.float32) * s).astype(np.int64), n_in - 1)
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), src] = 1.0
    return m


def _linear_matrix(n_in: int, n_out: int, scale: float | None, align_corners: bool) -> np.ndarray:
    dst = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = dst * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        s = 1.0 / scale if scale else n_in / n_out
        src = np.maximum(s * (dst + 0.5) - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.where(i0 < n_in - 1, i0 + 1, i0)
    l1 = src - i0
    m = np.zeros((n_out, n_in))
    np.add.at(m, (np.arange(n_out), i0), 1.0 - l1)
    np.add.at(m, (np.arange(n_out), i1), l1)
    return m


def interpolate(input: Any, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Array:
    """Resize (N, C, L) or (N, C, H, W) input to size, or by scale_factor (the output is
    floor(in * scale_factor)), torch's F.interpolate. mode: "nearest", "linear" (3-d),
    "bilinear" (4-d); align_corners (linear modes only) maps the corner pixels' centres
    onto each other.

    >>> interpolate(vnp.asarray([[[1.0, 2.0]]]), scale_factor=2).numpy().tolist()
    [[[1.0, 1.0, 2.0, 2.0]]]
    """
    x = vnp.asarray(input)
    if not dt.is_float(x.dtype):
        x = x.astype(dt.float32)
    if x.ndim not in (3, 4):
        raise ShapeError(f"interpolate: input must be (N, C, L) or (N, C, H, W), got shape {x.shape}")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    k = x.ndim - 2
    want = {"nearest": None, "linear": 3, "bilinear": 4}
    if mode not in want:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported; valid: "
                                  f"'nearest', 'linear' (3-d input), 'bilinear' (4-d input)")
    if want[mode] is not None and want[mode] != x.ndim:
        raise ValueError(f"interpolate: mode {mode!r} needs {want[mode]}-d input, got shape {x.shape}")
    if mode == "nearest" and align_corners is not None:
        raise ValueError("interpolate: align_corners option can only be set with the interpolating "
                         "modes: linear | bilinear")
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    spatial = x.shape[2:]
    if size is not None:
        out = (size,) * k if isinstance(size, int) else tuple(size)
        scales = (None,) * k
    else:
        sf = (scale_factor,) * k if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        if len(sf) != k or any(s <= 0 for s in sf):
            raise ValueError(f"interpolate: scale_factor {scale_factor!r} must be positive, one per "
                             f"spatial dimension ({k})")
        out = tuple(int(math.floor(n * s)) for n, s in zip(spatial, sf))
        scales = (None,) * k if recompute_scale_factor else tuple(float(s) for s in sf)
    if len(out) != k or any(not isinstance(o, (int, np.integer)) or o < 1 for o in out):
        raise ValueError(f"interpolate: output size {out} must be {k} positive ints")
    for i, (n, o, s) in enumerate(zip(spatial, out, scales)):
        if mode == "nearest":
            m = _nearest_matrix(n, o, s)
        else:
            m = _linear_matrix(n, o, s, bool(align_corners))
        if o != n or not np.array_equal(m, np.eye(n)):
            x = _along(x, 2 + i, m)
    return x


def adaptive_avg_pool2d(input: Any, output_size: Any) -> Array:
    """Average pooling to a fixed output size: output cell i averages input rows
    floor(i * H / oh) .. ceil((i + 1) * H / oh) - 1 (and so for columns); None keeps a size.

    >>> adaptive_avg_pool2d(vnp.ones((1, 2, 5, 7)), (2, 3)).shape
    (1, 2, 2, 3)
    """
    x = vnp.asarray(input)
    if not dt.is_float(x.dtype):
        x = x.astype(dt.float32)
    if x.ndim not in (3, 4):
        raise ShapeError(f"adaptive_avg_pool2d: input must be NCHW or CHW, got shape {x.shape}")
    os = (output_size,) * 2 if isinstance(output_size, int) or output_size is None else tuple(output_size)
    if len(os) != 2:
        raise ValueError(f"adaptive_avg_pool2d: output_size {output_size!r} must be an int or a pair")
    for i, o in enumerate(os):
        ax = x.ndim - 2 + i
        n = x.shape[ax]
        o = n if o is None else o
        if not isinstance(o, (int, np.integer)) or o < 1:
            raise ValueError(f"adaptive_avg_pool2d: output_size {output_size!r} must be positive ints")
        m = np.zeros((o, n))
        for j in range(o):
            a, b = (j * n) // o, -((-(j + 1) * n) // o)
            m[j, a:b] = 1.0 / (b - a)
        if o != n:
            x = _along(x, ax, m)
    return x


# --------------------------------------------------------------------------- pooling with ceil_mode / indices


def _out_size(name: str, n: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    span = n + 2 * p - d * (k - 1) - 1
    if span < 0:
        raise ShapeError(f"{name}: input size {n} (padding {p}) is smaller than the window "
                         f"{d * (k - 1) + 1}")
    o = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (o - 1) * s >= n + p:     # the last window must start inside the input or its left pad
        o -= 1
    return o


def _extra(n: int, k: int, s: int, p: int, d: int, o: int) -> int:
    """Extra high-side padding so that o windows fit exactly."""
    return max((o - 1) * s + d * (k - 1) + 1 - (n + 2 * p), 0)


def max_pool2d_full(x: Array, k: tuple, st: tuple, p: tuple, d: tuple, ceil_mode: bool,
                    return_indices: bool):
    """max_pool2d of NCHW x with ceil_mode and/or indices (flat h * W + w of each
    maximum in its input plane, int32; the first maximum where several are equal)."""
    N, C, H, W = x.shape
    oh = _out_size("max_pool2d", H, k[0], st[0], p[0], d[0], ceil_mode)
    ow = _out_size("max_pool2d", W, k[1], st[1], p[1], d[1], ceil_mode)
    eh, ew = _extra(H, k[0], st[0], p[0], d[0], oh), _extra(W, k[1], st[1], p[1], d[1], ow)
    low = -math.inf if dt.is_float(x.dtype) else -(1 << 31)
    xp = vnp.pad(x, ((0, 0), (0, 0), (p[0], p[0] + eh), (p[1], p[1] + ew)), constant_values=low)
    win = dict(kernel=k, stride=st, padding=(0, 0), dilation=d)
    # the extra padding makes exactly (oh, ow) windows fit the padded input
    y = bind(OpKind.MaxPool2d, [xp], **win)
    if not return_indices:
        return y
    xf = xp if dt.is_float(x.dtype) else xp.astype(dt.float32)
    Hp, Wp = xp.shape[2:]
    cols = bind(OpKind.Im2Col, [vnp.reshape(xf, (N * C, 1, Hp, Wp))], **win)   # (NC, kh*kw, L)
    j = vnp.argmax(cols, axis=1)                                               # (NC, L)
    l = np.arange(oh * ow)
    base_r = vnp.asarray(((l // ow) * st[0] - p[0]).astype(np.int32))
    base_c = vnp.asarray(((l % ow) * st[1] - p[1]).astype(np.int32))
    r = base_r + vnp.floor_divide(j, k[1]) * d[0]
    c = base_c + vnp.remainder(j, k[1]) * d[1]
    return y, vnp.reshape(r * W + c, (N, C, oh, ow))


def avg_pool2d_ceil(x: Array, k: tuple, st: tuple, p: tuple, count_include_pad: bool,
                    divisor_override: int | None) -> Array:
    """avg_pool2d of NCHW x with ceil_mode=True (torch's divisors: a window counts the
    padding it covers, but not the part past the padded input)."""
    N, C, H, W = x.shape
    oh = _out_size("avg_pool2d", H, k[0], st[0], p[0], 1, True)
    ow = _out_size("avg_pool2d", W, k[1], st[1], p[1], 1, True)
    eh, ew = _extra(H, k[0], st[0], p[0], 1, oh), _extra(W, k[1], st[1], p[1], 1, ow)
    win = dict(kernel=k, stride=st, padding=(0, 0), dilation=(1, 1))
    full = ((0, 0), (0, 0), (p[0], p[0] + eh), (p[1], p[1] + ew))
    xp = vnp.pad(vnp.reshape(x, (N * C, 1, H, W)), full)
    s = vnp.sum(bind(OpKind.Im2Col, [xp], **win), axis=1)                       # (NC, oh*ow)
    if divisor_override is not None:
        if not isinstance(divisor_override, int) or divisor_override <= 0:
            raise ValueError(f"avg_pool2d: divisor_override {divisor_override!r} must be a positive int")
        y = s / float(divisor_override)
    else:
        if count_include_pad:
            ones = np.pad(np.ones((H + 2 * p[0], W + 2 * p[1])), ((0, eh), (0, ew)))
        else:
            ones = np.pad(np.ones((H, W)), ((p[0], p[0] + eh), (p[1], p[1] + ew)))
        cnt = bind(OpKind.Im2Col, [vnp.asarray(ones[None, None].astype(x.dtype))], **win)
        y = s / vnp.sum(cnt, axis=1)
    return vnp.reshape(y, (N, C, oh, ow))
