"""Host-side cost of one jitted call on large arrays (the chain): kernel time alone, the
recording's submit-and-wait alone, the whole call, and vkQueueSubmit / fence polling
split out. Usage: python bench/tools/prof_host.py [scale]   (scale 4: 64M elements)"""
import sys
import time

import numpy as np

import vkml
import vkml.numpy as vnp
from vkml.vulkan import runtime
from vkml.vulkan.vk import vk


def best(fn, n=60):
    fn(); fn()
    ws = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ws.append(time.perf_counter() - t0)
    ws.sort()
    return ws[0], ws[len(ws) // 2]


def main(scale: float) -> None:
    n = int((16 << 20) * scale)
    x = vnp.asarray(np.random.default_rng(0).random(n, dtype=np.float32))
    f = vkml.jit(lambda v: vnp.tanh(2 * v + 1) * vnp.exp(-v) + vnp.sqrt(v + 1) - v * v)
    f(x)
    kern = min(sum(t for _, t in f.profile(x)) for _ in range(5))
    c = f._entry((x,))[0][0]
    rec = c.recording
    sub = best(rec.submit)
    call = best(lambda: f(x))
    rt = runtime.get()
    lib, d = vk.lib, rt.dev.device
    info = vk.ffi.new("VkSubmitInfo*")
    info.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
    arr = vk.ffi.new("VkCommandBuffer[]", [rec.cb])
    info.commandBufferCount, info.pCommandBuffers = 1, arr
    qs, polls, lat = [], [], []
    for _ in range(40):
        t0 = time.perf_counter()
        lib.vkQueueSubmit(rt.dev.queue, 1, info, rt._fence)
        t1 = time.perf_counter()
        k = 0
        while lib.vkGetFenceStatus(d, rt._fence) == vk.VK_NOT_READY:
            k += 1
        t2 = time.perf_counter()
        lib.vkResetFences(d, 1, rt._fences)
        qs.append(t1 - t0)
        lat.append(t2 - t0)
        polls.append(k)
    t0 = time.perf_counter()
    for _ in range(1000):
        lib.vkGetFenceStatus(d, rt._fence)
    poll_cost = (time.perf_counter() - t0) / 1000
    print(f"chain {n >> 20}M on {rt.dev.name}")
    print(f"  kernel time (timestamps)      {kern * 1e6:8.1f} us")
    print(f"  recording submit+wait         {sub[0] * 1e6:8.1f} us (median {sub[1] * 1e6:.1f})")
    print(f"  whole jitted call             {call[0] * 1e6:8.1f} us (median {call[1] * 1e6:.1f})")
    print(f"  vkQueueSubmit                 {min(qs) * 1e6:8.1f} us (median {sorted(qs)[20] * 1e6:.1f})")
    print(f"  submit -> fence seen          {min(lat) * 1e6:8.1f} us (median {sorted(lat)[20] * 1e6:.1f})")
    print(f"  one vkGetFenceStatus          {poll_cost * 1e6:8.2f} us; polls per wait ~{sorted(polls)[20]}")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)
