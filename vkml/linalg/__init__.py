"""Linear algebra on vkml arrays: `vkml.numpy.linalg` (this module) and `vkml.scipy.linalg`
read their names from here, as `jax.numpy.linalg`. Factorisations and solves are in
`factor`; the spectral decompositions (Jacobi and Householder kernels) and what composes
from them in `spectral`.

>>> import vkml.numpy as vnp
>>> float(vnp.linalg.det(vnp.asarray([[2.0, 1.0], [1.0, 3.0]])))
5.0
>>> round(float(vnp.linalg.norm(vnp.asarray([3.0, 4.0]))), 4)
5.0
"""
from .factor import (SlogdetResult, cho_factor, cho_solve, cholesky, det, inv, lu, lu_factor,
                     lu_solve, matrix_power, slogdet, solve, solve_triangular)
from .spectral import (EighResult, QRResult, SVDResult, cond, eigh, eigvalsh, lstsq,  # noqa: F401
                       matrix_rank, multi_dot, norm, pinv, qr, svd)

# numpy.linalg's names (vkml.numpy.linalg is this module)
__all__ = ["cholesky", "det", "inv", "matrix_power", "slogdet", "solve", "SlogdetResult",
           "cond", "eigh", "eigvalsh", "lstsq", "matrix_rank", "multi_dot", "norm", "pinv", "qr",
           "svd", "EighResult", "QRResult", "SVDResult"]
