"""The benchmark workloads: the same computation written once per framework.

A workload gives vkml's setup (vnp -> run) and one setup per other framework kind
(Target -> run); run() computes the result and does not return before it exists (the
runner waits for vkml's queued work, JAX blocks, PyTorch CUDA synchronises). Inputs are built once, outside the
timed call, on each target's device, from the same NumPy data. Workloads of one `group`
differ only in how vkml runs (eager or jit): the other columns are timed once per group.

    >>> sorted(WORKLOADS)[:3]
    ['chain', 'chain_jit', 'conv2d']
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np

MIB = 1 << 20


@dataclass
class Workload:
    """One table row."""
    name: str
    label: str
    group: str
    vkml: Callable | None = None                       # vnp -> run
    impls: dict = field(default_factory=dict)          # kind -> (Target -> run)
    flops: float | None = None                         # per run, for a GFLOP/s figure
    nbytes: float | None = None                        # least bytes moved per run, for GB/s
    tol: float = 1e-5                                  # max |x - numpy| / max |numpy| allowed


def to_numpy(value) -> np.ndarray:
    """A result (array of any framework, or a tuple/list/dict of them) as one float64 vector."""
    if isinstance(value, dict):
        value = [value[k] for k in sorted(value)]
    if isinstance(value, (tuple, list)):
        parts = [to_numpy(v) for v in value]
        return np.concatenate(parts) if parts else np.zeros(0)
    if hasattr(value, "detach"):                         # torch
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=np.float64).ravel()


# --------------------------------------------------------------------------- per framework helpers


def _torch_in(t, a: np.ndarray):
    return t.module.from_numpy(np.ascontiguousarray(a)).to(t.device)


def _jax_in(t, a: np.ndarray):
    return t.module.device_put(a, t.device)


def _jax_ready(out):
    import jax
    return jax.block_until_ready(out)


def _torch_fn(t, f):
    """f, compiled with torch.compile for a compiled target."""
    return t.module.compile(f) if t.compiled else f


# --------------------------------------------------------------------------- elementwise chain


def _chain(m, x):
    """tanh(2x+1)*exp(-x)+sqrt(x+1)-x*x in any NumPy-like module m."""
    return m.tanh(2 * x + 1) * m.exp(-x) + m.sqrt(x + 1) - x * x


@lru_cache(maxsize=2)
def _uniform(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(n, dtype=np.float32)   # in [0, 1): sqrt(x+1) real


def _one_array(fn, x: np.ndarray, jit: bool, not_compiled: str | None = None):
    """(vkml setup, other targets' setups) timing fn(module, x) on one array x: vkml eager
    or jitted, NumPy, JAX's jit, PyTorch, and torch.compile unless not_compiled says why
    not."""
    def vkml_setup(vnp):
        import vkml
        xv = vnp.asarray(x)
        f = vkml.jit(lambda v: fn(vnp, v)) if jit else (lambda v: fn(vnp, v))
        return lambda: f(xv)

    def jax_setup(t):
        import jax.numpy as jnp
        xj, f = _jax_in(t, x), t.module.jit(lambda v: fn(jnp, v))
        return lambda: _jax_ready(f(xj))

    def torch_setup(t):
        if t.compiled and not_compiled:
            raise NotImplementedError(not_compiled)
        xt, f = _torch_in(t, x), _torch_fn(t, lambda v: fn(t.module, v))

        def run():
            out = f(xt)
            t.sync()
            return out
        return run
    return vkml_setup, {"numpy": lambda t: (lambda: fn(np, x)), "jax": jax_setup, "torch": torch_setup}


def chain(scale: float, jit: bool) -> Workload:
    n = int(16 * MIB * scale)
    x = _uniform(n, 0)
    vkml_setup, impls = _one_array(_chain, x, jit)
    mode = "vkml.jit" if jit else "vkml eager"
    return Workload("chain_jit" if jit else "chain", f"chain tanh(2x+1)*exp(-x)+sqrt(x+1)-x*x, "
                    f"{n / MIB:.4g}M f32 ({mode})", "chain", vkml_setup, impls,
                    flops=None, nbytes=8.0 * n, tol=1e-5)


def copy(scale: float) -> Workload:
    """y = copy(x): the bandwidth a single read-and-write kernel reaches (the chain's floor)."""
    n = int(16 * MIB * scale)
    x = _uniform(n, 0)

    def vkml_setup(vnp):
        xv = vnp.asarray(x)
        return lambda: vnp.copy(xv)

    def torch_setup(t):
        if t.compiled:
            raise NotImplementedError("a copy has nothing to compile")
        xt = _torch_in(t, x)

        def run():
            out = xt.clone()
            t.sync()
            return out
        return run

    return Workload("copy", f"copy y = x, {n / MIB:.4g}M f32", "copy", vkml_setup,
                    {"numpy": lambda t: (lambda: x.copy()), "torch": torch_setup},
                    nbytes=8.0 * n, tol=0)


# --------------------------------------------------------------------------- reduction, matmul


def total(scale: float) -> Workload:
    n = int(16 * MIB * scale)
    x = _uniform(n, 1)
    vkml_setup, impls = _one_array(lambda m, v: m.sum(v), x, False, "one reduction: nothing to fuse")

    # float32 sums of 16M values in [0, 1) differ by summation order: about 1e-6 relative
    return Workload("sum", f"sum, {n / MIB:.4g}M f32", "sum", vkml_setup, impls,
                    nbytes=4.0 * n, tol=1e-4)


def matmul(n: int) -> Callable[[float], Workload]:
    def build(scale: float) -> Workload:
        rng = np.random.default_rng(2)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)

        def vkml_setup(vnp):
            av, bv = vnp.asarray(a), vnp.asarray(b)
            return lambda: av @ bv

        def jax_setup(t):
            aj, bj, f = _jax_in(t, a), _jax_in(t, b), t.module.jit(lambda p, q: p @ q)
            return lambda: _jax_ready(f(aj, bj))

        def torch_setup(t):
            if t.compiled:
                raise NotImplementedError("one matmul: nothing to fuse")
            at, bt = _torch_in(t, a), _torch_in(t, b)

            def run():
                out = at @ bt
                t.sync()
                return out
            return run

        return Workload(f"matmul{n}", f"matmul {n}x{n} @ {n}x{n} f32", f"matmul{n}", vkml_setup,
                        {"numpy": lambda t: (lambda: a @ b), "jax": jax_setup, "torch": torch_setup},
                        flops=2.0 * n ** 3, tol=1e-5)
    return build


# --------------------------------------------------------------------------- conv2d forward + backward


def _conv_data(scale: float):
    N = max(1, int(8 * scale))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((N, 32, 56, 56), dtype=np.float32)
    w = (rng.standard_normal((64, 32, 3, 3), dtype=np.float32) * 0.1).astype(np.float32)
    return x, w


def _numpy_conv_vg(x, w):
    """loss = mean(conv2d(x, w, padding=1)^2) and (dloss/dx, dloss/dw), by im2col."""
    N, C, H, W = x.shape
    O = w.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))   # N,C,H,W,3,3
    cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(N, C * 9, H * W)
    wm = w.reshape(O, C * 9)
    y = wm @ cols                                                            # N,O,HW
    loss = np.mean(y * y)
    dy = (2.0 / y.size) * y
    dw = np.einsum("nol,nkl->ok", dy, cols).reshape(w.shape)
    dcols = (wm.T @ dy).reshape(N, C, 3, 3, H, W)
    dxp = np.zeros_like(xp)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + H, j:j + W] += dcols[:, :, i, j]
    return loss, (dxp[:, :, 1:-1, 1:-1], dw)


def conv2d(scale: float, jit: bool) -> Workload:
    x, w = _conv_data(scale)
    N, C, H, W = x.shape
    O = w.shape[0]

    def vkml_setup(vnp):
        import vkml
        from vkml.nn import functional as F
        xv, wv = vnp.asarray(x), vnp.asarray(w)
        vg = vkml.value_and_grad(lambda a, b: vnp.mean(F.conv2d(a, b, padding=1) ** 2), argnums=(0, 1))
        f = vkml.jit(vg) if jit else vg
        return lambda: f(xv, wv)

    def jax_setup(t):
        jax = t.module
        import jax.numpy as jnp

        def loss(a, b):
            y = jax.lax.conv_general_dilated(a, b, (1, 1), ((1, 1), (1, 1)),
                                             precision=jax.lax.Precision.HIGHEST)
            return jnp.mean(y * y)
        f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
        xj, wj = _jax_in(t, x), _jax_in(t, w)
        return lambda: _jax_ready(f(xj, wj))

    def torch_setup(t):
        torch = t.module
        import torch.nn.functional as TF
        if t.compiled:
            raise NotImplementedError("not timed: torch.compile is compared on the fused chain")
        xt = _torch_in(t, x).requires_grad_(True)
        wt = _torch_in(t, w).requires_grad_(True)

        def run():
            y = TF.conv2d(xt, wt, padding=1)
            loss = (y * y).mean()
            dx, dw = torch.autograd.grad(loss, (xt, wt))
            t.sync()
            return loss.detach(), (dx, dw)
        return run

    mode = "vkml.jit" if jit else "vkml eager"
    return Workload("conv2d_jit" if jit else "conv2d",
                    f"conv2d 3x3 pad 1 fwd+bwd, {N}x{C}x{H}x{W} -> {O} ch f32 ({mode})", "conv2d",
                    vkml_setup, {"numpy": lambda t: (lambda: _numpy_conv_vg(x, w)),
                                 "jax": jax_setup, "torch": torch_setup},
                    flops=3 * 2.0 * N * O * C * 9 * H * W, tol=1e-4)


# --------------------------------------------------------------------------- MLP training step

LR = 0.01


def _mlp_data(batch: int, dims: tuple):
    rng = np.random.default_rng(4)
    params = []
    for i, o in zip(dims[:-1], dims[1:]):
        bound = 1.0 / np.sqrt(i)
        params.append((rng.uniform(-bound, bound, (i, o)).astype(np.float32),
                       rng.uniform(-bound, bound, (o,)).astype(np.float32)))
    x = rng.standard_normal((batch, dims[0]), dtype=np.float32)
    y = rng.integers(0, dims[-1], batch).astype(np.int32)
    return params, x, y


def _numpy_step(params, x, y):
    """One SGD step of the ReLU MLP with mean softmax cross-entropy: (loss, new params)."""
    hs, h = [x], x
    for k, (w, b) in enumerate(params):
        h = h @ w + b
        if k < len(params) - 1:
            h = np.maximum(h, 0)
        hs.append(h)
    z = h - h.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    B = x.shape[0]
    loss = -np.mean(np.log(p[np.arange(B), y]))
    d = p
    d[np.arange(B), y] -= 1
    d /= B
    new = [None] * len(params)
    for k in range(len(params) - 1, -1, -1):
        w, b = params[k]
        dw, db = hs[k].T @ d, d.sum(axis=0)
        if k:
            d = (d @ w.T) * (hs[k] > 0)
        new[k] = (w - LR * dw, b - LR * db)
    return np.float32(loss), new


def vkml_mlp_step(opt, donate: bool = True):
    """The jitted vkml MLP training step the mlp rows time (value_and_grad of a ReLU MLP's
    cross-entropy, then opt's update); bench/tools profile this same function."""
    import vkml
    from vkml import optim
    from vkml.nn import functional as F

    def loss_fn(p, xb, yb):
        h = xb
        for k, (w, b) in enumerate(p):
            h = h @ w + b
            if k < len(p) - 1:
                h = F.relu(h)
        return F.cross_entropy(h, yb)

    def step(p, s, xb, yb):
        loss, g = vkml.value_and_grad(loss_fn)(p, xb, yb)
        upd, s = opt.update(g, s, p)
        return optim.apply_updates(p, upd), s, loss
    return vkml.jit(step, donate_argnums=(0, 1) if donate else ())


def mlp(batch: int, dims: tuple, tag: str) -> Callable[[float], Workload]:
    def build(scale: float) -> Workload:
        p0, x, y = _mlp_data(batch, dims)
        last = len(p0) - 1

        def vkml_setup(vnp):
            from vkml import optim
            opt = optim.sgd(LR)
            jstep = vkml_mlp_step(opt)
            st = {"p": [(vnp.asarray(w), vnp.asarray(b)) for w, b in p0]}
            st["s"] = opt.init(st["p"])
            xv, yv = vnp.asarray(x), vnp.asarray(y)

            def run():
                st["p"], st["s"], loss = jstep(st["p"], st["s"], xv, yv)
                return loss, st["p"][last][0]
            return run

        def jax_setup(t):
            jax = t.module
            import jax.numpy as jnp

            def loss_fn(p, xb, yb):
                h = xb
                for k, (w, b) in enumerate(p):
                    h = h @ w + b
                    if k < last:
                        h = jax.nn.relu(h)
                logp = jax.nn.log_softmax(h)
                return -jnp.mean(jnp.take_along_axis(logp, yb[:, None], axis=1))

            def step(p, xb, yb):
                loss, g = jax.value_and_grad(loss_fn)(p, xb, yb)
                return jax.tree_util.tree_map(lambda a, d: a - LR * d, p, g), loss
            # donation is what a training loop uses; the CPU backend does not implement it
            f = jax.jit(step, donate_argnums=(0,) if t.gpu else ())
            st = {"p": [(_jax_in(t, w), _jax_in(t, b)) for w, b in p0]}
            xj, yj = _jax_in(t, x), _jax_in(t, y)

            def run():
                st["p"], loss = _jax_ready(f(st["p"], xj, yj))
                return loss, np.asarray(st["p"][last][0])
            return run

        def torch_setup(t):
            torch = t.module
            import torch.nn.functional as TF
            if t.compiled:
                raise NotImplementedError("not timed: torch.compile is compared on the fused chain")
            ps = [(_torch_in(t, w).requires_grad_(True), _torch_in(t, b).requires_grad_(True)) for w, b in p0]
            opt = torch.optim.SGD([a for pair in ps for a in pair], lr=LR)
            xt, yt = _torch_in(t, x), _torch_in(t, y.astype(np.int64))

            def run():
                opt.zero_grad(set_to_none=True)
                h = xt
                for k, (w, b) in enumerate(ps):
                    h = h @ w + b
                    if k < last:
                        h = torch.relu(h)
                loss = TF.cross_entropy(h, yt)
                loss.backward()
                opt.step()
                t.sync()
                return loss.detach(), ps[last][0].detach().cpu().numpy()
            return run

        def numpy_setup(t):
            st = {"p": [(w.copy(), b.copy()) for w, b in p0]}

            def run():
                loss, st["p"] = _numpy_step(st["p"], x, y)
                return loss, st["p"][last][0]
            return run

        flops = 3 * 2.0 * batch * sum(i * o for i, o in zip(dims[:-1], dims[1:]))
        return Workload(f"mlp_{tag}", f"MLP train step (value_and_grad + SGD, vkml.jit), batch "
                        f"{batch}, {'-'.join(map(str, dims))}", f"mlp_{tag}", vkml_setup,
                        {"numpy": numpy_setup, "jax": jax_setup, "torch": torch_setup},
                        flops=flops, tol=1e-4)
    return build


# --------------------------------------------------------------------------- jit replay overhead

OPS = 200


def _ops200(m, x):
    """200 cheap elementwise operators. (Not transcendental ones: lavapipe's compile time
    grows exponentially with the number of branchy math calls fused into one kernel.)"""
    for _ in range(OPS // 2):
        x = x * 0.999 + 0.001
    return x


def replay(scale: float, jit: bool) -> Workload:
    """A 200-operator graph on 8 floats: the time is per-call overhead, not arithmetic."""
    x = np.linspace(0.1, 0.9, 8, dtype=np.float32)
    vkml_setup, impls = _one_array(_ops200, x, jit, "not timed: torch.compile is compared on the fused chain")

    mode = "vkml.jit replay" if jit else "vkml eager"
    return Workload("replay" if jit else "ops200_eager", f"{OPS} ops on 8 f32 ({mode}; jax jit, "
                    f"torch eager)", "replay", vkml_setup, impls, tol=1e-5)


WORKLOADS: dict[str, Callable[[float], Workload]] = {
    "chain": lambda s: chain(s, jit=False),
    "chain_jit": lambda s: chain(s, jit=True),
    "copy": copy,
    "sum": total,
    "matmul1024": matmul(1024),
    "matmul4096": matmul(4096),
    "conv2d": lambda s: conv2d(s, jit=False),
    "conv2d_jit": lambda s: conv2d(s, jit=True),
    "mlp_small": mlp(256, (64, 256, 256, 10), "small"),
    "mlp_large": mlp(4096, (1024, 4096, 4096, 10), "large"),
    "replay": lambda s: replay(s, jit=True),
    "ops200_eager": lambda s: replay(s, jit=False),
}


# --------------------------------------------------------------------------- deep MLP (compiler at scale)

DEEP_BATCH, DEEP_WIDTH = 1024, 64


def deep_mlp_loss(xp, checkpoint, n: int, policy: str):
    """loss(params, x) of a depth-n tanh MLP (width DEEP_WIDTH) written against a
    NumPy-like module `xp` (vkml.numpy or jax.numpy) and its framework's checkpoint, so
    both run the same program; policy "none", "layer" (each layer checkpointed) or
    "sqrt" (sqrt(n) segments of sqrt(n) layers checkpointed)."""
    def layer(h, W, b):
        return xp.tanh(h @ W + b)

    def seg(h, Wl, bl):
        for W, b in zip(Wl, bl):
            h = layer(h, W, b)
        return h

    def loss(params, x):
        Ws, bs = params
        h = x
        if policy == "none":
            h = seg(h, Ws, bs)
        elif policy == "layer":
            for W, b in zip(Ws, bs):
                h = checkpoint(layer)(h, W, b)
        elif policy == "sqrt":
            k = max(1, int(round(math.sqrt(n))))
            for i in range(0, n, k):
                h = checkpoint(seg)(h, Ws[i:i + k], bs[i:i + k])
        else:
            raise ValueError(f"deep_mlp_loss: policy {policy!r}; valid: none, layer, sqrt")
        return (h * h).sum()
    return loss


def deep_mlp_data(n: int):
    """NumPy ((weights, biases), x) for `deep_mlp_loss` of depth n, batch DEEP_BATCH."""
    rng = np.random.default_rng(0)
    Ws = [rng.normal(size=(DEEP_WIDTH, DEEP_WIDTH)).astype(np.float32) / 8 for _ in range(n)]
    bs = [np.zeros(DEEP_WIDTH, np.float32) for _ in range(n)]
    x = rng.normal(size=(DEEP_BATCH, DEEP_WIDTH)).astype(np.float32)
    return (Ws, bs), x
