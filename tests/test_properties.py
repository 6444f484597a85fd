"""Property tests: random compositions of vkml.numpy operators against NumPy float64.

A `Program` is 2-6 steps over its inputs; every step applies one operator (or a small,
fixed composition that keeps the domain valid: log(|x| + 0.5), x / (|y| + 0.5), ...) to
earlier values. The same step functions run on vkml.numpy (eager and under vkml.jit) and
on NumPy, so a failure prints the program as readable code. Shapes come from a small
set of dimensions, so that kernels repeat across examples (each new one is compiled once).

Examples per test: `_settings` below, 260 in all for CI (derandomized, no database: every
run checks the same programs; tests/conftest.py loads that profile for every hypothesis
test); VKML_HYPOTHESIS_EXAMPLES=5000 runs about that many over these tests, still seeded.
"""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, reject, settings, strategies as st

import vkml
import vkml.numpy as vnp
from vkml.test_util import check_grads

# VKML_HYPOTHESIS_EXAMPLES: examples over all the property tests here, each its share
# (CI: 260 in all, about 80 s with a cold kernel cache, 2 cores)
_TOTAL = int(os.environ.get("VKML_HYPOTHESIS_EXAMPLES", "0") or 0)
_CI_TOTAL = 260


def _settings(n: int):
    return settings(max_examples=max(n, _TOTAL * n // _CI_TOTAL) if _TOTAL else n, deadline=None,
                    derandomize=True, database=None, print_blob=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


DIMS = (0, 1, 2, 3, 4)      # size 0 and 1 on purpose; few values, so kernels are reused
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _is_np(m) -> bool:
    return m is np


# --------------------------------------------------------------------------- steps
# Each op: (name, arity, smooth, fn(m, *xs, **params), applicable(shapes) -> bool,
# draw_params(draw, shapes) -> dict). fn works for m = vkml.numpy and m = numpy.

@dataclass(frozen=True)
class Op:
    name: str
    arity: int
    fn: object
    smooth: bool = True                # differentiable everywhere it is used (grad tests)
    ok: object = None                  # shapes -> bool
    params: object = None              # (draw, shapes) -> dict
    fmt: str = ""                      # how a step prints: {0}, {1} operands, {p} params
    kink: object = None                # (np values, params) -> distance to a discontinuity


def _u(name, fn, fmt, smooth=True, kink=None):
    return Op(name, 1, fn, smooth=smooth, fmt=fmt, kink=kink)


def _rsqrt(m, x):
    return 1.0 / np.sqrt(x) if _is_np(m) else m.rsqrt(x)


def _erf_any(m, x):
    return _erf(x).astype(x.dtype) if _is_np(m) else m.erf(x)


UNARY = [
    _u("neg", lambda m, x: -x, "-{0}"),
    _u("abs", lambda m, x: m.abs(x), "abs({0})", smooth=False),
    _u("sin", lambda m, x: m.sin(x), "sin({0})"),
    _u("cos", lambda m, x: m.cos(x), "cos({0})"),
    _u("tanh", lambda m, x: m.tanh(x), "tanh({0})"),
    _u("square", lambda m, x: m.square(x), "square({0})"),
    _u("exp", lambda m, x: m.exp(m.tanh(x) * 3.0), "exp(tanh({0}) * 3)"),
    _u("exp_clip", lambda m, x: m.exp(m.clip(x, -4.0, 4.0)), "exp(clip({0}, -4, 4))", smooth=False),
    _u("expm1", lambda m, x: m.expm1(m.sin(x)), "expm1(sin({0}))"),
    _u("log", lambda m, x: m.log(x * x + 0.5), "log({0}**2 + 0.5)"),
    _u("log_abs", lambda m, x: m.log(m.abs(x) + 0.5), "log(abs({0}) + 0.5)", smooth=False),
    _u("log1p", lambda m, x: m.log1p(x * x), "log1p({0}**2)"),
    _u("sqrt", lambda m, x: m.sqrt(x * x + 0.25), "sqrt({0}**2 + 0.25)"),
    _u("sqrt_abs", lambda m, x: m.sqrt(m.abs(x)), "sqrt(abs({0}))", smooth=False),
    _u("rsqrt", lambda m, x: _rsqrt(m, x * x + 1.0), "rsqrt({0}**2 + 1)"),
    _u("reciprocal", lambda m, x: m.reciprocal(x * x + 0.5), "reciprocal({0}**2 + 0.5)"),
    _u("erf", lambda m, x: _erf_any(m, x), "erf({0})"),
    _u("sign", lambda m, x: m.sign(x), "sign({0})", smooth=False, kink=lambda v, p: np.abs(v[0])),
    _u("clip", lambda m, x: m.clip(x, -1.0, 1.5), "clip({0}, -1, 1.5)", smooth=False),
]


def _bcast_ok(shapes):
    try:
        np.broadcast_shapes(*shapes)
        return True
    except ValueError:
        return False


def _b(name, fn, fmt, smooth=True, kink=None):
    return Op(name, 2, fn, smooth=smooth, ok=_bcast_ok, fmt=fmt, kink=kink)


BINARY = [
    _b("add", lambda m, x, y: x + y, "{0} + {1}"),
    _b("sub", lambda m, x, y: x - y, "{0} - {1}"),
    _b("mul", lambda m, x, y: x * y, "{0} * {1}"),
    _b("div", lambda m, x, y: x / (y * y + 0.5), "{0} / ({1}**2 + 0.5)"),
    _b("div_abs", lambda m, x, y: m.divide(x, m.abs(y) + 0.5), "divide({0}, abs({1}) + 0.5)", smooth=False),
    _b("maximum", lambda m, x, y: m.maximum(x, y), "maximum({0}, {1})", smooth=False),
    _b("minimum", lambda m, x, y: m.minimum(x, y), "minimum({0}, {1})", smooth=False),
    _b("power", lambda m, x, y: m.power(x * x + 0.5, m.tanh(y) * 2.0), "power({0}**2 + 0.5, tanh({1}) * 2)"),
    # the condition's operand against 0.25: examples within rounding of it are rejected
    _b("where", lambda m, x, y: m.where(x > 0.25, x, y), "where({0} > 0.25, {0}, {1})",
       smooth=False, kink=lambda v, p: np.abs(v[0] - 0.25)),
    _b("where_sq", lambda m, x, y: m.where(y < 0.25, x * y, -y), "where({1} < 0.25, {0} * {1}, -{1})",
       smooth=False, kink=lambda v, p: np.abs(v[1] - 0.25)),
]


def _axis_params(draw, shapes, empty_ok=True):
    (s,) = shapes
    nd = len(s)
    kind = draw(st.sampled_from(["none", "int", "tuple"])) if nd else "none"
    if kind == "none":
        axis = None
    elif kind == "int":
        axis = draw(st.integers(-nd, nd - 1))
    else:
        axis = tuple(sorted(draw(st.sets(st.integers(0, nd - 1), min_size=1, max_size=nd))))
    return {"axis": axis, "keepdims": draw(st.booleans())}


def _reduced_nonempty(shapes, p):
    (s,) = shapes
    axes = range(len(s)) if p["axis"] is None else (
        (p["axis"] % len(s),) if isinstance(p["axis"], int) else p["axis"])
    return all(s[a] > 0 for a in axes)


def _red(name, smooth=True, needs_elems=False):
    def fn(m, x, axis, keepdims):
        return getattr(m, name)(x, axis=axis, keepdims=keepdims)
    return Op(name, 1, fn, smooth=smooth, fmt=name + "({0}, axis={axis}, keepdims={keepdims})",
              params=_axis_params, ok=None, kink=("nonempty" if needs_elems else None))


REDUCE = [_red("sum"), _red("mean"), _red("max", smooth=False, needs_elems=True),
          _red("min", smooth=False, needs_elems=True), _red("prod"), _red("var"), _red("std", smooth=False)]


def _reshape_params(draw, shapes):
    (s,) = shapes
    n = int(np.prod(s))
    choices = [(-1,), (n,), (1, n), (n, 1)]
    if n and n % 2 == 0:
        choices += [(2, -1), (n // 2, 1, 2)]
    if len(s) >= 2:
        choices.append(s[::-1] if int(np.prod(s[::-1])) == n else (-1,))
        choices.append((s[0], -1) if s[0] else (0, -1) if n == 0 else (-1,))
    shape = draw(st.sampled_from(choices))
    if n == 0 and -1 in shape:       # -1 is ambiguous for a zero-size array
        shape = tuple(0 if d == -1 else d for d in shape)
    return {"shape": tuple(shape)}


def _perm_params(draw, shapes):
    (s,) = shapes
    return {"axes": tuple(draw(st.permutations(range(len(s)))))}


def _slice_params(draw, shapes):
    (s,) = shapes
    sl = []
    for d in s:
        step = draw(st.sampled_from([1, 2, -1, -2, 3]))
        a = draw(st.integers(0, d))
        b = draw(st.integers(0, d))
        if step < 0:
            a, b = max(a, b), min(a, b)
            sl.append(slice(a if a < d else None, b - 1 if b > 0 else None, step))
        else:
            sl.append(slice(min(a, b), max(a, b), step))
    return {"idx": tuple(sl)}


def _fmt_slice(sl: slice) -> str:
    f = lambda v: "" if v is None else str(v)
    return f"{f(sl.start)}:{f(sl.stop)}" + (f":{sl.step}" if sl.step not in (None, 1) else "")


def _bto_params(draw, shapes):
    (s,) = shapes
    new = tuple(draw(st.sampled_from([d, 3] if d == 1 else [d])) for d in s)
    lead = draw(st.sampled_from([(), (2,)]))
    return {"shape": lead + new}


def _concat_ok(shapes):
    a, b = shapes
    return len(a) == len(b) and len(a) > 0 and sum(x != y for x, y in zip(a, b)) <= 1


def _concat_params(draw, shapes):
    a, b = shapes
    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    return {"axis": diff[0] if diff else draw(st.integers(-len(a), len(a) - 1))}


def _matmul_ok(shapes):
    (s,) = shapes
    return len(s) >= 2


SHAPE = [
    Op("reshape", 1, lambda m, x, shape: m.reshape(x, shape), fmt="reshape({0}, {shape})",
       params=_reshape_params),
    Op("transpose", 1, lambda m, x, axes: m.transpose(x, axes), fmt="transpose({0}, {axes})",
       params=_perm_params),
    Op("slice", 1, lambda m, x, idx: x[idx], fmt="{0}[{idx}]", params=_slice_params),
    Op("broadcast_to", 1, lambda m, x, shape: m.broadcast_to(x, shape), fmt="broadcast_to({0}, {shape})",
       params=_bto_params),
    Op("concatenate", 2, lambda m, x, y, axis: m.concatenate([x, y], axis=axis),
       fmt="concatenate([{0}, {1}], axis={axis})", ok=_concat_ok, params=_concat_params),
    Op("matmul_t", 1, lambda m, x: m.matmul(x, m.swapaxes(x, -1, -2)), fmt="{0} @ swapaxes({0}, -1, -2)",
       ok=_matmul_ok),
    Op("expand_dims", 1, lambda m, x, axis: m.expand_dims(x, axis), fmt="expand_dims({0}, {axis})",
       params=lambda draw, s: {"axis": draw(st.integers(-len(s[0]) - 1, len(s[0])))}),
    Op("squeeze", 1, lambda m, x: m.squeeze(x), fmt="squeeze({0})"),
    Op("flip", 1, lambda m, x, axis: m.flip(x, axis), fmt="flip({0}, {axis})", ok=lambda s: len(s[0]) > 0,
       params=lambda draw, s: {"axis": draw(st.integers(-len(s[0]), len(s[0]) - 1))}),
    Op("stack", 2, lambda m, x, y, axis: m.stack([x, y], axis=axis), fmt="stack([{0}, {1}], axis={axis})",
       ok=lambda s: s[0] == s[1], params=lambda draw, s: {"axis": draw(st.integers(-len(s[0]) - 1, len(s[0])))}),
    Op("cumsum", 1, lambda m, x, axis: m.cumsum(x, axis=axis), fmt="cumsum({0}, axis={axis})",
       ok=lambda s: len(s[0]) > 0, params=lambda draw, s: {"axis": draw(st.integers(-len(s[0]), len(s[0]) - 1))}),
]

ALL_OPS = UNARY + BINARY + REDUCE + SHAPE


@dataclass
class Step:
    op: Op
    args: tuple           # indices into the program's values
    params: dict = field(default_factory=dict)

    def run(self, m, vals):
        return self.op.fn(m, *(vals[i] for i in self.args), **self.params)

    def text(self, names) -> str:
        p = dict(self.params)
        if "idx" in p:
            p["idx"] = ", ".join(_fmt_slice(s) for s in p["idx"])
        return self.op.fmt.format(*(names[i] for i in self.args), **p)


class Program:
    """Inputs (shape, dtype name, layout) and steps; prints as the code it runs (a plain
    class, not a dataclass: hypothesis prints a failing example with this repr)."""

    def __init__(self, inputs: list, steps: list, seed: int):
        self.inputs, self.steps, self.seed = inputs, steps, seed

    def names(self):
        return [f"x{i}" for i in range(len(self.inputs))] + [f"v{i}" for i in range(len(self.steps))]

    def __repr__(self) -> str:
        names = self.names()
        ins = ", ".join(f"{n}: {d}{list(s)}{'' if lay == 'c' else ' (' + lay + ')'}"
                        for n, (s, d, lay) in zip(names, self.inputs))
        body = "\n".join(f"    {names[len(self.inputs) + k]} = {s.text(names)}" for k, s in enumerate(self.steps))
        outs = ", ".join(names[i] for i in self.sinks())
        return f"\ndef f({ins}):  # values: seed {self.seed}\n{body}\n    return {outs}\n"

    def arrays(self):
        """The inputs as NumPy arrays of their dtypes, some of them non-contiguous views."""
        rng = np.random.default_rng(self.seed)
        out = []
        for shape, dtype, layout in self.inputs:
            if layout == "strided":     # every other element of a larger array
                big = rng.standard_normal(tuple(2 * d for d in shape)) * 1.5
                a = big[tuple(slice(None, None, 2) for _ in shape)]
            elif layout == "transposed":
                a = (rng.standard_normal(shape[::-1]) * 1.5).T
            else:
                a = rng.standard_normal(shape) * 1.5
            out.append(np.asarray(a, dtype=dtype) if layout == "c" else a.astype(dtype, copy=False))
        return out

    def sinks(self) -> list:
        """Indices of the values no later step reads (the last among them): the outputs."""
        used = {i for s in self.steps for i in s.args}
        n = len(self.inputs)
        return [n + k for k in range(len(self.steps)) if n + k not in used or k == len(self.steps) - 1]

    def run(self, m, xs, keep=False):
        """Every value (keep) or the outputs, a tuple."""
        vals = list(xs)
        for s in self.steps:
            vals.append(s.run(m, vals))
        return vals if keep else tuple(vals[i] for i in self.sinks())


def _np_shape(op: Op, shapes, params):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.shape(op.fn(np, *(np.ones(s) for s in shapes), **params))


@st.composite
def shapes_for(draw):
    """A base shape and 1-3 input shapes that broadcast with it (dims dropped or made 1)."""
    rank = draw(st.integers(0, 3))
    base = tuple(draw(st.sampled_from(DIMS)) for _ in range(rank))
    n = draw(st.integers(1, 3))
    out = []
    for _ in range(n):
        drop = draw(st.integers(0, rank))
        s = tuple(1 if draw(st.integers(0, 3)) == 0 else d for d in base[drop:])
        out.append(s)
    return out


@st.composite
def programs(draw, ops=ALL_OPS, dtypes=("float32", "float64"), min_steps=2, max_steps=6, layouts=True):
    shapes = draw(shapes_for())
    inputs = [(s, draw(st.sampled_from(dtypes)),
               draw(st.sampled_from(["c", "c", "strided", "transposed"])) if layouts and s else "c")
              for s in shapes]
    val_shapes = [s for s, _, _ in inputs]
    steps = []
    for _ in range(draw(st.integers(min_steps, max_steps))):
        for _attempt in range(10):
            op = draw(st.sampled_from(ops))
            # operands: recent values are likelier, so that steps compose
            pick = lambda: len(val_shapes) - 1 - (0 if draw(st.integers(0, 9)) < 5 else
                                                  draw(st.integers(0, len(val_shapes) - 1)))
            args = tuple(pick() for _ in range(op.arity))
            shp = [val_shapes[i] for i in args]
            if op.ok is not None and not op.ok(shp):
                continue
            params = op.params(draw, shp) if op.params else {}
            if op.kink == "nonempty" and not _reduced_nonempty(shp, params):
                continue
            try:
                out = _np_shape(op, shp, params)
            except (ValueError, IndexError):
                continue
            if int(np.prod(out)) > 512:
                continue
            steps.append(Step(op, args, params))
            val_shapes.append(tuple(out))
            break
    assume(steps)
    return Program(inputs, steps, draw(st.integers(0, 2**31 - 1)))


# --------------------------------------------------------------------------- oracle

def _oracle(prog: Program, xs):
    """(float64 values of every step, the program run in NumPy on the inputs' own dtypes)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vals = prog.run(np, [x.astype(np.float64) for x in xs], keep=True)
        native = prog.run(np, xs)
    return vals, native


def _check_kinks(prog: Program, vals) -> None:
    """Reject programs that evaluate a discontinuity (sign, where) within rounding of its edge."""
    scale = 1.0 + max((float(np.max(np.abs(v[np.isfinite(v)]))) for v in vals
                       if np.size(v) and np.isfinite(v).any()), default=0.0)
    for s in prog.steps:
        if callable(s.op.kink):
            d = s.op.kink([np.asarray(vals[i]) for i in s.args], s.params)
            if np.size(d) and float(np.min(d)) < 1e-3 * scale:
                reject()


def _tolerance(prog: Program, vals, native, all64: bool):
    mag = max((float(np.max(np.abs(v))) for v in vals if np.size(v) and np.isfinite(v).all()), default=0.0)
    n = len(prog.steps)
    if all64:
        return 1e-9 * (1 + mag) * n, 1e-9
    return 3e-5 * (1 + mag) * n, 2e-4


def _compare(prog: Program, got, xs, vals, native):
    """Each output of got (a tuple) against the float64 values."""
    assert len(got) == len(prog.sinks())
    for g, i, nat in zip(got, prog.sinks(), native):
        _compare_one(prog, g, xs, vals, vals[i], nat)


def _compare_one(prog: Program, got, xs, vals, want, native):
    want_dtype = np.result_type(native)
    assert got.dtype == want_dtype, f"dtype {got.dtype}, NumPy gives {want_dtype}{prog!r}"
    g = np.asarray(got)
    assert g.shape == np.shape(want), f"shape {g.shape}, NumPy gives {np.shape(want)}{prog!r}"
    all64 = all(x.dtype == np.float64 for x in xs)
    atol, rtol = _tolerance(prog, vals, native, all64)
    # where float32 rounding of the intermediates alone moves NumPy this far, allow as much
    slack = 4 * np.abs(np.asarray(native, np.float64) - want)
    slack = np.where(np.isfinite(slack), slack, 0.0)
    err = np.abs(g.astype(np.float64) - want)
    nan_ok = np.isnan(g) == np.isnan(want)
    assert nan_ok.all(), f"NaN where NumPy has none (or the reverse): got {g}, want {want}{prog!r}"
    bad = ~np.isnan(want) & ~(err <= atol + rtol * np.abs(want) + slack)
    assert not bad.any(), (f"max error {np.max(np.where(bad, err, 0))} (atol {atol:.3g}, rtol {rtol:.3g})\n"
                           f"got  {g}\nwant {want}{prog!r}")


# --------------------------------------------------------------------------- tests

@_settings(170)
@given(programs())
def test_eager_compositions_match_numpy(prog):
    xs = prog.arrays()
    vals, native = _oracle(prog, xs)
    _check_kinks(prog, vals)
    got = prog.run(vnp, [vnp.asarray(x) for x in xs])
    _compare(prog, got, xs, vals, native)


@_settings(70)
@given(programs())
def test_jit_compositions_match_numpy(prog):
    xs = prog.arrays()
    vals, native = _oracle(prog, xs)
    _check_kinks(prog, vals)
    f = vkml.jit(lambda *a: prog.run(vnp, a))
    args = [vnp.asarray(x) for x in xs]
    got = f(*args)
    _compare(prog, got, xs, vals, native)
    again = f(*args)                      # the replayed recording gives the same answer
    for a, b in zip(again, got):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


SMOOTH = [o for o in ALL_OPS if o.smooth and o.name not in ("cumsum",)] + [
    o for o in SHAPE if o.name == "cumsum"]


@_settings(20)
@given(programs(ops=SMOOTH, dtypes=("float64",), min_steps=2, max_steps=5, layouts=False))
def test_grad_of_compositions_matches_finite_differences(prog):
    xs = [x for x in prog.arrays()]
    assume(all(x.size for x in xs))
    vals, _ = _oracle(prog, xs)
    assume(any(np.size(vals[i]) for i in prog.sinks()))
    mag = max(float(np.max(np.abs(v))) for v in vals if np.size(v))
    assume(mag < 1e3)

    def f(*a):
        return sum(vnp.sum(o * (0.5 + k)) for k, o in enumerate(prog.run(vnp, a)))
    args = [vnp.asarray(x) for x in xs]
    check_grads(f, args, order=1, modes=("rev", "fwd"), eps=1e-5, atol=1e-6 * (1 + mag), rtol=1e-5)


def test_programs_print_as_code():
    prog = Program([((2, 3), "float32", "c"), ((3,), "float64", "strided")],
                   [Step(BINARY[0], (0, 1)), Step(REDUCE[0], (2,), {"axis": 0, "keepdims": False}),
                    Step(SHAPE[2], (3,), {"idx": (slice(None, None, -1),)})], seed=7)
    assert repr(prog) == ("\ndef f(x0: float32[2, 3], x1: float64[3] (strided)):  # values: seed 7\n"
                          "    v0 = x0 + x1\n    v1 = sum(v0, axis=0, keepdims=False)\n"
                          "    v2 = v1[::-1]\n    return v2\n")
    xs = prog.arrays()
    np.testing.assert_allclose(np.asarray(prog.run(vnp, [vnp.asarray(x) for x in xs])[0]),
                               (xs[0] + xs[1]).sum(0)[::-1], rtol=1e-6)


def test_float64_fused_reductions_keyerror():
    # issue 14: vkml/vulkan/executor.py _lower_group raised KeyError for float64 graphs with
    # several fused reductions (fixed by 1e8bd71)
    S = vnp.sum
    f = vkml.jit(lambda a, b: S(vnp.cos(a) * b) + S(vnp.sin(a) * b) + S(vnp.cos(b) * a) + S(vnp.sin(b) * a))
    a, b = np.array([0.3, -1.2, 0.7]), np.array([1.1, 0.4, -0.6])
    got = f(vnp.asarray(a), vnp.asarray(b))
    want = (np.cos(a) * b).sum() + (np.sin(a) * b).sum() + (np.cos(b) * a).sum() + (np.sin(b) * a).sum()
    np.testing.assert_allclose(float(got), want, rtol=1e-12)
