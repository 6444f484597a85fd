"""Cost of one load per subgroup iteration on lavapipe, by access path: storage buffer
(per lane or uniform address), uniform texel buffer (R32F, RGBA32F), against a loop of
multiply-adds alone. Usage: python bench/tools/lvp_loads.py (raw Vulkan set-up: texel
buffers are not part of the kernel interface; this measures whether they should be)."""
import time, numpy as np
from vkml.vulkan import runtime
from vkml.vulkan.vk import vk
from vkml.vulkan.compile import spirv
from vkml.vulkan.kernels import COMMON
rt = runtime.get(); dev = rt.dev; d = dev.device
N = 1 << 20
src = rt.upload(np.random.default_rng(0).random(N).astype(np.float32))
out = rt.allocator.alloc(4 * 8 * 1024)
meta = rt.upload(np.array([64, 2048], np.int32))
G, KN = 256, 2048
SB, UT = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
types = [SB, SB, SB, UT, UT]
binds = [vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=t, descriptorCount=1, stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT) for i, t in enumerate(types)]
dsl = vk.vkCreateDescriptorSetLayout(d, vk.VkDescriptorSetLayoutCreateInfo(pBindings=binds), None)
pl = vk.vkCreatePipelineLayout(d, vk.VkPipelineLayoutCreateInfo(pSetLayouts=[dsl]), None)
pool = vk.vkCreateDescriptorPool(d, vk.VkDescriptorPoolCreateInfo(maxSets=1, pPoolSizes=[vk.VkDescriptorPoolSize(type=SB, descriptorCount=3), vk.VkDescriptorPoolSize(type=UT, descriptorCount=2)]), None)
ds = vk.vkAllocateDescriptorSets(d, vk.VkDescriptorSetAllocateInfo(descriptorPool=pool, pSetLayouts=[dsl]))[0]
v1 = vk.vkCreateBufferView(d, vk.VkBufferViewCreateInfo(buffer=src.block.buffer, format=vk.VK_FORMAT_R32_SFLOAT, offset=src.offset, range=4 * N), None)
v4 = vk.vkCreateBufferView(d, vk.VkBufferViewCreateInfo(buffer=src.block.buffer, format=vk.VK_FORMAT_R32G32B32A32_SFLOAT, offset=src.offset, range=4 * N), None)
def bi(b, n): return vk.VkDescriptorBufferInfo(buffer=b.block.buffer, offset=b.offset, range=n)
writes = [vk.VkWriteDescriptorSet(dstSet=ds, dstBinding=0, descriptorType=SB, pBufferInfo=[bi(meta, 8)]),
          vk.VkWriteDescriptorSet(dstSet=ds, dstBinding=1, descriptorType=SB, pBufferInfo=[bi(out, 4 * 8 * 1024)]),
          vk.VkWriteDescriptorSet(dstSet=ds, dstBinding=2, descriptorType=SB, pBufferInfo=[bi(src, 4 * N)]),
          vk.VkWriteDescriptorSet(dstSet=ds, dstBinding=3, descriptorType=UT, pTexelBufferView=[v1]),
          vk.VkWriteDescriptorSet(dstSet=ds, dstBinding=4, descriptorType=UT, pTexelBufferView=[v4])]
vk.vkUpdateDescriptorSets(d, len(writes), writes, 0, None)
hdr = ("#extension GL_KHR_shader_subgroup_shuffle : enable\n"
       "layout(std430, set=0, binding=1) buffer O_ { float O[]; };\n"
       "layout(std430, set=0, binding=2) readonly buffer X_ { float X[]; };\n"
       "layout(set=0, binding=3) uniform samplerBuffer T1;\n"
       "layout(set=0, binding=4) uniform samplerBuffer T4;\n")
bodies = {
  "ssbo per-lane": "acc += X[lane + 8 * k];",
  "ssbo uniform": "acc += X[k];",
  "texel per-lane": "acc += texelFetch(T1, lane + 8 * k).x;",
  "texel uniform": "acc += texelFetch(T1, k).x;",
  "texel4 per-lane": "vec4 v = texelFetch(T4, lane + 8 * k); acc += v.x + v.y + v.z + v.w;",
  "ssbo vec4-ish (4 loads)": "int i = 4 * (lane + 8 * k); acc += X[i] + X[i+1] + X[i+2] + X[i+3];",
  "fma only": "acc = acc * 0.999 + float(k);",
}
cmdpool = dev.command_pool
for name, body in bodies.items():
    s = COMMON.replace("${LX}", "8") + hdr + ("void main() { int lane = int(gl_SubgroupInvocationID); float acc = 0.0; int kn = meta[1];\n"
        " for (int k0 = 0; k0 < kn; k0 += 16) {\n" + "".join(f"  {{ int k = k0 + {u}; {body} }}\n" for u in range(16)) + " }\n O[gidx()] = acc; }\n")
    code = spirv(s, "mb")
    sm = vk.vkCreateShaderModule(d, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None)
    stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=sm, pName="main")
    ci = vk.VkComputePipelineCreateInfo(stage=stage, layout=pl)
    pipe = vk.vkCreateComputePipelines(d, None, 1, [ci], None)[0]
    cb = vk.vkAllocateCommandBuffers(d, vk.VkCommandBufferAllocateInfo(commandPool=cmdpool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
    vk.vkBeginCommandBuffer(cb, vk.VkCommandBufferBeginInfo())
    vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipe)
    vk.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, [ds], 0, None)
    vk.vkCmdDispatch(cb, G, 1, 1)
    vk.vkEndCommandBuffer(cb)
    rt.submit([cb]); ws = []
    for _ in range(5):
        t0 = time.perf_counter(); rt.submit([cb]); ws.append(time.perf_counter() - t0)
    t = min(ws)
    print(f"{name:24s} {t*1e3:7.2f} ms  {t / (G * KN) * 1e9:6.2f} ns per subgroup-iteration", flush=True)
