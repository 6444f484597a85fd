"""A kernel's descriptor set layout and pipeline layout, made on any device: the real one
(`kernels.KernelCache.layout`) and lavapipe's helper devices (`precompile`)."""
from __future__ import annotations

from .vk import vk


def binding_kinds(n_tensors: int, texels: tuple = ()) -> tuple:
    """Per binding (meta first, then the tensors): whether it is a uniform texel buffer
    (else a storage buffer); texels: per tensor its texel format or None.

    >>> binding_kinds(3, (None, 100))
    (False, False, True, False)
    """
    return (False,) + tuple(f is not None for f in texels) + (False,) * (n_tensors - len(texels))


def create_layouts(device, kinds: tuple, push: int = 0) -> tuple:
    """(descriptor set layout, pipeline layout) on device for bindings of `kinds`
    (`binding_kinds`) and push bytes of push constants."""
    binds = [vk.VkDescriptorSetLayoutBinding(
        binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER if t
        else vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=1,
        stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT) for i, t in enumerate(kinds)]
    dsl = vk.vkCreateDescriptorSetLayout(device, vk.VkDescriptorSetLayoutCreateInfo(pBindings=binds), None)
    ranges = [vk.VkPushConstantRange(stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=push)
              ] if push else None
    pl = vk.vkCreatePipelineLayout(device, vk.VkPipelineLayoutCreateInfo(
        pSetLayouts=[dsl], pPushConstantRanges=ranges), None)
    return dsl, pl
