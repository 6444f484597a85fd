"""The committed operator pages are exactly what the generator writes from the registry."""
from pathlib import Path

from vkml.trace import docgen
from vkml.trace.ops import SPECS, Grad

ROOT = Path(__file__).resolve().parents[2] / "docs" / "ops"


def test_committed_pages_match_the_generator():
    want = docgen.pages()
    have = {p.name: p.read_text() for p in ROOT.glob("*.md")}
    assert set(have) == set(want), "run: python -m vkml.trace.docgen"
    stale = [k for k in want if have[k] != want[k]]
    assert not stale, f"stale pages {stale}; run: python -m vkml.trace.docgen"


def test_pages_state_gradient_group_and_reason():
    for k, sp in SPECS.items():
        text = docgen.page(k)
        assert sp.grad.value in text or sp.grad is Grad.RULE
        assert sp.extra["shape"] in text and sp.doc in text
