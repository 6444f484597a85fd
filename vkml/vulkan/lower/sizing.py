"""Sizing helpers shared by the multi-pass families (reduce, scan, softmax)."""
from __future__ import annotations

ALIGN = 256   # byte alignment of scratch regions (covers any storage offset alignment)


def device_kind(override: str | None = None) -> str:
    """The device profile's layout, 'cpu' (lanes stream contiguous runs) or 'gpu'
    (threads interleave loads); a family's STRATEGY override wins. Transitional: families
    read `ctx.profile.layout` (reduce does); this goes once scan, softmax and fusion do."""
    if override is not None:
        return override
    from ..device import get
    return get().profile.layout


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(-a // b)


def round_up(n: int) -> int:
    """n bytes rounded up to a whole number of ALIGN (at least one)."""
    return cdiv(max(n, 1), ALIGN) * ALIGN
