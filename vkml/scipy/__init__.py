"""scipy's names on vkml arrays (so far `vkml.scipy.special`), as `jax.scipy` has them.

>>> from vkml.scipy import special
>>> round(float(special.expit(0.0)), 3)
0.5
"""
from . import special

__all__ = ["special"]
