"""Training-step time of examples/gpt.py's model: vkml (one jitted step) vs PyTorch eager.

    python bench/tools/gpt_step.py                      # the example's default config
    python bench/tools/gpt_step.py --layers 1 --width 32 --steps 5

Both sides run the same architecture (pre-norm blocks, causal SDPA, tanh-GELU MLP, AdamW
with global-norm clipping) on the same batch shape; PyTorch runs eagerly on the CPU with
its default thread count; timed steps alternate between the two. Prints the first vkml
call (trace + compile), the median of the timed steps, and the ratio vkml / torch (the
issue's target: <= 2); --profile adds vkml's kernel times by op. Without torch it reports
vkml alone.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


def time_vkml(a, x, y):
    """(seconds of the first call, a function running one step and returning its loss)."""
    import gpt
    import vkml.numpy as vnp
    from vkml import optim, random

    model = gpt.make_model(len(gpt.VOCAB), a.context, a.width, a.layers, a.heads, random.key(0),
                           checkpoint=a.checkpoint)
    opt = optim.chain(optim.clip_by_global_norm(1.0), optim.adamw(1e-3, b2=0.99, weight_decay=0.05))
    state = opt.init(model)
    _, step = gpt.make_step(opt)

    xd, yd = vnp.asarray(x), vnp.asarray(y)
    t0 = time.perf_counter()
    model, state, loss = step(model, state, xd, yd)
    float(loss)
    first = time.perf_counter() - t0
    box = [model, state]

    def one() -> float:
        box[0], box[1], loss = step(box[0], box[1], xd, yd)
        return float(loss)   # wait for the device: the step is done when its loss is readable

    if a.profile:
        model, state = box
        import collections
        times = step.profile(model, state, xd, yd)
        tot = sum(t for _, t in times)
        print(f"vkml kernels : {len(times)} dispatches, {tot * 1e3:.1f} ms of kernel time; top:")
        by = collections.defaultdict(lambda: [0.0, 0])
        for n, t in times:
            by[n.split("_")[0]][0] += t
            by[n.split("_")[0]][1] += 1
        for n, (t, c) in sorted(by.items(), key=lambda kv: -kv[1][0])[:12]:
            print(f"   {n:28s} x{c:3d} {t * 1e3:8.2f} ms {100 * t / tot:5.1f}%")
    return first, one


def time_torch(a, x, y):
    """(a function running one eager step and returning its loss, torch's threads)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.manual_seed(0)
    E, H = a.width, a.heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(E), nn.LayerNorm(E)
            self.qkv, self.proj = nn.Linear(E, 3 * E), nn.Linear(E, E)
            self.fc, self.out = nn.Linear(E, 4 * E), nn.Linear(4 * E, E)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, H, E // H).permute(2, 0, 3, 1, 4)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(o.transpose(1, 2).reshape(B, T, E))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(len(VOCAB_), E)
            self.pos = nn.Embedding(a.context, E)
            self.blocks = nn.ModuleList([Block() for _ in range(a.layers)])
            self.ln, self.head = nn.LayerNorm(E), nn.Linear(E, len(VOCAB_))

        def forward(self, ids):
            x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln(x))

    import gpt
    VOCAB_ = gpt.VOCAB
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.05)
    xt, yt = torch.as_tensor(x, dtype=torch.long), torch.as_tensor(y, dtype=torch.long)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(xt)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), yt.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    return step, torch.get_num_threads()


def main() -> None:
    import inspect
    import gpt
    train = inspect.signature(gpt.train).parameters      # the example's defaults
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch_size", type=int, default=train["batch_size"].default)
    p.add_argument("--context", type=int, default=train["context"].default)
    p.add_argument("--layers", type=int, default=train["layers"].default)
    p.add_argument("--width", type=int, default=train["width"].default)
    p.add_argument("--heads", type=int, default=train["heads"].default)
    p.add_argument("--steps", type=int, default=20, help="timed steps (median reported)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="also print vkml's kernel times by op")
    p.add_argument("--no-checkpoint", dest="checkpoint", action="store_false",
                   help="vkml without vkml.checkpoint (torch never recomputes)")
    a = p.parse_args()
    rng = np.random.default_rng(0)
    w = rng.integers(0, len(gpt.VOCAB), (a.batch_size, a.context + 1)).astype(np.int32)
    x, y = w[:, :-1], w[:, 1:]
    print(f"model: {a.layers} layers, width {a.width}, {a.heads} heads, context {a.context}, "
          f"batch {a.batch_size}, vkml.checkpoint {'on' if a.checkpoint else 'off'}")
    first, vk_step = time_vkml(a, x, y)
    print(f"vkml jit     : first call (trace + compile) {first:.2f} s")
    try:
        import torch  # noqa: F401
    except ImportError:
        torch_step = None
    else:
        torch_step, threads = time_torch(a, x, y)
    for _ in range(a.warmup):
        vk_step()
        if torch_step:
            torch_step()
    # interleaved, so that load from other processes falls on both sides alike
    ts, tts = [], []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = vk_step()
        ts.append(time.perf_counter() - t0)
        if torch_step:
            t0 = time.perf_counter()
            tloss = torch_step()
            tts.append(time.perf_counter() - t0)
    vk = statistics.median(ts)
    print(f"vkml jit     : step median {vk * 1e3:8.1f} ms (min {min(ts) * 1e3:.1f}, loss {loss:.3f})")
    if torch_step is None:
        print("torch eager  : torch is not installed; no comparison")
        return
    tk = statistics.median(tts)
    print(f"torch eager  : step median {tk * 1e3:8.1f} ms (min {min(tts) * 1e3:.1f}, loss {tloss:.3f}, "
          f"{threads} threads)")
    print(f"ratio vkml / torch: {vk / tk:.2f}x by medians, {min(ts) / min(tts):.2f}x by minima "
          f"(target <= 2)")

if __name__ == "__main__":
    main()
