"""int32 products: exact, or an OverflowError (never wrapped)."""
from __future__ import annotations

from functools import lru_cache

from ...program import Meta, Program

INT_UNROLL = 32          # k steps per loop iteration (K up to INT_MAX_K)
INT_MAX_K = INT_UNROLL * 65000


@lru_cache(maxsize=1024)
def program(rank: int, ta: bool, tb: bool) -> Program:
    """One thread per output of an int32 product, exact: each a*b (|.| < 2^62) is split
    into its high and low 32-bit halves, summed apart in int64 (no sum of 2^31 terms can
    overflow), and the result is int32 only where high:low fits; else err[0] is set.
    The k loop does INT_UNROLL steps an iteration: lavapipe ends a loop at 65535.

    >>> p = program(1, False, False)
    >>> [f for f, _ in p.meta.fields], p.writes
    (['M', 'N', 'K', 'rows', 'shape', 'sa', 'sb'], (0, 3))
    """
    p = Program("MatMul_int")
    p.meta = Meta(("M", 1), ("N", 1), ("K", 1), ("rows", 1), ("shape", rank), ("sa", rank), ("sb", rank))
    p.extension("GL_ARB_gpu_shader_int64")
    C = p.buffer("C", "int")
    A = p.buffer("A", "int", readonly=True)
    B = p.buffer("B", "int", readonly=True)
    err = p.buffer("err", "int")
    L = ["uint gi = gidx();",
         f"int M = {p.m('M')}, N = {p.m('N')}, K = {p.m('K')};",
         f"if (gi >= uint({p.m('rows')}) * uint(N)) return;",
         "int o = int(gi); int n = o % N; int m = (o / N) % M; int bt = o / (N * M);",
         "int ao = 0, bo = 0, rem = bt;"]
    for j in range(rank - 1, -1, -1):
        L.append(f"{{ int d = rem % {p.m('shape', j)}; rem /= {p.m('shape', j)}; "
                 f"ao += d * {p.m('sa', j)}; bo += d * {p.m('sb', j)}; }}")
    a_at = "ao + k * M + m" if ta else "ao + m * K + k"
    b_at = "bo + n * K + k" if tb else "bo + k * N + n"
    step = f"{{ int64_t p = int64_t({A}[{a_at}]) * int64_t({B}[{b_at}]); hi += p >> 32; lo += p & 0xffffffffl; }}"
    L += ["int64_t hi = 0l, lo = 0l;", "int k = 0;",
          f"for (; k + {INT_UNROLL} <= K; ) {{"]
    L += ["  " + step + " ++k;"] * INT_UNROLL
    L += ["}", "for (; k < K; ++k) " + step,
          "hi += lo >> 32; lo &= 0xffffffffl;",
          f"if (!((hi == 0l && lo < 0x80000000l) || (hi == -1l && lo >= 0x80000000l))) atomicOr({err}[0], 1);",
          f"{C}[o] = int(uint(lo));"]
    p.main(*L)
    return p


def lower(node, a, b, ta, tb, out, ctx, M, N, K, nbatch, shp, sa, sb) -> None:
    """Queue an int32 product (`program`) and the device check that raises its overflow."""
    from ..reduce import overflow_error
    shapes = (tuple(node.inputs[0].shape), tuple(node.inputs[1].shape))
    if not ctx.dev.has_int64:
        raise overflow_error("MatMul", shapes[0], (), ctx.dev.name)

    def error(w):
        return OverflowError(f"MatMul: an element of the int32 product of {shapes[0]} @ {shapes[1]} "
                             f"does not fit int32, the device's only integer type (it would wrap): "
                             f"cast the operands to float64 first (x.astype('float64'))")
    if K > INT_MAX_K:
        raise ValueError(f"MatMul: an int32 product of {shapes[0]} @ {shapes[1]} sums K = {K} terms, "
                         f"more than the {INT_MAX_K} its exact kernel takes; cast to float64")
    err = ctx.check(error)
    k = ctx.kernel(program(len(shp), ta, tb))
    ctx.dispatch(k, {"M": M, "N": N, "K": K, "rows": M * nbatch, "shape": shp, "sa": sa, "sb": sb},
                 [out, a, b, err], threads=M * N * nbatch)
