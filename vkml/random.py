"""vkml.random: JAX-style explicit-key random numbers, drawn on the device.

A key is an ordinary int32[2] array; every draw is the Rand operator (Philox-4x32-10,
counter = element index) followed by vkml.numpy ops, so the same key gives the same
numbers on every device, and keys trace (jit, grad, vmap) like any other array.

Derived keys never reuse the stream of the key they come from: `split` draws from the
key plus a fixed domain constant, and `fold_in` hashes its data with Philox before
mixing it in. A key must never be used for two draws that should be independent;
split it instead.

>>> import vkml.random as vr
>>> k = vr.key(0)
>>> k1, k2 = vr.split(k)
>>> vr.uniform(k1, (2, 3)).shape
(2, 3)
"""
from __future__ import annotations

import math

import ml_dtypes as _ml_dtypes  # finfo of bfloat16 too, whatever numpy
import numpy as np

from . import numpy as vnp
from .array import Array, bind
from .trace import dtypes as dt
from .trace.dtypes import DTypeError
from .trace.ops import OpKind
from .trace.shapes import ShapeError, size_of

__all__ = ["key", "PRNGKey", "split", "fold_in", "bits", "uniform", "normal", "bernoulli",
           "randint", "permutation", "choice", "categorical"]

# Domain constants (hex digits of pi) added to a key before it derives other keys, so a
# derived key's words are never the numbers the parent key itself draws.
_SPLIT_DOMAIN = (0x243F6A88, 0x85A308D3)
_FOLD_DOMAIN = 0x13198A2E

_LIMB = 4096            # randint works in 12-bit limbs: limb products stay below 2^24,
_INV_LIMB = 1.0 / 4096  # exact in int32 and float32 alike


def _i32(x: int) -> int:
    """The int32 with the same low 32 bits as Python int x."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def _shape(fn: str, shape) -> tuple:
    if shape is None:
        return ()
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    if not hasattr(shape, "__iter__"):
        raise TypeError(f"random.{fn}: shape {shape!r} must be an int or a tuple of ints")
    out = tuple(vnp._dim(f"random.{fn}", s) for s in shape)   # TypeError for 2.0 or True
    if any(s < 0 for s in out):
        raise ShapeError(f"random.{fn}: shape {out} has a negative dimension")
    return out


def _key(fn: str, k) -> Array:
    k = k if isinstance(k, Array) else vnp.asarray(k)
    if k.shape != (2,) or k.dtype != dt.int32:
        raise TypeError(f"random.{fn}: expected a key, an int32 array of shape (2,), got "
                        f"{k.dtype}{list(k.shape)}; make one with vkml.random.key(seed) "
                        f"(or split a (n, 2) batch of keys and pass one row)")
    return k


def _check_broadcast(fn: str, what: str, have: tuple, shape: tuple) -> None:
    """Parameters broadcast to the requested shape, never widen it (as in JAX)."""
    if len(have) > len(shape) or any(a not in (1, b) for a, b in zip(have[::-1], shape[::-1])):
        raise ShapeError(f"random.{fn}: {what} of shape {have} does not broadcast to shape {shape}")


def _rand(k: Array, shape: tuple, dtype) -> Array:
    return bind(OpKind.Rand, [k], shape=tuple(shape), dtype=np.dtype(dtype))


def _float_dtype(fn: str, dtype) -> np.dtype:
    d = dt.canonical(dtype, f"random.{fn}")
    if d not in dt.FLOATS:
        raise DTypeError(f"random.{fn}: dtype {d} is not a float dtype; valid: float32, float64")
    return d


# --------------------------------------------------------------------------- keys


def key(seed) -> Array:
    """A key (int32[2]) from an integer seed; a 64-bit seed is split into (hi, lo) words.

    A Python int is taken as 64-bit (negative seeds as two's complement); an int32
    array seed (e.g. traced) gives (0, seed).

    >>> key(1).numpy().tolist()
    [0, 1]
    """
    if isinstance(seed, Array):
        if seed.shape != () or seed.dtype not in (dt.int32, dt.bool_):
            raise TypeError(f"random.key: seed must be an integer scalar, got {seed.dtype}{list(seed.shape)}")
        return vnp.stack([vnp.zeros((), dt.int32), seed.astype(dt.int32)])
    if isinstance(seed, (bool, float, np.floating)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"random.key: seed must be an int, got {type(seed).__name__} {seed!r}")
    seed = int(seed)
    if not -(1 << 63) <= seed < 1 << 64:
        raise OverflowError(f"random.key: seed {seed} does not fit in 64 bits")
    return vnp.asarray(np.array([_i32(seed >> 32), _i32(seed)], dtype=np.int32))


PRNGKey = key


def split(key, num: int = 2, *, n: int | None = None) -> Array:
    """`num` new keys, shape (num, 2), derived on the device (`n` is an alias of `num`).

    >>> split(key(0), 3).shape
    (3, 2)
    """
    num = num if n is None else n
    if not isinstance(num, (int, np.integer)) or num < 0:
        raise ValueError(f"random.split: num must be a non-negative int, got {num!r}")
    k = _key("split", key)
    dom = vnp.asarray(np.array([_i32(c) for c in _SPLIT_DOMAIN], dtype=np.int32))
    return _rand(k + dom, (int(num), 2), dt.int32)


def fold_in(key, data) -> Array:
    """A new key from `key` and an integer (Python int taken mod 2^32, or int32 scalar array).

    >>> fold_in(key(0), 7).shape
    (2,)
    """
    k = _key("fold_in", key)
    if isinstance(data, Array):
        if data.shape != () or data.dtype not in (dt.int32, dt.bool_):
            raise TypeError(f"random.fold_in: data must be an integer scalar, got {data.dtype}{list(data.shape)}")
        d = vnp.stack([vnp.full((), _i32(_FOLD_DOMAIN), dt.int32), data.astype(dt.int32)])
    elif isinstance(data, (int, np.integer)) and not isinstance(data, bool):
        d = vnp.asarray(np.array([_i32(_FOLD_DOMAIN), _i32(int(data))], dtype=np.int32))
    else:
        raise TypeError(f"random.fold_in: data must be an int, got {type(data).__name__} {data!r}")
    # Hash the data to two words first: an additive mix of raw data would make
    # fold_in(k, d) equal a draw of a nearby key such as key(seed + d).
    h = _rand(d, (2,), dt.int32)
    return _rand(k + h, (2,), dt.int32)


# --------------------------------------------------------------------------- draws


def bits(key, shape=(), dtype=dt.int32) -> Array:
    """Uniformly random 32-bit words (as int32).

    >>> bits(key(0), (4,)).dtype
    dtype('int32')
    """
    if dt.canonical(dtype, "random.bits") != dt.int32:
        raise DTypeError(f"random.bits: dtype {np.dtype(dtype)} is not supported; valid: int32")
    return _rand(_key("bits", key), _shape("bits", shape), dt.int32)


def uniform(key, shape=(), dtype=dt.float32, minval=0.0, maxval=1.0) -> Array:
    """Uniform floats in [minval, maxval) (minval/maxval broadcast against shape).

    The unit draw carries 24 (float32) or 53 (float64) random bits. As in JAX, the
    result is clamped below at minval; rounding of `u * (maxval - minval) + minval` can
    reach maxval in rare cases when the bounds are not 0 and 1.

    >>> u = uniform(key(0), (1000,))
    >>> 0.0 <= float(u.min()) and float(u.max()) < 1.0
    True
    """
    k = _key("uniform", key)
    shape = _shape("uniform", shape)
    d = _float_dtype("uniform", dtype)
    u = _rand(k, shape, d)
    plain = (isinstance(minval, (int, float)) and isinstance(maxval, (int, float))
             and float(minval) == 0.0 and float(maxval) == 1.0)
    if plain:
        return u
    lo = vnp.asarray(minval, d) if not isinstance(minval, Array) else minval.astype(d)
    hi = vnp.asarray(maxval, d) if not isinstance(maxval, Array) else maxval.astype(d)
    out = vnp.maximum(lo, u * (hi - lo) + lo)
    if out.shape != shape:
        _check_broadcast("uniform", "minval/maxval", out.shape, shape)
        out = vnp.broadcast_to(out, shape)
    return out


def normal(key, shape=(), dtype=dt.float32) -> Array:
    """Standard normal draws (Box-Muller on two uniform draws).

    The radius uses 1 - u, which lies in (0, 1], so log never sees 0; the largest
    magnitude is about 5.8 (float32) or 8.6 (float64).

    >>> normal(key(0), (2, 2)).shape
    (2, 2)
    """
    k = _key("normal", key)
    shape = _shape("normal", shape)
    d = _float_dtype("normal", dtype)
    u = _rand(k, (2,) + shape, d)
    radius = vnp.sqrt(vnp.log(1.0 - u[0]) * -2.0)
    return radius * vnp.cos(u[1] * (2.0 * math.pi))


def bernoulli(key, p=0.5, shape=None) -> Array:
    """Bool draws, True with probability p (shape defaults to p's shape).

    >>> bernoulli(key(0), 0.3, (5,)).dtype
    dtype('bool')
    """
    k = _key("bernoulli", key)
    if isinstance(p, Array):
        pa = p if dt.is_float(p.dtype) else p.astype(dt.float32)
    else:
        pa = vnp.asarray(p)
        if not dt.is_float(pa.dtype):
            pa = pa.astype(dt.float32)
    shape = pa.shape if shape is None else _shape("bernoulli", shape)
    _check_broadcast("bernoulli", "p", pa.shape, shape)
    return vnp.less(_rand(k, shape, pa.dtype), pa)


def _split_limbs(x: Array) -> Array:
    """Three 12-bit limbs (little end first, stacked on a new axis 0) of an int32 array
    read as unsigned 32-bit values. Division by powers of two goes through float32, which
    is exact below 2^24; the top limb comes from a rounded quotient, corrected once."""
    neg = x < 0
    x = vnp.where(neg, x + (-(1 << 31)), x)          # now in [0, 2^31); 2^31 = 128 * 2^24
    q = (x.astype(dt.float32) * (1.0 / (1 << 24))).astype(dt.int32)
    rem = x - q * (1 << 24)
    q = vnp.where(rem < 0, q - 1, vnp.where(rem >= (1 << 24), q + 1, q))
    rem = x - q * (1 << 24)
    mid = (rem.astype(dt.float32) * _INV_LIMB).astype(dt.int32)
    return vnp.stack([rem - mid * _LIMB, mid, vnp.where(neg, q + 128, q)])


def _mulhi48(r: Array, s: Array) -> Array:
    """floor(R * S / 2^48) in int32 (mod 2^32), R and S given as 12-bit limbs.

    r: (4,) + shape, the 48-bit R; s: (3,) + shape' with shape' broadcasting to shape.
    Every intermediate is an integer below 2^24, so int32 products and float32 divisions
    by 4096 are exact, on every device.
    """
    tail = r.shape[1:]
    p = r.reshape((4, 1) + tail) * s.reshape((1, 3) + s.shape[1:])       # (4, 3) + tail
    none = ((0, 0),) * len(p.shape[2:])
    hi = (p.astype(dt.float32) * _INV_LIMB).astype(dt.int32)
    lo = p - hi * _LIMB
    # m[i, j] has weight 4096^(i + j): the low half of r_i*s_j, plus the high half of
    # r_i*s_(j-1), which carries one limb up.
    m = vnp.pad(lo, ((0, 0), (0, 1)) + none) + vnp.pad(hi, ((0, 0), (1, 0)) + none)
    # Shift row i right by i (pad to width 8, read the flat buffer back with width 7) so
    # that column k of the result collects every term of weight 4096^k.
    full = m.shape[2:]
    skew = vnp.pad(m, ((0, 0), (0, 4)) + none).reshape((32,) + full)[:28].reshape((4, 7) + full)
    c = skew[0] + skew[1] + skew[2] + skew[3]                              # (7,) + tail
    carry = None
    for j in range(4):
        t = c[j] if carry is None else c[j] + carry
        carry = (t.astype(dt.float32) * _INV_LIMB).astype(dt.int32)
    return c[4] + carry + c[5] * _LIMB + c[6] * (_LIMB * _LIMB)


def randint(key, shape, minval, maxval, dtype=dt.int32) -> Array:
    """Uniform integers in [minval, maxval) as int32 (minval/maxval broadcast to shape).

    Multiply-shift on 48 random bits: value = minval + floor(R * span / 2^48), so any
    value's probability is off by at most span / 2^48 relative. Python int bounds are
    clipped to the int32 range (maxval up to 2^31); an empty range gives minval; array
    bounds are int32 and their span may exceed 2^31 (it is taken as unsigned).

    >>> randint(key(0), (3,), 0, 10).dtype
    dtype('int32')
    """
    k = _key("randint", key)
    shape = _shape("randint", shape)
    if dt.canonical(dtype, "random.randint") != dt.int32:
        raise DTypeError(f"random.randint: dtype {np.dtype(dtype)} is not supported; valid: int32")
    u = _rand(k, (4,) + shape, dt.float32)
    r = (u * float(_LIMB)).astype(dt.int32)           # the top 12 bits of each word, exactly
    if not isinstance(minval, Array) and not isinstance(maxval, Array):
        lo = max(int(minval), -(1 << 31))
        hi = min(int(maxval), 1 << 31)
        span = hi - lo
        if span <= 0:
            return vnp.full(shape, _i32(lo), dt.int32)
        limbs = np.array([(span >> (12 * j)) & (_LIMB - 1) for j in range(3)], dtype=np.int32)
        s = vnp.asarray(limbs.reshape((3,) + (1,) * len(shape)))
        return _mulhi48(r, s) + _i32(lo)
    lo = vnp.asarray(minval, dt.int32) if not isinstance(minval, Array) else minval.astype(dt.int32)
    hi = vnp.asarray(maxval, dt.int32) if not isinstance(maxval, Array) else maxval.astype(dt.int32)
    span = vnp.where(hi > lo, hi - lo, 1)
    _check_broadcast("randint", "minval/maxval", span.shape, shape)
    s = _split_limbs(span).reshape((3,) + (1,) * (len(shape) - span.ndim) + span.shape)
    return _mulhi48(r, s) + lo


def _ranks(k: Array, n: int) -> Array:
    """A uniformly random permutation of arange(n): the rank of each of n random words
    (ties broken by index), counted by n x n comparisons."""
    w = _rand(k, (n,), dt.int32)
    idx = vnp.arange(n)
    before = vnp.logical_or(w[None, :] < w[:, None],
                            vnp.logical_and(w[None, :] == w[:, None], idx[None, :] < idx[:, None]))
    return vnp.sum(before, axis=1)


def permutation(key, x, axis: int = 0) -> Array:
    """A random permutation of arange(x) (int x), or x shuffled along axis (array x).

    Built from n x n comparisons, so meant for n up to a few thousand.

    >>> sorted(permutation(key(0), 5).numpy().tolist())
    [0, 1, 2, 3, 4]
    """
    k = _key("permutation", key)
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        if x < 0:
            raise ValueError(f"random.permutation: n must be non-negative, got {x}")
        return _ranks(k, int(x))
    a = x if isinstance(x, Array) else vnp.asarray(x)
    if a.ndim == 0:
        raise ShapeError("random.permutation: x must be an int or an array of rank >= 1, got a 0-d array")
    ax = axis + a.ndim if axis < 0 else axis
    if not 0 <= ax < a.ndim:
        raise ShapeError(f"random.permutation: axis {axis} is out of range for shape {a.shape}")
    return vnp.take(a, _ranks(k, a.shape[ax]), axis=ax)


def choice(key, a, shape=(), replace: bool = True, p=None) -> Array:
    """Random samples from arange(a) (int a) or from a's first axis.

    replace=True draws indices independently (uniformly, or by weights p via the
    inverse CDF); replace=False takes the first prod(shape) entries of a permutation
    (p is then not supported).

    >>> choice(key(0), 10, (3,), replace=False).shape
    (3,)
    """
    k = _key("choice", key)
    shape = _shape("choice", shape)
    if isinstance(a, (int, np.integer)) and not isinstance(a, bool):
        n, pop = int(a), None
    else:
        pop = a if isinstance(a, Array) else vnp.asarray(a)
        if pop.ndim == 0:
            raise ShapeError("random.choice: a must be an int or an array of rank >= 1")
        n = pop.shape[0]
    m = size_of(shape)
    if n == 0 and m > 0:
        raise ValueError("random.choice: cannot take a non-empty sample from an empty population")
    if not replace:
        if p is not None:
            raise NotImplementedError("random.choice: p with replace=False is not supported")
        if m > n:
            raise ValueError(f"random.choice: cannot take {m} samples without replacement from {n}")
        idx = _ranks(k, n)[:m].reshape(shape)
    elif p is None:
        idx = randint(k, shape, 0, n)
    else:
        w = p if isinstance(p, Array) else vnp.asarray(p)
        if w.shape != (n,):
            raise ShapeError(f"random.choice: p must have shape ({n},), got {w.shape}")
        if not dt.is_float(w.dtype):
            w = w.astype(dt.float32)
        cdf = vnp.cumsum(w)
        u = uniform(k, shape, w.dtype) * cdf[n - 1]
        # index = how many cumulative weights lie at or below u (clamped for rounding)
        idx = vnp.minimum(vnp.sum(cdf[:n - 1] <= u[..., None], axis=-1), n - 1) if n > 1 \
            else vnp.zeros(shape, dt.int32)
    return idx if pop is None else vnp.take(pop, idx, axis=0)


def categorical(key, logits, axis: int = -1, shape=None) -> Array:
    """Indices drawn from the categorical distributions softmax(logits) along axis, as
    jax.random.categorical: argmax(logits + Gumbel noise) (the Gumbel-max trick).

    The result has logits' shape without axis, or `shape`, which must end with that
    batch shape (its leading axes draw independent samples).

    >>> categorical(key(0), vnp.asarray([[0.0, -1e9], [-1e9, 0.0]])).numpy().tolist()
    [0, 1]
    """
    k = _key("categorical", key)
    lg = logits if isinstance(logits, Array) else vnp.asarray(logits)
    if not dt.is_float(lg.dtype):
        lg = lg.astype(dt.float32)
    if lg.ndim == 0:
        raise ShapeError("random.categorical: logits must have at least one axis (the categories)")
    ax = axis + lg.ndim if axis < 0 else axis
    if not 0 <= ax < lg.ndim:
        raise ShapeError(f"random.categorical: axis {axis} is out of range for logits of shape {lg.shape}")
    batch = lg.shape[:ax] + lg.shape[ax + 1:]
    shape = batch if shape is None else _shape("categorical", shape)
    if len(shape) < len(batch) or any(a not in (1, b) for a, b in zip(batch[::-1], shape[::-1])):
        raise ShapeError(f"random.categorical: shape {shape} must end with the logits' batch shape "
                         f"{batch} (logits {lg.shape} without axis {axis})")
    prefix = shape[:len(shape) - len(batch)]
    full = prefix + shape[len(prefix):len(prefix) + ax] + (lg.shape[ax],) + shape[len(prefix) + ax:]
    # u in (0, 1): the tiny lower bound keeps log(u) finite, so the noise never is -inf or nan
    u = uniform(k, full, lg.dtype, minval=float(_ml_dtypes.finfo(lg.dtype).tiny), maxval=1.0)
    gumbel = -vnp.log(-vnp.log(u))
    return vnp.argmax(gumbel + vnp.reshape(lg, (1,) * len(prefix) + lg.shape), axis=len(prefix) + ax)
