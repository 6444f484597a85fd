"""Sizing helpers shared by the multi-pass families (reduce, scan, softmax)."""
from __future__ import annotations

ALIGN = 256   # byte alignment of scratch regions (covers any storage offset alignment)


def cdiv(a: int, b: int) -> int:
    """Ceiling division.

    >>> cdiv(7, 2), cdiv(8, 2)
    (4, 4)
    """
    return -(-a // b)


def round_up(n: int) -> int:
    """n bytes rounded up to a whole number of ALIGN (at least one).

    >>> round_up(0), round_up(257)
    (256, 512)
    """
    return cdiv(max(n, 1), ALIGN) * ALIGN
