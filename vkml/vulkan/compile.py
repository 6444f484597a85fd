"""GLSL to SPIR-V, cached on disk by source hash.

The cache lives in $VKML_CACHE_DIR or ~/.cache/vkml/spirv; a hit costs one file read.
An empty file (a write cut short) counts as a miss. A miss compiles in this process
through `glslang_lib` where it can be built (a millisecond or so a kernel), otherwise
with glslangValidator (~150 ms a kernel, most of it the program's start-up); both give
the same SPIR-V.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from . import glslang_lib as _glslang_lib


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
    if _glslang_lib.load() is not None:
        try:
            code = _glslang_lib.compile_glsl(source)
        except _glslang_lib.GlslangLibError as e:
            raise ShaderCompileError(f"glslang failed for {name}:\n{e}\n{_numbered(source)}") from None
    else:
        code = _run_validator(source, name)
    # a name of this process and thread: two threads compiling one source write apart
    tmp_path = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp_path.write_bytes(code)
    os.replace(tmp_path, path)  # atomic: concurrent test workers never read half a file
    _memo[h] = code
    return code, "glslang"


def _numbered(source: str) -> str:
    return "\n".join(f"{i + 1:4d}  {l}" for i, l in enumerate(source.splitlines()))


def _run_validator(source: str, name: str) -> bytes:
    """SPIR-V from the glslangValidator program (`--target-env vulkan1.1`)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"{name}.comp"
        out = Path(tmp) / f"{name}.spv"
        src.write_text(source)
        r = subprocess.run([glslang(), "-V", "--target-env", "vulkan1.1", str(src), "-o", str(out)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise ShaderCompileError(
                f"glslangValidator failed for {name}:\n{r.stdout}{r.stderr}\n{_numbered(source)}")
        return out.read_bytes()
