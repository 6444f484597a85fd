"""Train a small character-level GPT on the Python standard library's own sources.

    ./run demo gpt                               # a few minutes on lavapipe
    python examples/gpt.py --steps 300 --layers 2 --width 96 --context 64 --batch_size 32
    python examples/gpt.py --precision bfloat16      # float32 master weights, bfloat16 compute

The text ships with every Python install: the .py files directly in
`sysconfig.get_paths()['stdlib']`, in sorted order, concatenated up to --chars characters
(ASCII only, tabs as four spaces), so every run on one Python sees the same text. The last
10% is held out. The model is a pre-norm decoder (token and position Embedding, blocks of
LayerNorm -> causal scaled_dot_product_attention -> Linear and LayerNorm -> Linear/GELU/Linear,
each block under `vkml.checkpoint`), trained by AdamW with a warm-up/cosine schedule and
gradient clipping; the whole step (forward, backward, clipping, AdamW) is one `vkml.jit`
program. Prints the losses, saves a PNG of the loss curves and a checkpoint (.npz) in --out,
and ends with text sampled from the model (vkml.random.categorical).
"""
from __future__ import annotations

import math
import os
import sysconfig
import time
from pathlib import Path

import numpy as np
from absl import app, flags


def define_flags() -> None:
    """The command line's flags, defined only when this file runs as the program (so that
    importing it beside examples/digits.py, whose flags share names, works)."""
    flags.DEFINE_integer("steps", 300, "training steps")
    flags.DEFINE_integer("batch_size", 32, "sequences per step")
    flags.DEFINE_integer("context", 64, "characters per sequence (the attention window)")
    flags.DEFINE_integer("layers", 2, "transformer blocks")
    flags.DEFINE_integer("width", 96, "embedding width")
    flags.DEFINE_integer("heads", 4, "attention heads")
    flags.DEFINE_float("lr", 3e-3, "AdamW learning rate (peak of the cosine schedule)")
    flags.DEFINE_float("weight_decay", 0.05, "AdamW decoupled weight decay")
    flags.DEFINE_float("clip", 1.0, "gradient clipping: largest global norm")
    flags.DEFINE_integer("chars", 1_000_000, "characters of standard-library source to read")
    flags.DEFINE_integer("sample_chars", 300, "characters to sample at the end")
    flags.DEFINE_float("temperature", 0.8, "sampling temperature")
    flags.DEFINE_integer("device", None, "Vulkan device index (see vkml.devices()); default: best")
    flags.DEFINE_integer("seed", 0, "seed for the initialisation, the batches and the sampling")
    flags.DEFINE_string("out", "runs/gpt", "folder for the checkpoint and the plot")
    flags.DEFINE_boolean("progress", True, "show a tqdm progress bar")
    flags.DEFINE_enum("precision", "float32", list(PRECISIONS),
                      "compute dtype: float32, or mixed precision over float32 master weights "
                      "(bfloat16; float16 with dynamic loss scaling)")


FLAGS = flags.FLAGS

# printable ASCII and the newline: a vocabulary that does not depend on the text read
VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))
_INDEX = {c: i for i, c in enumerate(VOCAB)}


def load_text(chars: int) -> str:
    """The first `chars` characters of the stdlib's top-level .py files, sorted by name."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts, n = [], 0
    for p in sorted(root.glob("*.py")):
        try:
            t = p.read_text(encoding="utf-8", errors="ignore")
        except OSError:
            continue
        t = "".join(c for c in t.replace("\t", "    ") if c in _INDEX)
        parts.append(t)
        n += len(t)
        if n >= chars:
            break
    text = "".join(parts)[:chars]
    if len(text) < 10_000:
        raise RuntimeError(f"gpt: found only {len(text)} characters of .py source under {root}")
    return text


def encode(s: str) -> np.ndarray:
    return np.fromiter((_INDEX[c] for c in s if c in _INDEX), dtype=np.int32)


def decode(ids) -> str:
    return "".join(VOCAB[int(i)] for i in ids)


def make_model(vocab: int, context: int, width: int, layers: int, heads: int, key,
               checkpoint: bool = True):
    import vkml
    import vkml.nn as nn
    import vkml.nn.functional as F
    import vkml.numpy as vnp
    from vkml import random

    class Block(nn.Module):
        """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

        def __init__(self, key):
            k = random.split(key, 4)
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width, key=k[0])
            self.proj = nn.Linear(width, width, key=k[1])
            self.fc = nn.Linear(width, 4 * width, key=k[2])
            self.out = nn.Linear(4 * width, width, key=k[3])

        def forward(self, x):
            B, T, E = x.shape
            H = self.heads
            qkv = vnp.reshape(self.qkv(self.ln1(x)), (B, T, 3, H, E // H))
            q, k, v = (vnp.transpose(qkv[:, :, i], (0, 2, 1, 3)) for i in range(3))  # (B, H, T, D)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(vnp.reshape(vnp.transpose(a, (0, 2, 1, 3)), (B, T, E)))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        """Token + position embeddings, `layers` checkpointed blocks, LayerNorm, a Linear head."""

        def __init__(self, key):
            k = random.split(key, layers + 3)
            self.context = context
            self.tok = nn.Embedding(vocab, width, key=k[0])
            self.pos = nn.Embedding(context, width, key=k[1])
            # N(0, 1) embeddings make the first logits large; GPT-2 uses std 0.02
            self.tok.weight = self.tok.weight * 0.02
            self.pos.weight = self.pos.weight * 0.02
            self.blocks = nn.ModuleList([Block(k[3 + i]) for i in range(layers)])
            self.ln = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, key=k[2])

        def forward(self, ids):
            T = ids.shape[1]
            x = self.tok(ids) + self.pos(vnp.arange(T, dtype="int32"))
            for b in self.blocks:
                # recompute each block's activations in the backward pass instead of keeping them
                x = vkml.checkpoint(lambda b, x: b(x))(b, x) if checkpoint else b(x)
            return self.head(self.ln(x))

    return GPT(key)


def batches(data: np.ndarray, batch_size: int, context: int, rng):
    """Endless (inputs, targets) pairs of random windows: targets are inputs shifted by one."""
    while True:
        start = rng.integers(0, len(data) - context - 1, batch_size)
        idx = start[:, None] + np.arange(context + 1)
        w = data[idx]
        yield w[:, :-1], w[:, 1:]


PRECISIONS = ("float32", "bfloat16", "float16")


def init_state(opt, model, precision: str = "float32"):
    """The optimiser state a `make_step` step takes: opt's, and for float16 also the
    dynamic loss scale (float16's range is too narrow for unscaled gradients)."""
    from vkml import optim
    s = opt.init(model)
    return (s, optim.DynamicLossScale(2.0 ** 15)) if precision == "float16" else s


def make_step(opt, precision: str = "float32"):
    """(loss_fn, step): the next-character cross-entropy of a model on (x, y) windows, and
    one jitted training step with optimiser opt: step(m, s, x, y) -> (m, s, loss).

    precision: the compute dtype. The model's weights and the optimiser state stay
    float32 (master weights); the loss casts the weights to bfloat16 or float16 at its
    top and the logits back to float32 before the cross-entropy (`optim.Policy`), so the
    gradients arrive in float32 through the casts. float16 scales the loss dynamically
    (`optim.DynamicLossScale`, its state beside the optimiser's: `init_state`) and skips
    a step whose gradients overflowed."""
    import vkml
    import vkml.nn.functional as F
    import vkml.numpy as vnp
    from vkml import optim
    if precision not in PRECISIONS:
        raise ValueError(f"make_step: precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    policy = optim.get_policy(f"params=float32,compute={precision},output=float32")

    def loss_fn(m, x, y):
        logits = policy.cast_to_output(policy.cast_to_compute(m)(x))
        return F.cross_entropy(vnp.reshape(logits, (-1, logits.shape[-1])), vnp.reshape(y, (-1,)))

    if precision != "float16":
        @vkml.jit
        def step(m, s, x, y):
            loss, g = vkml.value_and_grad(loss_fn)(m, x, y)
            updates, s = opt.update(g, s, m)
            return optim.apply_updates(m, updates), s, loss
        return loss_fn, step

    @vkml.jit
    def step(m, s, x, y):
        s, scale = s
        loss, g = vkml.value_and_grad(lambda m: scale.scale(loss_fn(m, x, y)))(m)
        loss, g = scale.unscale(loss), scale.unscale(g)
        finite = optim.all_finite(g)
        updates, s2 = opt.update(g, s, m)
        m2 = optim.select_tree(finite, optim.apply_updates(m, updates), m)
        return m2, (optim.select_tree(finite, s2, s), scale.adjust(finite)), loss
    return loss_fn, step


def train(steps: int = 300, batch_size: int = 32, context: int = 64, layers: int = 2,
          width: int = 96, heads: int = 4, lr: float = 3e-3, weight_decay: float = 0.05,
          clip: float = 1.0, chars: int = 1_000_000, seed: int = 0, eval_every: int | None = None,
          progress: bool = True, log=print, precision: str = "float32"):
    """Train and return (model, history dict). history: loss per step, (step, held-out loss)
    pairs, characters/s, seconds, the text. precision: the compute dtype (`make_step`)."""
    import vkml
    import vkml.nn.functional as F
    import vkml.numpy as vnp
    from vkml import optim, random

    text = load_text(chars)
    data = encode(text)
    split = int(len(data) * 0.9)
    train_data, val_data = data[:split], data[split:]
    model = make_model(len(VOCAB), context, width, layers, heads, random.key(seed))
    warmup = max(1, min(50, steps // 10))
    sched = optim.warmup_cosine_decay_schedule(0.0, lr, warmup, max(steps, warmup + 1), lr * 0.1)
    opt = optim.chain(optim.clip_by_global_norm(clip), optim.adamw(sched, b2=0.99, weight_decay=weight_decay))
    state = init_state(opt, model, precision)
    loss_fn, step = make_step(opt, precision)
    evaluate = vkml.jit(loss_fn)
    rng = np.random.default_rng(seed + 1)
    # a fixed held-out set: the same windows at every evaluation, so the curve is smooth
    vx, vy = next(batches(val_data, 4 * batch_size, context, np.random.default_rng(seed + 2)))
    vx, vy = vnp.asarray(vx), vnp.asarray(vy)
    eval_every = eval_every or max(1, steps // 10)
    hist = {"loss": [], "val": [], "chars_per_s": 0.0, "seconds": 0.0, "text_chars": len(text)}
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=steps, unit="step", dynamic_ncols=True)
    it = batches(train_data, batch_size, context, rng)
    t0 = time.perf_counter()
    losses = []
    for i in range(steps):
        x, y = next(it)
        model, state, loss = step(model, state, vnp.asarray(x), vnp.asarray(y))
        losses.append(loss)
        last = i == steps - 1
        if (i + 1) % eval_every == 0 or last:
            hist["val"].append((i + 1, float(evaluate(model, vx, vy))))
        if bar is not None:
            bar.update(1)
            if i % 10 == 0 or last:
                el = time.perf_counter() - t0
                bar.set_postfix(loss=f"{float(loss):.3f}", val=f"{hist['val'][-1][1]:.3f}" if hist["val"] else "-",
                                char_s=f"{(i + 1) * batch_size * context / el:,.0f}")
        elif (i + 1) % eval_every == 0 or last:
            log(f"step {i + 1:5d}  loss {float(loss):.4f}  held-out {hist['val'][-1][1]:.4f}")
    hist["loss"] = [float(l) for l in losses]
    hist["seconds"] = time.perf_counter() - t0
    hist["chars_per_s"] = steps * batch_size * context / hist["seconds"]
    if bar is not None:
        bar.close()
    return model, hist


def sample(model, prompt: str, n: int, temperature: float = 0.8, seed: int = 0) -> str:
    """n characters continuing prompt: one jitted call per character on the last `context`
    characters (left-padded with newlines), drawn by vkml.random.categorical."""
    import vkml
    import vkml.numpy as vnp
    from vkml import random

    T = model.context

    @vkml.jit
    def next_id(m, ids, key):
        logits = m(ids)[0, -1] / temperature
        return random.categorical(key, logits)

    ids = list(encode(prompt)) or [0]
    key = random.key(seed)
    for _ in range(n):
        window = ([0] * T + ids)[-T:]
        key, sub = random.split(key)
        ids.append(int(next_id(model, vnp.asarray(np.asarray([window], np.int32)), sub)))
    return decode(ids)


def plot(hist, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    loss = np.asarray(hist["loss"])
    steps = np.arange(1, len(loss) + 1)
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.plot(steps, loss, color="C0", alpha=0.3, lw=0.8, label="training (per step)")
    k = max(1, len(loss) // 25)
    if len(loss) > k:
        smooth = np.convolve(loss, np.ones(k) / k, mode="valid")
        ax.plot(steps[k - 1:], smooth, color="C0", label=f"training ({k}-step mean)")
    if hist["val"]:
        vs, vl = zip(*hist["val"])
        ax.plot(vs, vl, "o-", color="C3", label="held-out")
    ax.axhline(math.log(len(VOCAB)), color="gray", ls=":", label=f"uniform (ln {len(VOCAB)})")
    ax.set(xlabel="step", ylabel="cross-entropy (nats/char)", title="char-level GPT on the Python stdlib")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv):
    if FLAGS.device is not None:
        os.environ["VKML_DEVICE"] = str(FLAGS.device)
    import vkml
    from vkml.vulkan import runtime
    print(f"vkml {vkml.__version__} on {runtime.get().dev.summary()}")
    model, hist = train(FLAGS.steps, FLAGS.batch_size, FLAGS.context, FLAGS.layers, FLAGS.width,
                        FLAGS.heads, FLAGS.lr, FLAGS.weight_decay, FLAGS.clip, FLAGS.chars,
                        FLAGS.seed, progress=FLAGS.progress, precision=FLAGS.precision)
    n_params = sum(int(np.prod(p.shape)) for p in model.parameters())
    out = Path(FLAGS.out)
    out.mkdir(parents=True, exist_ok=True)
    vkml.nn.save(out / "gpt.npz", model)
    plot(hist, out / "gpt_loss.png")
    first = float(np.mean(hist["loss"][:10]))
    last = float(np.mean(hist["loss"][-10:]))
    print(f"{n_params:,} parameters, {hist['text_chars']:,} characters of stdlib source; "
          f"training loss {first:.3f} -> {last:.3f} (mean of the first/last 10 steps), "
          f"held-out {hist['val'][-1][1]:.3f} nats/char")
    print(f"trained in {hist['seconds']:.1f} s ({hist['chars_per_s']:,.0f} characters/s); "
          f"checkpoint {out / 'gpt.npz'}, loss curves {out / 'gpt_loss.png'}")
    print("---- sampled text " + "-" * 50)
    print(sample(model, "def ", FLAGS.sample_chars, FLAGS.temperature, FLAGS.seed))


if __name__ == "__main__":
    define_flags()
    app.run(main)
