"""What a GPU spends between back-to-back submissions of one streaming kernel (issue 23:
20 jitted calls in a row that keep their results cost more than their kernels).

y = x + 1 over n float32 (one vec4 per invocation), `count` times, each pattern timed as
the wall time of all of them over count:
  one-cb         every dispatch in one command buffer, compute->compute barriers between
  submits        one submission per dispatch, vkml's barriers (host/all -> compute at the
                 start, compute -> host/all at the end), a fence each, submitted back to back
  submits-cc     the same with compute->compute barriers only
  submits-none   the same with no barriers
  one-submit     the per-dispatch command buffers (vkml's barriers) in one vkQueueSubmit

    python bench/tools/submit_gap.py [--n 67108864] [--count 20]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import vulkan as vk

from coop_probe import spirv   # noqa: E402
from coop_probe import Dev      # noqa: E402

SRC = """#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { vec4 x[]; };
layout(std430, binding = 1) writeonly buffer Y { vec4 y[]; };
layout(push_constant) uniform P { uint n4; } p;
void main() { uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * 65535u * 256u;
  if (i < p.n4) y[i] = x[i] + 1.0; }
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64 << 20)
    ap.add_argument("--count", type=int, default=20)
    a = ap.parse_args()
    d = Dev(coop=False)
    n, cnt = a.n, a.count
    DL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
    xb = d.alloc(n * 4, DL)
    ys = [d.alloc(n * 4, DL) for _ in range(cnt)]
    dsl = vk.vkCreateDescriptorSetLayout(d.dev, vk.VkDescriptorSetLayoutCreateInfo(pBindings=[
        vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                        descriptorCount=1, stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
        for i in range(2)]), None)
    pl = vk.vkCreatePipelineLayout(d.dev, vk.VkPipelineLayoutCreateInfo(pSetLayouts=[dsl], pPushConstantRanges=[
        vk.VkPushConstantRange(stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=4)]), None)
    pool = vk.vkCreateDescriptorPool(d.dev, vk.VkDescriptorPoolCreateInfo(maxSets=cnt, pPoolSizes=[
        vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=2 * cnt)]), None)
    sets = vk.vkAllocateDescriptorSets(d.dev, vk.VkDescriptorSetAllocateInfo(
        descriptorPool=pool, pSetLayouts=[dsl] * cnt))
    for s, y in zip(sets, ys):
        infos = [vk.VkDescriptorBufferInfo(buffer=b[0], offset=0, range=n * 4) for b in (xb, y)]
        writes = [vk.VkWriteDescriptorSet(dstSet=s, dstBinding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                          pBufferInfo=[infos[i]]) for i in range(2)]
        vk.vkUpdateDescriptorSets(d.dev, 2, writes, 0, None)
    code = spirv(SRC)
    sm = vk.vkCreateShaderModule(d.dev, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None)
    stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=sm, pName="main")
    ci = vk.VkComputePipelineCreateInfo(stage=stage, layout=pl)
    pipe = vk.vkCreateComputePipelines(d.dev, None, 1, [ci], None)[0]
    pc = vk.ffi.new("uint32_t[1]", [n // 4])
    groups = -(-n // 4 // 256)
    gx, gy = min(groups, 65535), -(-groups // 65535)
    mb = vk.VkMemoryBarrier(srcAccessMask=vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT
                            | vk.VK_ACCESS_HOST_WRITE_BIT,
                            dstAccessMask=vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
                            | vk.VK_ACCESS_HOST_READ_BIT | vk.VK_ACCESS_TRANSFER_READ_BIT)
    comp = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
    host = vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | vk.VK_PIPELINE_STAGE_HOST_BIT

    def dispatch(cb, s):
        vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipe)
        vk.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, [s], 0, None)
        vk.vkCmdPushConstants(cb, pl, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, pc)
        vk.vkCmdDispatch(cb, gx, gy, 1)

    cbs = vk.vkAllocateCommandBuffers(d.dev, vk.VkCommandBufferAllocateInfo(
        commandPool=d.cp, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=cnt))
    fences = [vk.vkCreateFence(d.dev, vk.VkFenceCreateInfo(), None) for _ in range(cnt)]

    def record(barriers: str):
        for cb, s in zip(cbs, sets):
            vk.vkResetCommandBuffer(cb, 0)
            vk.vkBeginCommandBuffer(cb, vk.VkCommandBufferBeginInfo())
            if barriers == "vkml":
                vk.vkCmdPipelineBarrier(cb, host, comp, 0, 1, [mb], 0, None, 0, None)
            elif barriers == "cc":
                vk.vkCmdPipelineBarrier(cb, comp, comp, 0, 1, [mb], 0, None, 0, None)
            dispatch(cb, s)
            if barriers == "vkml":
                vk.vkCmdPipelineBarrier(cb, comp | vk.VK_PIPELINE_STAGE_TRANSFER_BIT, host, 0, 1, [mb], 0, None, 0, None)
            vk.vkEndCommandBuffer(cb)

    def submits(one: bool) -> float:
        t = time.perf_counter()
        if one:
            vk.vkQueueSubmit(d.queue, 1, [vk.VkSubmitInfo(pCommandBuffers=cbs)], fences[0])
            vk.vkWaitForFences(d.dev, 1, [fences[0]], vk.VK_TRUE, 10**12)
        else:
            for cb, f in zip(cbs, fences):
                vk.vkQueueSubmit(d.queue, 1, [vk.VkSubmitInfo(pCommandBuffers=[cb])], f)
            vk.vkWaitForFences(d.dev, cnt, fences, vk.VK_TRUE, 10**12)
        dt = time.perf_counter() - t
        vk.vkResetFences(d.dev, 1 if one else cnt, fences[:1] if one else fences)
        return dt / cnt

    def one_cb() -> float:
        def r(cb):
            for i, s in enumerate(sets):
                if i:
                    vk.vkCmdPipelineBarrier(cb, comp, comp, 0, 1, [mb], 0, None, 0, None)
                dispatch(cb, s)
        return d.submit(r) / cnt

    end = time.perf_counter() + 1.5      # clocks up
    while time.perf_counter() < end:
        one_cb()
    res = {"one-cb": min(one_cb() for _ in range(5))}
    for name, bar, one in [("submits", "vkml", False), ("submits-cc", "cc", False),
                           ("submits-none", "none", False), ("one-submit", "vkml", True)]:
        record(bar)
        submits(one)
        res[name] = min(submits(one) for _ in range(5))
    for k, v in res.items():
        print(f"{k:14s} {v * 1e6:8.1f} us per dispatch  {8 * n / v / 1e9:7.1f} GB/s", flush=True)


if __name__ == "__main__":
    main()
