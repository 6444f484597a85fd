"""The benchmark workloads: the same computation written once per framework.

A workload's `setups` map a framework name to setup(module) -> run, where run() computes
the result and does not return before it exists (vkml executes synchronously, so its
`block_until_ready()` is immediate; JAX's blocks; PyTorch and NumPy on the CPU are
synchronous). Inputs are built once, outside the timed call, on each framework's device.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

MIB = 1 << 20


@dataclass
class Workload:
    """One table row."""
    name: str
    label: str
    setups: dict[str, Callable[[object], Callable[[], object]]] = field(default_factory=dict)
    flops: float | None = None         # per run, for a GFLOP/s column
    rtol: float = 1e-5                 # agreement with NumPy's result that counts as correct
    atol: float = 1e-5


def to_numpy(name: str, value) -> np.ndarray:
    """A framework's result as a NumPy array (for the agreement check)."""
    if name == "torch":
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _vkml_ready(a):
    return a.block_until_ready()


def _jax_jit(f):
    import jax
    g = jax.jit(f)
    return lambda *a: g(*a).block_until_ready()


def _chain(m, x):
    """tanh(2x+1)*exp(-x)+sqrt(x+1)-x*x in any NumPy-like module m."""
    return m.tanh(2 * x + 1) * m.exp(-x) + m.sqrt(x + 1) - x * x


def elementwise(scale: float) -> Workload:
    n = int(16 * MIB * scale)
    x = np.random.default_rng(0).random(n, dtype=np.float32)   # in [0, 1): sqrt(x+1) is real

    def jax_setup(jax):
        import jax.numpy as jnp
        xj = jnp.asarray(x)
        run = _jax_jit(lambda v: _chain(jnp, v))
        return lambda: run(xj)

    def torch_setup(torch):
        xt = torch.from_numpy(x)
        return lambda: _chain(torch, xt)

    def vkml_setup(vnp):
        xv = vnp.asarray(x)
        return lambda: _vkml_ready(_chain(vnp, xv))

    return Workload("elementwise", f"tanh(2x+1)*exp(-x)+sqrt(x+1)-x*x, {n / MIB:g}M f32",
                    {"vkml": vkml_setup, "numpy": lambda np_: (lambda: _chain(np_, x)),
                     "jax": jax_setup, "torch": torch_setup}, rtol=1e-5, atol=1e-5)


def total(scale: float) -> Workload:
    n = int(16 * MIB * scale)
    x = np.random.default_rng(1).random(n, dtype=np.float32)

    def jax_setup(jax):
        import jax.numpy as jnp
        xj = jnp.asarray(x)
        run = _jax_jit(jnp.sum)
        return lambda: run(xj)

    def torch_setup(torch):
        xt = torch.from_numpy(x)
        return lambda: torch.sum(xt)

    def vkml_setup(vnp):
        xv = vnp.asarray(x)
        return lambda: _vkml_ready(vnp.sum(xv))

    # float32 sums of 16M values in [0, 1) differ by summation order: about 1e-6 relative
    return Workload("sum", f"sum, {n / MIB:g}M f32",
                    {"vkml": vkml_setup, "numpy": lambda np_: (lambda: np_.sum(x)),
                     "jax": jax_setup, "torch": torch_setup}, rtol=1e-4, atol=0)


def matmul(scale: float) -> Workload:
    n = 1024
    rng = np.random.default_rng(2)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)

    def jax_setup(jax):
        import jax.numpy as jnp
        aj, bj = jnp.asarray(a), jnp.asarray(b)
        run = _jax_jit(jnp.matmul)
        return lambda: run(aj, bj)

    def torch_setup(torch):
        at, bt = torch.from_numpy(a), torch.from_numpy(b)
        return lambda: at @ bt

    def vkml_setup(vnp):
        av, bv = vnp.asarray(a), vnp.asarray(b)
        return lambda: _vkml_ready(av @ bv)

    return Workload("matmul", f"matmul {n}x{n} @ {n}x{n} f32",
                    {"vkml": vkml_setup, "numpy": lambda np_: (lambda: a @ b),
                     "jax": jax_setup, "torch": torch_setup},
                    flops=2.0 * n ** 3, rtol=1e-4, atol=2e-3)


def conv2d(scale: float) -> Workload:
    """3x3 convolution, padding 1, 32 -> 32 channels on one 64x64 image: vkml and NumPy
    as im2col + matmul, JAX and PyTorch with their own convolution."""
    C, H, W, O, KH, KW = 32, 64, 64, 32, 3, 3
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, C, H, W), dtype=np.float32)
    w = rng.standard_normal((O, C, KH, KW), dtype=np.float32)

    def numpy_run():
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = np.lib.stride_tricks.sliding_window_view(xp, (KH, KW), axis=(2, 3))  # 1,C,H,W,KH,KW
        cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(C * KH * KW, H * W)
        return (w.reshape(O, -1) @ cols).reshape(1, O, H, W)

    def jax_setup(jax):
        import jax.numpy as jnp
        xj, wj = jnp.asarray(x), jnp.asarray(w)
        run = _jax_jit(lambda a, b: jax.lax.conv_general_dilated(a, b, (1, 1), ((1, 1), (1, 1))))
        return lambda: run(xj, wj)

    def torch_setup(torch):
        import torch.nn.functional as F
        xt, wt = torch.from_numpy(x), torch.from_numpy(w)
        return lambda: F.conv2d(xt, wt, padding=1)

    def vkml_setup(vnp):
        from vkml.array import bind
        from vkml.trace.ops import OpKind
        xv, wv = vnp.asarray(x), vnp.asarray(w.reshape(O, C * KH * KW))

        def run():
            cols = bind(OpKind.Im2Col, [xv], kernel=(KH, KW), stride=(1, 1), padding=(1, 1),
                        dilation=(1, 1))                                   # 1, C*KH*KW, H*W
            return _vkml_ready(vnp.reshape(wv @ cols, (1, O, H, W)))
        return run

    return Workload("conv2d", f"conv2d 3x3 pad 1, 1x{C}x{H}x{W} -> {O} ch, f32",
                    {"vkml": vkml_setup, "numpy": lambda np_: numpy_run,
                     "jax": jax_setup, "torch": torch_setup},
                    flops=2.0 * O * C * KH * KW * H * W, rtol=1e-4, atol=1e-3)


WORKLOADS: dict[str, Callable[[float], Workload]] = {
    "elementwise": elementwise, "sum": total, "matmul": matmul, "conv2d": conv2d}
