"""vkml.numpy: NumPy's names on Vulkan arrays (thin: promotion, defaults, then registry ops).

Promotion is jax.numpy's (bool < int32 < float16, bfloat16 < float32 < float64) with Python
scalars weakly typed; an integer input to a float function (exp, divide, mean, ...)
becomes float32, the default float.

>>> import vkml.numpy as vnp
>>> vnp.exp(vnp.zeros(3)).tolist() if False else vnp.exp(vnp.zeros(3)).numpy().tolist()
[1.0, 1.0, 1.0]
"""
from __future__ import annotations

import builtins as _b
import math
import operator
from typing import Any, Sequence

import ml_dtypes as _ml_dtypes  # finfo of bfloat16 too, whatever numpy
import numpy as _np

from .array import Array, ConcretizationError, bind
from .debug import check_index as _check_index
from .trace import tracer as _tracer
from .trace import dtypes as dt
from .trace.dtypes import DTypeError
from .trace import ops as _ops
from .trace.ops import OpKind
from .trace.shapes import ShapeError, broadcast_shapes, normalize_axes, normalize_axis, size_of
from .vulkan import runtime as _runtime

inf = float("inf")
nan = float("nan")
pi = math.pi
e = math.e
newaxis = None
float32, float64, int32, bool_ = dt.float32, dt.float64, dt.int32, dt.bool_
# 16-bit floats: stored in 16 bits, computed in float32 (bfloat16 is ml_dtypes', as JAX's)
float16, bfloat16 = dt.float16, dt.bfloat16
ndarray = Array

# --------------------------------------------------------------------------- creation


def asarray(x: Any, dtype=None) -> Array:
    """An Array from an Array, NumPy array, scalar or nested sequence (no copy if unchanged).

    >>> asarray([1, 2]).dtype
    dtype('int32')
    """
    if isinstance(x, Array):
        if dtype is None or dt.canonical(dtype, "asarray") == x.dtype:
            return x
        return bind(OpKind.Cast, [x], dtype=dt.canonical(dtype, "asarray"))
    if isinstance(x, (list, tuple)) and _holds_array(x):
        return _stacked(x, dtype)
    if dtype is not None:
        d = dt.canonical(dtype, "asarray")
    elif isinstance(x, bool) or isinstance(x, _np.bool_):
        d = dt.bool_
    elif isinstance(x, int):
        d = dt.int32
    elif isinstance(x, float) and not isinstance(x, _np.generic):   # np.float64 is a float
        d = dt.float32
    else:
        arr = _np.asarray(x)
        if arr.dtype == object:
            raise DTypeError(f"asarray: cannot convert {type(x).__name__} to an array (object dtype)")
        d = dt.canonical(arr.dtype, "asarray")   # float16, complex, ... raise DTypeError
        # nested Python floats are float32 like a single Python float (NumPy would say float64)
        if d == dt.float64 and _python_floats(x):
            d = dt.float32
    src = _np.asarray(x)
    raw = dt.to_device_numpy(src, d, "asarray")
    buf = _runtime.get().upload(raw)
    # src.shape, not raw.shape: the device copy of a 0-d value comes back 1-d
    return Array._concrete(buf, src.shape, d)


def _holds_array(x) -> bool:
    """Whether a (nested) list or tuple holds a vkml Array (concrete or traced) anywhere."""
    return _b.any(isinstance(v, Array) or (isinstance(v, (list, tuple)) and _holds_array(v))
                  for v in x)


def _stacked(x, dtype) -> Array:
    """A nested sequence holding Arrays as one array built on the device, so that traced
    elements stay traced (and differentiable): each level is stacked, Python scalars are
    weakly typed in the promotion, as jax.numpy.array does."""
    parts = [_stacked(v, None) if isinstance(v, (list, tuple)) and _holds_array(v) else v
             for v in x]
    xs, _ = _operands("array", *parts)
    shapes = {p.shape for p in xs}
    if len(shapes) > 1:
        raise ShapeError(f"array: setting an array element with a sequence: the nested "
                         f"sequence is inhomogeneous (its elements have shapes "
                         f"{sorted(shapes)}); every element of a level needs the same shape")
    out = stack(xs)
    return out if dtype is None else out.astype(dt.canonical(dtype, "array"))


def _python_floats(x) -> bool:
    """Whether x is (nested lists/tuples of) Python scalars only, no typed arrays."""
    if isinstance(x, (list, tuple)):
        return _b.all(_python_floats(v) for v in x)
    return isinstance(x, (bool, int, float)) and not isinstance(x, _np.generic)


def array(x: Any, dtype=None, copy: bool = True) -> Array:
    """Like asarray; with an Array input and copy=True, a fresh device copy."""
    a = asarray(x, dtype)
    if copy and a is x:
        return bind(OpKind.Copy, [a])
    return a


def _dim(op: str, v) -> int:
    """One shape entry or count as an int, refusing what NumPy refuses: a float or bool
    (TypeError, where int(2.5) would silently truncate)."""
    if isinstance(v, (bool, _np.bool_)) or not hasattr(v, "__index__"):
        raise TypeError(f"{op}: {type(v).__name__} {v!r} cannot be interpreted as an integer "
                        f"(shapes and counts are ints)")
    return operator.index(v)


def _shape(shape, op: str = "shape", unknown: bool = False) -> tuple:
    """A shape argument (an int or a sequence of ints) as a tuple; ValueError for a negative
    entry (other than one -1 where `unknown`, for reshape), TypeError for a non-integer."""
    if shape is None:
        raise TypeError(f"{op}: shape None; use () for a 0-d array")
    if isinstance(shape, (tuple, list)) or getattr(shape, "ndim", 0):
        dims = tuple(_dim(op, d) for d in shape)
    elif hasattr(shape, "__index__"):
        dims = (_dim(op, shape),)
    elif hasattr(shape, "__iter__") and not isinstance(shape, (str, bytes)):
        dims = tuple(_dim(op, d) for d in shape)
    else:
        raise TypeError(f"{op}: shape {shape!r} must be an int or a sequence of ints")
    bad = [d for d in dims if d < 0 and not (unknown and d == -1)]
    if bad:
        raise ShapeError(f"{op}: negative dimensions are not allowed, got shape {dims}")
    return dims


def full(shape, fill_value, dtype=None) -> Array:
    """An array of shape filled with fill_value (dtype from the value when not given).

    >>> full((2,), 7).numpy().tolist()
    [7, 7]
    """
    shape = _shape(shape, "full")
    if isinstance(fill_value, Array):
        return broadcast_to(asarray(fill_value, dtype), shape)
    if dtype is None:
        if isinstance(fill_value, (_np.ndarray, _np.generic)):
            if _np.ndim(fill_value):
                return broadcast_to(asarray(fill_value), shape)
            dtype = dt.canonical(_np.asarray(fill_value).dtype, "full")
        else:
            dtype = dt.promote_weak([], [type(fill_value) if type(fill_value) in (bool, int, float) else float])
    d = dt.canonical(dtype, "full")
    v = bool(fill_value) if d == dt.bool_ else (int(fill_value) if d == dt.int32 else float(fill_value))
    return bind(OpKind.Full, [], shape=shape, dtype=d, value=v)


def zeros(shape, dtype=float32) -> Array:
    """An array of zeros."""
    return full(_shape(shape, "zeros"), 0, dtype)


def ones(shape, dtype=float32) -> Array:
    """An array of ones."""
    return full(_shape(shape, "ones"), 1, dtype)


def zeros_like(a, dtype=None) -> Array:
    a = asarray(a)
    return full(a.shape, 0, dtype or a.dtype)


def ones_like(a, dtype=None) -> Array:
    a = asarray(a)
    return full(a.shape, 1, dtype or a.dtype)


def full_like(a, fill_value, dtype=None) -> Array:
    a = asarray(a)
    return full(a.shape, fill_value, dtype or a.dtype)


def empty(shape, dtype=float32) -> Array:
    """An array of shape (zero-filled: device memory is never handed out uninitialised)."""
    return full(_shape(shape, "empty"), 0, dtype)


class _ZeroStepError(ValueError, ZeroDivisionError):
    """arange with step 0: NumPy raises ZeroDivisionError, vkml has said ValueError."""


def _real(op: str, name: str, v):
    """A Python int or float from a scalar argument (Python or NumPy scalar, 0-d array),
    TypeError otherwise (NumPy: only 0-d arrays convert to Python scalars)."""
    if isinstance(v, Array) and v._trace is not None:
        # as jax.numpy: the result's length depends on the value, which a trace lacks
        raise ConcretizationError(
            f"{op}: {name} is a traced value (shape {v.shape}, {v.dtype}) but {op} needs a "
            f"concrete one: its result's length depends on it. Pass a Python number (mark "
            f"the argument static under jit), or use linspace / arange(n) * step + start "
            f"with a traced start")
    if isinstance(v, (Array, _np.ndarray)):
        if v.ndim:
            raise TypeError(f"{op}: {name} must be a scalar, got an array of shape {v.shape}")
        v = v.item()
    elif isinstance(v, _np.generic):
        v = v.item()
    if isinstance(v, bool):
        return int(v)
    if not isinstance(v, (int, float)):
        raise TypeError(f"{op}: {name} {v!r} ({type(v).__name__}) is not a real number")
    return v


def arange(start, stop=None, step=1, dtype=None) -> Array:
    """Evenly spaced values in [start, stop).

    >>> arange(5).numpy().tolist()
    [0, 1, 2, 3, 4]
    """
    if stop is None:
        start, stop = 0, start
    start, stop, step = (_real("arange", n, v) for n, v in
                         (("start", start), ("stop", stop), ("step", step)))
    if dtype is None:
        dtype = dt.float32 if _b.any(isinstance(v, float) for v in (start, stop, step)) else dt.int32
    d = dt.canonical(dtype, "arange")
    if step == 0:
        raise _ZeroStepError("arange: step must not be zero")
    span = (stop - start) / step
    if not math.isfinite(span):
        raise ValueError(f"arange: cannot compute the length of [{start}, {stop}) with step {step} "
                         f"(it is {span}); give finite bounds")
    n = _b.max(0, math.ceil(span))
    return bind(OpKind.Arange, [], n=int(n), start=start, step=step, dtype=d)


def linspace(start, stop, num: int = 50, endpoint: bool = True, dtype=None) -> Array:
    """num evenly spaced samples over [start, stop] (or [start, stop)).

    >>> linspace(0, 1, 3).numpy().tolist()
    [0.0, 0.5, 1.0]
    """
    if not hasattr(num, "__index__"):
        raise TypeError(f"linspace: num {num!r} ({type(num).__name__}) cannot be interpreted as "
                        f"an integer")
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"linspace: number of samples, {num}, must be non-negative")
    if _array_bounds(start) or _array_bounds(stop):
        return _linspace_arrays(start, stop, num, endpoint, dtype)
    start, stop = _real("linspace", "start", start), _real("linspace", "stop", stop)
    d = dt.canonical(dtype or dt.float32, "linspace")
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    hi = dt.float64 if _device_float64() else dt.float32
    x = bind(OpKind.Arange, [], n=int(num), start=float(start), step=float(step), dtype=hi)
    if endpoint and num > 1:
        x = where(arange(num) == num - 1, asarray(float(stop), hi), x)
    return x.astype(d)


def _array_bounds(v) -> bool:
    """A linspace bound that is computed with on the device: an Array (traced or not: the
    same function either way, its dtype the result's), or a host array that is not 0-d."""
    return isinstance(v, Array) or \
        (isinstance(v, (_np.ndarray, list, tuple)) and _np.ndim(v) > 0)


def _linspace_arrays(start, stop, num: int, endpoint: bool, dtype) -> Array:
    """linspace of array (or traced) bounds, as jax.numpy: start + (stop - start) * i / div,
    differentiable in both; the samples along a new axis 0, bounds broadcast (NumPy's
    axis=0); the last sample is stop itself when endpoint."""
    (s, e), d = _float_operands("linspace", start, stop)
    s, e = broadcast_arrays(s, e)
    div = (num - 1) if endpoint else num
    frac = arange(num, dtype=d) / float(div) if div > 0 else zeros((num,), d)
    frac = reshape(frac, (num,) + (1,) * s.ndim)
    x = s + (e - s) * frac
    if endpoint and num > 1:
        x = where(reshape(arange(num) == num - 1, frac.shape), e, x)
    return x if dtype is None else x.astype(dt.canonical(dtype, "linspace"))


def _device_float64() -> bool:
    return _runtime.get().dev.has_float64


def eye(N: int, M: int | None = None, k: int = 0, dtype=float32) -> Array:
    """Ones on the k-th diagonal of an N x M matrix, zeros elsewhere.

    >>> eye(2, k=1).numpy().tolist()
    [[0.0, 1.0], [0.0, 0.0]]
    """
    N = _dim("eye", N)
    M = N if M is None else _dim("eye", M)
    k = _dim("eye", k)
    if N < 0 or M < 0:
        raise ShapeError(f"eye: negative dimensions are not allowed, got N={N}, M={M}")
    return equal(arange(N)[:, None] + k, arange(M)[None, :]).astype(dtype)


# --------------------------------------------------------------------------- promotion


def _operands(name: str, *xs):
    """Arrays of one common dtype (Python scalars weakly typed) for an n-ary op."""
    d = None
    for x in xs:        # the common case first: arrays of one dtype
        if not isinstance(x, Array) or (d is not None and x.dtype is not d and x.dtype != d):
            break
        d = x.dtype
    else:
        return list(xs), d
    if len(xs) == 2:    # then an array and a Python scalar
        a, b = xs
        if type(b) in _WEAK_TYPES and isinstance(a, Array):
            d = _weak_promotion(a.dtype, type(b))
            return [a if a.dtype == d else a.astype(d), _scalar_operand(b, d)], d
        if type(a) in _WEAK_TYPES and isinstance(b, Array):
            d = _weak_promotion(b.dtype, type(a))
            return [_scalar_operand(a, d), b if b.dtype == d else b.astype(d)], d
    strong, weak = [], []
    for x in xs:
        if isinstance(x, Array):
            strong.append(x.dtype)
        elif isinstance(x, (bool, int, float)) and not isinstance(x, _np.generic):
            weak.append(type(x))
        elif isinstance(x, _np.ndarray) or isinstance(x, _np.generic):
            strong.append(dt.canonical(_np.asarray(x).dtype, name))
        else:
            strong.append(asarray(x).dtype)
    d = dt.promote_weak(strong, weak)

    def conv(x):
        if isinstance(x, Array):
            return x if x.dtype == d else x.astype(d)
        if isinstance(x, (bool, int, float)) and not isinstance(x, _np.generic):
            return _scalar_operand(x, d)
        return asarray(x, d)        # eager: a host write into mapped memory, no submission
    return [conv(x) for x in xs], d


_WEAK_TYPES = (bool, int, float)
_WEAK_PROMOTIONS: dict = {}


def _weak_promotion(d, t: type):
    """promote_weak([d], [t]), memoised."""
    r = _WEAK_PROMOTIONS.get((d, t))
    if r is None:
        r = _WEAK_PROMOTIONS[d, t] = dt.promote_weak([d], [t])
    return r


def _scalar_operand(x, d) -> Array:
    """A Python scalar operand as an array of dtype d."""
    if _tracer.current() is not None:
        return full((), x, d)   # traced: a foldable Full node rather than a captured upload
    return _weak_scalar(x, d)   # eager: a host write into mapped memory, no submission


# (type, value, dtype) -> the device Buffer of an eager operator's Python scalar operand:
# `x * 2` in an eager loop uploads its 2 once. Each use gets an Array of its own; the buffer
# is never written again (jit does not take it as a donated argument: `_shared_buffer`).
_SCALARS: dict = {}
_SCALARS_KEPT = 1024


def _weak_scalar(x, d) -> Array:
    if x != x:          # nan: no key finds it again
        return asarray(x, d)
    # 0.0 and -0.0 are equal keys of different values
    key = (type(x), x, d, math.copysign(1.0, x) if type(x) is float else 0)
    buf = _SCALARS.get(key)
    if buf is None:
        a = asarray(x, d)
        if len(_SCALARS) >= _SCALARS_KEPT:
            _SCALARS.clear()
        _SCALARS[key] = a._buf
        return a
    return Array._concrete(buf, (), d)


def _shared_buffer(buf) -> bool:
    """Whether buf is one that eager operators share (a cached Python scalar's), which a
    jitted call must not take over as a donated argument."""
    return _b.any(b is buf for b in _SCALARS.values())


# oracles for the generated functions NumPy has no function of the same name for
_DOC_REFS = {"rsqrt": lambda v: 1 / _np.sqrt(v), "erf": _np.vectorize(math.erf),
             "erfc": _np.vectorize(math.erfc)}


def _example(name: str, call: str, *args, digits: int | None = None) -> str:
    """A generated function's docstring example: `call` and, as its expected output, what
    NumPy (the oracle) gives on the same operands, printed as the example prints it (a
    float32 array rounded to `digits` decimals, else the exact list)."""
    want = (_DOC_REFS.get(name) or getattr(_np, name))(*args)
    if digits is None:
        return f">>> {call}.numpy().tolist()\n{want.tolist()!r}\n"
    return (f">>> print({call}.numpy().round({digits}))\n"
            f"{_np.asarray(want, _np.float32).round(digits)}\n")


def _float_operands(name, *xs):
    xs, d = _operands(name, *xs)
    if not dt.is_float(d):
        xs, d = [x.astype(dt.float32) for x in xs], dt.float32
    return xs, d


def _unary_float(kind: OpKind, name: str):
    def f(x) -> Array:
        (x,), _ = _float_operands(name, x)
        return bind(kind, [x])
    f.__name__ = name
    f.__doc__ = (f"Elementwise {name} (integer input becomes float32).\n\n"
                 + _example(name, f"{name}(asarray([0.5]))", _np.array([0.5]), digits=4))
    return f


exp = _unary_float(OpKind.Exp, "exp")
log = _unary_float(OpKind.Log, "log")
log1p = _unary_float(OpKind.Log1p, "log1p")
expm1 = _unary_float(OpKind.Expm1, "expm1")
sqrt = _unary_float(OpKind.Sqrt, "sqrt")
rsqrt = _unary_float(OpKind.Rsqrt, "rsqrt")
reciprocal = _unary_float(OpKind.Reciprocal, "reciprocal")
tanh = _unary_float(OpKind.Tanh, "tanh")
sin = _unary_float(OpKind.Sin, "sin")
cos = _unary_float(OpKind.Cos, "cos")
erf = _unary_float(OpKind.Erf, "erf")
erfc = _unary_float(OpKind.Erfc, "erfc")


def _unary_num(kind: OpKind, name: str):
    def f(x) -> Array:
        (x,), d = _operands(name, x)
        if d == dt.bool_:
            # NumPy and jax.numpy: abs of a bool is itself; negative and sign refuse it
            if kind is OpKind.Abs:
                return x
            raise DTypeError(f"{name}: not defined for bool arrays; use logical_not, or cast to "
                             f"int32 first")
        return bind(kind, [x])
    f.__name__ = name
    f.__doc__ = (f"Elementwise {name}.\n\n"
                 + _example(name, f"{name}(asarray([-1.5]))", _np.float32([-1.5])))
    return f


negative = _unary_num(OpKind.Neg, "negative")
abs = _unary_num(OpKind.Abs, "abs")
absolute = abs
sign = _unary_num(OpKind.Sign, "sign")


def square(x) -> Array:
    """x * x; a bool input gives int32 (NumPy has no bool square: int8 there)."""
    x = asarray(x)
    if x.dtype == dt.bool_:
        x = x.astype(dt.int32)
    return multiply(x, x)


_BOOL_AS = {OpKind.Add: OpKind.Maximum, OpKind.Mul: OpKind.Minimum}


def _binary(kind: OpKind, name: str, floats: bool = False, bool_ok: bool = False):
    def f(x, y) -> Array:
        (x, y), d = (_float_operands if floats else _operands)(name, x, y)
        if d == dt.bool_ and not bool_ok:
            # jax.numpy: bool + bool is logical or, bool * bool logical and; minus has no meaning
            if kind in _BOOL_AS:
                return bind(_BOOL_AS[kind], [x, y])
            raise DTypeError(f"{name}: not defined for two bool arrays; use logical_xor/logical_and "
                             f"or cast to int32 first")
        return bind(kind, [x, y])
    f.__name__ = name
    f.__doc__ = (f"Elementwise {name} with broadcasting and promotion.\n\n"
                 + _example(name, f"{name}(asarray([1.0]), 2.0)", _np.float32([1.0]),
                            _np.float32(2.0)))
    return f


add = _binary(OpKind.Add, "add")
subtract = _binary(OpKind.Sub, "subtract")
multiply = _binary(OpKind.Mul, "multiply")
divide = _binary(OpKind.Div, "divide", floats=True)
true_divide = divide
maximum = _binary(OpKind.Maximum, "maximum", bool_ok=True)
minimum = _binary(OpKind.Minimum, "minimum", bool_ok=True)


def _host_scalar(v) -> bool:
    """A Python or NumPy scalar: its value is known while tracing."""
    return isinstance(v, (bool, int, float, _np.bool_, _np.integer, _np.floating))


def power(x, y) -> Array:
    """x ** y. A constant exponent that is an integer or k + 0.5 (a Python or NumPy
    scalar) is an exact multiplication chain (`IntegerPow`, as jax.lax.integer_pow): x ** 1
    is x and x ** 2 is x * x, gradients included; an integer base then stays integer
    (a negative exponent raises ValueError, as NumPy). Anything else is `Pow` in float.

    >>> power(asarray([3.0]), 2).numpy().tolist()
    [9.0]
    """
    n = _ops.integer_pow_exponent(y) if _host_scalar(y) else None
    if n is not None:
        (xa,), dx = _operands("power", x)
        # the exponent takes part in promotion (weakly when a Python scalar) but is not
        # made an array: it is the operator's attribute
        if isinstance(y, (bool, int, float)) and not isinstance(y, _np.generic):
            d = dt.promote_weak([dx], [type(y)])
        else:
            d = dt.promote(dx, dt.canonical(_np.asarray(y).dtype, "power"))
        if d == dt.bool_:
            d = dt.int32
        if not dt.is_float(d) and n < 0:
            raise ValueError("Integers to negative integer powers are not allowed.")
        return bind(OpKind.IntegerPow, [xa.astype(d)], exponent=n)
    (xa, ya), d = _operands("power", x, y)
    if not dt.is_float(d):
        # integers to an integer array: exact in int32 (NumPy's int result); a concrete
        # negative exponent is refused as NumPy refuses it, a traced one has the
        # operator's documented value
        if d == dt.bool_:
            xa, ya = xa.astype(dt.int32), ya.astype(dt.int32)
        if (ya._trace is None and size_of(broadcast_shapes("power", xa.shape, ya.shape))
                and bool((ya.numpy() < 0).any())):
            raise ValueError("Integers to negative integer powers are not allowed.")
        return bind(OpKind.Pow, [xa, ya])
    return bind(OpKind.Pow, [xa, ya])


def _compare(kind: OpKind, name: str):
    def f(x, y) -> Array:
        (x, y), _ = _operands(name, x, y)
        return bind(kind, [x, y])
    f.__name__ = name
    f.__doc__ = (f"Elementwise {name} as bool.\n\n"
                 + _example(name, f"{name}(asarray([1]), 1)", _np.int32([1]), 1))
    return f


equal = _compare(OpKind.Equal, "equal")
not_equal = _compare(OpKind.NotEqual, "not_equal")
less = _compare(OpKind.Less, "less")
less_equal = _compare(OpKind.LessEqual, "less_equal")
greater = _compare(OpKind.Greater, "greater")
greater_equal = _compare(OpKind.GreaterEqual, "greater_equal")


def _as_bool(x) -> Array:
    return asarray(x, dt.bool_)


def logical_and(x, y) -> Array:
    return bind(OpKind.Minimum, [_as_bool(x), _as_bool(y)])


def logical_or(x, y) -> Array:
    return bind(OpKind.Maximum, [_as_bool(x), _as_bool(y)])


def logical_not(x) -> Array:
    x = _as_bool(x)
    return bind(OpKind.Equal, [x, asarray(False)])


def _integral_operands(name: str, *xs, shift: bool = False):
    """Operands of a bitwise operator: bool and integer only (TypeError for floats, as
    NumPy's ufuncs); a shift promotes bool to int32, as NumPy does."""
    given = xs
    xs, d = _operands(name, *xs)
    if d not in dt.INTEGRAL:
        kinds = ", ".join(str(x.dtype) if isinstance(x, (Array, _np.ndarray, _np.generic))
                          else type(x).__name__ for x in given)
        raise DTypeError(f"{name}: not supported for the input types ({kinds}); NumPy's ufunc "
                         f"'{name}' takes bool and integer operands only")
    if shift and d == dt.bool_:
        xs, d = [x.astype(dt.int32) for x in xs], dt.int32
    return xs, d


def _bitwise(kind: OpKind, name: str, shift: bool = False):
    def f(x, y) -> Array:
        (x, y), _ = _integral_operands(name, x, y, shift=shift)
        return bind(kind, [x, y])
    f.__name__ = name
    f.__doc__ = (f"Elementwise {name} of bool or integer operands (NumPy's rules; floats raise "
                 f"TypeError).\n\n" + _example(name, f"{name}(asarray([6]), 3)", _np.int32([6]), 3))
    return f


bitwise_and = _bitwise(OpKind.BitwiseAnd, "bitwise_and")
bitwise_or = _bitwise(OpKind.BitwiseOr, "bitwise_or")
bitwise_xor = _bitwise(OpKind.BitwiseXor, "bitwise_xor")
left_shift = _bitwise(OpKind.ShiftLeft, "left_shift", shift=True)
right_shift = _bitwise(OpKind.ShiftRight, "right_shift", shift=True)


def _division_operands(name: str, x, y) -> list[Array]:
    """Operands of floor division and remainder (bool promotes to int32, as NumPy's
    integer result)."""
    (x, y), d = _operands(name, x, y)
    return [x.astype(dt.int32), y.astype(dt.int32)] if d == dt.bool_ else [x, y]


def _division(kind: OpKind, name: str):
    def f(x, y) -> Array:
        return bind(kind, _division_operands(name, x, y))
    f.__name__ = name
    f.__doc__ = (f"Elementwise {name} with NumPy's rules (floor division, the remainder has "
                 f"the sign of the divisor; exact on floats too).\n\n"
                 + _example(name, f"{name}(asarray([7, -7]), 2)", _np.int32([7, -7]), 2))
    return f


floor_divide = _division(OpKind.FloorDivide, "floor_divide")
remainder = _division(OpKind.Remainder, "remainder")
mod = remainder


def divmod(x, y) -> tuple[Array, Array]:
    """(floor_divide(x, y), remainder(x, y)).

    >>> [v.numpy().tolist() for v in divmod(asarray([7, -7]), 2)]
    [[3, -4], [1, 1]]
    """
    x, y = _division_operands("divmod", x, y)
    return bind(OpKind.FloorDivide, [x, y]), bind(OpKind.Remainder, [x, y])


def invert(x) -> Array:
    """~x: bitwise not of integers (-x - 1), logical not of bools; floats raise TypeError.

    >>> invert(asarray([1, -8])).numpy().tolist(), invert(asarray([True])).numpy().tolist()
    ([-2, 7], [False])
    """
    (x,), _ = _integral_operands("invert", x)
    return bind(OpKind.BitwiseNot, [x])


bitwise_not = invert


def isnan(x) -> Array:
    x = asarray(x)
    if not dt.is_float(x.dtype):
        return full(x.shape, False)
    return not_equal(x, x)


def isfinite(x) -> Array:
    x = asarray(x)
    if not dt.is_float(x.dtype):
        return full(x.shape, True)
    return less(abs(x), inf)


def where(condition, x=None, y=None, *, size=None, fill_value=None):
    """x where condition else y (broadcast; x and y promoted together); with condition
    alone, `nonzero(condition, size=, fill_value=)` (a tuple of index arrays)."""
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise ValueError("where: either both or neither of x and y should be given")
    (x, y), _ = _operands("where", x, y)
    return bind(OpKind.Where, [_as_bool(condition), x, y])


def clip(a, a_min=None, a_max=None) -> Array:
    """Limit values to [a_min, a_max]."""
    if a_min is not None:
        a = maximum(a, a_min)
    if a_max is not None:
        a = minimum(a, a_max)
    return asarray(a)


# --------------------------------------------------------------------------- reductions


def _axes(name, a: Array, axis, scalar_0d: bool = True):
    """Reduction axes as NumPy takes them; scalar_0d: a lone int 0 or -1 on a 0-d array
    means no axes (NumPy's ufunc reductions), False where NumPy refuses it (mean, var)."""
    return normalize_axes(name, axis, a.ndim, scalar_0d)


def _reduced_size(a: Array, axes) -> int:
    return size_of([a.shape[ax] for ax in axes])


def _need_nonempty(name: str, what: str, a: Array, axes) -> None:
    """NumPy's ValueError for a reduction without an identity over no elements."""
    if _reduced_size(a, axes) == 0:
        raise ShapeError(f"{name}: zero-size array to reduction operation {what} which has no "
                         f"identity (shape {a.shape}, axes {axes}); reduce over non-empty axes "
                         f"(or use where(...) with a fill value first)")


def _where_mask(name: str, a: Array, where) -> Array:
    """where= of a reduction as a bool array of a's shape (it broadcasts to a, not a to it)."""
    w = _as_bool(where)
    if broadcast_shapes(name, a.shape, w.shape) != a.shape:
        raise ShapeError(f"{name}: where mask of shape {w.shape} does not broadcast to the "
                         f"input's shape {a.shape}")
    return broadcast_to(w, a.shape)


def _mask_arg(where):
    """where= as given, None for a plain True (NumPy's default: no mask)."""
    return None if isinstance(where, (bool, _np.bool_)) and where else where


def _masked(name: str, a: Array, where, fill) -> Array:
    """a with the elements where= leaves out replaced by the reduction's identity."""
    where = _mask_arg(where)
    if where is None:
        return a
    return bind(OpKind.Where, [_where_mask(name, a, where), a, full((), fill, a.dtype)])


def _initial(r: Array, initial, combine) -> Array:
    """The reduction's result combined with initial= (cast to the result's dtype, as NumPy)."""
    return r if initial is None else combine(r, full((), initial, r.dtype))


def sum(a, axis=None, keepdims: bool = False, dtype=None, initial=None, where=None) -> Array:
    """Sum over axis (None: all); bool sums count as int32; an empty sum is 0 (or
    `initial`, added to every sum); `where` (bool, broadcast to a) picks the elements summed.

    >>> sum(asarray([[1, 2], [3, 4]]), axis=0).numpy().tolist()
    [4, 6]
    >>> sum(asarray([1, 2, 3]), initial=10, where=asarray([True, False, True])).item()
    14
    """
    a = asarray(a)
    if dtype is not None:
        a = a.astype(dtype)
    elif a.dtype == dt.bool_:
        a = a.astype(dt.int32)
    a = _masked("sum", a, where, 0)
    r = bind(OpKind.Sum, [a], axes=_axes("sum", a, axis), keepdims=bool(keepdims))
    return _initial(r, initial, add)


def mean(a, axis=None, keepdims: bool = False, dtype=None, where=None) -> Array:
    """Arithmetic mean over axis; integer input gives float32; an empty mean is nan;
    `where` (bool, broadcast to a) picks the elements averaged (nan where it picks none).

    >>> mean(asarray([1.0, 2.0, 6.0]), where=asarray([True, True, False])).item()
    1.5
    """
    a = asarray(a)
    if dtype is not None and not dt.is_float(dt.canonical(dtype, "mean")):
        # NumPy: the quotient cast to the integer dtype asked for (truncated)
        return mean(a, axis, keepdims, where=where).astype(dtype)
    if dtype is not None:
        a = a.astype(dtype)
    if not dt.is_float(a.dtype):
        a = a.astype(dt.float32)
    axes = _axes("mean", a, axis, False)
    where = _mask_arg(where)
    if where is None:
        return bind(OpKind.Mean, [a], axes=axes, keepdims=bool(keepdims))
    w = _where_mask("mean", a, where)
    s = bind(OpKind.Sum, [_masked("mean", a, w, 0)], axes=axes, keepdims=bool(keepdims))
    n = bind(OpKind.Sum, [w.astype(a.dtype)], axes=axes, keepdims=bool(keepdims))
    return s / n


def _extremum(kind: OpKind, name: str, what: str, combine, a, axis, keepdims, initial, where):
    """max or min: NumPy's rules for initial= (needed with where=, and over no elements)."""
    a = asarray(a)
    axes = _axes(name, a, axis)
    where = _mask_arg(where)
    if initial is None:
        if where is not None:
            raise ValueError(f"{name}: reduction operation '{what}' does not have an identity, "
                             f"so to use a where mask one has to specify 'initial'")
        _need_nonempty(name, what, a, axes)
        return bind(kind, [a], axes=axes, keepdims=bool(keepdims))
    if _reduced_size(a, axes) == 0:
        shape = tuple(1 if i in axes else d for i, d in enumerate(a.shape)) if keepdims else \
            tuple(d for i, d in enumerate(a.shape) if i not in axes)
        return full(shape, initial, a.dtype)
    if where is not None:
        # a left-out element becomes initial itself: it cannot change the result
        a = bind(OpKind.Where, [_where_mask(name, a, where), a, full((), initial, a.dtype)])
    return _initial(bind(kind, [a], axes=axes, keepdims=bool(keepdims)), initial, combine)


def max(a, axis=None, keepdims: bool = False, initial=None, where=None) -> Array:
    """Maximum over axis; nan propagates; ValueError over no elements (no identity) unless
    `initial` is given, which `where` (bool, broadcast to a) needs, as in NumPy.

    >>> max(asarray([1, 5, 3]), initial=2, where=asarray([True, False, True])).item()
    3
    """
    return _extremum(OpKind.Max, "max", "maximum", maximum, a, axis, keepdims, initial, where)


def min(a, axis=None, keepdims: bool = False, initial=None, where=None) -> Array:
    """Minimum over axis; nan propagates; ValueError over no elements (no identity) unless
    `initial` is given, which `where` needs, as in NumPy.

    >>> min(asarray([1, 5, 3]), initial=2).item()
    1
    """
    return _extremum(OpKind.Min, "min", "minimum", minimum, a, axis, keepdims, initial, where)


amax, amin = max, min


def _bool_reduce(kind: OpKind, name: str, empty: bool, a, axis, keepdims, where=None) -> Array:
    a = _as_bool(a)
    a = _masked(name, a, where, empty)   # a left-out element is the identity
    axes = _axes(name, a, axis)
    if _reduced_size(a, axes) == 0:
        # over no elements: the identity (False for any, True for all), as NumPy
        shape = tuple(1 if i in axes else d for i, d in enumerate(a.shape)) if keepdims else \
            tuple(d for i, d in enumerate(a.shape) if i not in axes)
        return full(shape, empty, dt.bool_)
    return bind(kind, [a], axes=axes, keepdims=bool(keepdims))


def any(a, axis=None, keepdims: bool = False, *, where=None) -> Array:
    """Whether any element along axis (and where= picks) is true (False over none)."""
    return _bool_reduce(OpKind.Max, "any", False, a, axis, keepdims, where)


def all(a, axis=None, keepdims: bool = False, *, where=None) -> Array:
    """Whether every element along axis (and where= picks) is true (True over none)."""
    return _bool_reduce(OpKind.Min, "all", True, a, axis, keepdims, where)


def prod(a, axis=None, keepdims: bool = False, dtype=None, initial=None, where=None) -> Array:
    """Product over axis; bool counts as int32; an empty product is 1 (or `initial`, which
    multiplies every product); `where` (bool, broadcast to a) picks the elements multiplied.

    >>> prod(asarray([2, 3, 4]), dtype=float32, where=asarray([True, False, True])).item()
    8.0
    """
    a = asarray(a)
    if dtype is not None:
        a = a.astype(dtype)
    elif a.dtype == dt.bool_:
        a = a.astype(dt.int32)
    a = _masked("prod", a, where, 1)
    r = bind(OpKind.Prod, [a], axes=_axes("prod", a, axis), keepdims=bool(keepdims))
    return _initial(r, initial, multiply)


def _arg(kind, name, a, axis, keepdims):
    a = asarray(a)
    if a.dtype == dt.bool_:
        a = a.astype(dt.int32)
    # NumPy: a 0-d array counts as 1-d here (axis 0 or -1 is its one axis); one int axis only
    ax = None if axis is None else normalize_axis(name, axis, _b.max(a.ndim, 1))
    if axis is None or a.ndim == 0:
        if a.size == 0:
            raise ShapeError(f"{name}: attempt to get {name} of an empty sequence (shape {a.shape})")
        r = bind(kind, [reshape(a, (-1,))], axes=(0,), keepdims=False)
        return reshape(r, (1,) * a.ndim) if keepdims else r
    if a.shape[ax] == 0:
        raise ShapeError(f"{name}: attempt to get {name} of an empty sequence (axis {ax} of "
                         f"shape {a.shape} has size 0)")
    return bind(kind, [a], axes=(ax,), keepdims=bool(keepdims))


def argmax(a, axis=None, keepdims: bool = False) -> Array:
    """Index of the first maximum (over the flattened array when axis is None)."""
    return _arg(OpKind.ArgMax, "argmax", a, axis, keepdims)


def argmin(a, axis=None, keepdims: bool = False) -> Array:
    """Index of the first minimum (over the flattened array when axis is None)."""
    return _arg(OpKind.ArgMin, "argmin", a, axis, keepdims)


def var(a, axis=None, ddof: int = 0, keepdims: bool = False, dtype=None, where=None) -> Array:
    """Variance (two-pass: mean first, then mean squared deviation); divides by
    max(n - ddof, 0) as NumPy, so ddof >= n gives inf (or nan where the sum is 0); `where`
    (bool, broadcast to a) picks the elements, n counting those.

    >>> var(asarray([1.0, 3.0, 100.0]), where=asarray([True, True, False])).item()
    1.0
    """
    a = asarray(a)
    if dtype is not None:
        a = a.astype(dtype)
    if not dt.is_float(a.dtype):
        a = a.astype(dt.float32)
    axes = _axes("var", a, axis, False)
    where = _mask_arg(where)
    if where is None:
        m = mean(a, axes, keepdims=True)
        d = a - m
        s = sum(d * d, axes, keepdims=keepdims)
        return s / float(_b.max(_reduced_size(a, axes) - ddof, 0))
    w = _where_mask("var", a, where)
    m = mean(a, axes, keepdims=True, where=w)
    d = bind(OpKind.Where, [w, a - m, full((), 0, a.dtype)])   # `where` is the argument here
    s = sum(d * d, axes, keepdims=keepdims)
    n = sum(w.astype(a.dtype), axes, keepdims=keepdims)
    return s / maximum(n - float(ddof), 0.0)


def std(a, axis=None, ddof: int = 0, keepdims: bool = False, dtype=None, where=None) -> Array:
    """Standard deviation: sqrt of var."""
    return sqrt(var(a, axis, ddof, keepdims, dtype, where))


def cumsum(a, axis=None) -> Array:
    """Inclusive running sum (flattened when axis is None; a 0-d input gives shape (1,)
    as in NumPy)."""
    a = asarray(a)
    if a.dtype == dt.bool_:
        a = a.astype(dt.int32)
    if axis is None or a.ndim == 0:
        ax = 0 if axis is None else normalize_axis("cumsum", axis, 1)
        a = reshape(a, (-1,))
    else:
        ax = normalize_axis("cumsum", axis, a.ndim)
    return bind(OpKind.Cumsum, [a], axis=ax)


# --------------------------------------------------------------------------- contraction


def matmul(a, b) -> Array:
    """Matrix product with NumPy's rules for 1-d operands and batch broadcasting."""
    (a, b), d = _operands("matmul", a, b)
    if d == dt.bool_:
        a, b = a.astype(dt.int32), b.astype(dt.int32)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: operands must not be 0-d, got shapes {a.shape} and {b.shape}")
    va, vb = a.ndim == 1, b.ndim == 1
    sa, sb = a.shape, b.shape   # the user's shapes, for the error below
    if va:
        a = reshape(a, (1,) + a.shape)
    if vb:
        b = reshape(b, b.shape + (1,))
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"matmul: contraction mismatch, {sa} @ {sb}: {a.shape[-1]} != {b.shape[-2]}")
    out = bind(OpKind.MatMul, [a, b])
    if va and vb:
        return reshape(out, out.shape[:-2])
    if va:
        return reshape(out, out.shape[:-2] + out.shape[-1:])
    if vb:
        return reshape(out, out.shape[:-1])
    return out


def dot(a, b) -> Array:
    """NumPy dot for rank <= 2 operands (scalars multiply)."""
    a, b = asarray(a), asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    if a.ndim > 2 or b.ndim > 2:
        raise ShapeError(f"dot: rank > 2 operands {a.shape}, {b.shape} are not supported; use matmul or einsum")
    return matmul(a, b)


def vdot(a, b) -> Array:
    return sum(multiply(reshape(a, (-1,)), reshape(b, (-1,))))


def outer(a, b) -> Array:
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def einsum(subscripts, *operands, out=None, optimize="auto", dtype=None) -> Array:
    """Einstein summation with NumPy's subscripts, as pairwise matmuls (see vkml/einsum.py).

    >>> einsum("ij,j->i", asarray([[1, 2], [3, 4]]), asarray([1, 1])).numpy().tolist()
    [3, 7]
    """
    from .einsum import einsum as _e     # lazily: vkml/einsum.py is built on this module
    return _e(subscripts, *operands, out=out, optimize=optimize, dtype=dtype)


# --------------------------------------------------------------------------- shape


def reshape(a, shape) -> Array:
    """Same data, new shape (one -1 is inferred)."""
    a = asarray(a)
    shape = _shape(shape, "reshape", unknown=True)
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape: only one -1 allowed in {shape}")
    if -1 in shape:
        known = size_of([s for s in shape if s != -1])
        if known == 0 or a.size % known:
            raise ShapeError(f"reshape: cannot reshape {a.shape} ({a.size} elements) to {shape}")
        shape = tuple(a.size // known if s == -1 else s for s in shape)
    if shape == a.shape:
        return a
    return bind(OpKind.Reshape, [a], shape=shape)


def transpose(a, axes=None) -> Array:
    a = asarray(a)
    perm = tuple(range(a.ndim))[::-1] if axes is None else tuple(normalize_axis("transpose", x, a.ndim) for x in axes)
    if perm == tuple(range(a.ndim)):
        return a
    return bind(OpKind.Permute, [a], perm=perm)


def swapaxes(a, axis1: int, axis2: int) -> Array:
    a = asarray(a)
    p = list(range(a.ndim))
    i, j = normalize_axis("swapaxes", axis1, a.ndim), normalize_axis("swapaxes", axis2, a.ndim)
    p[i], p[j] = p[j], p[i]
    return transpose(a, p)


def moveaxis(a, source: int, destination: int) -> Array:
    a = asarray(a)
    s, d = normalize_axis("moveaxis", source, a.ndim), normalize_axis("moveaxis", destination, a.ndim)
    p = [i for i in range(a.ndim) if i != s]
    p.insert(d, s)
    return transpose(a, p)


def expand_dims(a, axis) -> Array:
    a = asarray(a)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    nd = a.ndim + len(axes)
    axes = sorted(normalize_axis("expand_dims", x, nd) for x in axes)
    shape = list(a.shape)
    for ax in axes:
        shape.insert(ax, 1)
    return reshape(a, tuple(shape))


def squeeze(a, axis=None) -> Array:
    a = asarray(a)
    if axis is None:
        return reshape(a, tuple(d for d in a.shape if d != 1))
    axes = normalize_axes("squeeze", axis, a.ndim, scalar_0d=True)
    for ax in axes:
        if a.shape[ax] != 1:
            raise ShapeError(f"squeeze: cannot squeeze axis {ax} of shape {a.shape}: its size "
                             f"is {a.shape[ax]}, not 1")
    return reshape(a, tuple(d for i, d in enumerate(a.shape) if i not in axes))


def broadcast_to(a, shape) -> Array:
    a = asarray(a)
    shape = _shape(shape, "broadcast_to")
    if a.shape == shape:
        return a
    return bind(OpKind.Expand, [a], shape=shape)


def broadcast_arrays(*arrays) -> list[Array]:
    arrays = [asarray(x) for x in arrays]
    s = broadcast_shapes("broadcast_arrays", *[x.shape for x in arrays])
    return [broadcast_to(x, s) for x in arrays]


def concatenate(arrays: Sequence, axis: int = 0) -> Array:
    """Join arrays along an existing axis (dtypes promoted)."""
    xs, _ = _operands("concatenate", *arrays)
    if not xs:
        raise ValueError("concatenate: need at least one array")
    if xs[0].ndim == 0:
        raise ShapeError("concatenate: zero-dimensional arrays cannot be concatenated")
    ax = normalize_axis("concatenate", axis, xs[0].ndim)
    if len(xs) == 1:
        return xs[0]
    return bind(OpKind.Concat, xs, axis=ax)


def stack(arrays: Sequence, axis: int = 0) -> Array:
    """Join arrays along a new axis."""
    xs = [asarray(x) for x in arrays]
    if not xs:
        raise ValueError("stack: need at least one array")
    shapes = {x.shape for x in xs}
    if len(shapes) > 1:
        raise ShapeError(f"stack: all arrays need the same shape, got {sorted(shapes)}")
    ax = normalize_axis("stack", axis, xs[0].ndim + 1)
    return concatenate([expand_dims(x, ax) for x in xs], ax)


def split(a, indices_or_sections, axis: int = 0) -> list[Array]:
    """Split into equal sections or at the given indices."""
    a = asarray(a)
    ax = normalize_axis("split", axis, a.ndim)
    n = a.shape[ax]
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if k <= 0 or n % k:
            raise ShapeError(f"split: axis {ax} of size {n} does not divide into {k} equal sections")
        bounds = [i * (n // k) for i in range(k + 1)]
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        idx = [slice(None)] * a.ndim
        idx[ax] = slice(lo, hi)
        out.append(a[tuple(idx)])
    return out


def pad(a, pad_width, mode: str = "constant", constant_values=0) -> Array:
    """Constant padding (NumPy's pad_width forms)."""
    if mode != "constant":
        raise NotImplementedError(f"pad: mode {mode!r} is not supported; only 'constant'")
    a = asarray(a)
    pw = _np.broadcast_to(_np.asarray(pad_width, dtype=_np.int64), (a.ndim, 2))
    pads = tuple((int(lo), int(hi)) for lo, hi in pw)
    return bind(OpKind.Pad, [a], pads=pads, value=constant_values)


def flip(a, axis=None) -> Array:
    a = asarray(a)
    return bind(OpKind.Flip, [a], axes=normalize_axes("flip", axis, a.ndim))


def ravel(a) -> Array:
    return reshape(a, (-1,))


def shape(a) -> tuple:
    return asarray(a).shape


def ndim(a) -> int:
    return asarray(a).ndim


def size(a) -> int:
    return asarray(a).size


def astype(a, dtype) -> Array:
    return asarray(a).astype(dtype)


def copy(a) -> Array:
    return bind(OpKind.Copy, [asarray(a)])


def allclose(a, b, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    """Host-side check (reads both arrays back)."""
    return bool(_np.allclose(_np.asarray(a), _np.asarray(b), rtol=rtol, atol=atol))


# --------------------------------------------------------------------------- rounding and math
# (compositions of registry ops; Floor, Ceil, Trunc and Rint are exact kernels)


def _rounding(kind: OpKind, name: str, np_name: str):
    def f(x) -> Array:
        x = asarray(x)
        if not dt.is_float(x.dtype):
            return x   # NumPy 2 and jax.numpy: integers and bools come back unchanged
        return bind(kind, [x])
    f.__name__ = name
    f.__doc__ = (f"Elementwise {name} (-0 and nan kept; int and bool input returned as is; "
                 f"gradient zero).\n\n"
                 + _example(np_name, f"{name}(asarray([-1.5, -0.5, 0.5, 2.5]))",
                            _np.float32([-1.5, -0.5, 0.5, 2.5])))
    return f


floor = _rounding(OpKind.Floor, "floor", "floor")
ceil = _rounding(OpKind.Ceil, "ceil", "ceil")
trunc = _rounding(OpKind.Trunc, "trunc", "trunc")
fix = _rounding(OpKind.Trunc, "fix", "fix")


def rint(x) -> Array:
    """Round to the nearest integer, halves to even (integer input becomes float32).

    >>> rint(asarray([-1.5, 0.5, 2.5])).numpy().tolist()
    [-2.0, 0.0, 2.0]
    """
    (x,), _ = _float_operands("rint", x)
    return bind(OpKind.Rint, [x])


def round(a, decimals: int = 0) -> Array:
    """Round to `decimals` places, halves to even, as NumPy: x * 10**decimals rounded, then
    divided back (negative decimals divide first); integers stay integers (rounded to a
    multiple of 10**-decimals when decimals < 0), bools become float32.

    >>> round(asarray([1.25, -0.5, 15.0]), 1).numpy().tolist()
    [1.2000000476837158, -0.5, 15.0]
    >>> round(asarray([15, 25, -35]), -1).numpy().tolist()
    [20, 20, -40]
    """
    decimals = operator.index(decimals)
    a = asarray(a)
    if a.dtype == dt.bool_:
        a = a.astype(dt.float32)   # NumPy rounds a bool in float (float16 there)
    if not dt.is_float(a.dtype):
        if decimals >= 0:
            return a
        m = 10 ** -decimals
        if m > 2 ** 32:
            return zeros_like(a)   # every int32 is nearer 0 than any other multiple
        q = floor_divide(a, m)
        r = a - q * m
        up = (r * 2 > m) | ((r * 2 == m) & (remainder(q, 2) == 1))
        return (q + up.astype(dt.int32)) * m
    if decimals >= 0:
        f = 10.0 ** decimals
        return bind(OpKind.Rint, [a * f]) / f
    f = 10.0 ** -decimals
    return bind(OpKind.Rint, [a / f]) * f


around = round


def positive(x) -> Array:
    """+x (a copy); bool input raises TypeError as NumPy.

    >>> positive(asarray([-1, 2])).numpy().tolist()
    [-1, 2]
    """
    x = asarray(x)
    if x.dtype == dt.bool_:
        raise DTypeError("positive: not defined for bool arrays; cast to int32 first")
    return copy(x)


def fabs(x) -> Array:
    """|x| in float (integer and bool input become float32).

    >>> fabs(asarray([-1.5, 2])).numpy().tolist()
    [1.5, 2.0]
    """
    (x,), _ = _float_operands("fabs", x)
    return bind(OpKind.Abs, [x])


def deg2rad(x) -> Array:
    """Degrees to radians: x * (pi / 180), as NumPy.

    >>> deg2rad(asarray([180.0])).numpy().astype(float).round(5).tolist()
    [3.14159]
    """
    (x,), _ = _float_operands("deg2rad", x)
    return x * (math.pi / 180)


def rad2deg(x) -> Array:
    """Radians to degrees: x * (180 / pi), as NumPy.

    >>> rad2deg(asarray([0.0, pi])).numpy().astype(float).round(3).tolist()
    [0.0, 180.0]
    """
    (x,), _ = _float_operands("rad2deg", x)
    return x * (180 / math.pi)


radians, degrees = deg2rad, rad2deg




def fmax(x, y) -> Array:
    """Elementwise maximum that ignores nan (nan only where both are nan).

    >>> fmax(asarray([1.0, nan, nan]), asarray([nan, 2.0, nan])).numpy().tolist()
    [1.0, 2.0, nan]
    """
    (x, y), _ = _operands("fmax", x, y)
    return where(isnan(x), y, where(isnan(y), x, maximum(x, y)))


def fmin(x, y) -> Array:
    """Elementwise minimum that ignores nan (nan only where both are nan).

    >>> fmin(asarray([1.0, nan, 3.0]), asarray([nan, 2.0, 0.0])).numpy().tolist()
    [1.0, 2.0, 0.0]
    """
    (x, y), _ = _operands("fmin", x, y)
    return where(isnan(x), y, where(isnan(y), x, minimum(x, y)))


def heaviside(x1, x2) -> Array:
    """0 where x1 < 0, x2 where x1 == 0, 1 where x1 > 0, nan where x1 is nan (float result).

    >>> heaviside(asarray([-1.0, 0.0, 2.0]), 0.5).numpy().tolist()
    [0.0, 0.5, 1.0]
    """
    (x1, x2), _ = _float_operands("heaviside", x1, x2)
    return where(x1 < 0, 0.0, where(x1 > 0, 1.0, where(isnan(x1), x1, x2)))


def _float_test(x, test) -> Array:
    """test(x) for a float x; all False for integers and bools (which hold no inf)."""
    x = asarray(x)
    return test(x) if dt.is_float(x.dtype) else full(x.shape, False)


def isinf(x) -> Array:
    """True where x is +inf or -inf.

    >>> isinf(asarray([1.0, inf, -inf, nan])).numpy().tolist()
    [False, True, True, False]
    """
    return _float_test(x, lambda x: equal(abs(x), inf))


def isposinf(x) -> Array:
    """True where x is +inf.

    >>> isposinf(asarray([inf, -inf])).numpy().tolist()
    [True, False]
    """
    return _float_test(x, lambda x: equal(x, inf))


def isneginf(x) -> Array:
    """True where x is -inf.

    >>> isneginf(asarray([inf, -inf])).numpy().tolist()
    [False, True]
    """
    return _float_test(x, lambda x: equal(x, -inf))


def signbit(x) -> Array:
    """True where the sign bit is set, -0.0 included (x < 0, or x == 0 with 1 / x < 0).
    Not exact for nan: no operator reads a nan's sign bit, so signbit(-nan) is False.

    >>> signbit(asarray([-1.0, -0.0, 0.0, 2.0])).numpy().tolist()
    [True, True, False, False]
    """
    x = asarray(x)
    if x.dtype == dt.bool_:
        return full(x.shape, False)
    if not dt.is_float(x.dtype):
        return less(x, 0)
    return logical_or(less(x, 0), logical_and(equal(x, 0), less(divide(1.0, x), 0)))


def copysign(x1, x2) -> Array:
    """|x1| with the sign of x2 (float result; -0.0 in x2 counts as negative, a nan's sign
    is read as positive: see signbit).

    >>> copysign(asarray([1.0, 2.0, -3.0]), asarray([-0.0, 1.0, 1.0])).numpy().tolist()
    [-1.0, 2.0, 3.0]
    """
    (x1, x2), _ = _float_operands("copysign", x1, x2)
    a = bind(OpKind.Abs, [x1])
    return where(signbit(x2), -a, a)


def isclose(a, b, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Array:
    """|a - b| <= atol + rtol * |b| elementwise, as NumPy: infinities are close only to
    themselves, nan to nothing unless equal_nan.

    >>> isclose(asarray([1.0, inf, nan]), asarray([1.0 + 1e-9, inf, nan])).numpy().tolist()
    [True, True, False]
    """
    (x, y), _ = _float_operands("isclose", a, b)
    close = logical_and(less_equal(abs(x - y), atol + rtol * abs(y)), isfinite(y))
    close = logical_or(close, equal(x, y))
    if equal_nan:
        close = logical_or(close, logical_and(isnan(x), isnan(y)))
    return close


def nan_to_num(x, copy: bool = True, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Array:
    """nan, +inf and -inf replaced by `nan`, `posinf` and `neginf` (default: 0 and the
    dtype's largest and smallest finite values); integers and bools come back unchanged.

    >>> nan_to_num(asarray([nan, 1.0, inf]), posinf=9.0).numpy().tolist()
    [0.0, 1.0, 9.0]
    """
    x = asarray(x)
    if not dt.is_float(x.dtype):
        return x
    big = float(_ml_dtypes.finfo(_np.dtype(x.dtype)).max)
    hi = big if posinf is None else posinf
    lo = -big if neginf is None else neginf
    out = where(isnan(x), full((), nan, x.dtype), x)
    out = where(equal(x, inf), full((), hi, x.dtype), out)
    return where(equal(x, -inf), full((), lo, x.dtype), out)


def float_power(x, y) -> Array:
    """x ** y in float (as jax.numpy: the promoted float dtype, float32 for integers;
    NumPy computes in float64).

    >>> float_power(asarray([2, 4]), 0.5).numpy().astype(float).round(4).tolist()
    [1.4142, 2.0]
    """
    (x, y), _ = _float_operands("float_power", x, y)
    return bind(OpKind.Pow, [x, y])


def log2(x) -> Array:
    """Base-2 logarithm: log(x) / log(2), as jax.numpy.

    >>> log2(asarray([1.0, 8.0])).numpy().tolist()
    [0.0, 3.0]
    """
    (x,), _ = _float_operands("log2", x)
    return bind(OpKind.Log, [x]) / math.log(2)


def log10(x) -> Array:
    """Base-10 logarithm: log(x) / log(10), as jax.numpy.

    >>> log10(asarray([1.0, 100.0])).numpy().tolist()
    [0.0, 2.0]
    """
    (x,), _ = _float_operands("log10", x)
    return bind(OpKind.Log, [x]) / math.log(10)


def exp2(x) -> Array:
    """2 ** x (through Pow: exact at integers).

    >>> exp2(asarray([3.0, -1.0])).numpy().tolist()
    [8.0, 0.5]
    """
    (x,), d = _float_operands("exp2", x)
    return bind(OpKind.Pow, [full((), 2.0, d), x])


def _logaddexp(name: str, x, y, log1p_of_pow):
    (x, y), _ = _float_operands(name, x, y)
    # max + log1p(b ** -|x - y|): no overflow; maximum's rule splits a tie, so the
    # gradient is right there too. Equal infinities would give inf - inf: they are the answer.
    m = maximum(x, y)
    out = m + log1p_of_pow(-abs(x - y))
    return where(logical_and(equal(x, y), isinf(x)), x, out)


def logaddexp(x, y) -> Array:
    """log(exp(x) + exp(y)) without overflow (logaddexp(-inf, -inf) is -inf).

    >>> logaddexp(asarray([0.0, -inf]), asarray([0.0, -inf])).numpy().astype(float).round(4).tolist()
    [0.6931, -inf]
    """
    return _logaddexp("logaddexp", x, y, lambda t: log1p(exp(t)))


def logaddexp2(x, y) -> Array:
    """log2(2**x + 2**y) without overflow.

    >>> logaddexp2(asarray([1.0, 3.0]), asarray([1.0, -inf])).numpy().tolist()
    [2.0, 3.0]
    """
    return _logaddexp("logaddexp2", x, y, lambda t: log1p(exp2(t)) / math.log(2))


def sinh(x) -> Array:
    """Hyperbolic sine: (e + e / (e + 1)) / 2 with e = expm1(x) for |x| < 1 (accurate near
    0, -0 kept), else (h - 1/h)(h + 1/h) / 2 with h = exp(x / 2), finite up to sinh's own
    overflow.

    >>> sinh(asarray([0.0, 1.0])).numpy().astype(float).round(4).tolist()
    [0.0, 1.1752]
    """
    (x,), _ = _float_operands("sinh", x)
    # the small branch sees x clipped, so its untaken values (and gradients) stay finite
    e = expm1(clip(x, -1.0, 1.0))
    small = (e + e / (e + 1.0)) * 0.5
    h = exp(x * 0.5)
    large = ((h - 1.0 / h) * 0.5) * (h + 1.0 / h)
    return where(less(abs(x), 1.0), small, large)


def cosh(x) -> Array:
    """Hyperbolic cosine: h * h / 2 + 1 / (2 h h) with h = exp(|x| / 2), finite up to
    cosh's own overflow.

    >>> cosh(asarray([0.0, 1.0])).numpy().astype(float).round(4).tolist()
    [1.0, 1.5431]
    """
    (x,), _ = _float_operands("cosh", x)
    h = exp(abs(x) * 0.5)
    return (h * 0.5) * h + 0.5 / (h * h)


def hypot(x, y) -> Array:
    """sqrt(x**2 + y**2) without overflow or underflow (scaled by max(|x|, |y|)); inf if
    either is infinite, even with a nan.

    >>> hypot(asarray([3.0, 1e300], float64), asarray([4.0, 1e300], float64)).numpy().tolist()
    [5.0, 1.4142135623730952e+300]
    """
    (x, y), _ = _float_operands("hypot", x, y)
    ax, ay = abs(x), abs(y)
    m = maximum(ax, ay)
    # a scale of 1 where m is 0 or inf keeps the untaken values (and gradients) finite
    s = where(logical_or(equal(m, 0.0), equal(m, inf)), 1.0, m)
    r = s * sqrt((ax / s) * (ax / s) + (ay / s) * (ay / s))
    r = where(equal(m, 0.0), m, r)
    return where(logical_or(isinf(x), isinf(y)), inf, r)


# --------------------------------------------------------------------------- trigonometric,
# hyperbolic and number-theoretic functions: compositions over Sin/Cos/Log1p/Sqrt, the
# Atan2 kernel and the Gcd kernel. Branches whose values are not taken see clipped
# operands, so their (zero-weighted) gradients stay finite.

def _signed(f, x):
    """f(|x|) with the sign of x (a -0 in gives -0 out), as where(signbit) rather than abs
    so that the gradient at x = 0 is f'(0), not abs's 0."""
    neg = signbit(x)
    r = f(where(neg, -x, x))
    return where(neg, -r, r)


def tan(x) -> Array:
    """Tangent as sin(x) / cos(x) (one fused kernel under jit).

    >>> tan(asarray([0.0, 1.0])).numpy().astype(float).round(4).tolist()
    [0.0, 1.5574]
    """
    (x,), _ = _float_operands("tan", x)
    return sin(x) / cos(x)


def arctan2(x1, x2) -> Array:
    """The angle of the point (x2, x1) in [-pi, pi], with C99's signed zeros and infinities
    (arctan2(0, -0) is pi); integer input becomes float32.

    >>> arctan2(asarray([1.0, 1.0, -0.0]), asarray([1.0, -1.0, -1.0])).numpy().astype(float).round(4).tolist()
    [0.7854, 2.3562, -3.1416]
    """
    (y, x), _ = _float_operands("arctan2", x1, x2)
    return bind(OpKind.Atan2, [y, x])


def arctan(x) -> Array:
    """Inverse tangent in [-pi/2, pi/2], as arctan2(x, 1).

    >>> arctan(asarray([1.0, -inf])).numpy().astype(float).round(4).tolist()
    [0.7854, -1.5708]
    """
    (x,), d = _float_operands("arctan", x)
    return bind(OpKind.Atan2, [x, full((), 1.0, d)])


def _sqrt_1mx2(x):
    # sqrt(1 - x) sqrt(1 + x): accurate near |x| = 1 (1 - x is exact there), and at |x| = 1
    # the factor that vanishes is the one whose gradient is inf, so no 0 * inf appears
    return sqrt(1.0 - x) * sqrt(1.0 + x)


def arcsin(x) -> Array:
    """Inverse sine in [-pi/2, pi/2] as atan2(x, sqrt(1 - x^2)); nan outside [-1, 1].

    >>> arcsin(asarray([0.5, 1.0, 2.0])).numpy().astype(float).round(4).tolist()
    [0.5236, 1.5708, nan]
    """
    (x,), _ = _float_operands("arcsin", x)
    return bind(OpKind.Atan2, [x, _sqrt_1mx2(x)])


def arccos(x) -> Array:
    """Inverse cosine in [0, pi] as atan2(sqrt(1 - x^2), x); nan outside [-1, 1].

    >>> arccos(asarray([0.5, -1.0])).numpy().astype(float).round(4).tolist()
    [1.0472, 3.1416]
    """
    (x,), _ = _float_operands("arccos", x)
    return bind(OpKind.Atan2, [_sqrt_1mx2(x), x])


def _log_large(a, big):
    # asinh(a) = acosh(a) = log(2a) to within 1 / (4 a^2): below rounding for a >= big
    return log(maximum(a, big)) + math.log(2.0)


_BIG = 1e18       # a * a is finite in float32 below it, and log(2a) exact to rounding above


def arcsinh(x) -> Array:
    """Inverse hyperbolic sine: sign(x) log1p(a + a^2 / (1 + sqrt(1 + a^2))) with a = |x|
    (accurate near 0, -0 kept), log(2a) for huge a (no overflow of a^2).

    >>> arcsinh(asarray([0.0, 1.0, -1e30])).numpy().astype(float).round(4).tolist()
    [0.0, 0.8814, -69.7707]
    """
    (x,), _ = _float_operands("arcsinh", x)

    def f(a):
        s = minimum(a, _BIG)
        small = log1p(s + s * s / (1.0 + sqrt(1.0 + s * s)))
        return where(less(a, _BIG), small, _log_large(a, _BIG))
    return _signed(f, x)


def arccosh(x) -> Array:
    """Inverse hyperbolic cosine: log1p(t + sqrt(t) sqrt(t + 2)) with t = x - 1 (accurate
    near 1), log(2x) for huge x; nan below 1.

    >>> arccosh(asarray([1.0, 2.0, 0.5])).numpy().astype(float).round(4).tolist()
    [0.0, 1.317, nan]
    """
    (x,), _ = _float_operands("arccosh", x)
    t = minimum(x, _BIG) - 1.0
    small = log1p(t + sqrt(t) * sqrt(t + 2.0))
    return where(less(x, _BIG), small, _log_large(x, _BIG))


def arctanh(x) -> Array:
    """Inverse hyperbolic tangent: (log1p(x) - log1p(-x)) / 2, two terms of opposite signs
    (so nothing cancels); +-inf at +-1, nan outside [-1, 1].

    >>> arctanh(asarray([0.5, 1.0, -1.0])).numpy().astype(float).round(4).tolist()
    [0.5493, inf, -inf]
    """
    (x,), _ = _float_operands("arctanh", x)
    return (log1p(x) - log1p(-x)) * 0.5


def cbrt(x) -> Array:
    """Real cube root, sign preserving: exp(log|x| / 3), one Newton step, then snapped to
    the nearest number of a third of the significand's bits when that one cubes exactly to
    |x| (so perfect cubes such as 27 or 0.125 give exact roots, as NumPy's).

    >>> cbrt(asarray([27.0, -8.0, 0.125, 2.0])).numpy().astype(float).round(4).tolist()
    [3.0, -2.0, 0.5, 1.2599]
    """
    (x,), d = _float_operands("cbrt", x)
    # Veltkamp's split keeps the top 8 (float32) / 17 (float64) bits, whose cube is exact
    k = 65537.0 if d == dt.float32 else 68719476737.0

    def f(a):
        special = logical_or(equal(a, 0.0), isinf(a))
        s = where(special, 1.0, a)
        r = exp(log(s) * (1.0 / 3.0))
        r = (r * 2.0 + s / (r * r)) * (1.0 / 3.0)
        c = r * k
        q = bind(OpKind.StopGradient, [c - (c - r)])
        r = where(equal(q * q * q, s), q + (r - bind(OpKind.StopGradient, [r])), r)
        return where(special, a, r)
    return _signed(f, x)


def sinc(x) -> Array:
    """NumPy's normalized sinc, sin(pi x) / (pi x), and 1 at 0; near 0 its Taylor series,
    so that the first and second derivatives there are 0 and -pi^2 / 3 (as JAX's), not nan.

    >>> sinc(asarray([0.0, 0.5, 1.5])).numpy().astype(float).round(4).tolist()
    [1.0, 0.6366, -0.2122]
    """
    (x,), _ = _float_operands("sinc", x)
    y = x * math.pi
    near = less(abs(y), 1e-3)
    ys = where(near, 1.0, y)
    y2 = y * y
    return where(near, 1.0 - y2 * (1.0 / 6.0) + y2 * y2 * (1.0 / 120.0), sin(ys) / ys)


def fmod(x1, x2) -> Array:
    """C's fmod: the remainder of x1 / x2 truncated, with the sign of x1 (NumPy's; remainder
    takes the divisor's). Floats from the exact remainder of the magnitudes (nan for
    x2 = 0 or infinite x1); int32 from remainder, fmod(x, 0) = 0 as NumPy.

    >>> fmod(asarray([7, -7, 7]), asarray([2, 2, -2])).numpy().tolist()
    [1, -1, 1]
    >>> fmod(asarray([-7.5, 7.5]), 2.0).numpy().tolist()
    [-1.5, 1.5]
    """
    x, y = _division_operands("fmod", x1, x2)
    if dt.is_float(x.dtype):
        return _signed(lambda a: bind(OpKind.Remainder, [a, abs(y)]), x)
    m = bind(OpKind.Remainder, [x, y])
    # floor's remainder differs from the truncated one by y where it is non-zero and its
    # sign differs from x's (int32 wraps as C's would)
    return where(logical_and(not_equal(m, 0), not_equal(less(m, 0), less(x, 0))), m - y, m)


def _int32_operands(name, *xs):
    xs, d = _operands(name, *xs)
    if d == dt.bool_:
        return [x.astype(dt.int32) for x in xs]
    if d != dt.int32:
        raise DTypeError(f"{name}: defined on integers (bool, int32), got {d}; NumPy refuses "
                         f"floats too")
    return xs


def gcd(x1, x2) -> Array:
    """Greatest common divisor of |x1| and |x2| (int32; gcd(0, 0) is 0), as NumPy's.

    >>> gcd(asarray([12, -18, 0]), asarray([18, 12, 0])).numpy().tolist()
    [6, 6, 0]
    """
    return bind(OpKind.Gcd, _int32_operands("gcd", x1, x2))


def lcm(x1, x2) -> Array:
    """Least common multiple |x1| / gcd * |x2| (int32, non-negative; 0 if either is 0;
    wraps on overflow as NumPy's).

    >>> lcm(asarray([4, -6, 0]), asarray([6, 4, 5])).numpy().tolist()
    [12, 12, 0]
    """
    x, y = _int32_operands("lcm", x1, x2)
    g = bind(OpKind.Gcd, [x, y])
    # x // 0 is 0 on int32, so lcm(0, 0) = 0 with no special case
    return abs(floor_divide(abs(x), g) * y)


def real(x) -> Array:
    """The real part: x itself (vkml has no complex dtypes).

    >>> real(asarray([1.5])).numpy().tolist()
    [1.5]
    """
    return asarray(x)


def imag(x) -> Array:
    """The imaginary part: zeros of x's dtype (vkml has no complex dtypes).

    >>> imag(asarray([1.5])).numpy().tolist()
    [0.0]
    """
    return zeros_like(x)


def conj(x) -> Array:
    """The complex conjugate: x itself (vkml has no complex dtypes).

    >>> conj(asarray([1.5])).numpy().tolist()
    [1.5]
    """
    return asarray(x)


conjugate = conj


# --------------------------------------------------------------------------- triangles, diagonals


def tri(N: int, M: int | None = None, k: int = 0, dtype=float32) -> Array:
    """Ones at and below the k-th diagonal of an N x M matrix, zeros elsewhere.

    >>> tri(2, 3, k=1, dtype=int32).numpy().tolist()
    [[1, 1, 0], [1, 1, 1]]
    """
    N = _dim("tri", N)
    M = N if M is None else _dim("tri", M)
    k = _dim("tri", k)
    if N < 0 or M < 0:
        raise ShapeError(f"tri: negative dimensions are not allowed, got N={N}, M={M}")
    return greater_equal(arange(N)[:, None] + k, arange(M)[None, :]).astype(dtype)


def _triangle(name: str, m, k: int, lower: bool) -> Array:
    m = asarray(m)
    if m.ndim == 0:
        raise ShapeError(f"{name}: input must be at least 1-d, got shape {m.shape}")
    k = _dim(name, k)
    mask = tri(*m.shape[-2:], k=k if lower else k - 1, dtype=bool_)
    if not lower:
        mask = logical_not(mask)
    # a 1-d input broadcasts against the (N, N) mask, as in NumPy
    return where(mask, m, zeros((), m.dtype))


def tril(m, k: int = 0) -> Array:
    """The lower triangle of the last two axes (at and below diagonal k), zeros above.

    >>> tril(asarray([[1, 2], [3, 4]])).numpy().tolist()
    [[1, 0], [3, 4]]
    """
    return _triangle("tril", m, k, True)


def triu(m, k: int = 0) -> Array:
    """The upper triangle of the last two axes (at and above diagonal k), zeros below.

    >>> triu(asarray([[1, 2], [3, 4]]), k=1).numpy().tolist()
    [[0, 2], [0, 0]]
    """
    return _triangle("triu", m, k, False)


def diagonal(a, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Array:
    """The offset-th diagonal of the (axis1, axis2) planes, appended as the last axis.

    >>> diagonal(asarray([[1, 2, 3], [4, 5, 6]]), offset=1).numpy().tolist()
    [2, 6]
    """
    a = asarray(a)
    if a.ndim < 2:
        raise ShapeError(f"diagonal: array must be at least 2-d, got shape {a.shape}")
    i, j = normalize_axis("diagonal", axis1, a.ndim), normalize_axis("diagonal", axis2, a.ndim)
    if i == j:
        raise ShapeError(f"diagonal: axis1 and axis2 cannot be the same (both {i}) for shape "
                         f"{a.shape}")
    offset = _dim("diagonal", offset)
    a = moveaxis(moveaxis(a, i, -1), j if j < i else j - 1, -1)   # (..., rows, cols)
    R, C = a.shape[-2:]
    flat = reshape(a, a.shape[:-2] + (R * C,))
    # the diagonal is the strided run of the flattened plane from its first element
    n = _b.max(0, _b.min(R, C - offset) if offset >= 0 else _b.min(R + offset, C))
    start = offset if offset >= 0 else -offset * C
    if n == 0:
        return flat[..., 0:0]
    return flat[..., start:start + (n - 1) * (C + 1) + 1:C + 1]


def trace(a, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype=None) -> Array:
    """Sum of the offset-th diagonal of the (axis1, axis2) planes.

    >>> trace(asarray([[1, 2], [3, 4]])).numpy().tolist()
    5
    """
    return sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def diag(v, k: int = 0) -> Array:
    """A 1-d v on the k-th diagonal of a square matrix, or the k-th diagonal of a 2-d v.

    >>> diag(asarray([1, 2]), k=1).numpy().tolist()
    [[0, 1, 0], [0, 0, 2], [0, 0, 0]]
    """
    v = asarray(v)
    k = _dim("diag", k)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ShapeError(f"diag: input must be 1-d or 2-d, got shape {v.shape}")
    n = v.shape[0] + _b.abs(k)
    # row i of the result holds v[i] (k >= 0) or v[i + k] (k < 0) on its diagonal cell
    col = pad(v, ((0, k),) if k >= 0 else ((-k, 0),))
    return where(eye(n, k=k, dtype=bool_), col[:, None], zeros((), v.dtype))


def diagflat(v, k: int = 0) -> Array:
    """The flattened input on the k-th diagonal of a square matrix.

    >>> diagflat(asarray([[1, 2]])).numpy().tolist()
    [[1, 0], [0, 2]]
    """
    return diag(ravel(v), k)


# --------------------------------------------------------------------------- rearranging


def roll(a, shift, axis=None) -> Array:
    """Elements shifted cyclically by shift along axis (flattened when None); shift and
    axis may be tuples (broadcast together, shifts on one axis add).

    >>> roll(asarray([1, 2, 3, 4]), 1).numpy().tolist()
    [4, 1, 2, 3]
    """
    a = asarray(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), a.shape)
    shifts, axes = _np.broadcast_arrays(_np.asarray(shift), _np.asarray(axis))
    if shifts.ndim > 1 or not _np.issubdtype(shifts.dtype, _np.integer) \
            or not _np.issubdtype(axes.dtype, _np.integer):
        raise ShapeError(f"roll: shift and axis must be integers or 1-d sequences of them, got "
                         f"shift={shift!r}, axis={axis!r}")
    total = {}
    for s, ax in zip(shifts.reshape(-1).tolist(), axes.reshape(-1).tolist()):
        ax = normalize_axis("roll", ax, a.ndim)
        total[ax] = total.get(ax, 0) + s
    for ax, s in total.items():
        n = a.shape[ax]
        s = s % n if n else 0
        if s == 0:
            continue
        lo, hi = [slice(None)] * a.ndim, [slice(None)] * a.ndim
        lo[ax], hi[ax] = slice(n - s, None), slice(0, n - s)
        a = concatenate([a[tuple(lo)], a[tuple(hi)]], ax)
    return a


def rot90(m, k: int = 1, axes: tuple = (0, 1)) -> Array:
    """Rotate by 90 degrees k times in the plane of axes, from the first toward the second.

    >>> rot90(asarray([[1, 2], [3, 4]])).numpy().tolist()
    [[2, 4], [1, 3]]
    """
    m = asarray(m)
    axes = tuple(axes)
    if len(axes) != 2:
        raise ShapeError(f"rot90: axes must name 2 axes, got {axes}")
    if m.ndim < 2:
        raise ShapeError(f"rot90: array must be at least 2-d, got shape {m.shape}")
    if axes[0] == axes[1] or _b.abs(axes[0] - axes[1]) == m.ndim:
        raise ShapeError(f"rot90: axes {axes} must be two different axes of shape {m.shape}")
    a0, a1 = (normalize_axis("rot90", x, m.ndim) for x in axes)
    k = _dim("rot90", k) % 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, a0), a1)
    perm = list(range(m.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return transpose(flip(m, a1), perm)
    return flip(transpose(m, perm), a1)


def flipud(m) -> Array:
    """Reverse the order along axis 0.

    >>> flipud(asarray([[1, 2], [3, 4]])).numpy().tolist()
    [[3, 4], [1, 2]]
    """
    m = asarray(m)
    if m.ndim < 1:
        raise ShapeError(f"flipud: input must be at least 1-d, got shape {m.shape}")
    return flip(m, 0)


def fliplr(m) -> Array:
    """Reverse the order along axis 1.

    >>> fliplr(asarray([[1, 2], [3, 4]])).numpy().tolist()
    [[2, 1], [4, 3]]
    """
    m = asarray(m)
    if m.ndim < 2:
        raise ShapeError(f"fliplr: input must be at least 2-d, got shape {m.shape}")
    return flip(m, 1)


# --------------------------------------------------------------------------- at least n-d, stacking


def _atleast(arys, shaper):
    out = tuple(reshape(x, shaper(x.shape)) for x in (asarray(a) for a in arys))
    return out[0] if len(out) == 1 else out


def atleast_1d(*arys) -> Array | tuple:
    """Each input as an array of at least one dimension (one array, or a tuple of them).

    >>> atleast_1d(3.0).shape
    (1,)
    """
    return _atleast(arys, lambda s: s if len(s) >= 1 else (1,))


def atleast_2d(*arys) -> Array | tuple:
    """Each input with at least two dimensions (leading 1s added).

    >>> atleast_2d(asarray([1, 2])).shape
    (1, 2)
    """
    return _atleast(arys, lambda s: s if len(s) >= 2 else (1,) * (2 - len(s)) + s)


def atleast_3d(*arys) -> Array | tuple:
    """Each input with at least three dimensions: 0-d -> (1, 1, 1), (N,) -> (1, N, 1),
    (M, N) -> (M, N, 1), as in NumPy.

    >>> atleast_3d(asarray([1, 2])).shape
    (1, 2, 1)
    """
    return _atleast(arys, lambda s: s if len(s) >= 3 else
                    {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}[len(s)])


def _seq(name: str, tup) -> list:
    if isinstance(tup, Array) or not isinstance(tup, Sequence):
        raise TypeError(f"{name}: arrays to stack must be passed as a sequence (list or "
                        f"tuple), got {type(tup).__name__}")
    if not tup:
        raise ValueError(f"{name}: need at least one array to concatenate")
    return [asarray(x) for x in tup]


def _join(name: str, xs: list, axis: int) -> Array:
    """concatenate, its shape errors naming the caller and the caller's input shapes."""
    try:
        return concatenate(xs, axis)
    except ShapeError as e:
        raise ShapeError(f"{name}: cannot join shapes {[x.shape for x in xs]} along axis "
                         f"{axis} ({e})") from None


def vstack(tup: Sequence) -> Array:
    """Stack along axis 0 after atleast_2d.

    >>> vstack([asarray([1, 2]), asarray([3, 4])]).numpy().tolist()
    [[1, 2], [3, 4]]
    """
    return _join("vstack", [atleast_2d(x) for x in _seq("vstack", tup)], 0)


row_stack = vstack


def hstack(tup: Sequence) -> Array:
    """Stack along axis 1 (axis 0 for 1-d inputs) after atleast_1d.

    >>> hstack([asarray([1, 2]), asarray([3])]).numpy().tolist()
    [1, 2, 3]
    """
    xs = [atleast_1d(x) for x in _seq("hstack", tup)]
    return _join("hstack", xs, 0 if xs[0].ndim == 1 else 1)


def dstack(tup: Sequence) -> Array:
    """Stack along axis 2 after atleast_3d.

    >>> dstack([asarray([1, 2]), asarray([3, 4])]).numpy().tolist()
    [[[1, 3], [2, 4]]]
    """
    return _join("dstack", [atleast_3d(x) for x in _seq("dstack", tup)], 2)


def column_stack(tup: Sequence) -> Array:
    """1-d inputs as columns, 2-d ones as they are, joined along axis 1.

    >>> column_stack([asarray([1, 2]), asarray([3, 4])]).numpy().tolist()
    [[1, 3], [2, 4]]
    """
    xs = [reshape(x, (-1, 1)) if x.ndim < 2 else x for x in _seq("column_stack", tup)]
    return _join("column_stack", xs, 1)


# --------------------------------------------------------------------------- products, differences


def _contract_axes(name: str, a: Array, b: Array, axes) -> tuple[list, list]:
    if isinstance(axes, int) or (isinstance(axes, _np.ndarray) and axes.ndim == 0):
        n = int(axes)
        if n < 0 or n > a.ndim or n > b.ndim:
            raise ShapeError(f"{name}: axes={n} must be in 0..min(a.ndim, b.ndim) = "
                             f"0..{_b.min(a.ndim, b.ndim)} for shapes {a.shape} and {b.shape}")
        return list(range(a.ndim - n, a.ndim)), list(range(n))
    try:
        xa, xb = axes
    except (TypeError, ValueError):
        raise TypeError(f"{name}: axes must be an int or a pair of axis sequences, got "
                        f"{axes!r}") from None
    xa = [xa] if isinstance(xa, int) else list(xa)
    xb = [xb] if isinstance(xb, int) else list(xb)
    if len(xa) != len(xb):
        raise ShapeError(f"{name}: shape-mismatch for sum: {len(xa)} axes of a {xa} against "
                         f"{len(xb)} of b {xb}")
    return ([normalize_axis(name, x, a.ndim) for x in xa],
            [normalize_axis(name, x, b.ndim) for x in xb])


def tensordot(a, b, axes=2) -> Array:
    """Sum of products over the given axes of a and b (an int n: a's last n with b's first
    n), as one matmul of the permuted, flattened operands.

    >>> tensordot(asarray([[1, 2], [3, 4]]), asarray([[1, 0], [0, 1]])).numpy().tolist()
    5
    """
    (a, b), d = _operands("tensordot", a, b)
    xa, xb = _contract_axes("tensordot", a, b, axes)
    for i, j in zip(xa, xb):
        if a.shape[i] != b.shape[j]:
            raise ShapeError(f"tensordot: shape-mismatch for sum: axis {i} of {a.shape} has size "
                             f"{a.shape[i]}, axis {j} of {b.shape} has size {b.shape[j]}")
    fa = [i for i in range(a.ndim) if i not in xa]
    fb = [j for j in range(b.ndim) if j not in xb]
    k = size_of([a.shape[i] for i in xa])
    at = reshape(transpose(a, fa + xa), (size_of([a.shape[i] for i in fa]), k))
    bt = reshape(transpose(b, xb + fb), (k, size_of([b.shape[j] for j in fb])))
    out = reshape(matmul(at, bt), tuple(a.shape[i] for i in fa) + tuple(b.shape[j] for j in fb))
    return not_equal(out, 0) if d == dt.bool_ else out


def inner(a, b) -> Array:
    """Sum of products over the last axes of a and b (a product if either is 0-d).

    >>> inner(asarray([1, 2, 3]), asarray([0, 1, 0])).numpy().tolist()
    2
    """
    a, b = asarray(a), asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    if a.shape[-1] != b.shape[-1]:
        raise ShapeError(f"inner: last dimensions differ, shapes {a.shape} and {b.shape}; they "
                         f"must be equal")
    return tensordot(a, b, ([-1], [-1]))


def kron(a, b) -> Array:
    """Kronecker product: blocks a[i] * b, the shape the elementwise product of shapes.

    >>> kron(asarray([1, 10]), asarray([1, 2])).numpy().tolist()
    [1, 2, 10, 20]
    """
    a, b = asarray(a), asarray(b)
    nd = _b.max(a.ndim, b.ndim)
    sa, sb = (1,) * (nd - a.ndim) + a.shape, (1,) * (nd - b.ndim) + b.shape
    # interleaved axes (a0, b0, a1, b1, ...) broadcast to every pair, then merged pairwise
    ia = reshape(a, tuple(x for s in sa for x in (s, 1)))
    ib = reshape(b, tuple(x for s in sb for x in (1, s)))
    out = logical_and(ia, ib) if a.dtype == b.dtype == dt.bool_ else multiply(ia, ib)
    return reshape(out, tuple(x * y for x, y in zip(sa, sb)))


def cross(a, b, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis: int | None = None) -> Array:
    """Cross product of 3-vectors (or 2-vectors, the missing z taken as 0; two 2-vectors
    give the z component alone) along axisa of a and axisb of b, broadcast over the rest.

    >>> cross(asarray([1, 0, 0]), asarray([0, 1, 0])).numpy().tolist()
    [0, 0, 1]
    """
    (a, b), _ = _operands("cross", a, b)
    if axis is not None:
        axisa = axisb = axisc = axis
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"cross: operands must be at least 1-d, got shapes {a.shape} and {b.shape}")
    a = moveaxis(a, normalize_axis("cross", axisa, a.ndim), -1)
    b = moveaxis(b, normalize_axis("cross", axisb, b.ndim), -1)
    na, nb = a.shape[-1], b.shape[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ShapeError(f"cross: incompatible dimensions for cross product: vector sizes {na} "
                         f"and {nb} (dimension must be 2 or 3)")
    a0, a1, b0, b1 = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    z = a0 * b1 - a1 * b0
    if na == nb == 2:
        return z
    if na == 3 and nb == 3:
        a2, b2 = a[..., 2], b[..., 2]
        x, y = a1 * b2 - a2 * b1, a2 * b0 - a0 * b2
    elif na == 2:
        b2 = b[..., 2]
        x, y = a1 * b2, negative(a0 * b2)
    else:
        a2 = a[..., 2]
        x, y = negative(a2 * b1), a2 * b0
    x, y, z = broadcast_arrays(x, y, z)
    return stack([x, y, z], normalize_axis("cross", axisc, z.ndim + 1))


def diff(a, n: int = 1, axis: int = -1, prepend=None, append=None) -> Array:
    """n-th forward difference along axis (not_equal for bool), after joining prepend and
    append (0-d ones broadcast to one slice).

    >>> diff(asarray([1, 4, 9, 16]), n=2).numpy().tolist()
    [2, 2]
    """
    a = asarray(a)
    n = _dim("diff", n)
    if n < 0:
        raise ShapeError(f"diff: order must be non-negative but got n={n}")
    if a.ndim == 0:
        raise ShapeError(f"diff: requires input that is at least one dimensional, got shape {a.shape}")
    ax = normalize_axis("diff", axis, a.ndim)
    parts = []
    for v in (prepend, a, append):
        if v is None:
            continue
        v = asarray(v)
        if v.ndim == 0:
            v = broadcast_to(v, a.shape[:ax] + (1,) + a.shape[ax + 1:])
        parts.append(v)
    if len(parts) > 1:
        a = _join("diff", parts, ax)
    hi, lo = [slice(None)] * a.ndim, [slice(None)] * a.ndim
    hi[ax], lo[ax] = slice(1, None), slice(None, -1)
    for _ in range(n):
        a = not_equal(a[tuple(hi)], a[tuple(lo)]) if a.dtype == dt.bool_ else \
            subtract(a[tuple(hi)], a[tuple(lo)])
    return a


def ediff1d(ary, to_end=None, to_begin=None) -> Array:
    """Differences of the flattened array, to_begin and to_end (flattened, cast to its dtype)
    joined at the ends.

    >>> ediff1d(asarray([1, 2, 4]), to_begin=0).numpy().tolist()
    [0, 1, 2]
    """
    a = ravel(asarray(ary))
    parts = [subtract(a[1:], a[:-1])]
    for v, at in ((to_begin, 0), (to_end, 1)):
        if v is None:
            continue
        v = ravel(asarray(v))
        if not _np.can_cast(v.dtype, a.dtype, "same_kind"):
            raise TypeError(f"ediff1d: dtype of to_begin/to_end ({v.dtype}) must be castable "
                             f"to the input's ({a.dtype})")
        parts.insert(len(parts) * at, v.astype(a.dtype))
    return concatenate(parts, 0) if len(parts) > 1 else parts[0]


# --------------------------------------------------------------------------- repeating, splitting


def repeat(a, repeats, axis: int | None = None) -> Array:
    """Each element repeated (flattened when axis is None); repeats an int or one count per
    element along axis (concrete: it decides the shape).

    >>> repeat(asarray([1, 2]), [1, 3]).numpy().tolist()
    [1, 2, 2, 2]
    """
    a = asarray(a)
    if axis is None:
        a, ax = ravel(a), 0
    else:
        ax = normalize_axis("repeat", axis, a.ndim)
    r = _np.asarray(repeats)
    if not _np.issubdtype(r.dtype, _np.integer) or r.ndim > 1:
        raise TypeError(f"repeat: repeats must be an int or a 1-d sequence of ints, got "
                        f"{repeats!r}")
    if (r < 0).any():
        raise ShapeError(f"repeat: repeats must be non-negative, got {r.tolist()}")
    n = a.shape[ax]
    if r.size == 1:
        k = int(r.reshape(()))
        e = broadcast_to(expand_dims(a, ax + 1), a.shape[:ax + 1] + (k,) + a.shape[ax + 1:])
        return reshape(e, a.shape[:ax] + (n * k,) + a.shape[ax + 1:])
    if r.size != n:
        raise ShapeError(f"repeat: {r.size} repeats for axis {ax} of size {n} (shape "
                         f"{a.shape}); give one count, or one per element")
    # the gather positions follow from the (concrete) counts alone; the data stays on the device
    return take(a, _np.repeat(_np.arange(n, dtype=_np.int32), r), axis=ax)


def tile(A, reps) -> Array:
    """A repeated reps[i] times along axis i (shapes aligned at the right, as in NumPy).

    >>> tile(asarray([1, 2]), (2, 2)).numpy().tolist()
    [[1, 2, 1, 2], [1, 2, 1, 2]]
    """
    A = asarray(A)
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    reps = tuple(_dim("tile", r) for r in reps)
    if _b.any(r < 0 for r in reps):
        raise ShapeError(f"tile: reps must be non-negative, got {reps}")
    nd = _b.max(len(reps), A.ndim)
    reps = (1,) * (nd - len(reps)) + reps
    s = (1,) * (nd - A.ndim) + A.shape
    a = reshape(A, tuple(x for d in s for x in (1, d)))
    a = broadcast_to(a, tuple(x for r, d in zip(reps, s) for x in (r, d)))
    return reshape(a, tuple(r * d for r, d in zip(reps, s)))


def append(arr, values, axis: int | None = None) -> Array:
    """values joined after arr along axis (both flattened when axis is None).

    >>> append(asarray([1, 2]), [[3], [4]]).numpy().tolist()
    [1, 2, 3, 4]
    """
    arr, values = asarray(arr), asarray(values)
    if axis is None:
        return _join("append", [ravel(arr), ravel(values)], 0)
    if arr.ndim == 0:
        raise ShapeError("append: zero-dimensional arrays cannot be joined along an axis")
    return _join("append", [arr, values], normalize_axis("append", axis, arr.ndim))


def array_split(ary, indices_or_sections, axis: int = 0) -> list[Array]:
    """split that allows unequal sections: the first (size % n) of the n sections get one
    element more.

    >>> [s.numpy().tolist() for s in array_split(arange(5), 3)]
    [[0, 1], [2, 3], [4]]
    """
    a = asarray(ary)
    ax = normalize_axis("array_split", axis, a.ndim)
    if isinstance(indices_or_sections, int) or (isinstance(indices_or_sections, _np.ndarray)
                                                and indices_or_sections.ndim == 0):
        k = int(indices_or_sections)
        if k <= 0:
            raise ShapeError(f"array_split: number of sections must be larger than 0, got {k}")
        each, extra = _b.divmod(a.shape[ax], k)
        sizes = [each + 1] * extra + [each] * (k - extra)
        indices_or_sections = _np.cumsum(sizes[:-1]).tolist()
    return split(a, indices_or_sections, ax)


def _split_nd(name: str, ary, indices_or_sections, least: int, axis: int) -> list[Array]:
    a = asarray(ary)
    if a.ndim < least:
        raise ShapeError(f"{name}: only works on arrays of {least} or more dimensions, got "
                         f"shape {a.shape}")
    return split(a, indices_or_sections, axis)


def vsplit(ary, indices_or_sections) -> list[Array]:
    """split along axis 0 of an array of 2 or more dimensions.

    >>> [s.shape for s in vsplit(zeros((4, 2)), 2)]
    [(2, 2), (2, 2)]
    """
    return _split_nd("vsplit", ary, indices_or_sections, 2, 0)


def hsplit(ary, indices_or_sections) -> list[Array]:
    """split along axis 1 (axis 0 of a 1-d array).

    >>> [s.numpy().tolist() for s in hsplit(arange(4), [1])]
    [[0], [1, 2, 3]]
    """
    return _split_nd("hsplit", ary, indices_or_sections, 1, 1 if asarray(ary).ndim > 1 else 0)


def dsplit(ary, indices_or_sections) -> list[Array]:
    """split along axis 2 of an array of 3 or more dimensions.

    >>> [s.shape for s in dsplit(zeros((1, 1, 4)), 2)]
    [(1, 1, 2), (1, 1, 2)]
    """
    return _split_nd("dsplit", ary, indices_or_sections, 3, 2)


def meshgrid(*xi, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> tuple:
    """Coordinate arrays from 1-d coordinate vectors ('xy': Cartesian, the first two axes
    swapped; 'ij': matrix indexing); sparse keeps them unbroadcast.

    >>> [g.numpy().tolist() for g in meshgrid(asarray([1, 2]), asarray([3]))]
    [[[1, 2]], [[3, 3]]]
    """
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: valid values for indexing are 'xy' and 'ij', got {indexing!r}")
    n = len(xi)
    one = (1,) * n
    out = [reshape(asarray(x), one[:i] + (-1,) + one[i + 1:]) for i, x in enumerate(xi)]
    if indexing == "xy" and n > 1:
        out[0] = reshape(out[0], (1, -1) + one[2:])
        out[1] = reshape(out[1], (-1, 1) + one[2:])
    if not sparse:
        out = broadcast_arrays(*out)
    return tuple(out)   # copy is moot: vkml arrays are immutable


# --------------------------------------------------------------------------- families in modules of their own
from .reductions import (average, count_nonzero, nanargmax, nanargmin, nanmax,  # noqa: E402
                         nanmean, nanmin, nanprod, nanstd, nansum, nanvar, ptp)
from .index_tricks import (c_, indices, ix_, piecewise, r_, ravel_multi_index,  # noqa: E402
                           rollaxis, select, unravel_index)
# indexing, gather and scatter (vkml/indexing.py builds on the functions above)
from .indexing import (argwhere, flatnonzero, nonzero, put_along_axis, take,  # noqa: E402
                       take_along_axis)

for _f in (argwhere, flatnonzero, nonzero, put_along_axis, take, take_along_axis):
    _f.__module__ = __name__
# sorting, selection and running reductions live in their own module
from .sorting import (argpartition, argsort, cummax, cummin, cumprod, logcumsumexp, median,  # noqa: E402
                      nancumprod, nancumsum, partition, percentile, quantile, searchsorted, sort,
                      unique)

# numpy.linalg: `vkml.numpy.linalg` is the package vkml.linalg (importable by that name too)
import sys as _sys  # noqa: E402

from . import linalg  # noqa: E402

_sys.modules[__name__ + ".linalg"] = linalg
