"""Linear algebra on vkml arrays: `vkml.numpy.linalg` and `vkml.scipy.linalg` read their
names from here. Factorisations and solves are in `factor`.

>>> import vkml.numpy as vnp
>>> float(vnp.linalg.det(vnp.asarray([[2.0, 1.0], [1.0, 3.0]])))
5.0
"""
from .factor import (SlogdetResult, cho_factor, cho_solve, cholesky, det, inv, lu, lu_factor,
                     lu_solve, matrix_power, slogdet, solve, solve_triangular)

# numpy.linalg's names (vkml.numpy.linalg is this module)
__all__ = ["cholesky", "det", "inv", "matrix_power", "slogdet", "solve", "SlogdetResult"]
