"""scipy's names on vkml arrays (`vkml.scipy.special`, `vkml.scipy.linalg`), as `jax.scipy` has them.

>>> from vkml.scipy import special
>>> round(float(special.expit(0.0)), 3)
0.5
"""
from . import linalg, special

__all__ = ["linalg", "special"]
