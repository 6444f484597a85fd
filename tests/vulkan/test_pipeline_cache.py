"""The kernel build path at scale: the persistent pipeline cache (`kernels.PipelineCache`:
a second process builds from it, a bad file is ignored with a warning) and kernels built
together on a thread pool (`KernelCache.build_all`) with the same results as one by one."""
from __future__ import annotations

import hashlib
import json
import re
import os
import struct
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.vulkan import compile as vkcompile
from vkml.vulkan import runtime
from vkml.vulkan.compile import ShaderCompileError
from vkml.vulkan.kernels import Kernel, KernelCache, PipelineCache, PipelineCacheWarning
from vkml.vulkan.program import Program

ROOT = Path(__file__).resolve().parents[2]
DEV = runtime.get().dev

# A small program with a few kernels of its own (a comment in the source that no other
# test compiles: its SPIR-V is never in a shared cache), reporting its build counters
_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import vkml, vkml.numpy as vnp
from vkml.vulkan import runtime
rng = np.random.default_rng(0)
x = rng.standard_normal((37, 19)).astype(np.float32)
w = rng.standard_normal((19, 11)).astype(np.float32)
f = vkml.jit(lambda x, w: (vnp.tanh(x @ w + 0.25) * 3.0).sum(axis=0) - vnp.exp(-x).max())
out = np.asarray(f(vnp.asarray(x), vnp.asarray(w)))
kc = runtime.get().kernels
kc.pipelines.save()
st = kc.stats
path = kc.pipelines.path
print("STATS " + json.dumps(dict(out=out.tolist(), file=path.stat().st_size if path else 0,
                                 **{k: getattr(st, k) for k in st.__dataclass_fields__})))
"""


def _child(cache: Path, **env) -> tuple[dict, str]:
    e = dict(os.environ, VKML_CACHE_DIR=str(cache), MESA_SHADER_CACHE_DIR=str(cache / "mesa"), **env)
    r = subprocess.run([sys.executable, "-c", _CHILD, str(ROOT)], env=e, capture_output=True, text=True,
                       timeout=600)
    line = next((l for l in r.stdout.splitlines() if l.startswith("STATS ")), None)
    assert line is not None, r.stdout[-2000:] + r.stderr[-4000:]
    return json.loads(line[6:]), r.stderr


def test_second_process_builds_its_pipelines_from_the_caches(tmp_path):
    """Process 1 (empty caches) compiles every kernel with glslang and saves the pipeline
    cache; process 2 runs glslang for none, reads every SPIR-V module from disk and, on a
    driver whose pipeline cache keeps binaries, creates every pipeline from it (the
    driver's creation feedback says so). lavapipe's keeps only the header (Mesa caches
    LLVM code itself, unseen by Vulkan), so there it reports no hits."""
    first, _ = _child(tmp_path)
    assert first["pipelines"] >= 3 and first["glslang"] == first["pipelines"]
    assert first["cache_hits"] == 0
    second, _ = _child(tmp_path)
    assert second["out"] == first["out"]
    assert second["pipelines"] == first["pipelines"]
    assert second["glslang"] == 0 and second["spirv_disk"] == second["pipelines"]
    if DEV.creation_feedback:
        assert second["feedback"] == second["pipelines"]
    header_only = first["file"] <= 32 + 32          # the header and vkml's digest
    if DEV.creation_feedback and not header_only:
        assert second["cache_hits"] == second["pipelines"], second
    else:
        assert second["cache_hits"] == 0, second
    # without the pipeline cache, nothing can come from it
    third, _ = _child(tmp_path, VKML_PIPELINE_CACHE="0")
    assert third["cache_hits"] == 0 and third["out"] == first["out"]


def test_pipeline_cache_persists_across_processes(tmp_path, monkeypatch):
    """Pipelines are created through a VkPipelineCache kept on disk (the driver's data and
    their sha256): a new cache (as a second process makes) starts from the file an
    earlier one saved; VKML_PIPELINE_CACHE=0 creates pipelines without one."""
    monkeypatch.setenv("VKML_CACHE_DIR", str(tmp_path))
    first = PipelineCache(DEV)
    assert first.handle is not None and first.path.parent == tmp_path / "pipelines"
    first.dirty = True
    first.save()
    saved = first.path.read_bytes()
    assert saved[:-32] == first.data() and saved[-32:] == hashlib.sha256(saved[:-32]).digest()
    assert not first.dirty and first.why(saved) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # a good file loads without a warning
        second = PipelineCache(DEV)
    assert second.handle is not None and second.data()[:32] == saved[:32] and not second.dirty
    monkeypatch.setenv("VKML_PIPELINE_CACHE", "0")
    kc = KernelCache(DEV)
    assert kc.pipelines.handle is None
    p = Program("no_pipeline_cache")
    o = p.buffer("o", "float")
    p.main(f"{o}[gidx()] = 2.0;")
    assert kc.get(p).built and kc.stats.pipelines == 1 and kc.stats.cache_hits == 0


def _good_file(tmp_path, monkeypatch) -> bytes:
    monkeypatch.setenv("VKML_CACHE_DIR", str(tmp_path))
    pc = PipelineCache(DEV)
    pc.dirty = True
    pc.save()
    return pc.path.read_bytes()


def _with_digest(data: bytes) -> bytes:
    return data + hashlib.sha256(data).digest()


def _foreign_uuid(good: bytes) -> bytes:
    size, version, vendor, device, uuid = struct.unpack_from("<IIII16s", good)
    other = bytes(b ^ 0xFF for b in uuid)
    return _with_digest(struct.pack("<IIII16s", size, version, vendor, device, other) + good[32:-32])


def _foreign_device(good: bytes) -> bytes:
    size, version, vendor, device, uuid = struct.unpack_from("<IIII16s", good)
    return _with_digest(struct.pack("<IIII16s", size, version, vendor ^ 1, device, uuid) + good[32:-32])


BAD = {
    "random bytes": (lambda good: np.random.default_rng(1).integers(0, 256, 4096, np.uint8).tobytes(),
                     "not a pipeline cache"),
    "truncated header": (lambda good: good[:20], "20 bytes, shorter than a pipeline cache header"),
    "wrong cache UUID": (_foreign_uuid, "made for vendor .* cache UUID"),
    "another vendor": (_foreign_device, "made for vendor"),
    "cut after the header": (lambda good: good[:40], "do not match their checksum"),
    "a flipped bit": (lambda good: good[:-1] + bytes([good[-1] ^ 1]), "do not match their checksum"),
}


@pytest.mark.parametrize("kind", list(BAD))
def test_a_bad_cache_file_is_ignored_with_a_warning(tmp_path, monkeypatch, kind):
    """A truncated, garbage or foreign file: one warning naming the file and why, an
    empty cache that builds kernels, and the file replaced by a good one at the next
    save."""
    good = _good_file(tmp_path, monkeypatch)
    make, why = BAD[kind]
    bad = make(good)
    path = tmp_path / "pipelines" / f"{DEV.pipeline_cache_id}.vkpc"
    path.write_bytes(bad)
    with pytest.warns(PipelineCacheWarning, match=f"ignoring the pipeline cache {re.escape(str(path))}: .*{why}"):
        kc = KernelCache(DEV)
    assert kc.pipelines.handle is not None and kc.pipelines.dirty
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # once per file and reason
        again = PipelineCache(DEV)
    assert again.handle is not None
    p = Program("bad_cache_file")
    o = p.buffer("o", "float")
    p.main(f"{o}[gidx()] = 3.0; // {kind}")
    assert kc.get(p).built and kc.stats.pipelines == 1
    kc.pipelines.save()
    assert path.read_bytes() != bad and kc.pipelines.why(path.read_bytes()) is None


def test_a_program_runs_despite_a_garbage_cache_file(tmp_path):
    """End to end: a process meeting a garbage file warns (naming it), computes the same
    results, and leaves a good file behind that the next process loads silently."""
    ref, _ = _child(tmp_path)
    path = tmp_path / "pipelines" / f"{DEV.pipeline_cache_id}.vkpc"
    path.write_bytes(b"\x00garbage" * 100)
    got, err = _child(tmp_path)
    assert "PipelineCacheWarning" in err and str(path) in err and "not a pipeline cache" in err, err
    assert got["out"] == ref["out"]
    assert DEV.creation_feedback is False or got["feedback"] == got["pipelines"]
    _, err = _child(tmp_path)
    assert "PipelineCacheWarning" not in err, err


# --------------------------------------------------------------------------- parallel builds


def _many():
    """A function with a dozen kernels of its own (elementwise regions, reductions, a
    MatMul with an epilogue)."""
    def f(x, w):
        outs = []
        for i, g in enumerate((vnp.tanh, vnp.exp, vnp.sin, vnp.cos, vnp.abs, vnp.sqrt)):
            h = g(x * (0.5 + i) + 0.125) @ w
            outs.append((h - h.max(axis=1, keepdims=True)).sum(axis=0) * (i + 1))
        return outs
    rng = np.random.default_rng(4)
    return f, (rng.standard_normal((29, 23)).astype(np.float32), rng.standard_normal((23, 13)).astype(np.float32))


def _fresh(monkeypatch, tmp_path, workers: int) -> KernelCache:
    """The runtime with a kernel cache of its own, nothing compiled yet (not even SPIR-V)."""
    monkeypatch.setenv("VKML_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("VKML_BUILD_THREADS", str(workers))
    monkeypatch.setattr(vkcompile, "_memo", {})
    kc = KernelCache(DEV)
    monkeypatch.setattr(runtime.get(), "kernels", kc)
    return kc


def _jitted(f, args):
    jf = vkml.jit(f)
    out = [np.asarray(o) for o in jf(*(vnp.asarray(a) for a in args))]
    return out, sorted(d.kernel.source for d in jf._entry(tuple(vnp.asarray(a) for a in args))[0][0]
                       .lowered.dispatches)


def test_parallel_builds_give_the_same_kernels_and_results(tmp_path, monkeypatch):
    """A graph's kernels built together on a pool (glslang runs included) give the same
    sources and bits as built one by one, and every one is compiled once."""
    f, args = _many()
    with monkeypatch.context() as m:
        serial = _fresh(m, tmp_path / "serial", 1)
        want, want_src = _jitted(f, args)
        assert serial._pool is None and serial.stats.glslang == len(serial) >= 8
    with monkeypatch.context() as m:
        par = _fresh(m, tmp_path / "parallel", 4)
        got, got_src = _jitted(f, args)
        assert par._pool is not None and par.stats.glslang == len(par) == len(serial)
        assert par.stats.pipelines == len(par)
    assert got_src == want_src
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    x, w = (a.astype(np.float64) for a in args)
    h = np.tanh(x * 0.5 + 0.125) @ w
    np.testing.assert_allclose(got[0], (h - h.max(axis=1, keepdims=True)).sum(axis=0), rtol=1e-5, atol=1e-5)


def _programs(n: int, tag: str) -> list[Program]:
    out = []
    for i in range(n):
        p = Program(f"pool_{i}")
        o = p.buffer("o", "float")
        p.main(f"{o}[gidx()] = {i}.0; // {tag}")
        out.append(p)
    return out


def test_build_all_is_thread_safe(tmp_path, monkeypatch):
    """Threads building overlapping sets of kernels at once get one kernel per program."""
    monkeypatch.setenv("VKML_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(vkcompile, "_memo", {})
    kc = KernelCache(DEV)
    progs = _programs(12, f"threads {tmp_path.name}")
    results, errors = [], []

    def work(k):
        try:
            results.append(kc.build_all([Kernel(p) for p in progs[k:] + progs[:k]]))
        except Exception as e:       # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(kc) == 12 and kc.stats.pipelines == 12
    for r in results:
        assert all(k.built for k in r)
        assert {k.program.name: k.pipeline for k in r} == {k.program.name: kc.get(k.program).pipeline
                                                           for k in r}


def test_a_kernel_that_fails_to_compile_in_a_pool_is_named(tmp_path, monkeypatch):
    """glslang's error in a pool is the one a single build raises (naming the kernel and
    showing its source); the kernels that compiled are kept."""
    monkeypatch.setenv("VKML_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("VKML_BUILD_THREADS", "4")
    kc = KernelCache(DEV)
    good = _programs(3, f"failing pool {tmp_path.name}")
    bad = Program("broken_pool_kernel")
    o = bad.buffer("o", "float")
    bad.main(f"{o}[gidx()] = not_a_value;")
    with pytest.raises(ShaderCompileError, match=r"broken_pool_kernel(?s:.*)not_a_value"):
        kc.build_all([Kernel(p) for p in good[:2] + [bad] + good[2:]])
    assert len(kc) == 3 and all(kc.get(p, build=False).built for p in good)
