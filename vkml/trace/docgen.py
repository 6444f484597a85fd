"""Operator pages generated from the registry: docs/ops/<Op>.md and docs/ops/index.md.

    python -m vkml.trace.docgen          # rewrite docs/ops
    python -m vkml.trace.docgen --check  # exit 1 if the committed pages differ

Everything on a page is read from `SPECS`; nothing about an operator is written here.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from . import dtypes as dt
from .ops import SPECS, Grad, OpKind

_GROUP = {
    Grad.RULE: "differentiable",
    Grad.LEAF: "leaves and creation",
    Grad.BOOLEAN: "boolean results",
    Grad.DISCONTINUOUS: "discontinuous or integral",
    Grad.INTEGER: "integer operators",
}


def _dtypes(sp) -> str:
    return ", ".join(str(np.dtype(d)) for d in sp.dtypes)


def _low(sp) -> str | None:
    """How the operator treats float16 and bfloat16 (None where it takes neither)."""
    if not any(dt.is_low(d) for d in sp.dtypes):
        return None
    if sp.kernel == "elementwise":
        return ("computed in float32 from the 16-bit values, the result rounded once to the "
                "16-bit dtype (round to nearest even)")
    if sp.kernel in ("fill", None):
        return "stored as 16-bit values (the value rounded to nearest even)"
    return ("computed by the float32 kernel (`vkml/vulkan/widen.py`): operands converted "
            "exactly to float32, float32 accumulation, the result rounded once to the 16-bit dtype")


def _kernel_path(kernel: str) -> str:
    """The family's module, or its package where the family is one (`lower/matmul/`)."""
    pkg = Path(__file__).resolve().parents[1] / "vulkan" / "lower" / kernel
    return f"`vkml/vulkan/lower/{kernel}/`" if pkg.is_dir() else f"`vkml/vulkan/lower/{kernel}.py`"


def page(kind: OpKind) -> str:
    """The markdown page of one operator."""
    sp = SPECS[kind]
    arity = "variadic (one or more)" if sp.arity is None else str(sp.arity)
    attrs = ", ".join(f"`{a}`" for a in sp.attrs) or "none"
    sig = f"{sp.name}({', '.join(['x%d' % i for i in range(sp.arity or 1)] + (['...'] if sp.arity is None else []))}"
    sig += (", " if sp.attrs else "") + ", ".join(sp.attrs) + ")"
    grad = ("has a reverse-mode rule (`vkml/transforms/rules.py`), built from forward operators"
            if sp.grad is Grad.RULE else f"no rule: {sp.grad.value}")
    lines = [
        f"# {sp.name}",
        "",
        sp.doc,
        "",
        "| | |",
        "|---|---|",
        f"| signature | `{sig}` |",
        f"| operands | {arity} |",
        f"| attributes | {attrs} |",
        f"| shape rule | {sp.extra['shape']} |",
        f"| dtypes | {_dtypes(sp)} |",
    ] + ([f"| float16, bfloat16 | {_low(sp)} |"] if _low(sp) else []) + [
        f"| kernel | {_kernel_path(sp.kernel) if sp.kernel else 'none (bound to a buffer)'} |",
        f"| gradient group | {_GROUP[sp.grad]} |",
        f"| gradient | {grad} |",
        "",
        "Generated from `vkml/trace/ops.py` by `python -m vkml.trace.docgen`; do not edit.",
        "",
    ]
    return "\n".join(lines)


def index() -> str:
    """The coverage table."""
    n_rule = sum(s.grad is Grad.RULE for s in SPECS.values())
    lines = [
        "# Operators",
        "",
        f"{len(SPECS)} operators; {n_rule} have a gradient rule. Every operator without one is "
        f"in a group where no gradient exists (none is a gap).",
        "",
        "| operator | family | kernel | dtypes | gradient group |",
        "|---|---|---|---|---|",
    ]
    for k, sp in SPECS.items():
        lines.append(f"| [{sp.name}]({sp.name}.md) | {sp.family} | {sp.kernel or '-'} | "
                     f"{_dtypes(sp)} | {_GROUP[sp.grad]} |")
    lines += ["", "Generated from `vkml/trace/ops.py` by `python -m vkml.trace.docgen`; do not edit.", ""]
    return "\n".join(lines)


def pages() -> dict[str, str]:
    """file name -> content, for every page."""
    out = {f"{k.value}.md": page(k) for k in SPECS}
    out["index.md"] = index()
    return out


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[2] / "docs" / "ops"
    want = pages()
    if "--check" in argv:
        have = {p.name: p.read_text() for p in root.glob("*.md")} if root.exists() else {}
        bad = sorted(set(want) ^ set(have) | {k for k in want if have.get(k) != want[k]})
        for b in bad:
            print(f"docs/ops/{b} is out of date")
        return 1 if bad else 0
    root.mkdir(parents=True, exist_ok=True)
    for p in root.glob("*.md"):
        if p.name not in want:
            p.unlink()
    for name, text in want.items():
        (root / name).write_text(text)
    print(f"wrote {len(want)} pages to {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
