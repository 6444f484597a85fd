"""The large MLP training step in float32 and in float16 mixed precision (float32 master
weights, float16 products on tensor cores where the device has cooperative matrices),
vkml beside PyTorch eager and PyTorch AMP (`torch.autocast`) in the same run (issue 23).

    python bench/tools/amp_mlp.py [--batch 4096] [--dims 1024,4096,4096,10] [--steps 20]

Per target: ms per SGD step, best of 3 rounds of --steps steps in a row (each step's
parameters feed the next, one wait at the end), after warm-up steps; the ratios vkml /
torch. The mixed-precision steps use no loss scaling (PyTorch's without a GradScaler),
so both do the same arithmetic: float16 (or bfloat16) operands, float32 accumulation,
float32 softmax cross-entropy and update. With --profile, vkml's kernels of one
mixed-precision step (device timestamps) are listed, summed by name.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.workloads import LR, _mlp_data, _numpy_step  # noqa: E402


def _best(step, sync, steps: int, rounds: int = 3, warm: int = 3) -> float:
    for _ in range(warm):
        r = step()
    sync(r)
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(steps):
            r = step()
        sync(r)
        best = min(best, (time.perf_counter() - t) / steps)
    return best


def vkml_amp_step(opt, low):
    """The jitted mixed-precision step: float32 parameters cast to `low` for the forward
    products, logits back to float32 for the loss; the gradient flows back through the
    casts to the float32 parameters, which the optimiser updates."""
    import vkml
    from vkml import optim
    from vkml.nn import functional as F

    def loss_fn(p, xb, yb):
        h = xb.astype(low)
        for k, (w, b) in enumerate(p):
            h = h @ w.astype(low) + b.astype(low)
            if k < len(p) - 1:
                h = F.relu(h)
        return F.cross_entropy(h.astype(np.float32), yb)

    def step(p, s, xb, yb):
        loss, g = vkml.value_and_grad(loss_fn)(p, xb, yb)
        upd, s = opt.update(g, s, p)
        return optim.apply_updates(p, upd), s, loss
    return vkml.jit(step, donate_argnums=(0, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--dims", default="1024,4096,4096,10")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--only", default="vkml,torch", help="comma list of vkml, torch")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--coop-epilogues", choices=("default", "on", "off"), default="default",
                    help="whether float16 products on tensor cores take fused epilogues "
                         "(fusion.COOP_EPILOGUES)")
    a = ap.parse_args()
    if a.coop_epilogues != "default":
        from vkml.vulkan import fusion
        fusion.COOP_EPILOGUES = a.coop_epilogues == "on"
    dims = tuple(int(d) for d in a.dims.split(","))
    p0, x, y = _mlp_data(a.batch, dims)
    only = set(a.only.split(","))
    res: dict[str, float] = {}
    losses: dict[str, float] = {}
    flops = 3 * 2.0 * a.batch * sum(i * o for i, o in zip(dims[:-1], dims[1:]))
    ref_loss = float(_numpy_step([(w.astype(np.float64), b.astype(np.float64)) for w, b in p0],
                                 x.astype(np.float64), y)[0])

    if "vkml" in only:
        import vkml
        import vkml.numpy as vnp
        from vkml import lazy, optim
        from vkml.vulkan import runtime
        from bench.workloads import vkml_mlp_step
        rt = runtime.get()
        print(f"device: {rt.dev.name}; tensor cores (matmul_coop): {rt.dev.profile.matmul_coop}")
        xv, yv = vnp.asarray(x), vnp.asarray(y)

        def sync(r):
            lazy.flush()
            np.asarray(r)
        for name, make in (("vkml f32", lambda o: vkml_mlp_step(o)),
                           ("vkml f16 amp", lambda o: vkml_amp_step(o, vnp.float16))):
            opt = optim.sgd(LR)
            f = make(opt)
            st = {"p": [(vnp.asarray(w), vnp.asarray(b)) for w, b in p0]}
            st["s"] = opt.init(st["p"])
            first = {}

            def step(f=f, st=st, first=first):
                st["p"], st["s"], loss = f(st["p"], st["s"], xv, yv)
                first.setdefault("loss", loss)
                return loss
            res[name] = _best(step, sync, a.steps)
            losses[name] = float(np.asarray(first["loss"]))
            if a.profile and "amp" in name:
                tot = defaultdict(float)
                cnt = defaultdict(int)
                prof = f.profile(st["p"], st["s"], xv, yv)
                for k, s in prof:
                    tot[k] += s
                    cnt[k] += 1
                print(f"{name}: {len(prof)} dispatches, {sum(tot.values()) * 1e3:.2f} ms of kernels")
                for k in sorted(tot, key=tot.get, reverse=True)[:14]:
                    print(f"  {tot[k] * 1e3:8.3f} ms  x{cnt[k]:<3d} {k}")
                print("  MatMul dispatches in order: " + ", ".join(
                    f"{k} {s * 1e3:.3f}" for k, s in prof if k.startswith("MatMul")))

    if "torch" in only:
        import torch
        import torch.nn.functional as TF
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        xt = torch.from_numpy(x).to(dev)
        yt = torch.from_numpy(y.astype(np.int64)).to(dev)
        for name, amp in (("torch f32", None), ("torch f16 amp", torch.float16),
                          ("torch bf16 amp", torch.bfloat16)):
            ps = [(torch.from_numpy(w).to(dev).requires_grad_(True),
                   torch.from_numpy(b).to(dev).requires_grad_(True)) for w, b in p0]
            opt = torch.optim.SGD([t for pr in ps for t in pr], lr=LR)
            first = {}

            def step(ps=ps, opt=opt, amp=amp, first=first):
                opt.zero_grad(set_to_none=True)
                with torch.autocast(dev, dtype=amp, enabled=amp is not None):
                    h = xt
                    for k, (w, b) in enumerate(ps):
                        h = h @ w + b
                        if k < len(ps) - 1:
                            h = torch.relu(h)
                loss = TF.cross_entropy(h.float(), yt)
                loss.backward()
                opt.step()
                first.setdefault("loss", loss.detach())
                return loss

            def tsync(r):
                if dev == "cuda":
                    torch.cuda.synchronize()
            res[name] = _best(step, tsync, a.steps)
            losses[name] = float(first["loss"])

    print(f"MLP SGD step, batch {a.batch}, {'-'.join(map(str, dims))}; ms per step "
          f"(best of 3 rounds of {a.steps}); first-step loss (float64 NumPy {ref_loss:.6f})")
    for k, v in res.items():
        print(f"  {k:16s} {v * 1e3:8.3f} ms  {flops / v / 1e12:7.2f} TF/s  loss {losses[k]:.6f}")
    for v, t in (("vkml f32", "torch f32"), ("vkml f16 amp", "torch f16 amp"),
                 ("vkml f16 amp", "torch bf16 amp"), ("vkml f16 amp", "vkml f32")):
        if v in res and t in res:
            print(f"  {v} / {t}: {res[v] / res[t]:.2f}x")


if __name__ == "__main__":
    main()
