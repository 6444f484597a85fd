"""Every differentiable operator passes check_grads(order=2) in float64; the loop is over
the registry, so an operator with a rule but no case here fails the suite."""
import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.array import bind
from vkml.test_util import check_grads
from vkml.trace.ops import SPECS, Grad, OpKind as K
from vkml.transforms.rules import RULES

R = np.random.default_rng(1)
F64 = np.float64


def a(*shape, lo=-1.5, hi=1.5):
    return vnp.asarray(R.uniform(lo, hi, shape), F64)


def pos(*shape):
    return a(*shape, lo=0.3, hi=2.0)


def u(kind, **attrs):
    return lambda x: bind(kind, [x], **attrs)


def b(kind):
    return lambda x, y: bind(kind, [x, y])


W = dict(kernel=(2, 2), stride=(1, 1), padding=(1, 0), dilation=(1, 1))
IDX = vnp.asarray([2, 0, 2, -1], np.int32)
SR_IDX = vnp.asarray([2, 0, 2, -1, 1, 7], np.int32)
# distinct values so the max-pool argmax is locally constant for finite differences
POOL_X = vnp.asarray(R.permutation(2 * 2 * 4 * 4).reshape(2, 2, 4, 4) * 0.37, F64)

EXPAND_W = vnp.asarray(R.normal(size=(2, 3, 4)), F64)
# a batch of two 3x3 matrices near 3 I (well conditioned, either triangle too), an SPD pair,
# and a fixed row permutation for Lu
WELL = vnp.asarray(R.uniform(-0.5, 0.5, (2, 3, 3)) + 3 * np.eye(3), F64)
_M = R.normal(size=(2, 3, 3))
SPD = vnp.asarray(_M @ _M.transpose(0, 2, 1) + 3 * np.eye(3), F64)
LU_PERM = vnp.asarray([[2, 0, 1], [0, 1, 2]], np.int32)
# rows that LU_PERM puts back in WELL's order, so that the factorised rows are well conditioned
LU_X = vnp.asarray(np.stack([np.asarray(WELL)[0][[1, 2, 0]], np.asarray(WELL)[1]]), F64)

CASES = {
    K.Neg: (u(K.Neg), [a(3, 2)]),
    K.Reciprocal: (u(K.Reciprocal), [pos(4)]),
    K.Exp: (u(K.Exp), [a(2, 3)]),
    K.Log: (u(K.Log), [pos(5)]),
    K.Log1p: (u(K.Log1p), [pos(5)]),
    K.Expm1: (u(K.Expm1), [a(5)]),
    K.Sqrt: (u(K.Sqrt), [pos(5)]),
    K.Rsqrt: (u(K.Rsqrt), [pos(5)]),
    K.Sin: (u(K.Sin), [a(5)]),
    K.Cos: (u(K.Cos), [a(5)]),
    K.Tanh: (u(K.Tanh), [a(5)]),
    K.Sigmoid: (u(K.Sigmoid), [a(5)]),
    K.Abs: (u(K.Abs), [vnp.asarray([-1.3, -0.4, 0.6, 2.0], F64)]),
    K.Sign: (lambda x: bind(K.Sign, [x]) * x, [vnp.asarray([-1.3, -0.4, 0.6, 2.0], F64)]),
    # piecewise constant: the product's gradient is the op's value, its rule gives zero
    **{k: ((lambda k: lambda x: bind(k, [x]) * x)(k), [vnp.asarray([-1.3, -0.4, 0.6, 2.2], F64)])
       for k in (K.Floor, K.Ceil, K.Trunc, K.Rint)},
    K.Erf: (u(K.Erf), [a(5)]),
    K.Erfc: (u(K.Erfc), [a(5)]),
    K.Relu: (u(K.Relu), [vnp.asarray([-1.3, -0.4, 0.6, 2.0], F64)]),
    K.Gelu: (lambda x: bind(K.Gelu, [x], approximate=False) + bind(K.Gelu, [x * 0.7], approximate=True), [a(5)]),
    K.Silu: (u(K.Silu), [a(5)]),
    # dyadic points and step: float32 holds x +- eps exactly, so rounding does not pollute FD
    K.Cast: (lambda x: bind(K.Cast, [x], dtype=np.dtype(np.float32)).astype(F64) * x,
             [vnp.asarray([0.5, -1.25, 0.75, 1.5], F64)], dict(eps=2.0 ** -7)),
    K.Copy: (lambda x: bind(K.Copy, [x]) * x, [a(4)]),
    # not the derivative of its function by design: checked against the hand value instead
    K.StopGradient: None,
    K.Add: (b(K.Add), [a(2, 3), a(3)]),
    K.Sub: (b(K.Sub), [a(2, 1), a(3)]),
    K.Mul: (lambda x, y: bind(K.Mul, [x, y]) * x, [a(2, 3), a(1, 3)]),
    K.Div: (b(K.Div), [a(2, 3), pos(3)]),
    K.Pow: (b(K.Pow), [pos(4), a(4)]),
    # every quadrant, and a broadcast operand
    K.Atan2: (b(K.Atan2), [vnp.asarray([[0.7, -1.3, 0.2, -0.4]], F64), vnp.asarray([[1.1], [-0.6]], F64)]),
    # every kind of exponent: its rule is again an IntegerPow (down to 1 and 0)
    K.IntegerPow: (lambda x: sum((bind(K.IntegerPow, [x], exponent=e) for e in (0, 1, 2, 3, 7, -1, -2, 0.5, 1.5, -0.5, -2.5)),
                                 start=x * 0.0), [pos(5)]),
    # away from the jumps: x / y stays inside one integer interval under the FD step
    K.Remainder: (b(K.Remainder), [vnp.asarray([5.3, -3.7, 0.4, 9.1], F64), vnp.asarray([2.0, 1.5, -0.7, -2.2], F64)]),
    K.FloorDivide: (lambda x, y: bind(K.FloorDivide, [x, y]) * x + y,
                    [vnp.asarray([5.3, -3.7, 0.4, 9.1], F64), vnp.asarray([2.0, 1.5, -0.7, -2.2], F64)]),
    K.Maximum: (lambda x, y: bind(K.Maximum, [x, y]) * x, [a(6), a(6)]),
    K.Minimum: (lambda x, y: bind(K.Minimum, [x, y]) * y, [a(6), a(6)]),
    K.Where: (lambda x, y: bind(K.Where, [vnp.asarray([True, False, True]), x * x, y]), [a(2, 3), a(3)]),
    K.Sum: (lambda x: bind(K.Sum, [x * x], axes=(0, 2), keepdims=False), [a(2, 3, 2)]),
    K.Mean: (lambda x: bind(K.Mean, [x * x], axes=(1,), keepdims=True), [a(2, 3)]),
    K.Max: (lambda x: bind(K.Max, [x * x], axes=(1,), keepdims=False), [a(3, 4)]),
    K.Min: (lambda x: bind(K.Min, [x * x], axes=(0, 1), keepdims=True), [a(3, 4)]),
    K.Prod: (lambda x: bind(K.Prod, [x], axes=(1,), keepdims=False), [a(3, 4)]),
    K.Cumsum: (lambda x: bind(K.Cumsum, [x * x], axis=1), [a(2, 5)]),
    K.Softmax: (lambda x: bind(K.Softmax, [x], axis=1) * x, [a(2, 4)]),
    K.LogSoftmax: (lambda x: bind(K.LogSoftmax, [x], axis=0) * x, [a(3, 2)]),
    K.Reshape: (lambda x: bind(K.Reshape, [x], shape=(3, 2)) * vnp.arange(6.0, dtype=F64).reshape(3, 2), [a(2, 3)]),
    K.Permute: (lambda x: bind(K.Permute, [x * x], perm=(2, 0, 1)), [a(2, 3, 2)]),
    K.Expand: (lambda x: bind(K.Expand, [x], shape=(2, 3, 4)) * EXPAND_W, [a(3, 1)]),
    K.Slice: (lambda x: bind(K.Slice, [x * x], starts=(1, 4), stops=(3, -1), steps=(1, -2)), [a(3, 5)]),
    K.SliceBackward: (lambda x: bind(K.SliceBackward, [x * x], shape=(3, 5), starts=(0, 0), stops=(3, 5), steps=(2, 2)), [a(2, 3)]),
    K.Pad: (lambda x: bind(K.Pad, [x * x], pads=((1, 0), (2, 1)), value=0.5), [a(2, 3)]),
    K.Concat: (lambda x, y: bind(K.Concat, [x * y[:, :1], y, x], axis=1), [a(2, 2), a(2, 3)]),
    K.Flip: (lambda x: bind(K.Flip, [x * x], axes=(0,)), [a(3, 2)]),
    K.IndexSelect: (lambda x: bind(K.IndexSelect, [x * x, IDX], axis=1), [a(2, 3)]),
    K.ScatterAdd: (lambda x: bind(K.ScatterAdd, [x * x, IDX], axis=1, size=3), [a(2, 4)]),
    # max, min and mul together (every destination reached, one update dropped; distinct
    # values, so the max and min are locally one source each)
    K.ScatterReduce: (lambda x: bind(K.ScatterReduce, [x * x, SR_IDX], axis=1, size=3, reduce="max")
                      * bind(K.ScatterReduce, [x, SR_IDX], axis=1, size=3, reduce="mul")
                      + bind(K.ScatterReduce, [x * x * x, SR_IDX], axis=1, size=3, reduce="min"),
                      [a(2, 6)]),
    K.MatMul: (lambda x, y: bind(K.MatMul, [x, y]) * bind(K.MatMul, [x, y]), [a(2, 2, 3), a(3, 4)]),
    # gauge-invariant functions of the packed factors (squared eigenvector entries, the
    # rank-one term u_0 v_0^T, Householder's unique Q and R)
    K.Eigh: (lambda x: (lambda P: (P[3] ** 2).sum() + (P[:3] ** 2 * P[3:]).sum())(
        bind(K.Eigh, [x + x.T])), [a(3, 3)]),
    K.Svd: (lambda x: (lambda P: (P[7] ** 3).sum() + ((P[:4, :1] @ P[4:7, :1].T) ** 2 * x).sum())(
        bind(K.Svd, [x])), [a(4, 3)]),
    K.Qr: (lambda x: (bind(K.Qr, [x], complete=False) ** 3).sum(), [a(4, 3)]),
    K.Im2Col: (lambda x: bind(K.Im2Col, [x * x], **W), [a(1, 2, 3, 3)]),
    K.Col2Im: (lambda c: bind(K.Col2Im, [c * c], output_size=(3, 3), **W), [a(1, 8, 8)]),
    K.MaxPool2d: (lambda x: bind(K.MaxPool2d, [x], kernel=(2, 2), stride=(1, 1), padding=(0, 0), dilation=(1, 1)) ** 2, [POOL_X]),
    K.MaxPool2dBackward: (lambda g: bind(K.MaxPool2dBackward, [POOL_X, g * g], kernel=(2, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 1)), [a(2, 2, 3, 3)]),
    # a loop of three steps: carries and stacked outputs (the Parts) both differentiated
    K.Scan: (lambda w, xs: _scan_loss(w, xs), [a(3), a(3, 3)]),
    K.Part: (lambda w, xs: _scan_loss(w, xs, 1), [a(3), a(3, 3)]),
    # outside jit a while_loop's trip count is counted first (a scan of that many steps);
    # its forward mode under jit and its reverse mode's error: tests/lax/test_control.py
    K.While: (lambda w: _while_loss(w), [a(3)]),
    # linear algebra on well-conditioned matrices (tests/linalg has the surface's cases)
    K.Cholesky: (lambda s: bind(K.Cholesky, [s], symmetrize=False) + bind(K.Cholesky, [s], symmetrize=True), [SPD]),
    K.TriangularSolve: (lambda t, y: bind(K.TriangularSolve, [t, y], lower=True, trans=False, unit=False)
                        + bind(K.TriangularSolve, [t, y], lower=False, trans=True, unit=True),
                        [WELL, a(2, 3, 2)]),
    K.Solve: (b(K.Solve), [WELL, a(2, 3, 2)]),
    K.Lu: (lambda x: bind(K.Lu, [x, LU_PERM]), [LU_X]),
}


def _while_loss(w):
    from vkml import lax
    return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, vnp.sin(c[1] * w) + w), (0, w))[1]


def _scan_loss(w, xs, which=0):
    from vkml import lax
    c, ys = lax.scan(lambda c, x: (vnp.sin(c * w + x), c * x), (w * w), xs)
    return [c, ys][which]


def test_rules_match_registry():
    """The registry is the one record of which ops have rules; the table must agree."""
    with_rule = {k for k, s in SPECS.items() if s.grad is Grad.RULE}
    assert set(RULES) == with_rule


@pytest.mark.parametrize("kind", [k for k, s in SPECS.items() if s.grad is Grad.RULE], ids=lambda k: k.value)
def test_check_grads_order2(kind):
    assert kind in CASES, f"{kind.value} has a rule but no check_grads case"
    if kind is K.StopGradient:
        x = a(4)
        g = vkml.grad(lambda x: (bind(K.StopGradient, [x]) * x).sum())(x)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(x))
        # the inner gradient is stop_gradient(x*x): the outer transform must not see through it
        h = vkml.grad(lambda x: vkml.grad(lambda y: (bind(K.StopGradient, [y * y]) * y).sum())(x).sum())(x)
        np.testing.assert_array_equal(np.asarray(h), np.zeros(4))
        return
    f, args, *opts = CASES[kind]
    check_grads(f, args, order=2, **(opts[0] if opts else {}))


@pytest.mark.parametrize("kind", [k for k, s in SPECS.items() if s.grad is not Grad.RULE], ids=lambda k: k.value)
def test_ops_without_rules_raise(kind):
    """Every op without a rule is in one of the design note's groups, never a gap."""
    assert SPECS[kind].grad in (Grad.LEAF, Grad.BOOLEAN, Grad.DISCONTINUOUS, Grad.INTEGER)


def test_matmul_of_a_batch_against_one_matrix():
    rng = np.random.default_rng(3)
    x, w, c = rng.normal(size=(4, 3, 5)), rng.normal(size=(5, 2)), rng.normal(size=(4, 3, 2))
    f = lambda x, w: ((x @ w) * vnp.asarray(c)).sum()   # noqa: E731
    gx, gw = vkml.grad(f, argnums=(0, 1))(vnp.asarray(x), vnp.asarray(w))
    np.testing.assert_allclose(np.asarray(gw), x.reshape(12, 5).T @ c.reshape(12, 2), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gx), c @ w.T, rtol=1e-12)
    check_grads(f, (vnp.asarray(x), vnp.asarray(w)), order=2)
