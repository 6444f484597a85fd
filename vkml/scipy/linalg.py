"""scipy.linalg's factorisations and solves on vkml arrays, as `jax.scipy.linalg` has them
(see `vkml.linalg.factor`): batched over leading axes, differentiable, Vulkan kernels.

>>> import vkml.numpy as vnp
>>> from vkml.scipy import linalg
>>> linalg.solve_triangular(vnp.asarray([[2.0, 1.0], [0.0, 1.0]]), vnp.asarray([3.0, 1.0])).numpy().tolist()
[1.0, 1.0]
"""
from ..linalg.factor import (cho_factor, cho_solve, cholesky as _cholesky, det, expm, inv, lu, lu_factor,
                             lu_solve, solve as _solve, solve_triangular)

__all__ = ["solve_triangular", "cho_factor", "cho_solve", "lu_factor", "lu_solve", "lu", "cholesky",
           "det", "inv", "solve", "expm"]


def cholesky(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """scipy's cholesky: the upper factor U (a = U^T U) unless `lower`.

    >>> import vkml.numpy as vnp
    >>> cholesky(vnp.asarray([[4.0, 2.0], [2.0, 2.0]])).numpy().tolist()
    [[2.0, 1.0], [0.0, 1.0]]
    """
    return _cholesky(a, upper=not lower)


def solve(a, b, lower: bool = False, overwrite_a: bool = False, overwrite_b: bool = False,
          check_finite: bool = True, assume_a: str = "gen"):
    """scipy's solve: x with a x = b; b is (n,) or (n, k) (one dimension fewer than a: a
    vector), batch dims broadcast.

    >>> import vkml.numpy as vnp
    >>> solve(vnp.asarray([[2.0, 0.0], [0.0, 4.0]]), vnp.asarray([2.0, 2.0])).numpy().tolist()
    [1.0, 0.5]
    """
    import vkml.numpy as vnp
    a, b = vnp.asarray(a), vnp.asarray(b)
    if b.ndim == a.ndim - 1:
        return _solve(a, vnp.expand_dims(b, -1))[..., 0]
    return _solve(a, b)
