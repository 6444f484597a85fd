"""vkml.jit: a function compiled per input signature, replaying recorded command buffers.

`jit(f)` traces f once per signature (`graphs.trace_flat`), simplifies the graph and keeps
a `vulkan.compiled.Compiled` program for it; `Lowering` reports what a signature compiled
to. Inside another transform a jitted function is traced into the enclosing graph.
"""
from __future__ import annotations

import functools
import inspect
from collections import OrderedDict
from typing import Callable, Sequence

from . import lazy
from . import numpy as vnp
from .array import Array, run_compiled
from .debug import checks_enabled
from .graphs import for_execution, trace_flat
from .trace import tracer
from .transforms.simplify import simplify
from .tree_util import tree_flatten, tree_unflatten
from .vulkan import runtime
from .vulkan.compiled import Compiled
from .vulkan.dispatch import barriers_before

# signatures kept per jitted function, least recently used dropped (it traces again): each
# holds its arena, slots and recordings in device memory, so a function called on ever
# new shapes would otherwise grow without bound
SIGNATURES_KEPT = 256


def _mode() -> tuple:
    """What a compiled program depends on besides its graph: index checks on or off, and
    the device profile it is lowered for."""
    return checks_enabled(), runtime.get().dev.profile


class DonatedArrayError(RuntimeError):
    """An array donated to a jitted call was used afterwards."""


class _DonatedBuffer:
    """Stands in for the device buffer of an array donated to a jitted call: any use of the
    array reaches for its buffer, and that raises DonatedArrayError instead of reading
    memory that now holds a result."""
    __slots__ = ("_shape", "_dtype")

    def __init__(self, shape, dtype):
        self._shape, self._dtype = shape, dtype

    def __getattr__(self, name):
        raise DonatedArrayError(
            f"jit: this array ({self._dtype}{list(self._shape)}) was donated to a jitted call "
            f"(donate_argnums) and its memory now holds that call's results; it can no longer "
            f"be read or passed anywhere. Use the call's outputs, or do not donate it.")

    def __bool__(self):
        return True


def _is_donated(a) -> bool:
    return isinstance(getattr(a, "_buf", None), _DonatedBuffer)


class Lowering:
    """What `jitted.lower(*args)` reports about a compiled signature: ops after
    simplification, kernels after fusion, dispatches after CPU devices merged
    independent kernels (`vulkan.merge`), barriers, planned peak bytes. Of the program
    as it runs once its merged kernels are built (a first call may run their parts:
    `merge.tiers`); `lower` waits for that build.

    >>> import vkml, vkml.numpy as vnp
    >>> lo = vkml.jit(lambda x: (vnp.exp(x).sum(), vnp.tanh(x) * 2.0)).lower(vnp.ones(8))
    >>> (lo.kernel_count, lo.dispatch_count <= lo.kernel_count)
    (2, True)
    """

    def __init__(self, c: Compiled):
        c.finish()               # the program as later calls run it (its merged kernels built)
        self.graph = c.exec_graph
        self.op_count = c.exec_graph.op_count()
        self.kernel_count = c.lowered.kernel_count
        self.dispatch_count = len(c.lowered.dispatches)
        self.peak_bytes = c.plan.peak_bytes
        self.arena_bytes = c.plan.arena_bytes
        self.barrier_count = sum(barriers_before(c.lowered.dispatches))

    def __repr__(self):
        return (f"Lowering(ops={self.op_count}, kernels={self.kernel_count}, dispatches={self.dispatch_count}, "
                f"barriers={self.barrier_count}, peak_bytes={self.peak_bytes})")


class StaticArgumentError(TypeError, ValueError):
    """A static argument of a jitted function that cannot key the compilation cache (not
    hashable). ValueError as in JAX, TypeError as an unhashable value is elsewhere."""


def _signature_argnums(f: Callable, static_argnums: tuple, static_argnames: tuple):
    """JAX's reading of static_argnums and static_argnames against f's signature: each
    completed by the other (a parameter static by position is static when passed by name,
    and the other way round), negative positions resolved when f takes a fixed number of
    positional arguments; a position past them is refused. Without a signature (a builtin)
    both are kept as given and negative positions count from the end of each call's
    arguments."""
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        return static_argnums, static_argnames
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        n = None
    else:
        n = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        for a in static_argnums:
            if not -n <= a < n:
                raise ValueError(f"jit: static_argnums={static_argnums!r}, but "
                                 f"{getattr(f, '__name__', f)!s} takes {n} positional arguments")
        static_argnums = tuple(sorted({a % n for a in static_argnums}))
    names = [p.name if p.kind is p.POSITIONAL_OR_KEYWORD else None for p in params
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_pos = {names[a] for a in static_argnums if 0 <= a < len(names) and names[a]}
    by_name = {names.index(k) for k in static_argnames if k in names}
    return tuple(sorted(set(static_argnums) | by_name)), tuple(sorted(set(static_argnames) | by_pos))


def _hashable(value, what: str) -> None:
    try:
        hash(value)
    except TypeError as e:
        raise StaticArgumentError(
            f"jit: {what} of type {type(value).__name__} is not hashable ({e}); static arguments "
            f"key the compilation cache, so they must be hashable (a tuple rather than a list, a "
            f"frozen dataclass, ...), or pass it as a traced argument instead") from None


class Jitted:
    """A function compiled per input signature (see `jit`)."""

    def __init__(self, f: Callable, static_argnums=(), donate_argnums=(), static_argnames=()):
        functools.update_wrapper(self, f)
        self.f = f
        nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        for k in names:
            if not isinstance(k, str):
                raise TypeError(f"jit: static_argnames must be a str or a sequence of str, got {static_argnames!r}")
        self.static_argnums, self.static_argnames = _signature_argnums(f, nums, names)
        self.donate_argnums = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
        self.cache: OrderedDict = OrderedDict()     # bounded: SIGNATURES_KEPT
        self.trace_count = 0
        # (shape, dtype) per argument -> (Compiled, out_tree), for calls whose arguments are
        # all concrete Arrays, without static or donated ones: such a call
        # skips splitting, flattening and keying the pytree (a few microseconds of Python)
        self._plain: dict | None = {} if not (self.static_argnums or self.donate_argnums) else None

    def _split(self, args, kwargs):
        """(static positions, dynamic positional args, dynamic keywords, static keywords,
        cache key of the static values)."""
        n = len(args)
        static = tuple(sorted({a % n for a in self.static_argnums if -n <= a < n}))
        dyn = [a for i, a in enumerate(args) if i not in static]
        # type and value, as JAX: 1 and 1.0 are equal but may steer f differently
        key_static = []
        for i in static:
            _hashable(args[i], f"static argument {i}")
            key_static.append((i, type(args[i]), args[i]))
        dyn_kw, static_kw = {}, {}
        for k, v in kwargs.items():
            if k in self.static_argnames:
                _hashable(v, f"static argument {k!r}")
                static_kw[k] = v
            else:
                dyn_kw[k] = v
        key_static += [(k, type(static_kw[k]), static_kw[k]) for k in sorted(static_kw)]
        return static, dyn, dyn_kw, static_kw, tuple(key_static)

    def _trace(self, args, static, static_kw, dyn, dyn_kw):
        def flat_f(dyn_args, kw):
            it = iter(dyn_args)
            full = [args[i] if i in static else next(it) for i in range(len(args))]
            return self.f(*full, **kw, **static_kw)
        self.trace_count += 1
        return trace_flat(flat_f, (dyn, dyn_kw))

    def _entry(self, args, kwargs=None, split=None, flat=None):
        static, dyn, dyn_kw, static_kw, key_static = split or self._split(args, kwargs or {})
        leaves, treedef = flat or tree_flatten((dyn, dyn_kw))
        leaves = [l if type(l) is Array else vnp.asarray(l) for l in leaves]
        # traced with `vkml.debug` index checks or without, lowered for one device
        # profile or another: different programs
        key = (treedef, tuple((l.shape, l.dtype) for l in leaves), key_static, _mode())
        entry = self.cache.get(key)
        if entry is None:
            graph, out_tree, captured, _ = self._trace(args, static, static_kw, dyn, dyn_kw)
            if captured:
                raise AssertionError("jit: eager trace captured outer tracers")
            g = simplify(graph)
            entry = (Compiled(for_execution(g)), out_tree)
            self.cache[key] = entry
            while len(self.cache) > SIGNATURES_KEPT:
                self.cache.popitem(last=False)
        else:
            self.cache.move_to_end(key)
        return entry, leaves, static

    def __call__(self, *args, **kwargs):
        # pending eager work runs first: a donated argument's buffer may be one it reads
        if lazy._pending:
            lazy.flush()
        plain = self._plain
        if plain is not None and not kwargs:
            key = []
            for a in args:
                if type(a) is not Array or a._trace is not None:
                    break
                key.append((a.shape, a.dtype))
            else:
                hit = plain.get((_mode(), tuple(key)))
                if hit is not None and tracer.current() is None:
                    for a in args:
                        if type(a._buf) is _DonatedBuffer:
                            getattr(a._buf, "nbytes")   # raises DonatedArrayError
                    return tree_unflatten(hit[1], run_compiled(hit[0], args))
        return self._call(args, kwargs)

    def _call(self, args, kwargs):
        split = self._split(args, kwargs)
        static, dyn, dyn_kw = split[:3]
        flat = tree_flatten((dyn, dyn_kw))
        leaves = flat[0]
        if tracer.current() is not None or any(getattr(l, "_trace", None) is not None for l in leaves):
            # inside another transform, jit is the identity on the program: tracing f into
            # the enclosing trace keeps everything it records there (custom_vjp regions
            # and their residuals, checkpoint tags)
            self.trace_count += 1
            return self.f(*args, **kwargs)
        (compiled, out_tree), leaves, _ = self._entry(args, kwargs, split, flat)
        if self._plain is not None and not kwargs and all(type(a) is Array for a in args):
            plain = self._plain
            plain[(_mode(), tuple((a.shape, a.dtype) for a in args))] = (compiled, out_tree)
            while len(plain) > SIGNATURES_KEPT:   # oldest first (a hit here does not reorder)
                plain.pop(next(iter(plain)), None)
        for l in leaves:
            if _is_donated(l):
                getattr(l._buf, "nbytes")   # raises DonatedArrayError, naming the array
        donated = set()
        if self.donate_argnums:
            pos = 0
            dyn_index = [i for i in range(len(args)) if i not in static]
            for i, sub in zip(dyn_index, flat[1].children[0].children):    # one per argument
                n = sub.num_leaves
                if i in self.donate_argnums or (i - len(args)) in self.donate_argnums:
                    donated.update(range(pos, pos + n))
                pos += n
        if donated:   # an array also passed undonated in the same call is not given up
            undonated = {id(l._buf) for i, l in enumerate(leaves) if i not in donated}
            donated = {i for i in donated if id(leaves[i]._buf) not in undonated}
            # nor a buffer eager operators share (a cached Python scalar's)
            from .numpy import _shared_buffer
            donated = {i for i in donated if not _shared_buffer(leaves[i]._buf)}
        res = run_compiled(compiled, leaves, donated)
        for i in donated:
            if all(r is not leaves[i] for r in res):
                leaves[i]._buf = _DonatedBuffer(leaves[i].shape, leaves[i].dtype)
        return tree_unflatten(out_tree, res)

    def profile(self, *args, **kwargs) -> list[tuple[str, float]]:
        """Compile for these arguments (if needed), run once with each kernel timed alone
        by device timestamps, and return (kernel name, seconds) per dispatch in order.

        >>> import vkml, vkml.numpy as vnp
        >>> f = vkml.jit(lambda x: (vnp.exp(x) @ x).sum())
        >>> times = f.profile(vnp.ones((64, 64)))
        >>> [name.split("_")[0] for name, s in times][:2], all(s >= 0 for _, s in times)
        (['Exp', 'MatMul'], True)
        """
        (compiled, _), leaves, _ = self._entry(args, kwargs)
        return compiled.profile([l._buf for l in leaves])

    def lower(self, *args, **kwargs) -> Lowering:
        """Compile for these arguments (if needed) and report op, kernel and dispatch counts
        and peak bytes (`Lowering`)."""
        return Lowering(self._entry(args, kwargs)[0][0])


def jit(f: Callable | None = None, static_argnums: int | Sequence[int] = (),
        donate_argnums: int | Sequence[int] = (), static_argnames: str | Sequence[str] = ()):
    """Compile f per input signature; later calls replay a recorded command buffer.

    The signature is the pytree structure, shapes and dtypes of the arguments (keyword
    arguments included) plus the values of static arguments. A call with a new signature
    traces again. Inside another transform, a jitted function is traced into the
    enclosing graph.

    >>> import vkml, vkml.numpy as vnp
    >>> f = vkml.jit(lambda x, y: vnp.tanh(x) * y)
    >>> [round(v, 4) for v in f(vnp.ones(3), 2.0).numpy().tolist()]
    [1.5232, 1.5232, 1.5232]

    Every argument, positional or keyword, is traced as an array (a Python scalar as a
    0-d int32, float32 or bool array, so a new value does not trace again) except the
    static ones: static_argnums (positions, negative ones counting from the end) and
    static_argnames (keyword names) reach f as they are, so they can steer Python control
    flow, and each new value (compared by type and ==) traces again. Static values must
    be hashable. As in JAX, a parameter named in one is static when passed the other way
    too (read from f's signature).

    >>> def power(x, n):
    ...     for _ in range(n - 1):
    ...         x = x * x
    ...     return x
    >>> p = vkml.jit(power, static_argnames="n")
    >>> p(vnp.asarray(2.0), n=3).item(), p(vnp.asarray(2.0), 2).item(), p.trace_count
    (16.0, 4.0, 2)
    >>> vkml.jit(lambda x, n: x, static_argnums=1)(vnp.ones(1), [2])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    vkml.jit.StaticArgumentError: jit: static argument 1 of type list is not hashable ...
    """
    if f is None:
        return functools.partial(jit, static_argnums=static_argnums, donate_argnums=donate_argnums,
                                 static_argnames=static_argnames)
    return Jitted(f, static_argnums, donate_argnums, static_argnames)
