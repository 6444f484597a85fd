"""Which frameworks this run compares, and descriptions of the device and host.

JAX and PyTorch are optional: a framework that does not import is reported, not fatal.
Both are pinned to the CPU, so on a GPU machine vkml's device is compared with the CPU
libraries people would otherwise use.
"""
from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field


@dataclass
class Framework:
    """One column of the table: a name, its module (None if unavailable) and why not."""
    name: str
    module: object = None
    version: str = ""
    missing: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def available(self) -> bool:
        return self.module is not None


def _numpy() -> Framework:
    import numpy
    return Framework("numpy", numpy, numpy.__version__)


def _vkml() -> Framework:
    try:
        import vkml
        import vkml.numpy as vnp
        from vkml.vulkan import runtime
        dev = runtime.get().dev
    except Exception as e:  # no Vulkan, no glslang: say so in the table
        return Framework("vkml", missing=f"{type(e).__name__}: {e}")
    return Framework("vkml", vnp, getattr(vkml, "__version__", ""), extra={"device": dev.summary()})


def _jax() -> Framework:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax
        import jax.numpy  # noqa: F401
    except Exception as e:
        return Framework("jax", missing=f"{type(e).__name__}: {e}")
    return Framework("jax", jax, jax.__version__, extra={"backend": jax.default_backend()})


def _torch() -> Framework:
    try:
        import torch
    except Exception as e:
        return Framework("torch", missing=f"{type(e).__name__}: {e}")
    return Framework("torch", torch, torch.__version__, extra={"threads": torch.get_num_threads()})


def detect() -> dict[str, Framework]:
    """vkml, numpy, jax and torch, in table order.

    >>> sorted(detect())  # doctest: +SKIP
    ['jax', 'numpy', 'torch', 'vkml']
    """
    return {f.name: f for f in (_vkml(), _numpy(), _jax(), _torch())}


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
