"""The results table: times per framework, then vkml's time over each other framework's."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Row:
    """One workload's measurements: seconds per framework (None: n/a) and notes."""
    label: str
    seconds: dict = field(default_factory=dict)
    flops: float | None = None
    notes: list = field(default_factory=list)


def _time(s: float | None, flops: float | None) -> str:
    if s is None:
        return "n/a"
    t = f"{s * 1e3:.2f} ms" if s < 10 else f"{s:.2f} s"
    if flops:
        t += f" ({flops / s / 1e9:.1f} GF/s)"
    return t


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{a / b:.2f}x"


def table(rows: list[Row], names: list[str], base: str = "vkml") -> str:
    """A plain-text table; ratio columns are base time / other time (> 1: base slower).

    >>> print(table([Row("add", {"vkml": 0.002, "numpy": 0.001})], ["vkml", "numpy"]))
    ... # doctest: +NORMALIZE_WHITESPACE
    workload  vkml     numpy    vkml/numpy
    add       2.00 ms  1.00 ms  2.00x
    """
    others = [n for n in names if n != base]
    head = ["workload", *names, *[f"{base}/{o}" for o in others]]
    body = [[r.label, *[_time(r.seconds.get(n), r.flops) for n in names],
             *[_ratio(r.seconds.get(base), r.seconds.get(o)) for o in others]] for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [head, *body]]
    return "\n".join(lines)
