"""The columns of the table: vkml and every other framework/device pair this run can time.

A `Target` is one column: a framework (`kind`: numpy, jax or torch), the device it runs on,
and whether it compiles (torch.compile). JAX and PyTorch are optional; a target that
cannot start is reported with the reason, never fatal. On a machine with CUDA the GPU
targets (PyTorch CUDA, torch.compile on CUDA, JAX GPU) join the CPU ones, so vkml on the
GPU is compared with the GPU libraries and the CPU ones in the same run.
"""
from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from typing import Callable

# JAX must not take 75% of GPU memory at start: vkml allocates through Vulkan beside it
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _noop() -> None:
    return None


@dataclass
class Target:
    """One column: name, framework module (None: unavailable), device and how to sync."""
    name: str
    kind: str                              # vkml, numpy, jax or torch
    module: object = None
    device: object = None                  # a jax.Device or a torch device string
    version: str = ""
    missing: str = ""
    compiled: bool = False                 # torch.compile
    sync: Callable[[], None] = _noop       # wait for queued device work
    extra: dict = field(default_factory=dict)

    @property
    def available(self) -> bool:
        return self.module is not None

    @property
    def gpu(self) -> bool:
        return self.name.endswith(("-cuda", "-gpu")) or bool(self.extra.get("gpu"))


def _vkml() -> Target:
    try:
        import vkml
        import vkml.numpy as vnp
        from vkml.vulkan import runtime
        dev = runtime.get().dev
    except Exception as e:  # no Vulkan, no glslang: say so in the table
        return Target("vkml", "vkml", missing=f"{type(e).__name__}: {e}")
    from vkml import lazy

    def sync() -> None:
        lazy.flush()          # eager operators wait as records until a value is needed
        runtime.get().wait()
    return Target("vkml", "vkml", vnp, version=vkml.__version__, sync=sync,
                  extra={"device": dev.summary(), "gpu": not dev.profile.cpu})


def _numpy() -> Target:
    import numpy
    return Target("numpy", "numpy", numpy, version=numpy.__version__)


def _jax() -> list[Target]:
    try:
        import jax
        import jax.numpy  # noqa: F401
        # fp32 products in full fp32 (no TF32 / bf16 passes) on every backend, as vkml does
        jax.config.update("jax_default_matmul_precision", "highest")
        cpu = jax.devices("cpu")[0]
    except Exception as e:
        return [Target("jax", "jax", missing=f"{type(e).__name__}: {e}")]
    out = [Target("jax", "jax", jax, cpu, jax.__version__, extra={"device": "cpu, jit"})]
    try:
        gpu = jax.devices("gpu")[0]
        out.append(Target("jax-gpu", "jax", jax, gpu, jax.__version__,
                          extra={"device": f"{gpu.device_kind}, jit", "gpu": True}))
    except Exception:
        pass   # no GPU backend: the column is simply absent
    return out


def _torch() -> list[Target]:
    try:
        import torch
    except Exception as e:
        return [Target("torch", "torch", missing=f"{type(e).__name__}: {e}")]
    v = torch.__version__
    out = [Target("torch", "torch", torch, "cpu", v, extra={"device": f"cpu, {torch.get_num_threads()} threads"}),
           Target("torch.compile", "torch", torch, "cpu", v, compiled=True, extra={"device": "cpu, inductor"})]
    if torch.cuda.is_available():
        # fp32 matmul and convolution in full fp32: TF32 off, as the comparison demands
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        name = torch.cuda.get_device_name(0)
        sync = torch.cuda.synchronize
        out += [Target("torch-cuda", "torch", torch, "cuda", v, sync=sync,
                       extra={"device": f"{name}, TF32 off", "gpu": True}),
                Target("torch.compile-cuda", "torch", torch, "cuda", v, compiled=True, sync=sync,
                       extra={"device": f"{name}, inductor", "gpu": True})]
    return out


def detect(only: list[str] | None = None) -> dict[str, Target]:
    """vkml first, then numpy, JAX and PyTorch targets (restricted to `only` if given).

    >>> list(detect(["vkml", "numpy"]))  # doctest: +SKIP
    ['vkml', 'numpy']
    """
    targets = [_vkml(), _numpy(), *_jax(), *_torch()]
    return {t.name: t for t in targets if not only or t.name in only or t.name == "vkml"}


def host() -> str:
    """CPU model and core count of this machine."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} logical cores"
