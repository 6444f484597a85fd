"""Reverse-mode rules: one short entry per differentiable OpKind, forward operators only.

A rule is `rule(node, g, *inputs) -> tuple of cotangents (E or None)`, one per input, each
of that input's shape. None means "no gradient flows there" (indices, conditions, the
piecewise-constant side of a max-pool backward). Nothing here is a *_backward kernel: the
adjoints of the four scatters are ordinary forward operators, so second order works
through them too. Which OpKinds must have a rule is declared in the registry
(`OpSpec.grad is Grad.RULE`); test_rules checks the two agree.
"""
from __future__ import annotations

import numpy as np

from ..trace.ops import OpKind as K
from ..trace.shapes import size_of
from .expr import (E, INV_SQRT_2PI, SQRT_2_OVER_PI, TWO_OVER_SQRT_PI, cast, cos, erfc, exp, expand,
                   log, op, permute, reshape, rsum, sigmoid, sin, tanh, to_reduced,
                   unbroadcast, where)


def _binary(fa, fb):
    """A broadcasting binary op's rule from its two elementwise partials."""
    return lambda n, g, a, b: (unbroadcast(fa(n, g, a, b), a.shape), unbroadcast(fb(n, g, a, b), b.shape))


def _ties(a, b, g):
    """g where a wins, half of g on exact ties, 0 where b wins (maximum/minimum)."""
    return where(a.eq(b), g * 0.5, where(a > b, g, 0.0))


def _gelu(n, g, x):
    if n.attrs.get("approximate"):
        c = 0.044715
        t = tanh((x + x * x * x * c) * SQRT_2_OVER_PI)
        dt = (t * 0.5 + 0.5) + x * 0.5 * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + x * x * (3 * c))
        return (g * dt,)
    cdf = erfc(x * -0.7071067811865476) * 0.5
    pdf = exp(x * x * -0.5) * INV_SQRT_2PI
    return (g * (cdf + x * pdf),)


def _extreme(n, g, x):
    """Max/Min: ties share the gradient equally."""
    axes, kd = n.attrs["axes"], n.attrs["keepdims"]
    y = to_reduced(E(n), x.shape, axes, kd)
    mask = cast(x.eq(y), x.dtype)
    count = to_reduced(rsum(mask, axes, True), x.shape, axes, True)
    return (mask * to_reduced(g, x.shape, axes, kd) / count,)


def _prod(n, g, x):
    """Correct with zeros: count them instead of dividing by them."""
    axes, kd = n.attrs["axes"], n.attrs["keepdims"]
    z = x.eq(0.0)
    zf = cast(z, x.dtype)
    nz = to_reduced(rsum(zf, axes, True), x.shape, axes, True)
    safe = where(z, 1.0, x)
    p = to_reduced(op(K.Prod, safe, axes=axes, keepdims=True), x.shape, axes, True)
    others = where(nz.eq(0.0), p / safe, where(nz.eq(1.0), zf * p, 0.0))
    return (others * to_reduced(g, x.shape, axes, kd),)


def _mean(n, g, x):
    count = size_of([x.shape[a] for a in n.attrs["axes"]])
    return (to_reduced(g, x.shape, n.attrs["axes"], n.attrs["keepdims"]) * (1.0 / max(count, 1)),)


def _cumsum(n, g, x):
    ax = n.attrs["axis"]
    rev = op(K.Flip, op(K.Cumsum, op(K.Flip, g, axes=(ax,)), axis=ax), axes=(ax,))
    return (rev,)


def _softmax(n, g, x):
    y = E(n)
    s = expand(rsum(g * y, (n.attrs["axis"],), True), x.shape)
    return (y * (g - s),)


def _log_softmax(n, g, x):
    ax = n.attrs["axis"]
    return (g - exp(E(n)) * expand(rsum(g, (ax,), True), x.shape),)


def _pow_a(n, g, a, b):
    return g * b * op(K.Pow, a, b - 1.0)


def _pow_b(n, g, a, b):
    # double where: log is never evaluated at 0, so no nan leaks into the untaken branch
    zero = a.eq(0.0)
    return g * where(zero, 0.0, E(n) * log(where(zero, 1.0, a)))


def _integer_pow(n, g, x):
    """n * x ** (n - 1), itself an IntegerPow (so x ** 2 has gradient exactly 2 * x, and
    second order stays on the multiplication chain); x ** 0 is constant."""
    e = n.attrs["exponent"]
    if e == 0:
        return (None,)
    m = e - 1 if isinstance(e, int) else e - 1.0
    d = x if m == 1 else (None if m == 0 else op(K.IntegerPow, x, exponent=m))
    return (g * e if d is None else g * (d * e),)


def _permute(n, g, x):
    perm = n.attrs["perm"]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return (permute(g, inv),)


def _slice(n, g, x):
    a = n.attrs
    return (op(K.SliceBackward, g, shape=x.shape, starts=a["starts"], stops=a["stops"], steps=a["steps"]),)


def _slice_backward(n, g, x):
    a = n.attrs
    return (op(K.Slice, g, starts=a["starts"], stops=a["stops"], steps=a["steps"]),)


def _pad(n, g, x):
    pads = n.attrs["pads"]
    return (op(K.Slice, g, starts=tuple(lo for lo, _ in pads),
               stops=tuple(lo + d for (lo, _), d in zip(pads, x.shape)), steps=(1,) * x.ndim),)


def _concat(n, g, *xs):
    ax, pos, out = n.attrs["axis"], 0, []
    for x in xs:
        starts = tuple(pos if i == ax else 0 for i in range(g.ndim))
        stops = tuple(pos + x.shape[ax] if i == ax else d for i, d in enumerate(g.shape))
        out.append(op(K.Slice, g, starts=starts, stops=stops, steps=(1,) * g.ndim))
        pos += x.shape[ax]
    return tuple(out)


def _matmul(n, g, a, b):
    if len(b.shape) == 2 and len(a.shape) > 2:
        # a batch of rows against one matrix (x @ W over a sequence): W's cotangent is one
        # matmul over all the rows, not a batched matmul whose products are then summed
        k, m = a.shape[-1], g.shape[-1]
        rows = size_of(a.shape[:-1])
        return g @ b.mT, reshape(a, (rows, k)).mT @ reshape(g, (rows, m))
    return unbroadcast(g @ b.mT, a.shape), unbroadcast(a.mT @ g, b.shape)


def _window(n):
    return {k: n.attrs[k] for k in ("kernel", "stride", "padding", "dilation")}


def _im2col(n, g, x):
    return (op(K.Col2Im, g, output_size=tuple(x.shape[2:]), **_window(n)),)


def _col2im(n, g, c):
    return (op(K.Im2Col, g, **_window(n)),)


def _maxpool_backward(n, g, x, gy):
    """MaxPool2dBackward is linear in gy and piecewise constant in x: its adjoint in gy
    gathers g at each window's first argmax (Pad with -inf, Im2Col, ArgMax, one-hot)."""
    w = _window(n)
    (ph, pw), (kh, kw) = w["padding"], w["kernel"]
    N, C = x.shape[:2]
    pads = ((0, 0), (0, 0), (ph, ph), (pw, pw))
    nopad = dict(w, padding=(0, 0))
    xc = op(K.Im2Col, op(K.Pad, x, pads=pads, value=float("-inf")), **nopad)
    L = xc.shape[-1]
    xc = reshape(xc, (N, C, kh * kw, L))
    first = op(K.ArgMax, xc, axes=(2,), keepdims=True)                    # (N, C, 1, L) int32
    pos = reshape(op(K.Arange, n=kh * kw, start=0, step=1, dtype=first.dtype), (1, 1, kh * kw, 1))
    onehot = cast(op(K.Equal, expand(pos, xc.shape), expand(first, xc.shape)), g.dtype)
    gc = reshape(op(K.Im2Col, op(K.Pad, g, pads=pads, value=0.0), **nopad), (N, C, kh * kw, L))
    return None, reshape(rsum(onehot * gc, (2,), False), gy.shape)


def _index_select(n, g, x, idx):
    return op(K.ScatterAdd, g, idx, axis=n.attrs["axis"], size=x.shape[n.attrs["axis"]]), None


def _scatter_add(n, g, src, idx):
    return op(K.IndexSelect, g, idx, axis=n.attrs["axis"]), None


def _scatter_valid(idx, size: int, ndim: int, axis: int):
    """Which of a scatter's indices land (negative wrap once, the rest in [0, size)),
    shaped to broadcast against its source along `axis`."""
    wrapped = where(idx < 0, idx + size, idx)
    ok = where(wrapped < 0, op(K.Full, shape=(), dtype=np.dtype(bool), value=False), wrapped < size)
    return reshape(ok, tuple(idx.shape[0] if i == axis else 1 for i in range(ndim)))


def _scatter_reduce(n, g, src, idx):
    """max / min: the gradient is shared evenly among the sources equal to the result (as
    JAX's scatter_max). mul: each source gets the product of the others at its destination,
    written so that its own derivative is right too (second order): out / src where src is
    not 0; for a zero, the product of the nonzero others when it is its destination's only
    zero, the other zero times that when there are two, and 0 (constant) beyond."""
    ax, size, red = n.attrs["axis"], n.attrs["size"], n.attrs["reduce"]
    gather = lambda v: op(K.IndexSelect, v, idx, axis=ax)      # noqa: E731
    scatter = lambda v, **r: op(K.ScatterReduce if r else K.ScatterAdd, v, idx, axis=ax, size=size, **r)  # noqa: E731
    valid = _scatter_valid(idx, size, src.ndim, ax)
    if red in ("max", "min"):
        tie = where(valid, src.eq(gather(E(n))), False)
        cnt = where(tie, gather(scatter(cast(tie, src.dtype))), 1.0)
        return where(tie, gather(g) / cnt, 0.0), None
    z = src.eq(0.0)
    safe = where(z, 1.0, src)
    nz = gather(scatter(cast(z, src.dtype)))
    ps = gather(scatter(safe, reduce="mul"))                      # product of the nonzero ones
    zs = gather(scatter(where(z, src, 0.0))) - where(z, src, 0.0)  # the other zeros' sum
    at_zero = where(nz.eq(1.0), ps, where(nz.eq(2.0), zs * ps, 0.0))
    others = where(z, at_zero, gather(E(n)) / safe)
    return where(valid, gather(g) * others, 0.0), None


def _control(n, g, *xs):
    raise AssertionError(f"{n.op.value}: a loop's cotangents are gathered by the reverse walk "
                         f"(`grad.backward`) and pulled back by `control.scan_vjp` (`while_vjp`)")


RULES = {
    K.Neg: lambda n, g, x: (-g,),
    K.Reciprocal: lambda n, g, x: (-g * E(n) * E(n),),
    K.Exp: lambda n, g, x: (g * E(n),),
    K.Log: lambda n, g, x: (g / x,),
    K.Log1p: lambda n, g, x: (g / (x + 1.0),),
    K.Expm1: lambda n, g, x: (g * (E(n) + 1.0),),
    K.Sqrt: lambda n, g, x: (g / (E(n) * 2.0),),
    K.Rsqrt: lambda n, g, x: (g * E(n) / x * -0.5,),
    K.Sin: lambda n, g, x: (g * cos(x),),
    K.Cos: lambda n, g, x: (-g * sin(x),),
    K.Tanh: lambda n, g, x: (g * (1.0 - E(n) * E(n)),),
    K.Sigmoid: lambda n, g, x: (g * E(n) * (1.0 - E(n)),),
    K.Abs: lambda n, g, x: (where(x > 0.0, g, where(x < 0.0, -g, 0.0)),),
    K.Sign: lambda n, g, x: (None,),   # zero almost everywhere (JAX's choice at the step too)
    # piecewise constant like Sign: zero, as jax.grad(jnp.floor) and the rest
    K.Floor: lambda n, g, x: (None,),
    K.Ceil: lambda n, g, x: (None,),
    K.Trunc: lambda n, g, x: (None,),
    K.Rint: lambda n, g, x: (None,),
    K.Erf: lambda n, g, x: (g * exp(-(x * x)) * TWO_OVER_SQRT_PI,),
    K.Erfc: lambda n, g, x: (g * exp(-(x * x)) * -TWO_OVER_SQRT_PI,),
    K.Relu: lambda n, g, x: (where(E(n) > 0.0, g, 0.0),),   # the output: x itself need not be kept
    K.Gelu: _gelu,
    K.Silu: lambda n, g, x: (g * sigmoid(x) * (1.0 + x * (1.0 - sigmoid(x))),),
    K.Cast: lambda n, g, x: (cast(g, x.dtype),),
    K.Copy: lambda n, g, x: (g,),
    K.StopGradient: lambda n, g, x: (None,),
    K.Add: _binary(lambda n, g, a, b: g, lambda n, g, a, b: g),
    K.Sub: _binary(lambda n, g, a, b: g, lambda n, g, a, b: -g),
    K.Mul: _binary(lambda n, g, a, b: g * b, lambda n, g, a, b: g * a),
    K.Div: _binary(lambda n, g, a, b: g / b, lambda n, g, a, b: -g * E(n) / b),
    K.Pow: _binary(_pow_a, _pow_b),
    K.IntegerPow: _integer_pow,
    # d atan2(y, x) = (x dy - y dx) / (x^2 + y^2), as JAX's
    K.Atan2: _binary(lambda n, g, y, x: g * x / (x * x + y * y),
                     lambda n, g, y, x: -g * y / (x * x + y * y)),
    # x // y is piecewise constant (zero almost everywhere, as JAX's); x % y = x - y * (x // y)
    K.FloorDivide: lambda n, g, a, b: (None, None),
    K.Remainder: _binary(lambda n, g, a, b: g, lambda n, g, a, b: -g * op(K.FloorDivide, a, b)),
    K.Maximum: _binary(lambda n, g, a, b: _ties(a, b, g), lambda n, g, a, b: _ties(b, a, g)),
    K.Minimum: _binary(lambda n, g, a, b: _ties(b, a, g), lambda n, g, a, b: _ties(a, b, g)),
    K.Where: lambda n, g, c, a, b: (None, unbroadcast(where(c, g, 0.0), a.shape),
                                    unbroadcast(where(c, 0.0, g), b.shape)),
    K.Sum: lambda n, g, x: (to_reduced(g, x.shape, n.attrs["axes"], n.attrs["keepdims"]),),
    K.Mean: _mean,
    K.Max: _extreme,
    K.Min: _extreme,
    K.Prod: _prod,
    K.Cumsum: _cumsum,
    K.Softmax: _softmax,
    K.LogSoftmax: _log_softmax,
    K.Reshape: lambda n, g, x: (reshape(g, x.shape),),
    K.Permute: _permute,
    K.Expand: lambda n, g, x: (unbroadcast(g, x.shape),),
    K.Slice: _slice,
    K.SliceBackward: _slice_backward,
    K.Pad: _pad,
    K.Concat: _concat,
    K.Flip: lambda n, g, x: (op(K.Flip, g, axes=n.attrs["axes"]),),
    K.IndexSelect: _index_select,
    K.ScatterAdd: _scatter_add,
    K.ScatterReduce: _scatter_reduce,
    K.MatMul: _matmul,
    K.Im2Col: _im2col,
    K.Col2Im: _col2im,
    K.MaxPool2d: lambda n, g, x: (op(K.MaxPool2dBackward, x, g, **_window(n)),),
    K.MaxPool2dBackward: _maxpool_backward,
    K.Scan: _control,     # Scan and Part: see transforms/control.py
    K.Part: _control,
    K.While: _control,
}

# the linear-algebra operators' rules live beside their helpers
from .linalg_rules import RULES as _LINALG_RULES  # noqa: E402

RULES.update(_LINALG_RULES)

# the spectral decompositions' rules live in a module of their own
from .spectral_rules import SPECTRAL_RULES  # noqa: E402

RULES.update(SPECTRAL_RULES)
