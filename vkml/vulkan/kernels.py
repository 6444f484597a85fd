"""Compiled kernels: shader module + pipeline per rendered `Program`, layouts per binding count.

Every kernel has the same interface: binding 0 is a read-only `int meta[]` (shapes,
strides, offsets and scalars of one dispatch), bindings 1..n are tensors. So one
descriptor set layout per arity serves every kernel. A kernel may read some tensors
through uniform texel buffers instead (`program.Binding.texel`): lavapipe reads a
storage buffer lane by lane with a bounds-check branch each, a texel fetch as one gather
(bench/tools/lvp_loads.py); those kernels get a layout per set of texel bindings.
"""
from __future__ import annotations

import atexit
import dataclasses
import hashlib
import os
import struct
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from . import compile as _compile
from . import precompile
from .descriptors import binding_kinds, create_layouts
from .device import Device
from .program import Program
from .vk import vk


@dataclass(frozen=True)
class Kernel:
    """A compiled compute pipeline for one program (pipeline None: not compiled yet)."""
    program: Program
    pipeline: object = None
    layout: object = None
    set_layout: object = None
    source: str = ""

    @property
    def name(self) -> str:
        return self.program.name

    @property
    def n_tensors(self) -> int:
        return self.program.n_tensors

    @property
    def local_size(self) -> int:
        return self.program.local_size

    @property
    def texels(self) -> tuple:
        return self.program.texels

    @property
    def spec(self) -> tuple:
        return self.program.spec

    @property
    def built(self) -> bool:
        """Whether the pipeline exists (a deferred kernel: `KernelCache.get(build=False)`)."""
        return self.pipeline is not None


# VkFormat of a float32 texel holding w elements (a w = 8 load is two 4-element texels)
TEXEL_FORMATS = {1: vk.VK_FORMAT_R32_SFLOAT, 2: vk.VK_FORMAT_R32G32_SFLOAT,
                 4: vk.VK_FORMAT_R32G32B32A32_SFLOAT, 8: vk.VK_FORMAT_R32G32B32A32_SFLOAT}
TEXEL_BYTES = {vk.VK_FORMAT_R32_SFLOAT: 4, vk.VK_FORMAT_R32G32_SFLOAT: 8,
               vk.VK_FORMAT_R32G32B32A32_SFLOAT: 16, vk.VK_FORMAT_R16_UINT: 2, vk.VK_FORMAT_R32G32_UINT: 8,
               vk.VK_FORMAT_R32G32B32A32_UINT: 16, vk.VK_FORMAT_R32_UINT: 4}
# VkFormat of an unsigned texel holding w 16-bit floats (their bits; `lower/lowp.py`)
TEXEL_FORMATS_16 = {1: vk.VK_FORMAT_R16_UINT, 4: vk.VK_FORMAT_R32G32_UINT, 8: vk.VK_FORMAT_R32G32B32A32_UINT}


def texel_format(dev, v, w: int, on: bool | None = None):
    """The texel format a device reads float32 view v through, w elements per load (None:
    a storage buffer; a 16-bit float view: an unsigned texel of its bits), where its profile reads float32 operands as texels (`on` overrides
    `profile.texels`). The view must start on a texel boundary (tensors lie 256 bytes
    apart) and hold whole texels within the device's limit."""
    if not (dev.profile.texels if on is None else on):
        return None
    if v.dtype.itemsize == 2 and v.dtype.kind in "fV" and w in TEXEL_FORMATS_16:    # float16, bfloat16
        fmt = TEXEL_FORMATS_16[w]
    elif v.dtype == np.float32:
        fmt = TEXEL_FORMATS[w]
    else:
        return None
    tb = TEXEL_BYTES[fmt]
    if v.offset % max(dev.texel_alignment, tb) or v.nbytes < tb or v.nbytes // tb > dev.max_texels:
        return None
    return fmt


def divisor(d: int) -> tuple[int, int]:
    """(m, s) for `udiv` in the kernels: floor(x / d) = (x * m) >> (32 + s) for every
    0 <= x < 2^31 (Granlund & Montgomery: m = ceil(2^(31 + l) / d), l = ceil(log2 d),
    s = l - 1; m < 2^32 for d >= 2, and d = 1 is s = -1). m travels as an int32 bit pattern.

    >>> m, s = divisor(7)
    >>> all(((x * (m % 2**32)) >> (32 + s)) == x // 7 for x in (0, 6, 7, 2**31 - 1))
    True
    """
    if d < 1:
        raise ValueError(f"divisor: {d} is not a positive size")
    if d == 1:
        return 0, -1
    l = (d - 1).bit_length()
    m = -(-(1 << (31 + l)) // d)
    return (m - (1 << 32) if m >= 1 << 31 else m), l - 1


class PipelineCacheWarning(UserWarning):
    """A pipeline cache file vkml cannot use (truncated, corrupt, or made for another
    device or driver): it is ignored and replaced at the next save."""


# VkPipelineCacheHeaderVersionOne, written least significant byte first on every host
_HEADER = struct.Struct("<IIII16s")
_DIGEST = 32                       # the file ends in the sha256 of the driver's data
_warned: set = set()               # (file, reason) already warned about in this process


def _env_off(name: str) -> bool:
    return os.environ.get(name, "1").strip().lower() in ("0", "false", "off", "no")


class PipelineCache:
    """A VkPipelineCache kept on disk across processes, so a second process creates the
    pipelines of kernels an earlier one built from the driver's cached binaries instead of
    compiling their SPIR-V again (the SPIR-V itself is cached by `compile`).

    One file per device and driver build ($VKML_CACHE_DIR or ~/.cache/vkml/spirv, under
    pipelines/, named by vendor, device and the driver's pipelineCacheUUID): the driver's
    data followed by its sha256. Before the data reaches the driver, its header
    (VkPipelineCacheHeaderVersionOne: size, version, vendor, device, cache UUID) is checked
    against the device and the digest against the data; a file that fails (`why`) is
    ignored with a `PipelineCacheWarning` once, and the cache starts empty and replaces it
    at the next save. Written at exit and by `save` when it changed, atomically (parallel
    test workers replace it whole). VKML_PIPELINE_CACHE=0 turns it off.
    """

    def __init__(self, dev: Device):
        self.dev = dev
        self.handle = None
        self.dirty = False
        self.path: Path | None = None
        if _env_off("VKML_PIPELINE_CACHE"):
            return
        self.path = _compile.cache_dir() / "pipelines" / f"{dev.pipeline_cache_id}.vkpc"
        try:
            raw = self.path.read_bytes()
        except OSError:
            raw = b""
        data = b""
        if raw:
            why = self.why(raw)
            if why is None:
                data = raw[:-_DIGEST]
            else:
                self._reject(why)
        ffi, lib = vk.ffi, vk.lib
        info = ffi.new("VkPipelineCacheCreateInfo*")
        info.sType = vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO
        buf = ffi.from_buffer(data) if data else ffi.NULL
        info.initialDataSize, info.pInitialData = len(data), buf
        out = ffi.new("VkPipelineCache*")
        r = lib.vkCreatePipelineCache(self.dev.device, info, ffi.NULL, out)
        if r != 0 and data:
            self._reject(f"the driver refused its data (VkResult {r})")
            info.initialDataSize, info.pInitialData = 0, ffi.NULL
            r = lib.vkCreatePipelineCache(self.dev.device, info, ffi.NULL, out)
        if r != 0:
            return
        self.handle = out[0]
        atexit.register(self.save)

    def why(self, raw: bytes) -> str | None:
        """Why the contents of a cache file cannot be used on this device (None: they can).

        >>> from vkml.vulkan import runtime
        >>> PipelineCache(runtime.get().dev).why(b"junk")
        '4 bytes, shorter than a pipeline cache header (32): truncated'
        """
        dev = self.dev
        if len(raw) < _HEADER.size:
            return f"{len(raw)} bytes, shorter than a pipeline cache header ({_HEADER.size}): truncated"
        size, version, vendor, device, uuid = _HEADER.unpack_from(raw)
        if size != _HEADER.size or version != vk.VK_PIPELINE_CACHE_HEADER_VERSION_ONE:
            return (f"header size {size} and version {version} where a Vulkan pipeline cache has "
                    f"{_HEADER.size} and {vk.VK_PIPELINE_CACHE_HEADER_VERSION_ONE}: not a pipeline cache")
        if (vendor, device, uuid) != (dev.vendor_id, dev.device_id, dev.pipeline_cache_uuid):
            return (f"made for vendor {vendor:#x}, device {device:#x}, cache UUID {uuid.hex()}; "
                    f"this device ({dev.name}) is vendor {dev.vendor_id:#x}, device "
                    f"{dev.device_id:#x}, cache UUID {dev.pipeline_cache_uuid.hex()}")
        if len(raw) < _HEADER.size + _DIGEST or hashlib.sha256(raw[:-_DIGEST]).digest() != raw[-_DIGEST:]:
            return "its data do not match their checksum: truncated or corrupt"
        return None

    def _reject(self, why: str) -> None:
        if (str(self.path), why) not in _warned:
            _warned.add((str(self.path), why))
            warnings.warn(f"vkml: ignoring the pipeline cache {self.path}: {why}. Starting with an "
                          f"empty cache; the file is replaced at the next save.",
                          PipelineCacheWarning, stacklevel=3)
        self.dirty = True

    def data(self) -> bytes:
        """The cache's current contents as the driver serialises them."""
        if self.handle is None:
            return b""
        ffi, lib = vk.ffi, vk.lib
        n = ffi.new("size_t*")
        if lib.vkGetPipelineCacheData(self.dev.device, self.handle, n, ffi.NULL) != 0 or not n[0]:
            return b""
        out = ffi.new("char[]", n[0])
        if lib.vkGetPipelineCacheData(self.dev.device, self.handle, n, out) != 0:
            return b""
        return ffi.buffer(out, n[0])[:]

    def save(self) -> None:
        """Write the cache to its file if pipelines were added (or the file was rejected)
        since the last write."""
        if self.handle is None or not self.dirty or self.path is None:
            return
        try:
            data = self.data()
            if not data:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(data + hashlib.sha256(data).digest())
            os.replace(tmp, self.path)
            self.dirty = False
        except OSError:
            pass      # a read-only or full cache directory costs only the speed-up


@dataclass
class BuildStats:
    """What a KernelCache's kernel builds did (`KernelCache.stats`). cache_hits counts
    pipelines the driver reports (VkPipelineCreationFeedback) it found in the pipeline
    cache; it is known only for the `feedback` ones, and a driver whose cache keeps no
    binaries (lavapipe: Mesa caches them itself) reports none. The SPIR-V counts show a
    second process compiling nothing on every driver."""
    pipelines: int = 0         # pipelines created
    cache_hits: int = 0        # ... found in the pipeline cache, by the driver's feedback
    feedback: int = 0          # ... created with creation feedback
    glslang: int = 0           # kernels compiled by glslangValidator (SPIR-V cache misses)
    spirv_disk: int = 0        # kernels whose SPIR-V was read from the disk cache
    glslang_s: float = 0.0     # seconds in SPIR-V compiles and reads, summed over threads
    create_s: float = 0.0      # seconds creating shader modules and pipelines, summed over threads
    precompiled: int = 0       # kernels compiled ahead of their first dispatch (`precompile`)
    build_s: float = 0.0       # wall seconds spent building

    def reset(self) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, f.default)


@dataclass
class _Job:
    """One kernel on its way to a pipeline (`KernelCache.build_all`)."""
    program: Program
    key: str
    source: str
    layouts: tuple
    code: bytes = b""
    pipeline: object = None
    hit: bool | None = None
    precompile: bool = False     # compile it on a helper device too (`precompile`)
    hint: tuple = ()             # ... binding texel views like these (`precompile.texel_hint`)


def pipeline_info(program: Program, module, layout) -> tuple:
    """(VkComputePipelineCreateInfo*, what it points at) for program's shader module under
    a pipeline layout: entry point main, its specialisation constants (`Program.spec`)."""
    ffi = vk.ffi
    ci = ffi.new("VkComputePipelineCreateInfo*")
    ci.sType = vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO
    ci.layout = layout
    st = ci.stage
    name = ffi.new("char[]", b"main")
    st.sType = vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO
    st.stage, st.module, st.pName = vk.VK_SHADER_STAGE_COMPUTE_BIT, module, name
    keep = [name]
    if program.spec:
        values = (int(program.local_size),) + tuple(int(v) for v in program.spec)
        data = ffi.new("int32_t[]", list(values))
        entries = ffi.new("VkSpecializationMapEntry[]", len(values))
        for e in range(len(values)):
            entries[e].constantID, entries[e].offset, entries[e].size = e, 4 * e, 4
        spec = ffi.new("VkSpecializationInfo*")
        spec.mapEntryCount, spec.pMapEntries = len(values), entries
        spec.dataSize, spec.pData = 4 * len(values), data
        st.pSpecializationInfo = spec
        keep += [data, entries, spec]
    return ci, keep


def _helper_pipeline(program: Program):
    """make_pipeline for `precompile.compile_on_helper`: program's pipeline on another device."""
    def make(device, module, layout):
        ci, keep = pipeline_info(program, module, layout)
        out = vk.ffi.new("VkPipeline*")
        if vk.lib.vkCreateComputePipelines(device, vk.ffi.NULL, 1, ci, vk.ffi.NULL, out) != 0:
            raise RuntimeError(f"{program.name}: pipeline refused")
        return out[0]
    return make


def build_threads() -> int:
    """Threads that build kernels: VKML_BUILD_THREADS, else one per core this process
    may run on.

    >>> build_threads() >= 1
    True
    """
    v = os.environ.get("VKML_BUILD_THREADS", "").strip()
    if v.isdigit() and int(v) > 0:
        return int(v)
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class KernelCache:
    """Pipelines by source hash; descriptor set layouts by tensor count. Thread-safe:
    `lock` guards the tables and counters, never a compile (kernels compile in a pool
    of one thread per core, `build_all`)."""

    def __init__(self, dev: Device):
        self.dev = dev
        self._kernels: dict[str, Kernel] = {}
        self._by_program: dict[int, tuple] = {}
        self._layouts: dict[tuple, tuple] = {}
        self.lock = threading.RLock()
        self.pipelines = PipelineCache(dev)
        self.stats = BuildStats()
        self.workers = build_threads()
        self._pool: ThreadPoolExecutor | None = None

    def layout(self, n_tensors: int, texels: tuple = (), push: int = 0):
        """(descriptor set layout, pipeline layout) of kernels binding n_tensors after meta,
        those where texels says so as texel buffers, and reading push bytes of push
        constants (the addresses of `program.Binding.address` bindings)."""
        key = (binding_kinds(n_tensors, texels), push)
        with self.lock:
            if key not in self._layouts:
                self._layouts[key] = create_layouts(self.dev.device, *key)
            return self._layouts[key]

    def get(self, program: Program, build: bool = True) -> Kernel:
        """The kernel for program. build=False: a kernel not compiled yet, unless it
        already is (`build` / `build_all` compile it later): lowering defers them so that
        a graph's kernels compile together and those `merge` replaces never do. A program
        with specialisation constants takes its workgroup size from constant 0 and its own
        from ids 1, 2, ...: one SPIR-V module serves every value, one pipeline per set."""
        hoist = self.dev.profile.hoist_meta
        # keyed by the program object first: an eager operator looks its kernels up at
        # every call, and its family hands back the same program for the same layout
        k = self._by_program.get(id(program))
        if k is not None and k[0] is program and k[1] == hoist:
            return k[2]
        h = program.key(hoist)
        k = self._kernels.get(h)
        if k is None and not build:
            return Kernel(program)
        if k is None:
            k = self._run([self._job(program, h, hoist)], parallel=False)[0]
        if len(self._by_program) > 8192:
            self._by_program.clear()
        self._by_program[id(program)] = (program, hoist, k)
        return k

    def has(self, program: Program) -> bool:
        """Whether program's kernel is compiled already (in this process)."""
        return program.key(self.dev.profile.hoist_meta) in self._kernels

    def build(self, k: Kernel) -> Kernel:
        """k compiled (k itself if it is)."""
        return k if k.built else self.get(k.program)

    def build_all(self, kernels: Sequence[Kernel], hints: Sequence[tuple] = ()) -> list[Kernel]:
        """kernels compiled, those that are not yet compiled together: SPIR-V (glslang on
        a disk-cache miss) and pipeline on a pool of one thread per core, so a first call
        with hundreds of new kernels keeps every core busy (and on lavapipe also compiled
        there, `precompile`; hints: per kernel, its first dispatch's `precompile.texel_hint`).
        Errors are those of `get`."""
        hoist = self.dev.profile.hoist_meta
        todo: dict[str, _Job] = {}
        for q, k in enumerate(kernels):
            if not k.built:
                h = k.program.key(hoist)
                if h not in self._kernels and h not in todo:
                    todo[h] = self._job(k.program, h, hoist)
                    todo[h].hint = hints[q] if q < len(hints) else ()
        if todo:
            parallel = len(todo) > 1 and self.workers > 1
            if parallel and precompile.wanted(self.dev):
                for j in todo.values():
                    j.precompile = True
            # the longest first: the last kernel to finish sets the wall time, and a long
            # one started last would run alone while the other threads sit idle
            jobs = sorted(todo.values(), key=lambda j: -len(j.source)) if parallel else list(todo.values())
            self._run(jobs, parallel=parallel)
        return [k if k.built else self.get(k.program) for k in kernels]

    def _job(self, program: Program, h: str, hoist: int) -> _Job:
        if program.push_bytes > self.dev.max_push_constants:
            raise ValueError(
                f"{program.name}: {len(program.addresses)} operands larger than one storage-buffer binding "
                f"({self.dev.max_storage_buffer_range:,} bytes) need {program.push_bytes} bytes of "
                f"addresses, more than {self.dev.name}'s {self.dev.max_push_constants} bytes of push "
                f"constants. Split the computation into smaller arrays.")
        return _Job(program, h, program.render(hoist),
                    self.layout(program.n_tensors, program.texels, program.push_bytes))

    def _run(self, jobs: list[_Job], parallel: bool) -> list[Kernel]:
        """Make jobs (on the pool where parallel: each worker makes one kernel whole, its
        pipeline included, which beat one vkCreateComputePipelines call for all of them
        on NVIDIA and lavapipe alike; bench/RESULTS.md), enter those made, raise the first
        error."""
        t0 = time.perf_counter()
        try:
            if parallel:
                if self._pool is None:
                    with self.lock:
                        if self._pool is None:
                            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="vkml-build")
                errors = [f.exception() for f in [self._pool.submit(self._make, j) for j in jobs]]
            else:
                errors = []
                for j in jobs:
                    try:
                        self._make(j)
                        errors.append(None)
                    except Exception as e:
                        errors.append(e)
            kernels = [self._register(j) for j, e in zip(jobs, errors) if e is None]
            error = next((e for e in errors if e is not None), None)
            if error is not None:
                raise error
            return kernels
        finally:
            with self.lock:
                self.stats.build_s += time.perf_counter() - t0

    def _make(self, j: _Job) -> None:
        """j's SPIR-V, shader module and pipeline (on any thread: cffi releases the GIL
        around each call, and the VkPipelineCache is internally synchronised)."""
        ffi, lib, d = vk.ffi, vk.lib, self.dev.device
        t0 = time.perf_counter()
        j.code, origin = _compile.compiled(j.source, j.program.name)
        t1 = time.perf_counter()
        try:
            smi = ffi.new("VkShaderModuleCreateInfo*")
            smi.sType = vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO
            code = ffi.from_buffer(j.code)
            smi.codeSize, smi.pCode = len(j.code), ffi.cast("uint32_t*", code)
            sm = ffi.new("VkShaderModule*")
            r = lib.vkCreateShaderModule(d, smi, ffi.NULL, sm)
            if r != 0:
                raise self._refused(j, r)
            try:
                self._pipeline(j, sm[0])
            finally:
                lib.vkDestroyShaderModule(d, sm[0], ffi.NULL)
            if j.precompile and origin == "glslang":
                # lavapipe compiles at the first dispatch, one kernel after another: this
                # thread's helper device compiles it now, into Mesa's disk cache
                done = precompile.compile_on_helper(self.dev, j.code, j.program, _helper_pipeline(j.program),
                                                    j.hint)
                with self.lock:
                    self.stats.precompiled += done
        finally:
            with self.lock:
                self.stats.glslang += origin == "glslang"
                self.stats.spirv_disk += origin == "disk"
                self.stats.glslang_s += t1 - t0
                self.stats.create_s += time.perf_counter() - t1

    def _pipeline(self, j: _Job, module) -> None:
        ffi, lib = vk.ffi, vk.lib
        ci, keep = pipeline_info(j.program, module, j.layouts[1])
        fb = ffi.new("VkPipelineCreationFeedback[2]")     # the pipeline's, its stage's
        if self.dev.creation_feedback:
            fci = ffi.new("VkPipelineCreationFeedbackCreateInfo*")
            fci.sType = vk.VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO
            fci.pPipelineCreationFeedback = fb
            fci.pipelineStageCreationFeedbackCount, fci.pPipelineStageCreationFeedbacks = 1, fb + 1
            ci.pNext = fci
        out = ffi.new("VkPipeline*")
        cache = self.pipelines.handle if self.pipelines.handle is not None else ffi.NULL
        r = lib.vkCreateComputePipelines(self.dev.device, cache, 1, ci, ffi.NULL, out)
        if r != 0:
            raise self._refused(j, r)
        j.pipeline = out[0]
        if fb[0].flags & vk.VK_PIPELINE_CREATION_FEEDBACK_VALID_BIT:
            j.hit = bool(fb[0].flags & vk.VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT)

    def _refused(self, j: _Job, result: int) -> RuntimeError:
        what = vk.exception_codes[result].__name__ if result in vk.exception_codes else f"VkResult {result}"
        return RuntimeError(
            f"{j.program.name}: {self.dev.name}'s driver could not build this kernel "
            f"({what}; {len(j.source.splitlines())} lines of GLSL, local size "
            f"{j.program.local_size}). Drivers reject very large unrolled kernels: a smaller "
            f"tiling (vkml.vulkan.lower.matmul.set_tiling) or the default one avoids it.")

    def _register(self, j: _Job) -> Kernel:
        """The kernel of a made job, entered in the table (the one already there where
        another thread made the same kernel meanwhile)."""
        with self.lock:
            k = self._kernels.get(j.key)
            if k is not None:
                vk.lib.vkDestroyPipeline(self.dev.device, j.pipeline, vk.ffi.NULL)
                return k
            self.stats.pipelines += 1
            self.stats.feedback += j.hit is not None
            self.stats.cache_hits += bool(j.hit)
            if self.pipelines.handle is not None:
                self.pipelines.dirty = True
            dsl, pl = j.layouts
            k = self._kernels[j.key] = Kernel(j.program, j.pipeline, pl, dsl, j.source)
            return k

    def __len__(self) -> int:
        return len(self._kernels)
