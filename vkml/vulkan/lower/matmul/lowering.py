"""The MatMul lowering: picks the tiling and the kernel for one product and dispatches it."""
from __future__ import annotations

import math
from dataclasses import replace

from ....trace import dtypes as dt
from . import coop, int32, shared, spec, subgroup, vec4
from .epilogue import operands as epilogue_operands
from .prologue import MAX_BATCH_RANK, batch_layout, swap_last
from .tiling import (SMALL_TILING, interleave, select_tiling, small_product, swap_small_n, vec4_fits, vec4_scheme,
                     width)


def lower(node, ins, out, ctx, transposed: tuple = (False, False), epilogue=None) -> None:
    """Queue the dispatch computing node (MatMul) from views ins = (A, B) into out.

    transposed: ins[0] holds A's transpose (..., K, M) / ins[1] B's (..., N, K), which the
    kernels read in place (`fusion` folds a transpose into the MatMul). epilogue:
    (region, views per region leaf, None for the product) of a same-shape elementwise
    region applied before the store (a bias, an activation, a mask), so the product
    itself is never written (`fusion` checks that its loads are ones `epilogue.operands` reads).

    >>> import vkml.numpy as vnp
    >>> (vnp.ones((2, 1, 1, 3)) @ vnp.ones((4, 3, 5))).shape
    (2, 4, 1, 5)
    """
    a, b = ins
    ta, tb = transposed
    a_shape = swap_last(a.shape) if ta else a.shape
    b_shape = swap_last(b.shape) if tb else b.shape
    M, K, N = a_shape[-2], a_shape[-1], b_shape[-1]
    batch = tuple(node.shape[:-2])
    nbatch = 1
    for d in batch:
        nbatch *= d
    if M == 0 or N == 0 or nbatch == 0:
        return
    shp, sa, sb = batch_layout(a_shape, b_shape, batch)
    if len(shp) > MAX_BATCH_RANK:
        raise ValueError(f"MatMul: {len(shp)} non-mergeable batch dims exceed the kernel limit of "
                         f"{MAX_BATCH_RANK} (shapes {a.shape} @ {b.shape})")
    if node.dtype == dt.int32:
        assert epilogue is None, "fusion gives int32 products no epilogue"
        int32.lower(node, a, b, ta, tb, out, ctx, M, N, K, nbatch, shp, sa, sb)
        return
    if a.dtype == dt.float16:
        # float16 operands reach a MatMul only where tensor cores take them (`widen`)
        assert coop.eligible(M, N, K, ta, tb), "widen leaves float16 MatMuls to coop"
        _lower_coop(node, a, b, ta, tb, out, ctx, M, N, K, nbatch, shp, sa, sb, epilogue)
        return
    _lower_float(node, a, b, ta, tb, out, ctx, M, N, K, nbatch, shp, sa, sb, epilogue)


def loop_heads(K: int, rank: int, tile: int, epilogue) -> int:
    """Loop heads one invocation of a float MatMul kernel runs, at most: its loops over k
    (the k loop, a chunk's or a shared tile's steps and the loads filling a tile: at most
    4K together), over the batch axes, and the epilogue's library calls for every element
    of its tile (`Dispatch.heads`).

    >>> loop_heads(64, 1, 16, None)
    273
    """
    from ..elementwise import region_heads
    return 4 * K + rank + 16 + (tile * region_heads(epilogue[0]) if epilogue else 0)


def _lower_coop(node, a, b, ta, tb, out, ctx, M, N, K, nbatch, shp, sa, sb, epi_in) -> None:
    t = coop.choose(M, N, nbatch, shapes=getattr(ctx.dev, "coop_shapes", ()))
    # an epilogue computes as a fused elementwise kernel reading the stored product would
    epi, epi_meta, epi_views, _ = epilogue_operands(epi_in, node, None, ctx.profile.lowp_round_each)
    p = coop.program(t, len(shp), ta, tb, epi_in[0].dtype if epi_in else node.dtype, epi, node.dtype)
    tiles_m, tiles_n = -(-M // t.bm), -(-N // t.bn)
    ctx.dispatch(ctx.kernel(p), {"M": M, "N": N, "K": K, "tiles_m": tiles_m, "tiles_n": tiles_n,
                                 "nbatch": nbatch, "shape": shp, "sa": sa, "sb": sb, **epi_meta},
                 [out, a, b, *epi_views], groups=tiles_m * tiles_n * nbatch,
                 heads=loop_heads(K, len(shp), t.bm * t.bn, epi_in))


def _lower_float(node, a, b, ta, tb, out, ctx, M, N, K, nbatch, shp, sa, sb, epi_in) -> None:
    dev, prof = ctx.dev, ctx.profile
    T = dt.glsl_type(node.dtype)
    S = dev.subgroup_size
    rank = len(shp)
    t, prefetch = select_tiling(dev, node.dtype, M, N, K, nbatch, ta, tb)
    small = t.strategy == "subgroup" and small_product(prof, M, N, K, nbatch)
    # the subgroup kernel's CPU-tuned variants (swap, interleave, tail) are on in CPU
    # devices' profiles only: on a GPU it runs only for a forced tiling, and a swapped A^T
    # chunk of S * wa k unrolled past what the H200's compiler builds
    swap = prof.matmul_swap and t.strategy == "subgroup" and swap_small_n(S, M, N) and not small
    if swap:     # C^T = B^T A^T: the operands trade places and transposition flags
        a, b, ta, tb, M, N, sa, sb = b, a, not tb, not ta, N, M, sb, sa
        t, prefetch = select_tiling(dev, node.dtype, M, N, K, nbatch, ta, tb)
    epi, epi_meta, epi_views, _ = epilogue_operands(epi_in, node, dev if t.strategy == "subgroup" else None)
    spec_ok = prof.matmul_spec_tiles and max(t.tm, t.tn) <= spec.SPEC_MAX
    if t.strategy == "shared" and prof.matmul_vec4 and vec4_fits(t, T, M, N, K, ta, tb):
        scheme = vec4_scheme(prof, t, ta, tb, dev.max_shared_memory)
        p = (spec.vec4_program(t, rank, ta, tb, prefetch, epi, *scheme) if spec_ok
             else vec4.program(t, rank, ta, tb, prefetch, epi))
        tile_m, tile_n = t.bm, t.bn
    elif t.strategy == "shared":
        if spec_ok and not any(prof.matmul_contiguous) and T != "double":
            p = spec.shared_program(t, T, rank, ta, tb, epi)
        else:
            p = shared.program(t, T, rank, ta, tb, epi, tuple(prof.matmul_contiguous))
        tile_m, tile_n = t.bm, t.bn
    elif small:     # one form whatever the shape: scalar stores, no swap or interleave
        t = SMALL_TILING
        tex = subgroup.texel_operands(dev, T, t, a, b)
        p = subgroup.program(t, T, rank, S, ta, tb, epi, 1, tex is not None, False, False, prof.matmul_tail_chunk)
        tile_m, tile_n = t.tm, S * t.tn
    else:
        if ta:   # wa runs along m: a width dividing both m and the row tile
            t = replace(t, wa=width(min(8, t.tm), math.gcd(M, t.tm), T, dev))
        if tb:   # wb runs along k, within one chunk
            t = replace(t, wb=width(8, math.gcd(K, S), T, dev))
        ws = width(t.tn, math.gcd(N, t.tn), T, dev) if prof.matmul_wide_stores and not swap else 1
        tex = subgroup.texel_operands(dev, T, t, a, b)
        ilv = prof.matmul_interleave and interleave(tb, S, t.tn, K, dt.itemsize(node.dtype))
        chunk = S * (1 if ta else t.wa)
        p = subgroup.program(t, T, rank, S, ta, tb, epi, ws, tex is not None, ilv, swap,
                             prof.matmul_tail_chunk and K % chunk != 0)
        tile_m, tile_n = t.tm, S * t.tn
    tiles_m, tiles_n = -(-M // tile_m), -(-N // tile_n)
    k = ctx.kernel(p)
    ctx.dispatch(k, {"M": M, "N": N, "K": K, "tiles_m": tiles_m, "tiles_n": tiles_n, "nbatch": nbatch,
                     "shape": shp, "sa": sa, "sb": sb, **epi_meta},
                 [out, a, b, *epi_views], groups=tiles_m * tiles_n * nbatch,
                 heads=loop_heads(K, rank, tile_m * tile_n, epi_in))
