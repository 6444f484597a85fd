"""jax.lax's names on vkml arrays: control flow (`control`) and top_k.

>>> import vkml.numpy as vnp
>>> [a.numpy().tolist() for a in top_k(vnp.asarray([[1, 5, 3]]), 2)]
[[[5, 3]], [[1, 2]]]
"""
from __future__ import annotations

from ..sorting import top_k
from .control import associative_scan, cond, fori_loop, map, scan, switch, while_loop

__all__ = ["top_k", "scan", "fori_loop", "while_loop", "cond", "switch", "map", "associative_scan"]
