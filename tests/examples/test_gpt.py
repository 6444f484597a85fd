"""A tiny examples/gpt.py run (one block, width 32, 60 steps) inside the suite.

Threshold: an untrained model sits near the uniform loss ln(96) = 4.56 nats/char. Sixty
steps of this tiny configuration at lr 1e-2 measured held-out losses of 3.49, 3.47 and
3.40 for seeds 0, 1, 2 (training: 4.3 -> 2.8-3.1; the model learns the character
frequencies and the runs of spaces in Python source); 3.8 leaves room for variation of
the batches while failing a run whose gradients, clipping or optimiser are broken (those
stay near 4.5, or diverge).
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import gpt  # noqa: E402


def test_text_is_deterministic_ascii():
    a, b = gpt.load_text(20_000), gpt.load_text(20_000)
    assert a == b and len(a) == 20_000
    assert set(a) <= set(gpt.VOCAB)
    assert gpt.decode(gpt.encode(a[:500])) == a[:500]


def test_tiny_run_learns_and_samples(tmp_path):
    model, hist = gpt.train(steps=60, batch_size=8, context=16, layers=1, width=32, heads=2,
                            lr=1e-2, chars=50_000, seed=0, eval_every=20, progress=False,
                            log=lambda *a: None)
    first, last = np.mean(hist["loss"][:5]), np.mean(hist["loss"][-5:])
    assert first > 4.0, hist["loss"][:5]          # starts near uniform: the init is sane
    assert last < first - 0.8, (first, last)
    assert hist["val"][-1][1] < 3.8, hist["val"]
    assert hist["val"][-1][1] < hist["val"][0][1], hist["val"]
    text = gpt.sample(model, "def ", 12, temperature=0.8, seed=0)
    assert text.startswith("def ") and len(text) == 16 and set(text) <= set(gpt.VOCAB)
    assert text == gpt.sample(model, "def ", 12, temperature=0.8, seed=0)   # same key, same text
    gpt.plot(hist, tmp_path / "loss.png")
    assert (tmp_path / "loss.png").stat().st_size > 1000


def test_precision_flag_is_checked():
    from vkml import optim
    import pytest
    with pytest.raises(ValueError, match="precision 'int8'"):
        gpt.make_step(optim.sgd(0.1), "int8")
