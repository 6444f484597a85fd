"""vkml.numpy.einsum (vkml/einsum.py) against numpy.einsum.

Every spec of the table runs in float64 (tolerance 1e-12) and float32 (1e-5) with each
contraction order; int32 and bool on a subset (exact). Gradients go through check_grads;
jit and vmap through one case each; bad specs must raise NumPy's exception type with a
message naming einsum. Dims are reused across cases (i=3, j=4, k=5, b=2) so kernels are.
"""
from __future__ import annotations

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.test_util import check_grads

F32, F64, I32, B = np.float32, np.float64, np.int32, np.bool_
RNG = np.random.default_rng(7)

# (subscripts, operand shapes)
CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),                      # matmul
    ("ij,jk", [(3, 4), (4, 5)]),                          # implicit output
    ("ij,kj->ik", [(3, 4), (5, 4)]),                      # transposed right operand
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),             # batched matmul
    ("bij,bjk->kbi", [(2, 3, 4), (2, 4, 5)]),             # ... with a permuted output
    ("bi,ij,bj->b", [(2, 3), (3, 4), (2, 4)]),            # bilinear
    ("i,j->ij", [(3,), (4,)]),                            # outer
    ("ij,k->kji", [(3, 4), (5,)]),                        # outer, permuted
    ("i,i", [(3,), (3,)]),                                # inner
    ("i,i->i", [(3,), (3,)]),                             # elementwise
    ("ii", [(3, 3)]),                                     # trace
    ("ii->i", [(3, 3)]),                                  # diagonal
    ("iij->j", [(3, 3, 4)]),                              # diagonal then sum
    ("iii->i", [(3, 3, 3)]),                              # triple diagonal
    ("ij,jj->i", [(3, 4), (4, 4)]),                       # diagonal inside a contraction
    ("ij->ji", [(3, 4)]),                                 # transpose
    ("ji", [(3, 4)]),                                     # implicit: alphabetical order
    ("aB", [(3, 4)]),                                     # implicit: ASCII order (B before a)
    ("bijk->kbji", [(2, 3, 4, 5)]),
    ("ij->", [(3, 4)]),                                   # sums
    ("ijk->j", [(3, 4, 5)]),
    ("ijk,jil->kl", [(3, 4, 5), (4, 3, 2)]),              # two summed indices
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),          # ellipsis broadcasting
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 5)]),           # implicit, size-1 ellipsis dims
    ("...ii->...i", [(2, 3, 3)]),
    ("i...->...", [(3, 2, 4)]),
    ("ab...", [(2, 3, 4, 5)]),                            # implicit: ellipsis first
    ("ij...,j...->i...", [(3, 4, 2), (4, 1)]),
    ("...,...", [(2, 1), (3,)]),
    ("ij,jk->ik", [(3, 1), (4, 5)]),                      # size-1 broadcast of a named dim
    ("ij,ij->ij", [(3, 1), (3, 4)]),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),           # three and four operands
    ("ij,jk,k->i", [(3, 4), (4, 5), (5,)]),
    ("ij,jk,kl,lm->mi", [(3, 4), (4, 5), (5, 2), (2, 3)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    (",i->i", [(), (3,)]),                                # scalars
    ("", [()]),
    (",", [(), ()]),
    ("ij,jk->ik", [(3, 0), (0, 5)]),                      # empty contraction: zeros
    ("ij->j", [(0, 4)]),
]
EXACT = ["ij,jk->ik", "bi,ij,bj->b", "ii", "iij->j", "...ij,...jk->...ik", "ij,jk,k->i",
         ",i->i", "i,j->ij"]


def data(shape, dtype):
    if dtype == B:
        return RNG.random(shape) < 0.5
    if dtype == I32:
        return RNG.integers(-3, 4, size=shape).astype(I32)
    return RNG.uniform(-2, 2, size=shape).astype(dtype)


def check(got, want, dtype):
    want = np.asarray(want)
    assert got.dtype == dtype, f"dtype {got.dtype}, expected {np.dtype(dtype)}"
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    if np.dtype(dtype).kind in "bi":
        np.testing.assert_array_equal(got.numpy(), want.astype(dtype))
    else:
        tol = 1e-12 if dtype == F64 else 1e-5
        np.testing.assert_allclose(got.numpy().astype(F64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("spec,shapes", CASES, ids=[f"{s}|{sh}" for s, sh in CASES])
def test_against_numpy(spec, shapes, dtype):
    xs = [data(s, dtype) for s in shapes]
    want = np.einsum(spec, *[x.astype(F64) for x in xs])
    for opt in (False, "auto"):        # left to right, greedy
        check(vnp.einsum(spec, *[vnp.asarray(x) for x in xs], optimize=opt), want, dtype)


@pytest.mark.parametrize("dtype", [I32, B])
@pytest.mark.parametrize("spec", EXACT)
def test_int32_and_bool_are_exact(spec, dtype):
    shapes = dict(CASES)[spec]
    xs = [data(s, dtype) for s in shapes]
    want = np.einsum(spec, *xs)         # bool: an OR of ANDs, as NumPy and jax.numpy
    assert want.dtype.kind == np.dtype(dtype).kind
    check(vnp.einsum(spec, *[vnp.asarray(x) for x in xs]), want, dtype)


def test_promotion_python_scalars_sublists_paths_and_dtype():
    a, b = data((3, 4), F32), data((4, 5), F64)
    check(vnp.einsum("ij,jk", vnp.asarray(a), vnp.asarray(b)), np.einsum("ij,jk", a, b), F64)
    n = data((3, 4), I32)
    check(vnp.einsum("ij,jk", vnp.asarray(n), vnp.asarray(a.T.copy())),
          np.einsum("ij,jk", n, a.T.astype(F64)), F32)          # jax: int32 with float32 -> float32
    check(vnp.einsum(",ij", 2.0, vnp.asarray(a)), 2.0 * a, F32)   # a Python float is weak
    check(vnp.einsum(",ij", 2, vnp.asarray(n)), 2 * n, I32)
    check(vnp.einsum("ij", vnp.asarray(n), dtype="float64"), n, F64)
    # NumPy's sublist form, with Ellipsis and an output list
    check(vnp.einsum(vnp.asarray(a), [0, 1], vnp.asarray(b), [1, 2], [2, 0]),
          np.einsum(a, [0, 1], b, [1, 2], [2, 0]), F64)
    check(vnp.einsum(vnp.asarray(a), [Ellipsis, 1]), np.einsum(a, [Ellipsis, 1]), F32)
    # a contraction path from numpy.einsum_path is followed
    xs = [data(s, F64) for s in dict(CASES)["ij,jk,kl,lm->mi"]]
    path, _ = np.einsum_path("ij,jk,kl,lm->mi", *xs, optimize="optimal")
    check(vnp.einsum("ij,jk,kl,lm->mi", *[vnp.asarray(x) for x in xs], optimize=path),
          np.einsum("ij,jk,kl,lm->mi", *xs), F64)


def test_pairs_are_matmuls_not_outer_products():
    """A contraction must not materialise the (i, j, k) outer product."""
    g = vkml.make_graph(lambda a, b: vnp.einsum("ij,jk->ik", a, b),
                        vnp.zeros((3, 4)), vnp.zeros((4, 5)))
    text = str(g)
    assert text.count("= MatMul(") == 1 and "= Mul(" not in text, text
    g = vkml.make_graph(lambda *a: vnp.einsum("bi,ij,bj->b", *a),
                        vnp.zeros((2, 3)), vnp.zeros((3, 4)), vnp.zeros((2, 4)))
    assert str(g).count("= MatMul(") == 2 and "= Mul(" not in str(g), str(g)


@pytest.mark.parametrize("spec", ["ij,jk->ik", "bi,ij,bj->b", "ii->i", "...ij,...jk->...ik",
                                  "ij,ij->ij", ",i->i"])
def test_gradients_against_finite_differences(spec):
    xs = [vnp.asarray(data(s, F64)) for s in dict(CASES)[spec]]
    check_grads(lambda *a: vnp.einsum(spec, *a), xs, order=1)


def test_second_order_gradient():
    xs = [vnp.asarray(data(s, F64)) for s in dict(CASES)["bi,ij,bj->b"]]
    check_grads(lambda *a: vnp.einsum("bi,ij,bj->b", *a), xs, order=2, modes=("rev",))


def test_jit_and_vmap():
    a, b = data((2, 3, 4), F32), data((2, 4), F32)
    f = vkml.jit(lambda x, y: vnp.einsum("ij,j->i", x[0], y))
    check(f(vnp.asarray(a), vnp.asarray(b[0])), np.einsum("ij,j->i", a[0], b[0]).astype(F64), F32)
    v = vkml.vmap(lambda x, y: vnp.einsum("ij,j->i", x, y))
    check(v(vnp.asarray(a), vnp.asarray(b)), np.einsum("bij,bj->bi", a.astype(F64), b), F32)
    g = vkml.jit(vkml.grad(lambda x: vnp.sum(vnp.einsum("ii->i", x) ** 2)))
    m = data((3, 3), F32)
    check(g(vnp.asarray(m)), np.diag(2 * np.diag(m.astype(F64))), F32)


ERRORS = [
    ("ij,jk", [(3, 4)]),                   # fewer operands than terms
    ("ij", [(3, 4), (4, 5)]),              # more operands than terms
    ("ijk", [(3, 4)]),                     # too many subscripts for the rank
    ("i", [(3, 4)]),                       # too few, no ellipsis
    ("ij,jk", [(3, 4), (5, 6)]),           # inconsistent size of j
    ("ii", [(3, 4)]),                      # a diagonal of unequal dims
    ("i1", [(3, 4)]),                      # invalid characters
    ("i.j", [(3, 4)]),
    ("i-j", [(3,)]),
    ("i->->", [(3,)]),
    ("i->j", [(3,)]),                      # output index not in the inputs
    ("i->ii", [(3,)]),                     # repeated output index
    ("...ij->ij", [(2, 3, 4)]),            # ellipsis dims dropped from the output
    ("...,...", [(2,), (3,)]),             # ellipsis dims that do not broadcast
]


@pytest.mark.parametrize("spec,shapes", ERRORS, ids=[s for s, _ in ERRORS])
def test_errors_are_numpys_and_name_einsum(spec, shapes):
    xs = [np.ones(s, F32) for s in shapes]
    with pytest.raises(Exception) as np_err:
        np.einsum(spec, *xs)
    with pytest.raises(type(np_err.value), match="einsum"):
        vnp.einsum(spec, *[vnp.asarray(x) for x in xs])


def test_other_refusals():
    x = vnp.ones((3,))
    with pytest.raises(TypeError, match="einsum: out"):
        vnp.einsum("i", x, out=x)
    with pytest.raises(ValueError, match="einsum"):
        vnp.einsum("i")
    with pytest.raises(ValueError, match="einsum"):
        vnp.einsum("i", x, optimize="fastest")
    with pytest.raises(ValueError, match="einsum"):
        vnp.einsum("i,i", x, x, optimize=[(0, 5)])
    with pytest.raises(ValueError, match="einsum"):
        vnp.einsum(x, [0, 99])
