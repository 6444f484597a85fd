"""The one Vulkan device of the process: instance, physical device choice, queue, limits.

`VKML_DEVICE=<index>` picks a physical device; otherwise the first discrete GPU, then
integrated, then virtual, then CPU (lavapipe). Limits are queried, never assumed.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

from .vk import vk


class VulkanUnavailableError(RuntimeError):
    """No Vulkan loader or no physical device: vkml cannot run here."""


_TYPE_NAMES = {0: "other", 1: "integrated GPU", 2: "discrete GPU", 3: "virtual GPU", 4: "CPU"}
_PREFERENCE = {2: 0, 1: 1, 3: 2, 4: 3, 0: 4}


@dataclass(frozen=True)
class DeviceInfo:
    """What vkml.devices() reports for one physical device."""
    index: int
    name: str
    kind: str
    api_version: str

    def __str__(self) -> str:
        return f"[{self.index}] {self.name} ({self.kind}, Vulkan {self.api_version})"


def _cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux reports them (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def lavapipe_vectors() -> None:
    """Ask lavapipe for 512-bit vectors (subgroups of 16) on a CPU with AVX-512, unless
    LP_NATIVE_VECTOR_WIDTH is already set; it is read when the driver starts, so this runs
    before the instance is created. llvmpipe defaults to 256 bits everywhere. A float32
    MatMul then does twice the work per instruction (bench/RESULTS.md); elementwise and
    reduction kernels are unchanged. GPUs ignore the variable.

    >>> saved = os.environ.get("LP_NATIVE_VECTOR_WIDTH")
    >>> os.environ["LP_NATIVE_VECTOR_WIDTH"] = "256"   # a width already chosen is kept
    >>> lavapipe_vectors()
    >>> os.environ["LP_NATIVE_VECTOR_WIDTH"]
    '256'
    >>> if saved is None: del os.environ["LP_NATIVE_VECTOR_WIDTH"]
    ... else: os.environ["LP_NATIVE_VECTOR_WIDTH"] = saved
    """
    if "LP_NATIVE_VECTOR_WIDTH" not in os.environ and "avx512f" in _cpu_flags():
        os.environ["LP_NATIVE_VECTOR_WIDTH"] = "512"


# VkDriverId values (VK_KHR_driver_properties, core in Vulkan 1.2) -> vkml's driver names
_DRIVERS = {1: "amd", 2: "amd", 3: "amd", 4: "nvidia", 5: "intel", 6: "intel", 7: "imagination",
            8: "qualcomm", 9: "arm", 10: "swiftshader", 11: "other", 12: "other", 13: "lavapipe",
            14: "other", 15: "other", 16: "arm", 17: "other", 18: "other", 19: "other", 20: "other",
            21: "other", 22: "apple", 23: "other", 24: "other", 25: "other", 26: "other"}


def lavapipe_workers() -> int:
    """lavapipe's worker threads: LP_NUM_THREADS, else one per CPU on a machine with more
    than one (none on one CPU: the queue thread runs every workgroup), at most 16."""
    v = os.environ.get("LP_NUM_THREADS")
    n = int(v) if v and v.strip().isdigit() else (os.cpu_count() or 1)
    if v is None and n <= 1:
        n = 0
    return min(n, 16)


@dataclass(frozen=True)
class Profile:
    """Everything a lowering, the scheduler and the runtime decide by device: built once
    per device (`profile_for`) from its driver and queried limits, passed in the lowering
    context. Tests make variants with `dataclasses.replace` (see `using`); a profile is
    part of every compiled program's cache key, so a variant never replays another's.

    The lavapipe entries work around how llvmpipe runs compute shaders on host cores: it
    runs the dispatches of a command buffer one after another (so `merge` joins
    independent ones), loads a storage buffer lane by lane with a bounds check (so float32
    operands are read as texels, meta values hoisted, 32-bit data moved as uint64 pairs)
    and ends any loop after 65535 iterations. Another CPU driver (SwiftShader) gets the
    CPU layouts without those workarounds; a GPU gets the GPU layouts.

    >>> p = get().profile
    >>> dataclasses.replace(p, texels=False).texels, p.layout in ("cpu", "gpu")
    (False, True)
    """
    driver: str                 # "lavapipe", "swiftshader", "nvidia", "amd", "intel", ...
    cpu: bool                   # the device runs on host cores
    # how multi-pass families lay out work: "cpu" (lanes stream contiguous runs) or "gpu"
    # (threads interleave loads); also whether fusion recomputes small broadcasts
    layout: str
    workers: int = 0            # host threads that run workgroups (lavapipe); 0: not a CPU driver
    # ---- low precision (float16 / bfloat16 arrays, `trace/dtypes.py`)
    storage16: bool = False     # 16-bit storage buffers: float16/bfloat16 arrays hold 2 bytes per element
    float16: bool = False       # native float16 arithmetic (shaderFloat16); vkml computes in float32 either way
    bfloat16: bool = False      # native bfloat16 arithmetic (no Vulkan core feature): converted by bit operations
    # round every 16-bit operator's float32 result inside a fused kernel, not only the
    # values it stores: off (as XLA's xla_allow_excess_precision), a fused chain keeps
    # its intermediates in float32 and rounds once at the store; on, a jitted chain gives
    # the bits of the same operators run one by one
    lowp_round_each: bool = False
    cores: int = 1              # host cores (the CPU matmul tiling keeps each busy)
    merge: bool = False         # run independent dispatches as one (`vulkan/merge.py`)
    dynamic: bool = False       # ... and big single ones as a loop over an atomic counter
    # read a kernel's fixed meta values first thing in main() where it reads at least this
    # many (0: never): lavapipe loads a uniform value as one scalar only while every
    # invocation is known active; a streaming kernel reading a few ran slower hoisted
    hoist_meta: int = 0
    texels: bool = False        # read float32 operands through uniform texel buffers
    wide_loads: bool = False    # move 32-bit data as uint64 pairs (eight per u64vec4)
    vectorize: bool = True      # elementwise regions: several elements per thread on large arrays
    vector_min: int = 1 << 14   # ... from this many elements
    large_groups: bool = False  # elementwise: 1024 invocations per workgroup on large kernels
    loop_limit: int = 0         # iterations after which the driver ends a loop (0: none)
    # How long a submission's wait polls before it blocks: a GPU signals its fence tens of
    # microseconds before a blocking wait wakes up. lavapipe wakes its worker threads for
    # every dispatch, and a core that went idle in a VM is slow to wake: a host thread
    # polling with sched_yield keeps one awake while giving it to any runnable worker
    # (polling without yielding was slower than blocking; bench/RESULTS.md).
    poll_s: float = 0.005
    poll_yield: bool = False
    host_cached_reads: bool = False   # read results through host-cached memory where there is any
    # ---- fusion (`vulkan/fusion.py`) and elementwise regions (`lower/elementwise.py`)
    fuse: bool = True           # fuse kernels (`profile_for`: off where VKML_FUSION is 0/false/off/no)
    recompute_small: int = 0    # regions up to this size recompute their broadcast inputs (0: never)
    inline_sum: int = 0         # a Sum over at most this many elements per output is inlined (0: never)
    fold_transposes: bool = True
    matmul_epilogues: bool = True
    max_leaves: int = 12        # materialised inputs one region may read
    # (end of fusion/elementwise fields)

    # ---- reductions (`lower/reduce.py`)
    reduce_unroll: int = 8      # thread passes of a reduction: loop steps written out per iteration
    # (end of reduce fields)

    # ---- matmul (`lower/matmul`)
    matmul_texels: bool = False       # the subgroup kernel reads float32 operands and epilogue leaves as texels
    matmul_vec4: bool = True          # GPU tilings: the vec4 shared kernel where it fits
    matmul_prefetch: bool = False     # ... with register prefetch, for a forced tiling
    # ... its slab's k loop marked [[unroll]], and two slabs in shared memory (one barrier
    # a slab): None takes the tuned choice per operand layout (`tiling.VEC4_SCHEMES`).
    # Both apply to the kernel with tiles as specialisation constants only
    # (`matmul_spec_tiles`, tiles up to `spec.SPEC_MAX`); two slabs only where they fit
    matmul_unroll_k: bool | None = None
    matmul_double_buffer: bool | None = None
    matmul_wide_stores: bool = True   # the subgroup kernel stores runs of columns as one value
    # the subgroup kernel's CPU-tuned variants (on for CPU devices in `profile_for`):
    matmul_interleave: bool = False   # B^T columns one lane apart where rows would share a cache set
    matmul_swap: bool = False         # C^T = B^T A^T for fewer columns than lanes
    matmul_tail_chunk: bool = False   # k past the last whole chunk as one masked chunk
    matmul_spec_tiles: bool = True    # GPU kernels take their tiling as specialisation constants
    # the shared kernel's register-tile rows / columns adjacent in shared memory (read as
    # runs) instead of a workgroup row apart: measured slower, kept for comparison
    matmul_contiguous: tuple = (False, False)
    matmul_tiling: object = None      # a forced `lower.matmul.Tiling` (tuning, tests), else per device
    # float16 products on tensor cores (`lower/matmul/coop.py`): set where the device has
    # VK_NV_cooperative_matrix with 16x16x16 float16 fragments and float32 accumulators,
    # 32-lane subgroups and 16-bit storage; $VKML_COOP=0 keeps the float32 SIMT kernels
    matmul_coop: bool = False
    # (end of matmul fields)

    # ---- scan, softmax, window, index (`lower/scan.py` ...)
    im2col_wide: bool = True
    # (end of scan/softmax/window/index fields)

    @cached_property
    def _hash(self) -> int:
        return hash(dataclasses.astuple(self))

    def __hash__(self) -> int:
        return self._hash


def profile_for(driver: str, device_type: int, has_int64: bool, max_storage_buffers: int) -> Profile:
    """The profile of a device from its driver, type and queried limits.

    >>> profile_for("lavapipe", 4, True, 32).merge, profile_for("nvidia", 2, True, 1 << 20).layout
    (True, 'gpu')
    >>> profile_for("swiftshader", 4, True, 32).merge    # a CPU driver without lavapipe's quirks
    False
    """
    cpu = device_type == 4
    leaves = max(1, min(12, (max_storage_buffers - 4) // 2))
    base = dict(driver=driver, cpu=cpu, layout="cpu" if cpu else "gpu", max_leaves=leaves,
                cores=os.cpu_count() or 1)
    base["fuse"] = os.environ.get("VKML_FUSION", "1").strip().lower() not in ("0", "false", "off", "no")
    base.update(matmul_interleave=cpu, matmul_swap=cpu, matmul_tail_chunk=cpu)
    if driver == "lavapipe":
        return Profile(**base, workers=lavapipe_workers(), merge=True, dynamic=True, hoist_meta=8,
                       texels=True, matmul_texels=True, wide_loads=has_int64, large_groups=True,
                       loop_limit=65535, poll_s=0.05 if hasattr(os, "sched_yield") else 0.0,
                       poll_yield=hasattr(os, "sched_yield"), host_cached_reads=True,
                       recompute_small=4096, inline_sum=16)
    if cpu:
        return Profile(**base, poll_s=0.0, host_cached_reads=True, recompute_small=4096, inline_sum=16)
    return Profile(**base)


def _large_buffers(physical, api: int) -> tuple[int, int, bool]:
    """(maxMemoryAllocationSize, maxBufferSize, bufferDeviceAddress) of a physical device:
    the limits Vulkan 1.1 and 1.3 report (2^31 and 2^32 - 1 where the device reports none)
    and whether it has buffer device addresses (core in 1.2). VKML_BUFFER_ADDRESS=0 turns
    them off: every tensor must then fit one storage-buffer binding."""
    m3 = vk.VkPhysicalDeviceMaintenance3Properties()
    m4 = vk.VkPhysicalDeviceMaintenance4Properties(pNext=m3) if api >= vk.VK_MAKE_VERSION(1, 3, 0) else None
    vk.vkGetPhysicalDeviceProperties2(physical, vk.VkPhysicalDeviceProperties2(pNext=m4 or m3))
    max_alloc = int(m3.maxMemoryAllocationSize) or 1 << 31
    max_buffer = int(m4.maxBufferSize) if m4 is not None and m4.maxBufferSize else 2**32 - 1
    bda = False
    if api >= vk.VK_MAKE_VERSION(1, 2, 0) and os.environ.get("VKML_BUFFER_ADDRESS", "1").strip().lower() not in (
            "0", "false", "off", "no"):
        f = vk.VkPhysicalDeviceBufferDeviceAddressFeatures()
        vk.vkGetPhysicalDeviceFeatures2(physical, vk.VkPhysicalDeviceFeatures2(pNext=f))
        bda = bool(f.bufferDeviceAddress)
    return max_alloc, max_buffer, bda


def _version(v: int) -> str:
    return f"{v >> 22}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


class Device:
    """Instance, logical device, compute queue and the capabilities kernels are tuned by."""

    def __init__(self, index: int | None = None):
        lavapipe_vectors()
        try:
            app = vk.VkApplicationInfo(pApplicationName="vkml", apiVersion=vk.VK_MAKE_VERSION(1, 2, 0))
            ici = vk.VkInstanceCreateInfo(pApplicationInfo=app)
            self.instance = vk.vkCreateInstance(ici, None)
            phys = vk.vkEnumeratePhysicalDevices(self.instance)
        except Exception as e:  # the loader raises several types
            raise VulkanUnavailableError(
                f"vkml: cannot create a Vulkan instance ({type(e).__name__}: {e}). Install a Vulkan "
                f"driver: on Debian/Ubuntu `apt-get install libvulkan1 mesa-vulkan-drivers` gives "
                f"the lavapipe CPU device.") from e
        if not phys:
            raise VulkanUnavailableError("vkml: the Vulkan loader found no physical device; install "
                                         "mesa-vulkan-drivers for the lavapipe CPU device")
        self.physical_devices = phys
        props = [vk.vkGetPhysicalDeviceProperties(p) for p in phys]
        self.infos = [DeviceInfo(i, p.deviceName, _TYPE_NAMES.get(p.deviceType, "other"),
                                 _version(p.apiVersion)) for i, p in enumerate(props)]
        if index is None:
            env = os.environ.get("VKML_DEVICE")
            if env not in (None, ""):
                try:
                    index = int(env)
                except ValueError:
                    raise VulkanUnavailableError(f"VKML_DEVICE={env!r} is not an integer index") from None
            else:
                index = min(range(len(phys)), key=lambda i: (_PREFERENCE.get(props[i].deviceType, 9), i))
        if not 0 <= index < len(phys):
            raise VulkanUnavailableError(
                f"VKML_DEVICE={index} but there are {len(phys)} devices: "
                + "; ".join(map(str, self.infos)))
        self.index = index
        self.physical = phys[index]
        p = props[index]
        self.info = self.infos[index]
        self.name = p.deviceName
        lim = p.limits
        self.max_storage_buffer_range = int(lim.maxStorageBufferRange)
        self.max_workgroup_count = tuple(int(x) for x in lim.maxComputeWorkGroupCount)
        self.max_workgroup_invocations = int(lim.maxComputeWorkGroupInvocations)
        self.max_shared_memory = int(lim.maxComputeSharedMemorySize)
        self.storage_alignment = max(int(lim.minStorageBufferOffsetAlignment), 16)
        self.texel_alignment = int(lim.minTexelBufferOffsetAlignment)
        self.max_texels = int(lim.maxTexelBufferElements)
        self.max_push_constants = int(lim.maxPushConstantsSize)
        self.timestamp_period = float(lim.timestampPeriod)
        # per-kernel descriptor limits (lavapipe: 32 storage buffers): how many tensors
        # one merged dispatch may bind (`merge`)
        self.max_storage_buffers = int(lim.maxPerStageDescriptorStorageBuffers)
        self.max_sampled = int(lim.maxPerStageDescriptorSampledImages)
        self.max_resources = int(lim.maxPerStageResources)
        sub = vk.VkPhysicalDeviceSubgroupProperties()
        drv = vk.VkPhysicalDeviceDriverProperties(pNext=sub)
        p2 = vk.VkPhysicalDeviceProperties2(pNext=drv)
        vk.vkGetPhysicalDeviceProperties2(self.physical, p2)
        self.subgroup_size = int(sub.subgroupSize) or 32
        self.driver = _DRIVERS.get(int(drv.driverID), "other")
        # what a pipeline cache's data is valid for (`kernels.PipelineCache` checks a
        # file's header against these)
        self.vendor_id, self.device_id = int(p.vendorID), int(p.deviceID)
        self.pipeline_cache_uuid = bytes(int(b) & 0xFF for b in p.pipelineCacheUUID)
        self.pipeline_cache_id = (f"{self.vendor_id:04x}-{self.device_id:04x}-"
                                  + self.pipeline_cache_uuid.hex())
        if self.driver == "other" and "llvmpipe" in self.name:
            self.driver = "lavapipe"
        feats = vk.vkGetPhysicalDeviceFeatures(self.physical)
        self.has_float64 = bool(feats.shaderFloat64)
        self.has_int64 = bool(feats.shaderInt64)
        mp = vk.vkGetPhysicalDeviceMemoryProperties(self.physical)
        self.memory_types = [int(mp.memoryTypes[i].propertyFlags) for i in range(mp.memoryTypeCount)]
        api = int(p.apiVersion)
        self.max_allocation, self.max_buffer_size, self.buffer_address = _large_buffers(self.physical, api)
        qfs = vk.vkGetPhysicalDeviceQueueFamilyProperties(self.physical)
        self.queue_family = next(i for i, q in enumerate(qfs) if q.queueFlags & vk.VK_QUEUE_COMPUTE_BIT)
        self._keep = []
        # 16-bit storage (float16/bfloat16 arrays) and native float16 arithmetic where the
        # device has them (core in Vulkan 1.1 / 1.2)
        self.has_int16 = bool(feats.shaderInt16)
        s16 = vk.VkPhysicalDevice16BitStorageFeatures()
        f16 = vk.VkPhysicalDeviceShaderFloat16Int8Features(pNext=s16)
        if api >= vk.VK_MAKE_VERSION(1, 2, 0):
            vk.vkGetPhysicalDeviceFeatures2(self.physical, vk.VkPhysicalDeviceFeatures2(pNext=f16))
        self.has_storage16 = bool(s16.storageBuffer16BitAccess)
        self.has_float16 = bool(f16.shaderFloat16)
        enabled = vk.VkPhysicalDeviceFeatures(shaderFloat64=self.has_float64, shaderInt64=self.has_int64,
                                              shaderInt16=self.has_int16)
        qci = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=self.queue_family, queueCount=1,
                                         pQueuePriorities=[1.0])
        # pipeline creation feedback (core only from Vulkan 1.3; vkml asks for 1.2): whether
        # the driver found a pipeline in the cache (`KernelCache.stats`)
        exts = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(self.physical, None)}
        self.creation_feedback = vk.VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME in exts
        names = [vk.VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME] if self.creation_feedback else []
        # tensor cores: cooperative matrices (`lower/matmul/coop.py`)
        self.coop_shapes = self._coop_shapes(exts, api)
        coop = ((16, 16, 16, "float16", "float32") in self.coop_shapes and self.subgroup_size == 32
                and self.has_storage16 and self.has_float16
                and os.environ.get("VKML_COOP", "1") != "0")
        if coop:
            names.append("VK_NV_cooperative_matrix")
        # a tensor larger than one storage-buffer binding is read through its address
        # (`program.Binding.address`)
        en16 = vk.VkPhysicalDevice16BitStorageFeatures(storageBuffer16BitAccess=self.has_storage16)
        enf16 = vk.VkPhysicalDeviceShaderFloat16Int8Features(pNext=en16, shaderFloat16=self.has_float16)
        head = enf16
        if coop:     # the fragments' scope needs the Vulkan memory model
            mm = vk.VkPhysicalDeviceVulkanMemoryModelFeatures(pNext=head, vulkanMemoryModel=True)
            head = vk.VkPhysicalDeviceCooperativeMatrixFeaturesNV(pNext=mm, cooperativeMatrix=True)
            self._keep += [mm, head]
        bda = vk.VkPhysicalDeviceBufferDeviceAddressFeatures(pNext=head, bufferDeviceAddress=True) \
            if self.buffer_address else head
        self._keep += [en16, enf16, bda]

        def device_info():
            """(VkDeviceCreateInfo, what it points at): this device's, for another device
            with the same features (`precompile`); keep both until vkCreateDevice returns."""
            q = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=self.queue_family, queueCount=1,
                                           pQueuePriorities=[1.0])
            return vk.VkDeviceCreateInfo(pNext=bda, pQueueCreateInfos=[q], pEnabledFeatures=enabled,
                                         ppEnabledExtensionNames=names), (q, bda, enabled, names)
        self.device_info = device_info
        dci = vk.VkDeviceCreateInfo(pNext=bda, pQueueCreateInfos=[qci], pEnabledFeatures=enabled,
                                    ppEnabledExtensionNames=names)
        self.device = vk.vkCreateDevice(self.physical, dci, None)
        self.queue = vk.vkGetDeviceQueue(self.device, self.queue_family, 0)
        self.command_pool = vk.vkCreateCommandPool(self.device, vk.VkCommandPoolCreateInfo(
            queueFamilyIndex=self.queue_family,
            flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT), None)
        self.lock = threading.RLock()
        self.profile: Profile = dataclasses.replace(
            profile_for(self.driver, int(p.deviceType), self.has_int64, self.max_storage_buffers),
            storage16=self.has_storage16, float16=self.has_float16, matmul_coop=coop)

    def _coop_shapes(self, exts: set, api: int) -> tuple:
        """The cooperative-matrix fragments the device has, as (M, N, K, A/B type, C type)
        with A and B of one type and C and D of another (VK_NV_cooperative_matrix)."""
        if "VK_NV_cooperative_matrix" not in exts or api < vk.VK_MAKE_VERSION(1, 2, 0):
            return ()
        names = {vk.VK_COMPONENT_TYPE_FLOAT16_KHR: "float16", vk.VK_COMPONENT_TYPE_FLOAT32_KHR: "float32",
                 vk.VK_COMPONENT_TYPE_FLOAT64_KHR: "float64"}   # the NV values (NV aliases unbound)
        try:
            get = vk.vkGetInstanceProcAddr(self.instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV")
            props = get(self.physical)
        except Exception:       # bindings or loader without the entry point: no tensor cores
            return ()
        out = []
        for q in props:
            a, b, c, d = (names.get(int(x)) for x in (q.AType, q.BType, q.CType, q.DType))
            if a and a == b and c and c == d and int(q.scope) == vk.VK_SCOPE_SUBGROUP_KHR:
                out.append((int(q.MSize), int(q.NSize), int(q.KSize), a, c))
        return tuple(out)

    @property
    def max_tensor_bytes(self) -> int:
        """The most bytes one tensor may hold: one allocation's worth where kernels reach
        past a storage-buffer binding by buffer address, else one binding's range."""
        one = min(self.max_allocation, self.max_buffer_size)
        return one if self.buffer_address else min(one, self.max_storage_buffer_range)

    def memory_type(self, type_bits: int, want: int, avoid: int = 0, fallback: int | None = None) -> int:
        """Index of the first memory type allowed by type_bits with all `want` flags (else
        with all `fallback` flags, where given)."""
        for i, f in enumerate(self.memory_types):
            if type_bits >> i & 1 and f & want == want and not f & avoid:
                return i
        for i, f in enumerate(self.memory_types):
            if type_bits >> i & 1 and f & want == want:
                return i
        if fallback is not None:
            return self.memory_type(type_bits, fallback)
        raise RuntimeError(f"vkml: no Vulkan memory type with flags {want:#x} on {self.name}")

    def summary(self) -> str:
        return (f"{self.name} ({self.info.kind}); fp64={'yes' if self.has_float64 else 'no'}, "
                f"subgroup {self.subgroup_size}, max storage buffer "
                f"{self.max_storage_buffer_range // 2**20} MiB, max tensor {self.max_tensor_bytes // 2**20} MiB"
                + (" (buffer device addresses)" if self.buffer_address else ""))


_device: Device | None = None
_lock = threading.Lock()


@contextlib.contextmanager
def using(**changes) -> Iterator[Profile]:
    """Run the enclosed code with the device's profile changed (comparisons, tests).

    >>> with using(texels=False) as p:
    ...     p.texels
    False
    """
    dev = get()
    old = dev.profile
    dev.profile = dataclasses.replace(old, **changes)
    try:
        yield dev.profile
    finally:
        dev.profile = old


def get() -> Device:
    """The process's device, created on first use."""
    global _device
    if _device is None:
        with _lock:
            if _device is None:
                _device = Device()
    return _device


def devices() -> list[DeviceInfo]:
    """Every Vulkan physical device, with the index VKML_DEVICE takes.

    >>> import vkml
    >>> infos = vkml.devices()
    >>> len(infos) >= 1, type(infos[0]).__name__, infos[0].index
    (True, 'DeviceInfo', 0)
    """
    return list(get().infos)
