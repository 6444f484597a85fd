"""jax.lax's names on vkml arrays (so far only `top_k`).

>>> import vkml.numpy as vnp
>>> [a.numpy().tolist() for a in top_k(vnp.asarray([[1, 5, 3]]), 2)]
[[[5, 3]], [[1, 2]]]
"""
from __future__ import annotations

from ..sorting import top_k

__all__ = ["top_k"]
