"""`vkml.numpy.linalg`: NumPy's linear-algebra names on vkml arrays, as `jax.numpy.linalg`.

This branch holds the spectral half (vkml/linalg/spectral.py): decompositions by Jacobi
and Householder kernels, and what composes from them.

>>> import vkml.numpy as vnp
>>> round(float(vnp.linalg.norm(vnp.asarray([3.0, 4.0]))), 4)
5.0
"""
from .spectral import (EighResult, QRResult, SVDResult, cond, eigh, eigvalsh, lstsq,  # noqa: F401
                       matrix_rank, multi_dot, norm, pinv, qr, svd)

__all__ = ["cond", "eigh", "eigvalsh", "lstsq", "matrix_rank", "multi_dot", "norm", "pinv", "qr",
           "svd", "EighResult", "QRResult", "SVDResult"]
