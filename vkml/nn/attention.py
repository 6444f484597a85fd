"""Scaled dot-product attention, PyTorch's `F.scaled_dot_product_attention`.

One batched matmul for the scores, one elementwise chain (scale, mask) that fuses into the
softmax's input, the registry's Softmax, and one batched matmul with the values: the same
few kernels whatever the mask, and everything differentiated by the ordinary rules.

>>> import vkml.numpy as vnp
>>> q = vnp.ones((2, 3, 4))
>>> scaled_dot_product_attention(q, q, q, is_causal=True).shape
(2, 3, 4)
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import numpy as vnp
from ..array import Array
from ..trace import dtypes as dt
from ..trace.dtypes import DTypeError
from ..trace.shapes import ShapeError, broadcast_shapes

__all__ = ["scaled_dot_product_attention"]


def _causal(L: int, S: int) -> Array:
    """Bool (L, S), True where query i may attend key j <= i (aligned top-left, as torch)."""
    return vnp.asarray(np.tril(np.ones((L, S), dtype=bool)))


def attention_weights(query: Array, key: Array, attn_mask: Any = None, is_causal: bool = False,
                      scale: float | None = None, name: str = "scaled_dot_product_attention") -> Array:
    """softmax(q k^T * scale + mask) over the keys: (..., L, S). A bool mask keeps the
    pairs where it is True; a float mask is added to the scores."""
    from .functional import softmax
    L, E, S = query.shape[-2], query.shape[-1], key.shape[-2]
    s = 1.0 / math.sqrt(E) if scale is None else float(scale)
    scores = vnp.matmul(query, vnp.swapaxes(key, -1, -2)) * s
    keep = _causal(L, S) if is_causal else None
    if attn_mask is not None:
        m = vnp.asarray(attn_mask)
        try:
            broadcast_shapes(name, m.shape, scores.shape)
        except ShapeError as e:
            raise ShapeError(f"{name}: attn_mask of shape {m.shape} does not broadcast to the "
                             f"scores' shape {scores.shape} (..., L, S)") from e
        if m.dtype == dt.bool_:
            keep = m if keep is None else vnp.logical_and(keep, m)
        elif dt.is_float(m.dtype):
            scores = scores + m.astype(scores.dtype)
        else:
            raise DTypeError(f"{name}: attn_mask must be bool (True: attend) or float (added to "
                             f"the scores), got {m.dtype}")
    if keep is not None:
        scores = vnp.where(keep, scores, -math.inf)
    return softmax(scores, axis=-1)


def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None, enable_gqa: bool = False, *,
                                 dropout_key: Any = None) -> Array:
    """softmax(query @ key^T * scale + mask) @ value, as torch.

    query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev); leading axes
    broadcast. scale defaults to 1 / sqrt(E). attn_mask: bool (True: take part) or float
    (added to the scores), broadcasting to (..., L, S). is_causal masks key j > query i
    (top-left aligned) and combines with attn_mask. dropout_p > 0 drops attention weights
    and needs `dropout_key=` (a vkml.random key; torch draws from its global generator).
    enable_gqa lets key and value have fewer heads (axis -3) than query, a divisor of
    them: each key/value head serves a group of consecutive query heads.

    >>> q = vnp.asarray([[[1.0, 0.0], [0.0, 1.0]]])
    >>> scaled_dot_product_attention(q, q, q, is_causal=True).numpy()[0, 0].tolist()
    [1.0, 0.0]
    """
    from .functional import _common_float, dropout
    name = "scaled_dot_product_attention"
    q, k, v = _common_float(name, query, key, value)
    for nm, a in (("query", q), ("key", k), ("value", v)):
        if a.ndim < 2:
            raise ShapeError(f"{name}: {nm} must be (..., seq, features), got shape {a.shape}")
    if enable_gqa and q.ndim >= 3 and k.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if hk < 1 or hq % hk or v.shape[-3] != hk:
            raise ShapeError(f"{name}: enable_gqa needs the query's heads ({hq}) to be a multiple "
                             f"of the key's and value's ({hk}, {v.shape[-3]})")
        k, v = vnp.repeat(k, hq // hk, axis=-3), vnp.repeat(v, hq // hk, axis=-3)
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"{name}: query {q.shape}, key {k.shape} and value {v.shape} must be "
                         f"(..., L, E), (..., S, E) and (..., S, Ev)")
    w = attention_weights(q, k, attn_mask, is_causal, scale, name)
    if dropout_p > 0.0:
        if dropout_key is None:
            raise ValueError(f"{name}: dropout_p={dropout_p} needs dropout_key= (a vkml.random "
                             f"key); pass dropout_p=0.0 in evaluation")
        w = dropout(w, dropout_p, dropout_key)
    return vnp.matmul(w, v)
