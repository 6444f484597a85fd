"""The results: a table of times per target and vkml's ratios, as text and as Markdown,
and the per-device sections of bench/RESULTS.md."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Row:
    """One workload's measurements: seconds per target (absent: n/a), and notes."""
    label: str
    seconds: dict = field(default_factory=dict)
    flops: float | None = None
    nbytes: float | None = None
    notes: list = field(default_factory=list)


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 10:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_rate(r: Row, s: float) -> str:
    if r.flops:
        v = r.flops / s
        return f"{v / 1e12:.2f} TF/s" if v >= 1e12 else f"{v / 1e9:.1f} GF/s"
    if r.nbytes:
        return f"{r.nbytes / s / 1e9:.1f} GB/s"
    return ""


def _cell(r: Row, name: str) -> str:
    s = r.seconds.get(name)
    if s is None:
        return "n/a"
    rate = fmt_rate(r, s)
    return f"{fmt_time(s)} ({rate})" if rate else fmt_time(s)


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{a / b:.2f}x"


def grid(rows: list[Row], names: list[str], base: str = "vkml") -> list[list[str]]:
    """Header and body cells: times per target, then base time / other time."""
    others = [n for n in names if n != base]
    head = ["workload", *names, *[f"{base}/{o}" for o in others]]
    body = [[r.label, *[_cell(r, n) for n in names],
             *[_ratio(r.seconds.get(base), r.seconds.get(o)) for o in others]] for r in rows]
    return [head, *body]


def table(rows: list[Row], names: list[str], base: str = "vkml") -> str:
    """A plain-text table; ratio columns are base time / other time (> 1: base slower).

    >>> print(table([Row("add", {"vkml": 0.002, "numpy": 0.001})], ["vkml", "numpy"]))
    ... # doctest: +NORMALIZE_WHITESPACE
    workload  vkml     numpy    vkml/numpy
    add       2.00 ms  1.00 ms  2.00x
    """
    g = grid(rows, names, base)
    widths = [max(len(x[i]) for x in g) for i in range(len(g[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in g)


def markdown(rows: list[Row], names: list[str], base: str = "vkml") -> str:
    """The same table in Markdown."""
    g = grid(rows, names, base)
    lines = ["| " + " | ".join(g[0]) + " |", "|" + "---|" * len(g[0])]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in line) + " |" for line in g[1:]]
    return "\n".join(lines)


def merge_section(path: Path, key: str, body: str) -> None:
    """Write `## key` + body into the Markdown file at path, replacing an earlier section
    with the same heading and keeping every other section (other devices) as it was."""
    text = path.read_text() if path.exists() else ""
    head = f"## {key}"
    parts = re.split(r"(?m)^(?=## )", text)
    pre = parts[0] if parts and not parts[0].startswith("## ") else ""
    sections = [p for p in parts if p.startswith("## ")]
    new = f"{head}\n\n{body.strip()}\n\n"
    for i, s in enumerate(sections):
        if s.splitlines()[0].strip() == head:
            sections[i] = new
            break
    else:
        sections.append(new)
    if not pre.strip():
        pre = ("# vkml benchmark results\n\n`python -m bench` writes one section per device (the "
               "newest run on that device replaces its section; other devices' sections stay).\n"
               "Ratios are vkml time / other time: above 1, vkml is slower.\n\n")
    path.write_text(pre + "".join(s if s.endswith("\n\n") else s.rstrip("\n") + "\n\n"
                                  for s in sections).rstrip("\n") + "\n")
