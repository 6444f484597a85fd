"""IndexSelect and ScatterAdd: gathers along one axis, and their deterministic adjoint;
CheckIndex, the device check of indices that `vkml.debug.checks` puts before a gather.

Both view their operands as (outer, n, inner) around the indexed axis. A negative index
wraps once in every kernel; then, as in JAX, a gather clamps an index still out of range
to [0, n-1] and a scatter drops its update (so a clamped read gets no gradient).

ScatterAdd never uses float atomics: each output element gathers its contributions in
index order j = 0, 1, ..., so results are bitwise reproducible. For short index arrays it
simply scans all of them; for long ones it first sorts (destination, j) pairs with a
stable merge sort in scratch memory and finds each destination's run by binary search,
so the cost is proportional to the number of contributions, not positions x len(idx).
Both paths add in the same order, so they give bitwise the same result.
"""
from __future__ import annotations

from ...trace import dtypes as dt
from ...trace.ops import OpKind
from ..kernels import binding
from ..memory import ALIGN
from .fill import fill_view

# Above this many indices ScatterAdd sorts them first (a few extra dispatches) instead of
# letting every output element scan the whole index array.
SORT_MIN = 64

# GLSL: the gather's index (wrap negatives once, clamp into [0, n-1]) and the scatter's
# (wrap negatives once; out of range gives n: never equal to a position, and sorted to
# the end, past every destination, by the long path).
_NORM = """
int norm_index(int k, int n) {
  if (k < 0) k += n;
  return clamp(k, 0, n - 1);
}
int drop_index(int k, int n) {
  if (k < 0) k += n;
  return (k < 0 || k >= n) ? n : k;
}
"""

# out = idx; an index outside [lo, n) (other than `ignore`, when meta[3]) sets err[0] and
# records the largest such value (err[1], if positive) and the smallest (err[2], if negative)
_CHECK = """{decl}
void main() {{
  uint gi = gidx();
  if (gi >= uint(meta[0])) return;
  int k = idx[gi];
  out_[gi] = k;
  int n = meta[1], lo = meta[2];
  if ((k < lo || k >= n) && !(meta[3] != 0 && k == meta[4])) {{
    atomicOr(err[0], 1);
    if (k >= 0) atomicMax(err[1], k); else atomicMin(err[2], k);
  }}
}}
"""

_SELECT = """{decl}{norm}
void main() {{
  uint gi = gidx();
  if (gi >= uint(meta[0])) return;
  int m = meta[1], n = meta[2], inner = meta[3];
  int o = int(gi);
  int i = o % inner;
  int j = (o / inner) % m;
  int b = o / (inner * m);
  int k = norm_index(idx[j], n);
  dst[o] = src[(b * n + k) * inner + i];
}}
"""

_SCAN = """{decl}{norm}
void main() {{
  uint gi = gidx();
  if (gi >= uint(meta[0])) return;
  int m = meta[1], size = meta[2], inner = meta[3];
  int o = int(gi);
  int i = o % inner;
  int p = (o / inner) % size;
  int b = o / (inner * size);
  {T} acc = {T}(0);
  for (int j = 0; j < m; ++j) {{
    if (drop_index(idx[j], size) == p) acc += src[(b * m + j) * inner + i];
  }}
  dst[o] = acc;
}}
"""

# (destination, j) pairs in index order: runs of length 1 for the merge sort.
_PAIRS = """{decl}{norm}
void main() {{
  uint gi = gidx();
  int m = meta[0], size = meta[1];
  if (gi >= uint(m)) return;
  int j = int(gi);
  pairs[j] = ivec2(drop_index(idx[j], size), j);
}}
"""

# One bottom-up merge pass: runs of width w pairwise into runs of 2w. Each element finds
# its place by binary search in the partner run; ties go left-run first, so the sort is
# stable and equal destinations keep increasing j.
_MERGE = """{decl}
// first position in [lo, hi) whose key is > key (strict) or >= key, by `upper`
int bound(int lo, int hi, int key, bool upper) {{
  while (lo < hi) {{
    int mid = (lo + hi) >> 1;
    int k = src[mid].x;
    if (k < key || (upper && k == key)) lo = mid + 1; else hi = mid;
  }}
  return lo;
}}
void main() {{
  uint gi = gidx();
  int m = meta[0], w = meta[1];
  if (gi >= uint(m)) return;
  int i = int(gi);
  ivec2 e = src[i];
  int run = i / w;
  int s = run * w;
  int base = (run & ~1) * w;
  int pos;
  if ((run & 1) == 0) {{
    int b0 = s + w, b1 = min(s + 2 * w, m);
    pos = b0 < m ? base + (i - s) + (bound(b0, b1, e.x, false) - b0) : i;
  }} else {{
    int a0 = s - w;
    pos = base + (i - s) + (bound(a0, s, e.x, true) - a0);
  }}
  dst[pos] = e;
}}
"""

# starts[p] = first sorted position with destination >= p, for p in [0, size].
_STARTS = """{decl}
void main() {{
  uint gi = gidx();
  int m = meta[0], size = meta[1];
  if (gi > uint(size)) return;
  int p = int(gi);
  int lo = 0, hi = m;
  while (lo < hi) {{
    int mid = (lo + hi) >> 1;
    if (pairs[mid].x < p) lo = mid + 1; else hi = mid;
  }}
  starts[p] = lo;
}}
"""

_GATHER = """{decl}
void main() {{
  uint gi = gidx();
  if (gi >= uint(meta[0])) return;
  int m = meta[1], size = meta[2], inner = meta[3];
  int o = int(gi);
  int i = o % inner;
  int p = (o / inner) % size;
  int b = o / (inner * size);
  {T} acc = {T}(0);
  for (int t = starts[p]; t < starts[p + 1]; ++t) acc += src[(b * m + pairs[t].y) * inner + i];
  dst[o] = acc;
}}
"""


def _split(shape: tuple, axis: int) -> tuple[int, int]:
    """(outer, inner) element counts around axis."""
    outer = inner = 1
    for d in shape[:axis]:
        outer *= d
    for d in shape[axis + 1:]:
        inner *= d
    return outer, inner


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _scratch_layout(m: int, size: int) -> tuple[int, int, int]:
    """Byte offsets of the two pair buffers and the run starts, and the total."""
    pairs = _align(8 * m)
    return pairs, 2 * pairs, 2 * pairs + 4 * (size + 1)


def scratch_bytes(node) -> int:
    """Bytes of scratch a node needs: ScatterAdd with many indices sorts (destination, j)
    pairs in two ping-pong buffers and keeps each destination's run start.

    For 1000 indices into 10 positions: two 8000-byte pair buffers (each rounded up to
    the binding alignment) and 11 int32 starts, 16428 bytes with ALIGN = 256.
    """
    if node.op is not OpKind.ScatterAdd:
        return 0
    m = node.inputs[1].shape[0]
    if m <= SORT_MIN or node.size == 0:
        return 0
    return _scratch_layout(m, node.attrs["size"])[2]


def _index_select(node, ins, out, ctx) -> None:
    x, idx = ins
    ax = node.attrs["axis"]
    _, inner = _split(x.shape, ax)
    T = dt.glsl_type(x.dtype)
    decl = (binding(1, T, "dst") + binding(2, T, "src", readonly=True)
            + binding(3, "int", "idx", readonly=True))
    k = ctx.kernel("IndexSelect", _SELECT.format(decl=decl, norm=_NORM), 3)
    ctx.dispatch(k, [out.size, idx.shape[0], x.shape[ax], inner], [out, x, idx], threads=out.size)


def _wide_sums(body: str, node, ctx, n_bind: int) -> tuple[str, list]:
    """An int32 scatter's body summing in int64, its store checked against int32 (binding
    n_bind + 1, a device check): the extra views. Float bodies are returned unchanged."""
    if "int acc = int(0);" not in body:
        return body, []
    from .reduce import overflow_error
    if not ctx.dev.has_int64:
        raise overflow_error("ScatterAdd", node.inputs[0].shape, (node.attrs["axis"],), ctx.dev.name)
    shape, axis = node.inputs[0].shape, node.attrs["axis"]
    err = ctx.check(lambda w: overflow_error("ScatterAdd", shape, (axis,)))
    body = ("#extension GL_ARB_gpu_shader_int64 : enable\n" + binding(n_bind + 1, "int", "err")
            + body.replace("int acc = int(0);", "int64_t acc = 0l;").replace(
                "dst[o] = acc;", "if (acc < -2147483648l || acc > 2147483647l) atomicOr(err[0], 1);\n"
                "  dst[o] = int(acc);"))
    return body, [err]


def _scatter_add(node, ins, out, ctx) -> None:
    src, idx = ins
    ax, size = node.attrs["axis"], node.attrs["size"]
    m = idx.shape[0]
    if m == 0:
        fill_view(ctx, out, 0)
        return
    _, inner = _split(src.shape, ax)
    T = dt.glsl_type(src.dtype)
    meta = [out.size, m, size, inner]
    if m <= SORT_MIN:
        decl = (binding(1, T, "dst") + binding(2, T, "src", readonly=True)
                + binding(3, "int", "idx", readonly=True))
        body, extra = _wide_sums(_SCAN.format(decl=decl, norm=_NORM, T=T), node, ctx, 3)
        k = ctx.kernel("ScatterAdd", body, 3 + len(extra))
        ctx.dispatch(k, meta, [out, src, idx] + extra, writes=(0, 3)[:1 + len(extra)], threads=out.size)
        return
    sc = ctx.scratch
    off_b, off_s, _ = _scratch_layout(m, size)
    bufs = [sc.sub(0, 8 * m, (m, 2), dt.int32), sc.sub(off_b, 8 * m, (m, 2), dt.int32)]
    starts = sc.sub(off_s, 4 * (size + 1), (size + 1,), dt.int32)

    decl = binding(1, "ivec2", "pairs") + binding(2, "int", "idx", readonly=True)
    k = ctx.kernel("ScatterAddPairs", _PAIRS.format(decl=decl, norm=_NORM), 2)
    ctx.dispatch(k, [m, size], [bufs[0], idx], threads=m)
    decl = binding(1, "ivec2", "dst") + binding(2, "ivec2", "src", readonly=True)
    k = ctx.kernel("ScatterAddMerge", _MERGE.format(decl=decl), 2)
    cur, w = 0, 1
    while w < m:
        ctx.dispatch(k, [m, w], [bufs[1 - cur], bufs[cur]], threads=m)
        cur, w = 1 - cur, 2 * w
    decl = binding(1, "int", "starts") + binding(2, "ivec2", "pairs", readonly=True)
    k = ctx.kernel("ScatterAddStarts", _STARTS.format(decl=decl), 2)
    ctx.dispatch(k, [m, size], [starts, bufs[cur]], threads=size + 1)
    decl = (binding(1, T, "dst") + binding(2, T, "src", readonly=True)
            + binding(3, "ivec2", "pairs", readonly=True) + binding(4, "int", "starts", readonly=True))
    body, extra = _wide_sums(_GATHER.format(decl=decl, T=T), node, ctx, 4)
    k = ctx.kernel("ScatterAddGather", body, 4 + len(extra))
    ctx.dispatch(k, meta, [out, src, bufs[cur], starts] + extra, writes=(0, 4)[:1 + len(extra)],
                 threads=out.size)


def index_error(what: str, value: int, size: int, axis: int | None, ignore: int | None = None) -> IndexError:
    """The IndexError for an out-of-range index (NumPy's wording) or class label.

    >>> str(index_error("take", 10, 3, 0))
    'take: index 10 is out of bounds for axis 0 with size 3'
    """
    if axis is not None:
        return IndexError(f"{what}: index {value} is out of bounds for axis {axis} with size {size}")
    also = f", or ignore_index {ignore}" if ignore is not None else ""
    return IndexError(f"{what}: label {value} is out of bounds for {size} classes (valid: 0 to "
                      f"{size - 1}{also})")


def _check_index(node, ins, out, ctx) -> None:
    a = node.attrs
    n, ignore = a["size"], a["ignore"]
    decl = binding(1, "int", "out_") + binding(2, "int", "idx", readonly=True) + binding(3, "int", "err")

    def error(w, what=a["what"], axis=a["axis"]):
        return index_error(what, int(w[1]) if w[1] > 0 else int(w[2]), n, axis, ignore)
    err = ctx.check(error)
    k = ctx.kernel("CheckIndex", _CHECK.format(decl=decl), 3)
    meta = [out.size, n, -n if a["negative"] else 0, ignore is not None, 0 if ignore is None else ignore]
    ctx.dispatch(k, meta, [out, ins[0], err], writes=(0, 2), threads=out.size)


def lower(node, ins, out, ctx) -> None:
    """Lower IndexSelect, ScatterAdd or CheckIndex (see the module docstring)."""
    if node.op is OpKind.IndexSelect:
        _index_select(node, ins, out, ctx)
    elif node.op is OpKind.ScatterAdd:
        _scatter_add(node, ins, out, ctx)
    elif node.op is OpKind.CheckIndex:
        _check_index(node, ins, out, ctx)
    else:
        raise NotImplementedError(f"index family: no lowering for {node.op.value}")
