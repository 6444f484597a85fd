"""Train a small CNN on scikit-learn's bundled 8x8 digits, on the default Vulkan device.

    ./run demo                                   # the README's first command
    python examples/digits.py --epochs 20 --batch_size 64 --lr 3e-3 --device 0
    mpirun -n 2 python examples/digits.py --distributed    # data-parallel, one device per rank
                                                 # (as root: mpirun --allow-run-as-root)

The whole training step (forward, backward, Adam) is one `vkml.jit` program: traced once,
recorded once, replayed every step with one queue submission. Prints the held-out
accuracy and the time, saves a checkpoint (.npz) and a PNG of the loss/accuracy curves.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from absl import app, flags

flags.DEFINE_integer("epochs", 20, "passes over the training set")
flags.DEFINE_integer("batch_size", 64, "images per step")
flags.DEFINE_float("lr", 3e-3, "Adam learning rate (peak of the cosine schedule)")
flags.DEFINE_integer("device", None, "Vulkan device index (see vkml.devices()); default: best")
flags.DEFINE_integer("seed", 0, "seed for the split, the initialisation and the shuffling")
flags.DEFINE_integer("width", 16, "channels of the first conv layer")
flags.DEFINE_string("out", "runs/digits", "folder for the checkpoint and the plot")
flags.DEFINE_boolean("progress", True, "show a tqdm progress bar")
flags.DEFINE_boolean("distributed", False, "data-parallel over the MPI world (launch with mpirun): "
                     "--batch_size is the global batch, each rank trains on its shard")
FLAGS = flags.FLAGS


def load_digits(seed: int, test_fraction: float = 0.2):
    """scikit-learn's 1,797 digits as NCHW float32 in [0, 1], split train/test (stratified)."""
    from sklearn.datasets import load_digits as sk_load
    d = sk_load()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]
    y = d.target.astype(np.int32)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), bool)
    for c in range(10):
        idx = np.flatnonzero(y == c)
        test[rng.choice(idx, int(round(len(idx) * test_fraction)), replace=False)] = True
    return x[~test], y[~test], x[test], y[test]


def make_model(width: int, key):
    import vkml.nn as nn
    from vkml import random
    k = random.split(key, 4)
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1, key=k[0]), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1, key=k[1]), nn.ReLU(),
        nn.MaxPool2d(2),                                   # 8x8 -> 4x4
        nn.Flatten(),
        nn.Linear(2 * width * 16, 64, key=k[2]), nn.ReLU(),
        nn.Linear(64, 10, key=k[3]),
    )


def train(epochs: int, batch_size: int, lr: float, seed: int = 0, width: int = 16,
          progress: bool = True, log=print, distributed: bool = False):
    """Train and return (model, history dict). history: loss per epoch, test accuracy per
    epoch, images/s, seconds. distributed: data-parallel over the MPI world
    (`vkml.distributed`): batch_size is the global batch; gradients are averaged across
    ranks, so every rank holds the same model."""
    import vkml
    import vkml.numpy as vnp
    import vkml.nn.functional as F
    from vkml import optim, random

    xtr, ytr, xte, yte = load_digits(seed)
    n = len(ytr)
    steps_per_epoch = n // batch_size
    model = make_model(width, random.key(seed))
    if distributed:
        from vkml import distributed as dist
        model = dist.broadcast(model, root=0)     # every replica starts from rank 0's weights
        progress = progress and dist.process_index() == 0
    sched = optim.warmup_cosine_decay_schedule(0.0, lr, steps_per_epoch, epochs * steps_per_epoch, lr * 0.02)
    opt = optim.adam(sched)
    state = opt.init(model)

    def loss_fn(m, x, y):
        return F.cross_entropy(m(x), y)

    @vkml.jit
    def step(m, s, x, y):
        loss, g = vkml.value_and_grad(loss_fn)(m, x, y)
        updates, s = opt.update(g, s, m)
        return optim.apply_updates(m, updates), s, loss

    if distributed:
        step = dist.data_parallel(step)     # gradients averaged between the two programs
    @vkml.jit
    def predict(m, x):
        return vnp.argmax(m(x), axis=1)

    xte_d, yte_np = vnp.asarray(xte), yte
    rng = np.random.default_rng(seed + 1)
    hist = {"loss": [], "acc": [], "img_per_s": 0.0, "seconds": 0.0}
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=epochs * steps_per_epoch, unit="step", dynamic_ncols=True)
    t0 = time.perf_counter()
    seen = 0
    for epoch in range(epochs):
        if distributed:
            batches = dist.shard_batches([xtr, ytr], batch_size, seed=seed + 1, epoch=epoch)
        else:
            order = rng.permutation(n)
            batches = ((vnp.asarray(xtr[idx]), vnp.asarray(ytr[idx])) for idx in
                       (order[b * batch_size:(b + 1) * batch_size] for b in range(steps_per_epoch)))
        losses = []
        for b, (xb, yb) in enumerate(batches):
            model, state, loss = step(model, state, xb, yb)
            losses.append(loss)
            seen += batch_size
            if bar is not None:
                bar.update(1)
                if b % 5 == 0 or b == steps_per_epoch - 1:
                    el = time.perf_counter() - t0
                    bar.set_postfix(epoch=epoch + 1, loss=f"{float(loss):.4f}", img_s=f"{seen / el:,.0f}")
        ep_loss = float(np.mean([float(l) for l in losses]))
        if distributed:    # each rank's loss is its shard's: the mean over ranks is the batch's
            ep_loss = float(dist.all_reduce(vnp.asarray(ep_loss)))
        acc = float(np.mean(np.asarray(predict(model, xte_d)) == yte_np))
        hist["loss"].append(ep_loss)
        hist["acc"].append(acc)
        if bar is None:
            log(f"epoch {epoch + 1:3d}  loss {ep_loss:.4f}  held-out accuracy {acc:.4f}")
    hist["seconds"] = time.perf_counter() - t0
    hist["img_per_s"] = seen / hist["seconds"]
    if bar is not None:
        bar.close()
    return model, hist


def plot(hist, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ep = np.arange(1, len(hist["loss"]) + 1)
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
    ax[0].plot(ep, hist["loss"], marker="o")
    ax[0].set(xlabel="epoch", ylabel="training loss", title="cross-entropy", yscale="log")
    ax[1].plot(ep, np.array(hist["acc"]) * 100, marker="o", color="C2")
    ax[1].set(xlabel="epoch", ylabel="held-out accuracy (%)", title="accuracy", ylim=(80, 100))
    for a in ax:
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv):
    if FLAGS.device is not None:
        os.environ["VKML_DEVICE"] = str(FLAGS.device)
    import vkml
    from vkml.vulkan import runtime
    rank = 0
    if FLAGS.distributed:
        from vkml import distributed as dist
        dist.initialize()               # before the device is chosen: one per local rank
        rank = dist.process_index()
        print(f"rank {rank} of {dist.process_count()} on device {dist.local_device()}")
    if rank == 0:
        print(f"vkml {vkml.__version__} on {runtime.get().dev.summary()}")
    model, hist = train(FLAGS.epochs, FLAGS.batch_size, FLAGS.lr, FLAGS.seed, FLAGS.width, FLAGS.progress,
                        log=print if rank == 0 else (lambda *a: None), distributed=FLAGS.distributed)
    if rank:
        return
    out = Path(FLAGS.out)
    out.mkdir(parents=True, exist_ok=True)
    vkml.nn.save(out / "digits_cnn.npz", model)
    plot(hist, out / "digits_curves.png")
    print(f"held-out accuracy {hist['acc'][-1] * 100:.2f}% after {FLAGS.epochs} epochs; "
          f"final training loss {hist['loss'][-1]:.4f}")
    print(f"trained in {hist['seconds']:.1f} s ({hist['img_per_s']:,.0f} images/s); "
          f"checkpoint {out / 'digits_cnn.npz'}, curves {out / 'digits_curves.png'}")


if __name__ == "__main__":
    app.run(main)
