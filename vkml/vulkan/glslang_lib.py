"""glslang as a library in this process, built on first use from `glslang_lib.cpp`.

glslangValidator spends ~150 ms of every run building glslang's built-in symbol tables,
whatever the shader; in one process the library builds them once, so a kernel costs only
its own parse and code generation (a few milliseconds). The library is compiled once per
machine with the C++ compiler against the static libraries of Debian's `glslang-dev` into
$VKML_GLSLANG_LIB_DIR or ~/.cache/vkml/lib (apart from the kernel cache, so a fresh
VKML_CACHE_DIR does not rebuild the compiler: that takes seconds), and loaded with ctypes.
Where either is missing, or ``VKML_GLSLANG_LIB=0``, `compile` runs glslangValidator as before: same SPIR-V, slower.
``VKML_GLSLANG_LIB=<path>`` loads a library built elsewhere (a machine without glslang-dev).

>>> from vkml.vulkan import compile, glslang_lib
>>> lib = glslang_lib.load()
>>> lib is None or glslang_lib.compile_glsl(
...     "#version 450\\nlayout(local_size_x=1) in;\\nvoid main(){}\\n")[:4] == b"\\x03\\x02#\\x07"
True
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import threading
import warnings
from pathlib import Path

_SOURCE = Path(__file__).with_name("glslang_lib.cpp")
_INCLUDE = Path("/usr/include/glslang/Public/ShaderLang.h")
# the order matters to a static link: each library before the ones it uses
_LIBS = ("glslang", "MachineIndependent", "GenericCodeGen", "OSDependent", "OGLCompiler",
         "SPIRV", "glslang-default-resource-limits", "SPIRV-Tools-opt", "SPIRV-Tools")

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_tried = False
why_not: str = ""  # why the library is not in use (empty while it is)


class GlslangLibError(RuntimeError):
    """The in-process glslang rejected a shader; the message holds its info log."""


def _lib_dir() -> Path | None:
    """Where glslang-dev's static libraries are, if anywhere."""
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        if (Path(d) / "libglslang.a").exists():
            return Path(d)
    return None


def _build(target: Path, libdir: Path, cxx: str) -> None:
    archives = [str(libdir / f"lib{n}.a") for n in _LIBS]
    tmp = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    cmd = [cxx, "-O1", "-fPIC", "-shared", "-o", str(tmp), str(_SOURCE),
           "-Wl,--no-undefined", "-Wl,--start-group", *archives, "-Wl,--end-group", "-lpthread"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise OSError(f"building {target.name} failed:\n{r.stderr[-2000:]}")
    os.replace(tmp, target)  # atomic: parallel workers never load half a file


def default_dir() -> Path:
    """Where the library is built: $VKML_GLSLANG_LIB_DIR or ~/.cache/vkml/lib."""
    return Path(os.environ.get("VKML_GLSLANG_LIB_DIR") or Path.home() / ".cache" / "vkml" / "lib")


def load(directory: Path | None = None) -> ctypes.CDLL | None:
    """The loaded library, building it into `directory` (default `default_dir()`) first
    if it is not there; None where it cannot be had (`why_not` says why). Built and
    loaded at most once per process."""
    global _lib, _tried, why_not
    if _tried:
        return _lib
    with _lock:
        if _tried:
            return _lib
        try:
            # Path.home() raises RuntimeError where no home directory can be found
            _lib = _load(default_dir() if directory is None else directory)
        except (OSError, RuntimeError) as e:
            # glslang-dev is there but the library did not build or load: say so once, since
            # every new kernel now costs a glslangValidator run
            _lib, why_not = None, str(e)
            warnings.warn(f"vkml: compiling kernels with glslangValidator; the in-process glslang "
                          f"failed: {e}", RuntimeWarning, stacklevel=2)
        _tried = True
    return _lib


def _load(d: Path) -> ctypes.CDLL | None:
    global why_not
    setting = os.environ.get("VKML_GLSLANG_LIB", "")
    if setting == "0":
        why_not = "VKML_GLSLANG_LIB=0"
        return None
    if setting not in ("", "1"):
        return _bind(ctypes.CDLL(setting))
    libdir = _lib_dir()
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not _INCLUDE.exists() or libdir is None:
        why_not = "glslang-dev (headers and static libraries) is not installed"
        return None
    key = hashlib.sha256(_SOURCE.read_bytes()
                         + b"".join(str(os.stat(libdir / f"lib{n}.a").st_mtime_ns).encode()
                                    for n in _LIBS)).hexdigest()[:16]
    d.mkdir(parents=True, exist_ok=True)
    target = d / f"libvkml_glslang-{key}.so"
    if not target.exists():
        if not cxx:
            why_not = "no C++ compiler (c++ or g++) to build the glslang library"
            return None
        _build(target, libdir, cxx)
    return _bind(ctypes.CDLL(str(target)))


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    global why_not
    lib.vkml_glslang_compile.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_uint)),
                                         ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_char_p)]
    lib.vkml_glslang_compile.restype = ctypes.c_int
    lib.vkml_glslang_free.argtypes = [ctypes.c_void_p]
    lib.vkml_glslang_free.restype = None
    why_not = ""
    return lib


def compile_glsl(source: str) -> bytes:
    """SPIR-V (bytes) of a GLSL compute shader, compiled in this process. ctypes drops the
    GIL for the call, so the compile pool's threads compile in parallel."""
    lib = _lib
    if lib is None:
        raise RuntimeError(f"vkml: the in-process glslang is not loaded ({why_not or 'call load'})")
    words = ctypes.POINTER(ctypes.c_uint)()
    n = ctypes.c_size_t()
    log = ctypes.c_char_p()
    rc = lib.vkml_glslang_compile(source.encode(), ctypes.byref(words), ctypes.byref(n), ctypes.byref(log))
    if rc != 0:
        msg = ctypes.cast(log, ctypes.c_char_p).value or b""
        lib.vkml_glslang_free(ctypes.cast(log, ctypes.c_void_p))
        raise GlslangLibError(msg.decode(errors="replace"))
    out = ctypes.string_at(words, n.value * 4)
    lib.vkml_glslang_free(ctypes.cast(words, ctypes.c_void_p))
    return out
