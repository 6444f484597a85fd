"""IndexSelect and ScatterAdd: gathers along one axis, and their deterministic adjoint;
ScatterReduce, the same scatter folding by max, min or product instead of a sum;
CheckIndex, the device check of indices that `vkml.debug.checks` puts before a gather.

Both view their operands as (outer, n, inner) around the indexed axis. A negative index
wraps once in every kernel; then, as in JAX, a gather clamps an index still out of range
to [0, n-1] and a scatter drops its update (so a clamped read gets no gradient).

ScatterAdd never uses float atomics: each output element gathers its contributions in
index order j = 0, 1, ..., so results are bitwise reproducible. For short index arrays
every output element tests all of them (`scatter_all_program`); for long ones it first
sorts (destination, j) pairs with a stable merge sort in scratch memory
(`pairs_program`, `merge_pass_program`), finds each destination's run by binary search
(`run_starts_program`) and sums only its run (`scatter_runs_program`), so the cost is
proportional to the number of contributions, not positions x len(idx). Both paths add
in the same order, so they give bitwise the same result. An int32 ScatterAdd sums in
int64 and sets a device check where a sum does not fit int32.

>>> [b.name for b in scatter_runs_program("float").bindings]
['dst', 'src', 'pairs', 'starts']
"""
from __future__ import annotations

from functools import lru_cache

from ...trace import dtypes as dt
from ...trace.ops import OpKind
from ..memory import ALIGN
from ..program import Meta, Program
from .fill import fill_view

# Above this many indices ScatterAdd sorts them first (a few extra dispatches) instead of
# letting every output element scan the whole index array.
SORT_MIN = 64

# GLSL: the gather's index (wrap negatives once, clamp into [0, n-1]) and the scatter's
# (wrap negatives once; out of range gives n: never equal to a position, and sorted to
# the end, past every destination, by the long path).
NORMALISE_GLSL = """int norm_index(int k, int n) {
  if (k < 0) k += n;
  return clamp(k, 0, n - 1);
}
int drop_index(int k, int n) {
  if (k < 0) k += n;
  return (k < 0 || k >= n) ? n : k;
}
"""

# the per-output-element kernels: (outer, positions, inner) outputs gathering from
# (outer, m, inner) sources
_SCATTER_META = (("total", 1), ("m", 1), ("size", 1), ("inner", 1))


def _decode(p: Program) -> list[str]:
    """main()'s first lines: output o = (b, p, i) of (outer, size, inner)."""
    return ["uint gi = gidx();",
            f"if (gi >= uint({p.m('total')})) return;",
            f"int m = {p.m('m')}, size = {p.m('size')}, inner = {p.m('inner')};",
            "int o = int(gi);",
            "int i = o % inner;",
            "int p = (o / inner) % size;",
            "int b = o / (inner * size);"]


@lru_cache(maxsize=1024)
def check_program() -> Program:
    """CheckIndex: out = idx; an index outside [lo, n) (other than `ignore`, when
    has_ignore) sets err[0] and records the largest such value (err[1], if positive) and
    the smallest (err[2], if negative).

    >>> check_program().writes     # the checked copy and the device check
    (0, 2)
    """
    p = Program("CheckIndex")
    p.meta = Meta(("total", 1), ("n", 1), ("lo", 1), ("has_ignore", 1), ("ignore", 1))
    out = p.buffer("checked", "int")
    idx = p.buffer("idx", "int", readonly=True)
    err = p.buffer("err", "int")
    p.main("uint gi = gidx();",
           f"if (gi >= uint({p.m('total')})) return;",
           f"int k = {idx}[gi];",
           f"{out}[gi] = k;",
           f"int n = {p.m('n')}, lo = {p.m('lo')};",
           f"if ((k < lo || k >= n) && !({p.m('has_ignore')} != 0 && k == {p.m('ignore')})) {{",
           f"  atomicOr({err}[0], 1);",
           f"  if (k >= 0) atomicMax({err}[1], k); else atomicMin({err}[2], k);",
           "}")
    return p


@lru_cache(maxsize=1024)
def select_program(T: str) -> Program:
    """IndexSelect: dst[b, j, i] = src[b, norm_index(idx[j]), i].

    >>> select_program("float").meta
    Meta(('total', 1), ('m', 1), ('n', 1), ('inner', 1))
    """
    p = Program("IndexSelect")
    p.meta = Meta(("total", 1), ("m", 1), ("n", 1), ("inner", 1))
    dst = p.buffer("dst", T)
    src = p.buffer("src", T, readonly=True)
    idx = p.buffer("idx", "int", readonly=True)
    p.library("index_normalise", NORMALISE_GLSL)
    p.main("uint gi = gidx();",
           f"if (gi >= uint({p.m('total')})) return;",
           f"int m = {p.m('m')}, n = {p.m('n')}, inner = {p.m('inner')};",
           "int o = int(gi);",
           "int i = o % inner;",
           "int j = (o / inner) % m;",
           "int b = o / (inner * m);",
           f"int k = norm_index({idx}[j], n);",
           f"{dst}[o] = {src}[(b * n + k) * inner + i];")
    return p


def _sums(p: Program, T: str, wide: bool) -> tuple[str, str | None]:
    """The accumulator's declaration for a scatter of T (int32 sums in int64: wide) and
    the device check a wide one sets, bound after p's other bindings (None if not wide)."""
    if not wide:
        return f"{T} acc = {T}(0);", None
    p.extension("GL_ARB_gpu_shader_int64")
    return "int64_t acc = 0l;", p.buffer("err", "int")


def _store(dst: str, err: str | None) -> list[str]:
    """The output's store; a wide sum that does not fit int32 sets err[0]."""
    if err is None:
        return [f"{dst}[o] = acc;"]
    return [f"if (acc < -2147483648l || acc > 2147483647l) atomicOr({err}[0], 1);",
            f"{dst}[o] = int(acc);"]


def _identity(T: str, reduce: str) -> str:
    """GLSL for the value a ScatterReduce destination no index reaches holds."""
    if reduce == "mul":
        return f"{T}(1)"
    if T == "int":
        return "int(0x80000000u)" if reduce == "max" else "int(0x7fffffffu)"
    inf = "uintBitsToFloat(0x7f800000u)"
    return f"{T}({'-' if reduce == 'max' else ''}{inf})"


def _combine(T: str, reduce: str, v: str) -> str:
    """GLSL folding the contribution v into acc: nan propagates through max and min (a nan
    acc stays, as neither comparison holds against it)."""
    if reduce == "add":
        return f"acc += {v};"
    if reduce == "mul":
        return f"acc *= {v};"
    cmp = ">" if reduce == "max" else "<"
    if T == "int":
        return f"acc = {reduce}(acc, {v});"
    return f"{{ {T} v = {v}; if (v {cmp} acc || isnan(v)) acc = v; }}"


def identity_value(dtype, reduce: str):
    """The host value of `_identity` (what an empty scatter fills with).

    >>> identity_value("int32", "max"), identity_value("float32", "min")
    (-2147483648, inf)
    """
    if reduce == "add":
        return 0
    if reduce == "mul":
        return 1
    if dt.is_float(dtype):
        return float("-inf") if reduce == "max" else float("inf")
    return -2 ** 31 if reduce == "max" else 2 ** 31 - 1


def _accumulator(p: Program, T: str, wide: bool, reduce: str) -> tuple[str, str | None]:
    """The accumulator's declaration and the device check (see `_sums`)."""
    if reduce == "add":
        return _sums(p, T, wide)
    return f"{T} acc = {_identity(T, reduce)};", None


@lru_cache(maxsize=1024)
def scatter_all_program(T: str, wide: bool = False, reduce: str = "add") -> Program:
    """ScatterAdd (or ScatterReduce, by `reduce`) for short index arrays: each output
    element tests every index. wide: an int32 ScatterAdd, summed in int64 and checked (a
    device check bound last).

    >>> [b.name for b in scatter_all_program("int", wide=True).bindings]
    ['dst', 'src', 'idx', 'err']
    """
    p = Program("ScatterAddAll" if reduce == "add" else f"Scatter{reduce.capitalize()}All")
    p.meta = Meta(*_SCATTER_META)
    dst = p.buffer("dst", T)
    src = p.buffer("src", T, readonly=True)
    idx = p.buffer("idx", "int", readonly=True)
    acc, err = _accumulator(p, T, wide, reduce)
    p.library("index_normalise", NORMALISE_GLSL)
    p.main(*_decode(p), acc,
           "for (int j = 0; j < m; ++j) {",
           f"  if (drop_index({idx}[j], size) == p) {_combine(T, reduce, f'{src}[(b * m + j) * inner + i]')}",
           "}",
           *_store(dst, err))
    return p


@lru_cache(maxsize=1024)
def pairs_program() -> Program:
    """(destination, j) pairs in index order: runs of length 1 for the merge sort.

    >>> pairs_program().bindings[0].type
    'ivec2'
    """
    p = Program("ScatterAddPairs")
    p.meta = Meta(("m", 1), ("size", 1))
    pairs = p.buffer("pairs", "ivec2")
    idx = p.buffer("idx", "int", readonly=True)
    p.library("index_normalise", NORMALISE_GLSL)
    p.main("uint gi = gidx();",
           f"int m = {p.m('m')}, size = {p.m('size')};",
           "if (gi >= uint(m)) return;",
           "int j = int(gi);",
           f"{pairs}[j] = ivec2(drop_index({idx}[j], size), j);")
    return p


@lru_cache(maxsize=1024)
def merge_pass_program() -> Program:
    """One bottom-up merge pass: runs of width w pairwise into runs of 2w. Each element
    finds its place by binary search in the partner run; ties go left-run first, so the
    sort is stable and equal destinations keep increasing j.

    >>> merge_pass_program().names
    ['bound']
    """
    p = Program("ScatterAddMerge")
    p.meta = Meta(("m", 1), ("w", 1))
    dst = p.buffer("dst", "ivec2")
    src = p.buffer("src", "ivec2", readonly=True)
    p.add(f"""// first position in [lo, hi) whose key is > key (strict) or >= key, by `upper`
int bound(int lo, int hi, int key, bool upper) {{
  while (lo < hi) {{
    int mid = (lo + hi) >> 1;
    int k = {src}[mid].x;
    if (k < key || (upper && k == key)) lo = mid + 1; else hi = mid;
  }}
  return lo;
}}
""", names=("bound",))
    p.main("uint gi = gidx();",
           f"int m = {p.m('m')}, w = {p.m('w')};",
           "if (gi >= uint(m)) return;",
           "int i = int(gi);",
           f"ivec2 e = {src}[i];",
           "int run = i / w;",
           "int s = run * w;",
           "int base = (run & ~1) * w;",
           "int pos;",
           "if ((run & 1) == 0) {",
           "  int b0 = s + w, b1 = min(s + 2 * w, m);",
           "  pos = b0 < m ? base + (i - s) + (bound(b0, b1, e.x, false) - b0) : i;",
           "} else {",
           "  int a0 = s - w;",
           "  pos = base + (i - s) + (bound(a0, s, e.x, true) - a0);",
           "}",
           f"{dst}[pos] = e;")
    return p


@lru_cache(maxsize=1024)
def run_starts_program() -> Program:
    """starts[p] = first sorted position with destination >= p, for p in [0, size].

    >>> run_starts_program().writes
    (0,)
    """
    p = Program("ScatterAddStarts")
    p.meta = Meta(("m", 1), ("size", 1))
    starts = p.buffer("starts", "int")
    pairs = p.buffer("pairs", "ivec2", readonly=True)
    p.main("uint gi = gidx();",
           f"int m = {p.m('m')}, size = {p.m('size')};",
           "if (gi > uint(size)) return;",
           "int p = int(gi);",
           "int lo = 0, hi = m;",
           "while (lo < hi) {",
           "  int mid = (lo + hi) >> 1;",
           f"  if ({pairs}[mid].x < p) lo = mid + 1; else hi = mid;",
           "}",
           f"{starts}[p] = lo;")
    return p


@lru_cache(maxsize=1024)
def scatter_runs_program(T: str, wide: bool = False, reduce: str = "add") -> Program:
    """ScatterAdd (or ScatterReduce) for long index arrays: each output element folds its
    run of the sorted pairs, [starts[p], starts[p + 1]) (wide: as in `scatter_all_program`).

    >>> scatter_runs_program("int", wide=True).writes
    (0, 4)
    """
    p = Program("ScatterAddRuns" if reduce == "add" else f"Scatter{reduce.capitalize()}Runs")
    p.meta = Meta(*_SCATTER_META, ("skip", 1), ("span", 1), ("resume", 1))
    dst = p.buffer("dst", T)
    src = p.buffer("src", T, readonly=True)
    pairs = p.buffer("pairs", "ivec2", readonly=True)
    starts = p.buffer("starts", "int", readonly=True)
    acc, err = _accumulator(p, T, wide, reduce)
    v = f"{src}[(b * m + {pairs}[t].y) * inner + i]"
    # one pass folds at most `span` of a run's terms (a loop-limited driver, `_scatter_add`);
    # a resumed pass starts from what the passes before it stored, so the terms are still
    # folded in index order
    p.main(*_decode(p), acc,
           f"int t0 = {starts}[p] + {p.m('skip')}, t1 = min(t0 + {p.m('span')}, {starts}[p + 1]);",
           f"if ({p.m('resume')} != 0) {{",
           "  if (t0 >= t1) return;",
           f"  acc = {dst}[o];",
           "}",
           f"for (int t = t0; t < t1; ++t) {_combine(T, reduce, v)}",
           *_store(dst, err))
    return p


def _outer_inner(shape: tuple, axis: int) -> tuple[int, int]:
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


def scratch_bytes(node, profile=None) -> int:
    """Bytes of scratch a node needs: ScatterAdd with many indices sorts (destination, j)
    pairs in two ping-pong buffers and keeps each destination's run start.

    For 1000 indices into 10 positions: two 8000-byte pair buffers (each rounded up to
    the binding alignment) and 11 int32 starts, 16428 bytes with ALIGN = 256. profile:
    unused (the layout is the same everywhere).

    >>> from types import SimpleNamespace as NS
    >>> scratch_bytes(NS(op=OpKind.ScatterAdd, size=10, inputs=[None, NS(shape=(1000,))], attrs={"size": 10}))
    16428
    """
    if node.op not in (OpKind.ScatterAdd, OpKind.ScatterReduce):
        return 0
    m = node.inputs[1].shape[0]
    if m <= SORT_MIN or node.size == 0:
        return 0
    return _scratch_layout(m, node.attrs["size"])[2]


def _index_select(node, ins, out, ctx) -> None:
    x, idx = ins
    ax = node.attrs["axis"]
    _, inner = _outer_inner(x.shape, ax)
    k = ctx.kernel(select_program(dt.glsl_type(x.dtype)))
    ctx.dispatch(k, {"total": out.size, "m": idx.shape[0], "n": x.shape[ax], "inner": inner},
                 [out, x, idx], threads=out.size, heads=0)


def _overflow_check(node, ctx, T: str) -> list:
    """An int scatter's device check (it sums in int64): [the check's view]; [] else."""
    if T != "int":
        return []
    from .reduce import overflow_error
    if not ctx.dev.has_int64:
        raise overflow_error("ScatterAdd", node.inputs[0].shape, (node.attrs["axis"],), ctx.dev.name)
    shape, axis = node.inputs[0].shape, node.attrs["axis"]
    return [ctx.check(lambda w: overflow_error("ScatterAdd", shape, (axis,)))]


def _scatter_add(node, ins, out, ctx) -> None:
    src, idx = ins
    ax, size = node.attrs["axis"], node.attrs["size"]
    reduce = node.attrs.get("reduce", "add")
    m = idx.shape[0]
    T = dt.glsl_type(src.dtype)
    if m == 0:
        fill_view(ctx, out, identity_value(out.dtype, reduce))
        return
    _, inner = _outer_inner(src.shape, ax)
    meta = {"total": out.size, "m": m, "size": size, "inner": inner}
    err = _overflow_check(node, ctx, T) if reduce == "add" else []
    if m <= SORT_MIN:
        k = ctx.kernel(scatter_all_program(T, bool(err), reduce))
        ctx.dispatch(k, meta, [out, src, idx] + err, threads=out.size, heads=m + 8)
        return
    sc = ctx.scratch
    off_b, off_s, _ = _scratch_layout(m, size)
    bufs = [sc.sub(0, 8 * m, (m, 2), dt.int32), sc.sub(off_b, 8 * m, (m, 2), dt.int32)]
    starts = sc.sub(off_s, 4 * (size + 1), (size + 1,), dt.int32)

    ctx.dispatch(ctx.kernel(pairs_program()), {"m": m, "size": size}, [bufs[0], idx], threads=m, heads=0)
    search = 2 * m.bit_length() + 8     # a binary search's loop heads (`Dispatch.heads`)
    k = ctx.kernel(merge_pass_program())
    cur, w = 0, 1
    while w < m:
        ctx.dispatch(k, {"m": m, "w": w}, [bufs[1 - cur], bufs[cur]], threads=m, heads=search)
        cur, w = 1 - cur, 2 * w
    ctx.dispatch(ctx.kernel(run_starts_program()), {"m": m, "size": size}, [starts, bufs[cur]],
                 threads=size + 1, heads=search)
    k = ctx.kernel(scatter_runs_program(T, bool(err), reduce))
    # lavapipe ends an invocation's loops after `Profile.loop_limit` heads, silently: a
    # destination with more contributions folds them over several passes
    limit = ctx.profile.loop_limit
    span = min(m, limit // 2) if limit else m
    for q in range(-(-m // span)):
        ctx.dispatch(k, {**meta, "skip": q * span, "span": span, "resume": int(q > 0)},
                     [out, src, bufs[cur], starts] + err, threads=out.size, heads=span + 8)


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

    def error(w, what=a["what"], axis=a["axis"]):
        return index_error(what, int(w[1]) if w[1] > 0 else int(w[2]), n, axis, ignore)
    err = ctx.check(error)
    meta = {"total": out.size, "n": n, "lo": -n if a["negative"] else 0, "has_ignore": ignore is not None,
            "ignore": 0 if ignore is None else ignore}
    ctx.dispatch(ctx.kernel(check_program()), meta, [out, ins[0], err], threads=out.size)


def lower(node, ins, out, ctx) -> None:
    """Lower IndexSelect, ScatterAdd or CheckIndex (see the module docstring).

    >>> import numpy as np, vkml.numpy as vnp
    >>> from vkml.array import bind
    >>> src = vnp.asarray(np.ones((4, 2), np.float32))
    >>> bind(OpKind.ScatterAdd, [src, vnp.asarray(np.array([0, 2, 0, -1], np.int32))], axis=0, size=3)
    Array([[2., 2.],
           [0., 0.],
           [2., 2.]], dtype=float32)
    """
    if node.op is OpKind.IndexSelect:
        _index_select(node, ins, out, ctx)
    elif node.op in (OpKind.ScatterAdd, OpKind.ScatterReduce):
        _scatter_add(node, ins, out, ctx)
    elif node.op is OpKind.CheckIndex:
        _check_index(node, ins, out, ctx)
    else:
        raise NotImplementedError(f"index family: no lowering for {node.op.value}")
