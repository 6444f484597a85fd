"""torch.nn's recurrent layers: LSTMCell, GRUCell, LSTM, GRU (num_layers, batch_first,
bidirectional, dropout between layers).

Parameters are torch's (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, and the
`_reverse` ones; gate order i, f, g, o for LSTM and r, z, n for GRU), initialised
U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) as torch does. The input projections of
every time step are one matmul; the recurrence is a Python loop over time (each step a
small matmul and one fused elementwise chain), which jit records once.

>>> import vkml.numpy as vnp
>>> out, (h, c) = LSTM(3, 5, num_layers=2)(vnp.ones((7, 2, 3)))
>>> out.shape, h.shape, c.shape
((7, 2, 5), (2, 2, 5), (2, 2, 5))
"""
from __future__ import annotations

import math
from typing import Any

from .. import numpy as vnp
from .. import random as vr
from ..array import Array
from ..trace import dtypes as dt
from ..trace.shapes import ShapeError
from . import functional as F
from .base import Module
from .modules import _key, _param, _positive

__all__ = ["LSTMCell", "GRUCell", "LSTM", "GRU"]


def _uniform(key: Array, shape: tuple, hidden: int, dtype) -> Array:
    b = 1.0 / math.sqrt(hidden) if hidden > 0 else 0.0
    return _param(vr.uniform(key, shape, dtype, minval=-b, maxval=b))


def _lstm_step(gx: Array, h: Array, c: Array, w_hh: Array, b_hh: Array | None):
    """One LSTM step from the input's projection gx (N, 4H) (its bias included)."""
    g = gx + F.linear(h, w_hh, b_hh)
    i, f, gg, o = vnp.split(g, 4, axis=-1)
    c = F.sigmoid(f) * c + F.sigmoid(i) * vnp.tanh(gg)
    return F.sigmoid(o) * vnp.tanh(c), c


def _gru_step(gx: Array, h: Array, w_hh: Array, b_hh: Array | None) -> Array:
    """One GRU step: n = tanh(x W_in + b_in + r * (h W_hn + b_hn)), h' = (1 - z) n + z h."""
    gh = F.linear(h, w_hh, b_hh)
    xr, xz, xn = vnp.split(gx, 3, axis=-1)
    hr, hz, hn = vnp.split(gh, 3, axis=-1)
    r, z = F.sigmoid(xr + hr), F.sigmoid(xz + hz)
    n = vnp.tanh(xn + r * hn)
    return n + z * (h - n)


class _Cell(Module):
    _gates, _cls = 0, ""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, *, key: Any = None,
                 dtype=dt.float32):
        self.input_size = _positive(self._cls, "input_size", input_size)
        self.hidden_size = _positive(self._cls, "hidden_size", hidden_size)
        G, H = self._gates, hidden_size
        ks = vr.split(_key(key), 4)
        self.weight_ih = _uniform(ks[0], (G * H, input_size), H, dtype)
        self.weight_hh = _uniform(ks[1], (G * H, H), H, dtype)
        self.bias_ih = _uniform(ks[2], (G * H,), H, dtype) if bias else None
        self.bias_hh = _uniform(ks[3], (G * H,), H, dtype) if bias else None

    def _input(self, x: Any) -> tuple[Array, bool]:
        x = vnp.asarray(x)
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ShapeError(f"{self._cls}: input must be (N, {self.input_size}) or "
                             f"({self.input_size},), got shape {x.shape}")
        return (vnp.expand_dims(x, 0), True) if x.ndim == 1 else (x, False)

    def _state(self, s: Any, x: Array, unbatched: bool) -> Array:
        if s is None:
            return vnp.zeros((x.shape[0], self.hidden_size), self.weight_hh.dtype)
        s = vnp.asarray(s)
        s = vnp.expand_dims(s, 0) if unbatched else s
        if s.shape != (x.shape[0], self.hidden_size):
            raise ShapeError(f"{self._cls}: hidden state must be ({x.shape[0]}, {self.hidden_size})"
                             f"{' unbatched: (' + str(self.hidden_size) + ',)' if unbatched else ''}, "
                             f"got shape {s.shape}")
        return s


class LSTMCell(_Cell):
    """One LSTM step: (input (N, I), (h, c)) -> (h', c'); hx None starts from zeros.

    >>> h, c = LSTMCell(3, 4)(vnp.ones((2, 3)))
    >>> h.shape, c.shape
    ((2, 4), (2, 4))
    """
    _gates, _cls = 4, "LSTMCell"

    def forward(self, input: Any, hx: Any = None) -> tuple[Array, Array]:
        x, unb = self._input(input)
        h0, c0 = (None, None) if hx is None else hx
        h, c = self._state(h0, x, unb), self._state(c0, x, unb)
        h, c = _lstm_step(F.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh)
        return (h[0], c[0]) if unb else (h, c)


class GRUCell(_Cell):
    """One GRU step: (input (N, I), h) -> h'; hx None starts from zeros.

    >>> GRUCell(3, 4)(vnp.ones((2, 3))).shape
    (2, 4)
    """
    _gates, _cls = 3, "GRUCell"

    def forward(self, input: Any, hx: Any = None) -> Array:
        x, unb = self._input(input)
        h = self._state(hx, x, unb)
        h = _gru_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh)
        return h[0] if unb else h


class _RNN(Module):
    _gates, _cls = 0, ""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, *, key: Any = None, dtype=dt.float32):
        cls = self._cls
        if proj_size:
            raise NotImplementedError(f"{cls}: proj_size={proj_size} is not supported (only 0)")
        self.input_size = _positive(cls, "input_size", input_size)
        self.hidden_size = _positive(cls, "hidden_size", hidden_size)
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"{cls}: num_layers {num_layers!r} must be a positive int")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{cls}: dropout {dropout} must be in [0, 1]")
        self.num_layers, self.bias, self.batch_first = num_layers, bool(bias), bool(batch_first)
        self.dropout, self.bidirectional = float(dropout), bool(bidirectional)
        D, G, H = 2 if bidirectional else 1, self._gates, hidden_size
        keys = iter(vr.split(_key(key), 4 * num_layers * D))
        for layer in range(num_layers):
            n_in = input_size if layer == 0 else H * D
            for sfx in ("", "_reverse")[:D]:
                # torch's order of the state dict: w_ih, w_hh, b_ih, b_hh per layer and direction
                self.__dict__[f"weight_ih_l{layer}{sfx}"] = _uniform(next(keys), (G * H, n_in), H, dtype)
                self.__dict__[f"weight_hh_l{layer}{sfx}"] = _uniform(next(keys), (G * H, H), H, dtype)
                kb1, kb2 = next(keys), next(keys)
                if bias:
                    self.__dict__[f"bias_ih_l{layer}{sfx}"] = _uniform(kb1, (G * H,), H, dtype)
                    self.__dict__[f"bias_hh_l{layer}{sfx}"] = _uniform(kb2, (G * H,), H, dtype)

    def _p(self, name: str, layer: int, sfx: str) -> Array | None:
        return self.__dict__.get(f"{name}_l{layer}{sfx}")

    def _states(self, hx: Any, N: int, unbatched: bool, what: str) -> list:
        D = 2 if self.bidirectional else 1
        want = (self.num_layers * D, N, self.hidden_size)
        if hx is None:
            return [vnp.zeros(want[1:], self.weight_hh_l0.dtype)] * want[0]
        h = vnp.asarray(hx)
        h = vnp.expand_dims(h, 1) if unbatched else h
        if h.shape != want:
            raise ShapeError(f"{self._cls}: {what} must have shape {want if not unbatched else (want[0], want[2])}, "
                             f"got {vnp.asarray(hx).shape}")
        return [h[i] for i in range(want[0])]

    def _run(self, input: Any, hx: Any, key: Any):
        x = vnp.asarray(input)
        if not dt.is_float(x.dtype):
            x = x.astype(dt.float32)
        unbatched = x.ndim == 2
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            raise ShapeError(f"{self._cls}: input must be (L, N, {self.input_size}) (batch_first: "
                             f"(N, L, {self.input_size})) or unbatched (L, {self.input_size}), got "
                             f"shape {x.shape}")
        if unbatched:
            x = vnp.expand_dims(x, 1)
        elif self.batch_first:
            x = vnp.swapaxes(x, 0, 1)
        T, N = x.shape[:2]
        lstm = self._gates == 4
        if lstm:
            h0, c0 = (None, None) if hx is None else hx
            hs, cs = self._states(h0, N, unbatched, "h_0"), self._states(c0, N, unbatched, "c_0")
        else:
            hs, cs = self._states(hx, N, unbatched, "h_0"), None
        drop = self.training and self.dropout > 0.0 and self.num_layers > 1
        if drop and key is None:
            raise ValueError(f"{self._cls}(dropout={self.dropout}) in train mode needs key= (a "
                             f"vkml.random key), or call .eval()")
        dkeys = iter(vr.split(key, self.num_layers)) if drop else None
        D = 2 if self.bidirectional else 1
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            if layer and drop:
                x = F.dropout(x, self.dropout, next(dkeys))
            outs = []
            for d, sfx in enumerate(("", "_reverse")[:D]):
                i = layer * D + d
                w_hh, b_hh = self._p("weight_hh", layer, sfx), self._p("bias_hh", layer, sfx)
                gx = F.linear(x, self._p("weight_ih", layer, sfx), self._p("bias_ih", layer, sfx))
                h, c = hs[i], None if cs is None else cs[i]
                steps = [None] * T
                for t in (range(T - 1, -1, -1) if d else range(T)):
                    if lstm:
                        h, c = _lstm_step(gx[t], h, c, w_hh, b_hh)
                    else:
                        h = _gru_step(gx[t], h, w_hh, b_hh)
                    steps[t] = h
                outs.append(vnp.stack(steps))
                h_n.append(h)
                c_n.append(c)
            x = outs[0] if D == 1 else vnp.concatenate(outs, axis=-1)
        out = x[:, 0] if unbatched else (vnp.swapaxes(x, 0, 1) if self.batch_first else x)
        fin = lambda s: vnp.stack(s)[:, 0] if unbatched else vnp.stack(s)
        return out, fin(h_n), (fin(c_n) if lstm else None)


class LSTM(_RNN):
    """Multi-layer LSTM over (L, N, input_size) (batch_first: (N, L, input_size)); returns
    (output, (h_n, c_n)) with output (L, N, D * hidden_size) and h_n, c_n
    (D * num_layers, N, hidden_size), D = 2 when bidirectional. Dropout between layers in
    train mode needs `key=`.

    >>> out, (h, c) = LSTM(3, 4, bidirectional=True, batch_first=True)(vnp.ones((2, 5, 3)))
    >>> out.shape, h.shape
    ((2, 5, 8), (2, 2, 4))
    """
    _gates, _cls = 4, "LSTM"

    def forward(self, input: Any, hx: Any = None, *, key: Any = None):
        out, h, c = self._run(input, hx, key)
        return out, (h, c)


class GRU(_RNN):
    """Multi-layer GRU; returns (output, h_n), shapes as LSTM's.

    >>> out, h = GRU(3, 4, num_layers=2)(vnp.ones((5, 2, 3)))
    >>> out.shape, h.shape
    ((5, 2, 4), (2, 2, 4))
    """
    _gates, _cls = 3, "GRU"

    def forward(self, input: Any, hx: Any = None, *, key: Any = None):
        out, h, _ = self._run(input, hx, key)
        return out, h
