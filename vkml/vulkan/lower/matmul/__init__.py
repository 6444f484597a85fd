"""MatMul: (..., m, k) @ (..., k, n) with broadcast batch dims, as tiled compute kernels.

Each workgroup computes one tile of one batch entry's output and each invocation keeps a
register tile of accumulators, so every value it reads is used many times. A `Tiling` is
chosen per device type, then shrunk to the device's limits and to small operands
(`tiling`). Every kernel is a `Program` built by one module:

* ``shared`` (GPUs): the workgroup stages a bk-deep slab of A and B in shared memory,
  each invocation does tm*tn multiply-adds per k from there; ``vec4`` the same with
  16-byte traffic (float32); ``spec`` both with the tiling as specialisation constants
  (one SPIR-V module per dtype, operand layout and epilogue, one pipeline per tiling).
* ``subgroup`` (CPU devices, lavapipe): a subgroup reads a chunk of A's rows once,
  spread over its lanes, and hands every element to all lanes with subgroupShuffle;
  only B is read per lane, as wide as the row length allows.
* ``int32``: one thread per output, exact int32 or an OverflowError.

``prologue`` holds what the float kernels share (meta schema, main()'s start, the batch
layout), ``epilogue`` the elementwise consumers applied at the stores, ``lowering`` the
entry that picks a kernel for one product. Device-dependent choices are `Profile` fields
(`matmul_*` in `vulkan/device.py`): a forced tiling is `matmul_tiling` (`set_tiling`).

>>> import vkml.numpy as vnp
>>> (vnp.ones((4, 3)) @ vnp.ones((3, 2))).numpy().tolist()
[[3.0, 3.0], [3.0, 3.0], [3.0, 3.0], [3.0, 3.0]]
"""
from __future__ import annotations

from .int32 import INT_MAX_K, INT_UNROLL
from .lowering import lower
from .prologue import MAX_BATCH_RANK
from .spec import SPEC_MAX, spec_values
from .subgroup import texel_operands
from .tiling import (CPU_TILING, GPU_TILING, MIN_WORKGROUPS, SKINNY_TILING, VEC4_SCHEMES, VEC4_TILINGS,
                     Tiling, choose_tiling, cpu_tiling, interleave, select_tiling, set_tiling,
                     swap_small_n, vec4_fits, vec4_scheme)

__all__ = ["lower", "Tiling", "set_tiling", "choose_tiling", "select_tiling", "cpu_tiling", "vec4_fits",
           "vec4_scheme", "swap_small_n", "interleave", "texel_operands", "spec_values", "CPU_TILING", "GPU_TILING",
           "SKINNY_TILING", "VEC4_TILINGS", "VEC4_SCHEMES", "MIN_WORKGROUPS", "SPEC_MAX", "MAX_BATCH_RANK",
           "INT_UNROLL", "INT_MAX_K"]
