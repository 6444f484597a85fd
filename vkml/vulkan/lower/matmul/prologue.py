"""What every float MatMul kernel shares: its meta schema, the start of main() (sizes,
this workgroup's tile, batch offsets) and the host's batch layout.

Batch: the batch dims are collapsed (adjacent dims merged where both operands allow)
and the flat batch index is folded into the workgroup index, decoded with per-dim
strides from meta; an operand's broadcast (size-1) batch dim has stride 0 there.
"""
from __future__ import annotations

from ...program import Program
from ..elementwise import collapse

MAX_BATCH_RANK = 6


def meta_fields(rank: int) -> tuple:
    """The meta fields of a float MatMul kernel over rank collapsed batch dims: sizes,
    tile counts, batch count, then batch extents and A's and B's batch strides (an
    epilogue's fields follow: `epilogue.fields`).

    >>> [n for n, _ in meta_fields(2)]
    ['M', 'N', 'K', 'tiles_m', 'tiles_n', 'nbatch', 'shape', 'sa', 'sb']
    """
    return (("M", 1), ("N", 1), ("K", 1), ("tiles_m", 1), ("tiles_n", 1), ("nbatch", 1),
            ("shape", rank), ("sa", rank), ("sb", rank))


def prologue(p: Program, rank: int) -> list[str]:
    """main()'s common part: sizes, this workgroup's tile (tmi, tni) and batch offsets
    (coff, aoff, boff). Neighbouring workgroups walk down m, so they share one panel of B
    in cache.

    >>> from vkml.vulkan.program import Meta
    >>> p = Program("T"); p.meta = Meta(*meta_fields(1))
    >>> prologue(p, 1)[0]
    'int M = m_M; int N = m_N; int K = m_K;'
    """
    L = [f"int M = {p.m('M')}; int N = {p.m('N')}; int K = {p.m('K')};",
         f"int tiles_m = {p.m('tiles_m')}; int tiles_n = {p.m('tiles_n')};",
         "int g = int(group_id());",
         "int tmi = g % tiles_m; g /= tiles_m;",
         "int tni = g % tiles_n; g /= tiles_n;",
         # a grid folded into y may be rounded up: whole workgroups leave together
         f"if (g >= {p.m('nbatch')}) return;",
         "int coff = g * M * N; int aoff = 0; int boff = 0;"]
    if rank:
        L += [f"for (int d = {rank - 1}; d >= 0; --d) {{",
              f"  int sz = {p.m('shape', 'd')}; int c = g % sz; g /= sz;",
              f"  aoff += c * {p.m('sa', 'd')}; boff += c * {p.m('sb', 'd')};",
              "}"]
    return L


def mad(T: str, acc: str, a: str, b: str) -> str:
    """acc += a * b in GLSL type T: fused for floats.

    >>> mad("float", "s", "x", "y"), mad("int", "s", "x", "y")
    ('s = fma(x, y, s);', 's += x * y;')
    """
    if T == "int":
        return f"{acc} += {a} * {b};"
    return f"{acc} = fma({a}, {b}, {acc});"


def batch_layout(a_shape, b_shape, out_batch) -> tuple:
    """Collapsed batch dims and A's and B's element strides over them (0: broadcast).

    >>> batch_layout((2, 1, 3, 4), (5, 4, 6), (2, 5))
    ((2, 5), (12, 0), (0, 24))
    """
    def strides(shape):
        lead = (1,) * (len(out_batch) + 2 - len(shape)) + tuple(shape[:-2])
        st, acc = [0] * len(lead), shape[-2] * shape[-1]
        for i in range(len(lead) - 1, -1, -1):
            st[i] = 0 if lead[i] == 1 else acc
            acc *= lead[i]
        return tuple(st)
    out_st, acc = [0] * len(out_batch), 1
    for i in range(len(out_batch) - 1, -1, -1):
        out_st[i] = acc
        acc *= out_batch[i]
    shp, (_, sa, sb) = collapse(out_batch, [tuple(out_st), strides(a_shape), strides(b_shape)])
    return tuple(shp), tuple(sa), tuple(sb)


def swap_last(shape: tuple) -> tuple:
    """shape with its last two dims exchanged (a transposed operand's logical shape)."""
    return tuple(shape[:-2]) + (shape[-1], shape[-2])
