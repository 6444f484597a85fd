"""The in-process glslang (vkml/vulkan/glslang_lib.py) gives glslangValidator's SPIR-V."""
from __future__ import annotations

import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.vulkan import compile as vkcompile
from vkml.vulkan import glslang_lib


def _validator(source: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "k.comp", Path(tmp) / "k.spv"
        src.write_text(source)
        subprocess.run([vkcompile.glslang(), "-V", "--target-env", "vulkan1.1", str(src), "-o", str(out)],
                       check=True, capture_output=True)
        return out.read_bytes()


@pytest.fixture(autouse=True)
def _loaded():
    glslang_lib.load()


def _sources() -> list[str]:
    """GLSL of kernels of several families: fused elementwise (float16 and int too), a
    subgroup reduction, a MatMul with an epilogue, a softmax, a gather."""
    x = vnp.asarray(np.linspace(-2, 2, 96, dtype=np.float32).reshape(8, 12))
    w = vnp.asarray(np.ones((12, 5), np.float32))
    i = vnp.asarray(np.array([3, 0, 7, 1], np.int32))

    fs = [lambda x, w, i: vnp.tanh(x @ w + 1.0), lambda x, w, i: vnp.sum(vnp.exp(x), axis=0),
          lambda x, w, i: vkml.nn.functional.softmax(x, axis=-1), lambda x, w, i: x[i],
          lambda x, w, i: (x.astype(vnp.float16) * 3).astype(vnp.float32), lambda x, w, i: (i * 7) % 3]
    out = set()
    for f in fs:
        jf = vkml.jit(f)
        jf(x, w, i)
        out |= {d.kernel.source for d in jf._entry((x, w, i))[0][0].lowered.dispatches}
    return sorted(out)


def test_the_library_is_built_where_the_test_command_installs_it():
    # `./run test` installs glslang-dev and a C++ compiler; a suite that silently fell back
    # to glslangValidator would spend ~150 ms a kernel (the cold-suite budget depends on it)
    assert glslang_lib.load() is not None, glslang_lib.why_not


def test_same_spirv_as_glslang_validator():
    sources = _sources()
    assert len(sources) >= 5
    for s in sources:
        assert glslang_lib.compile_glsl(s) == _validator(s)


def test_threads_compile_at_once_and_agree():
    sources = _sources()
    want = [glslang_lib.compile_glsl(s) for s in sources]
    got: dict[int, list[bytes]] = {}

    def work(k: int) -> None:
        got[k] = [glslang_lib.compile_glsl(s) for s in sources[k % len(sources):] + sources[:k % len(sources)]]

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for k, outs in got.items():
        n = k % len(sources)
        assert outs == want[n:] + want[:n]


def test_a_bad_shader_raises_with_the_log_and_numbered_source(tmp_path, monkeypatch):
    monkeypatch.setenv("VKML_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(vkcompile, "_memo", {})
    bad = "#version 450\nlayout(local_size_x=1) in;\nvoid main(){ undefined_name = 1; }\n"
    with pytest.raises(vkcompile.ShaderCompileError, match=r"(?s)undefined_name.*   3  void main"):
        vkcompile.compiled(bad, "bad")
    assert not list(tmp_path.glob("*.spv"))  # nothing cached for a failed compile


def test_without_the_library_glslang_validator_gives_the_same_bytes(tmp_path, monkeypatch):
    source = _sources()[0]
    want = glslang_lib.compile_glsl(source)
    monkeypatch.setenv("VKML_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(vkcompile, "_memo", {})
    monkeypatch.setattr(glslang_lib, "load", lambda directory=None: None)
    assert vkcompile.compiled(source, "k") == (want, "glslang")


def test_the_library_lives_apart_from_the_kernel_cache(tmp_path, monkeypatch):
    # a fresh kernel cache (a cold benchmark, a test's tmp dir) must not rebuild the compiler
    before = glslang_lib.default_dir()
    monkeypatch.setenv("VKML_CACHE_DIR", str(tmp_path / "spirv"))
    assert glslang_lib.default_dir() == before
    monkeypatch.setenv("VKML_GLSLANG_LIB_DIR", str(tmp_path / "lib"))
    assert glslang_lib.default_dir() == tmp_path / "lib"
