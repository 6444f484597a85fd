"""Module state written during a forward pass (BatchNorm's running statistics).

`assign(obj, name, value)` sets the attribute at once when value is concrete. Inside a
traced function the value is a tracer: the assignment is recorded on the trace, the
transform returns the value as an extra output, and writes the concrete result back
when it finishes (or re-records it on the enclosing trace when nested). So a module
updated inside `vkml.grad` or `vkml.jit` ends up with concrete, up-to-date state.
"""
from __future__ import annotations

from typing import Any


def assign(obj: Any, name: str, value: Any) -> None:
    """Set obj.name = value, deferring to the end of the enclosing transform if traced.

    >>> class S: pass
    >>> s = S(); assign(s, "x", 1); s.x
    1
    """
    t = getattr(value, "_trace", None)
    if t is None:
        object.__setattr__(obj, name, value)
        return
    effects = getattr(t, "effects", None)
    if effects is None:
        effects = t.effects = []
    # the last assignment to an attribute wins, as with plain setattr
    effects[:] = [e for e in effects if not (e[0] is obj and e[1] == name)]
    effects.append((obj, name, value))


def commit(effects: list, values: list) -> None:
    """Write back effect values computed by a transform (concrete or outer tracers)."""
    for (obj, name, _), v in zip(effects, values):
        assign(obj, name, v)
