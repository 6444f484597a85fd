"""The scan LSTM example: the same values and gradients as its Python-loop form, and a
short run that learns the delayed copy.

Threshold: predicting 0 scores the inputs' variance, about 1.0; 101 steps at hidden 16,
length 12 measured a last loss near 0.01 (seed 0). 0.15 still fails any run whose
gradient through the scan is wrong (those stay near 1 or diverge)."""
import sys
from pathlib import Path

import numpy as np

import vkml
import vkml.numpy as vnp

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import lstm_scan  # noqa: E402


def test_scan_lstm_matches_the_unrolled_lstm():
    p = lstm_scan.init_params(vkml.random.key(1), 1, 8, 1, dtype=vnp.float64)
    rng = np.random.default_rng(0)
    xs, ys = lstm_scan.batch(rng, 7, 3, 2)
    xs, ys = xs.astype(vnp.float64), ys.astype(vnp.float64)

    def unrolled(p, xs, ys):
        return (((lstm_scan.lstm_unrolled(p, xs) @ p["w_out"] + p["b_out"]) - ys) ** 2).mean()
    for remat in (None, "sqrt"):
        v, g = vkml.value_and_grad(lstm_scan.loss)(p, xs, ys, remat)
        v2, g2 = vkml.value_and_grad(unrolled)(p, xs, ys)
        np.testing.assert_allclose(float(v), float(v2), rtol=1e-13)
        for k in p:
            np.testing.assert_allclose(np.asarray(g[k]), np.asarray(g2[k]), rtol=1e-11, atol=1e-14)


def test_a_short_run_learns_the_delayed_copy():
    _, losses = lstm_scan.train(steps=101, length=12, hidden=16, log=lambda *a: None)
    assert losses[-1] < 0.15, losses
    assert losses[-1] < losses[0] / 4, losses
