"""GLSL to SPIR-V with glslangValidator, cached on disk by source hash.

The cache lives in $VKML_CACHE_DIR or ~/.cache/vkml/spirv; a hit costs one file read.
An empty file (a write cut short) counts as a miss.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path


class ShaderCompileError(RuntimeError):
    """glslangValidator rejected generated GLSL (a vkml bug): the message holds the source."""


class GlslangMissingError(RuntimeError):
    """glslangValidator is not on PATH."""


def cache_dir() -> Path:
    d = Path(os.environ.get("VKML_CACHE_DIR") or Path.home() / ".cache" / "vkml" / "spirv")
    d.mkdir(parents=True, exist_ok=True)
    return d


def glslang() -> str:
    exe = os.environ.get("VKML_GLSLANG") or shutil.which("glslangValidator")
    if not exe:
        raise GlslangMissingError(
            "vkml: glslangValidator is not on PATH; it compiles vkml's kernels. On Debian/Ubuntu: "
            "`apt-get install glslang-tools` (or run the README's setup command).")
    return exe


_memo: dict[str, bytes] = {}


def spirv(source: str, name: str = "kernel") -> bytes:
    """SPIR-V words (as bytes) for a GLSL compute shader."""
    return compiled(source, name)[0]


def compiled(source: str, name: str = "kernel") -> tuple[bytes, str]:
    """(SPIR-V, where it came from: "memory", "disk" or "glslang"). Safe to call from
    several threads at once (kernels compile in a pool: `KernelCache.build_all`)."""
    h = hashlib.sha256(source.encode()).hexdigest()[:32]
    code = _memo.get(h)
    if code is not None:
        return code, "memory"
    path = cache_dir() / f"{h}.spv"
    try:
        code = path.read_bytes()
    except OSError:
        code = None
    if code:
        _memo[h] = code
        return code, "disk"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"{name}.comp"
        out = Path(tmp) / f"{name}.spv"
        src.write_text(source)
        r = subprocess.run([glslang(), "-V", "--target-env", "vulkan1.1", str(src), "-o", str(out)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            numbered = "\n".join(f"{i + 1:4d}  {l}" for i, l in enumerate(source.splitlines()))
            raise ShaderCompileError(f"glslangValidator failed for {name}:\n{r.stdout}{r.stderr}\n{numbered}")
        code = out.read_bytes()
    # a name of this process and thread: two threads compiling one source write apart
    tmp_path = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp_path.write_bytes(code)
    os.replace(tmp_path, path)  # atomic: concurrent test workers never read half a file
    _memo[h] = code
    return code, "glslang"
