"""The one Vulkan device of the process: instance, physical device choice, queue, limits.

`VKML_DEVICE=<index>` picks a physical device; otherwise the first discrete GPU, then
integrated, then virtual, then CPU (lavapipe). Limits are queried, never assumed.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

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
    before the instance is created. llvmpipe defaults to 256 bits everywhere. On the 2-core
    AMD EPYC (Zen 5) VM of `bench/RESULTS.md` a float32 MatMul then does twice the work per
    instruction: 1024^3 104 -> 143 GFLOP/s, the small MLP step about 15% faster, elementwise
    and reduction kernels unchanged (`python -m bench`). GPUs ignore the variable.

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
        self.is_cpu = p.deviceType == 4
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
        p2 = vk.VkPhysicalDeviceProperties2(pNext=sub)
        vk.vkGetPhysicalDeviceProperties2(self.physical, p2)
        self.subgroup_size = int(sub.subgroupSize) or 32
        feats = vk.vkGetPhysicalDeviceFeatures(self.physical)
        self.has_float64 = bool(feats.shaderFloat64)
        self.has_int64 = bool(feats.shaderInt64)
        mp = vk.vkGetPhysicalDeviceMemoryProperties(self.physical)
        self.memory_types = [int(mp.memoryTypes[i].propertyFlags) for i in range(mp.memoryTypeCount)]
        self.max_allocation = 1 << 31
        qfs = vk.vkGetPhysicalDeviceQueueFamilyProperties(self.physical)
        self.queue_family = next(i for i, q in enumerate(qfs) if q.queueFlags & vk.VK_QUEUE_COMPUTE_BIT)
        self._keep = []
        enabled = vk.VkPhysicalDeviceFeatures(shaderFloat64=self.has_float64, shaderInt64=self.has_int64)
        qci = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=self.queue_family, queueCount=1,
                                         pQueuePriorities=[1.0])
        dci = vk.VkDeviceCreateInfo(pQueueCreateInfos=[qci], pEnabledFeatures=enabled)
        self.device = vk.vkCreateDevice(self.physical, dci, None)
        self.queue = vk.vkGetDeviceQueue(self.device, self.queue_family, 0)
        self.command_pool = vk.vkCreateCommandPool(self.device, vk.VkCommandPoolCreateInfo(
            queueFamilyIndex=self.queue_family,
            flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT), None)
        self.lock = threading.RLock()

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
                f"{self.max_storage_buffer_range // 2**20} MiB")


_device: Device | None = None
_lock = threading.Lock()


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
