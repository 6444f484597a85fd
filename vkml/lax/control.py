"""jax.lax's control flow on vkml arrays: scan, fori_loop, while_loop, cond, switch, map,
associative_scan.

`scan` traces its body once into a subgraph held by one Scan node (`trace/ops.py`), so
a loop of any length costs the tracer, the transforms and the lowering one body, and a
jitted loop is one submission replaying the body's dispatches (`vulkan/lower/control.py`).
Its gradient is a Scan in the other direction (`transforms/control.py`), so grad, vmap,
jit, checkpoint and nested grad compose with it as with any operator. `cond` and
`switch` evaluate every branch and select (so they differentiate and batch, a batched
predicate included); `fori_loop` with static bounds is a scan; `while_loop` is one
While node, whose lowering reads its predicate back from the device every few steps.

>>> import vkml.numpy as vnp
>>> c, ys = scan(lambda c, x: (c + x, c), 0.0, vnp.arange(4.0))
>>> float(c), ys.numpy().tolist()
(6.0, [0.0, 0.0, 1.0, 3.0])
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from .. import numpy as vnp
from ..array import Array, bind
from ..graphs import call_graph, execute, trace_flat
from ..trace import control as tc
from ..trace import dtypes as dt
from ..trace import tracer
from ..trace.graph import Graph
from ..trace.ops import OpKind, scan_outputs
from ..transforms.simplify import simplify
from ..tree_util import _leaf_paths, tree_flatten, tree_map, tree_unflatten

__all__ = ["scan", "fori_loop", "while_loop", "cond", "switch", "map", "associative_scan"]


def _traced(leaves) -> bool:
    return tracer.current() is not None or any(getattr(l, "_trace", None) is not None for l in leaves)


def _eagerly(fn: Callable, args: Sequence) -> Any:
    """fn(*args) traced into one graph and run (a loop outside any transform)."""
    graph, out_tree, captured, leaves = trace_flat(fn, args)
    return tree_unflatten(out_tree, call_graph(simplify(graph), leaves + captured))


def _aval(x) -> str:
    return f"{np.dtype(x.dtype)}{list(x.shape)}"


def _check_same(who: str, what: str, tree_a, leaves_a, tree_b, leaves_b, names=("input", "output")):
    """JAX's TypeError for two pytrees of arrays that must have identical types."""
    if tree_a != tree_b:
        raise TypeError(f"{who}: {what} must have identical types (the same pytree structure), but "
                        f"the {names[0]} is {tree_a} and the {names[1]} is {tree_b}")
    paths = _leaf_paths(tree_unflatten(tree_a, [0] * len(leaves_a)), "")
    for p, a, b in zip(paths, leaves_a, leaves_b):
        if tuple(a.shape) != tuple(b.shape) or np.dtype(a.dtype) != np.dtype(b.dtype):
            where = f" at {p}" if p else ""
            raise TypeError(f"{who}: {what} must have identical types, but{where} the {names[0]} is "
                            f"{_aval(a)} and the {names[1]} is {_aval(b)}")


def _trace_body(who: str, f: Callable, carry_tree, carry: list, x_tree, xs: list, pair=True,
                what: str = "body function carry output and input"):
    """f(carry, x) traced once on stand-ins: (body Graph, constants it closes over, the
    output tree of its step outputs). Checks that f returns (carry, y) with the carry's
    types unchanged."""
    with tracer.Trace() as t:
        c_in = [Array._traced(t, t.new_input(c.shape, c.dtype)) for c in carry]
        x_in = [Array._traced(t, t.new_input(x.shape[1:], x.dtype)) for x in xs]
        out = f(tree_unflatten(carry_tree, c_in), tree_unflatten(x_tree, x_in))
        if pair:
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise TypeError(f"{who}: the body function must return a pair (carry, y), got "
                                f"{type(out).__name__}")
            new_c, y = out
        else:
            new_c, y = out, None
        c_leaves, c_tree = tree_flatten(new_c)
        c_leaves = [vnp.asarray(c) for c in c_leaves]
        _check_same(who, what, carry_tree, carry, c_tree, c_leaves)
        y_leaves, y_tree = tree_flatten(y)
        y_leaves = [vnp.asarray(v) for v in y_leaves]
        nodes = [t.lift(v) for v in c_leaves + y_leaves]
        keep = [t.lift(v) for v in getattr(t, "keep", [])]
    n = len(carry) + len(xs)
    body = Graph(t.inputs[n:] + t.inputs[:n], nodes)
    body.keep = keep
    return body, list(t.captured), y_tree


def _emit(body: Graph, operands: list, length: int, reverse: bool, nc: int, nk: int):
    """Scan and Part nodes in the active trace: (final carries, stacked step outputs)."""
    body = tc.with_saved(tc.normalized(body, nc, nk), nc, nk)
    tok = bind(OpKind.Scan, operands, body=body, length=int(length), reverse=bool(reverse),
               n_consts=nc, n_carry=nk, saved=True)
    outs = [bind(OpKind.Part, [tok], index=k, shape=s, dtype=d)
            for k, (s, d) in enumerate(scan_outputs(body, nk, length))]
    n_y = len(body.outputs) - 2 * nk
    return outs[:nk], outs[nk:nk + n_y]


def _blocks(x: Array, start: int, q: int, k: int) -> Array:
    return vnp.reshape(x[start:start + q * k], (q, k) + tuple(x.shape[1:]))


def _loop(body, consts, init, xs, length, reverse, unroll: int, remat):
    nc, nk = len(consts), len(init)
    if remat == "sqrt" and length > 1:
        k = math.isqrt(length - 1) + 1          # ceil(sqrt(length)) steps per block
        u = min(unroll, k)
        k = -(-k // u) * u                      # whole unrolled iterations per block
        big = lambda: tc.blocked(body, nc, nk, k, reverse, u)   # noqa: E731
    elif unroll > 1 and length > 1:
        k = min(unroll, length)
        big = lambda: tc.unrolled(body, nc, nk, k, reverse)  # noqa: E731
    else:
        return _emit(body, consts + init + xs, length, reverse, nc, nk)
    q, r = divmod(length, k)
    main_at = r if reverse else 0
    tail_at = 0 if reverse else q * k
    carry, ys = _emit(big(), consts + init + [_blocks(x, main_at, q, k) for x in xs], q, reverse, nc, nk)
    ys = [vnp.reshape(y, (q * k,) + tuple(y.shape[2:])) for y in ys]
    if r:
        carry, tail = _emit(body, consts + carry + [x[tail_at:tail_at + r] for x in xs], r, reverse, nc, nk)
        ys = [vnp.concatenate([t, y] if reverse else [y, t], axis=0) for y, t in zip(ys, tail)]
    return carry, ys


def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None, reverse: bool = False,
         unroll: int | bool = 1, *, remat: str | None = None) -> tuple[Any, Any]:
    """Loop f(carry, x) -> (carry, y) over the leading axis of xs, as jax.lax.scan:
    returns (final carry, ys stacked). f is traced once, whatever the length.

    unroll: steps per loop iteration (True: all), as JAX's (the body graph holds that many
    copies of f's trace; f is still called once). remat="sqrt" (vkml's): the gradient
    keeps the carries of about sqrt(length) steps instead of every step's, recomputing
    the rest (blocks of ceil(sqrt(length)) steps, each a scan of its own; with unroll,
    a block is rounded up to whole unrolled iterations, each of `unroll` steps).

    >>> import vkml, vkml.numpy as vnp
    >>> xs = vnp.asarray([1.0, 2.0, 3.0])
    >>> def f(c, x):
    ...     return c * x, c
    >>> float(vkml.grad(lambda xs: scan(f, 1.0, xs)[0])(xs)[1])
    3.0
    >>> scan(f, 1.0, xs, length=4)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: scan: length argument 4 disagrees with the leading axis sizes [3] of xs
    """
    if not callable(f):
        raise TypeError(f"scan: f must be callable, got {type(f).__name__}")
    if remat not in (None, "sqrt"):
        raise ValueError(f"scan: remat must be None or 'sqrt', got {remat!r}")
    x_leaves, x_tree = tree_flatten(xs)
    x_leaves = [vnp.asarray(x) for x in x_leaves]
    for x in x_leaves:
        if x.ndim == 0:
            raise ValueError(f"scan: got a value with no leading axis to scan over: {_aval(x)}")
    sizes = sorted({x.shape[0] for x in x_leaves})
    if len(sizes) > 1:
        raise ValueError(f"scan: got values with different leading axis sizes: "
                         f"{', '.join(str(x.shape[0]) for x in x_leaves)}")
    if length is not None:
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
            raise TypeError(f"scan: length must be a non-negative int, got {length!r}")
        length = int(length)
        if sizes and sizes[0] != length:
            raise ValueError(f"scan: length argument {length} disagrees with the leading axis "
                             f"sizes {sizes} of xs")
    elif not sizes:
        raise ValueError("scan: got no values to scan over and `length` not provided")
    else:
        length = sizes[0]
    if unroll is True:
        unroll = max(length, 1)
    elif unroll is False:
        unroll = 1
    if isinstance(unroll, bool) or not isinstance(unroll, (int, np.integer)) or unroll < 1:
        raise ValueError(f"scan: unroll must be a positive int or a bool, got {unroll!r}")
    c_leaves, c_tree = tree_flatten(init)
    c_leaves = [vnp.asarray(c) for c in c_leaves]
    if not _traced(c_leaves + x_leaves):
        return _eagerly(lambda c, x: scan(f, c, x, length, reverse, unroll, remat=remat),
                        [tree_unflatten(c_tree, c_leaves), tree_unflatten(x_tree, x_leaves)])
    body, consts, y_tree = _trace_body("scan", f, c_tree, c_leaves, x_tree, x_leaves)
    carry, ys = _loop(body, consts, c_leaves, x_leaves, length, reverse, int(unroll), remat)
    return tree_unflatten(c_tree, carry), tree_unflatten(y_tree, ys)


def map(f: Callable, xs: Any, *, batch_size: int | None = None) -> Any:  # noqa: A001
    """f applied to each slice of xs along its leading axis, stacked (jax.lax.map): a scan
    without a carry; batch_size slices at a time through vkml.vmap.

    >>> import vkml.numpy as vnp
    >>> map(lambda x: x * x, vnp.arange(3.0)).numpy().tolist()
    [0.0, 1.0, 4.0]
    """
    if batch_size is None:
        return scan(lambda _, x: (None, f(x)), None, xs)[1]
    from ..vmap import vmap
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"map: batch_size must be a positive int, got {batch_size!r}")
    leaves, tree = tree_flatten(xs)
    n = leaves[0].shape[0] if leaves else 0
    q, r = divmod(n, batch_size)
    out = None
    if q:
        main = tree_map(lambda x: vnp.reshape(vnp.asarray(x)[:q * batch_size], (q, batch_size) + tuple(x.shape[1:])), xs)
        out = tree_map(lambda y: vnp.reshape(y, (q * batch_size,) + tuple(y.shape[2:])),
                       scan(lambda _, x: (None, vmap(f)(x)), None, main)[1])
    if r:
        tail = vmap(f)(tree_map(lambda x: vnp.asarray(x)[q * batch_size:], xs))
        out = tail if out is None else tree_map(lambda a, b: vnp.concatenate([a, b]), out, tail)
    return out


def fori_loop(lower, upper, body_fun: Callable, init_val: Any, *, unroll: int | bool | None = None) -> Any:
    """body_fun(i, val) for i in range(lower, upper), as jax.lax.fori_loop. With static
    bounds (Python or concrete ints) it is a scan of upper - lower steps, so it runs under
    jit and differentiates in both modes; traced bounds make it a while_loop.

    >>> import vkml.numpy as vnp
    >>> float(fori_loop(0, 4, lambda i, x: x + i, vnp.asarray(0.0)))
    6.0
    """
    def static(v):
        if getattr(v, "_trace", None) is not None:
            return None
        if isinstance(v, Array):
            if v.shape != () or not np.issubdtype(v.dtype, np.integer):
                raise TypeError(f"fori_loop: bounds must be int scalars, got {_aval(v)}")
            return int(v.item())
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            return int(v)
        raise TypeError(f"fori_loop: bounds must be ints, got {type(v).__name__}")
    lo, hi = static(lower), static(upper)
    if lo is None or hi is None:
        return while_loop(lambda c: c[0] < upper, lambda c: (c[0] + 1, body_fun(c[0], c[1])),
                          (vnp.asarray(lower, dtype=dt.int32), init_val))[1]
    n = max(hi - lo, 0)

    def step(c, _):
        i, v = c
        return (i + 1, body_fun(i, v)), None
    (_, out), _ = scan(step, (vnp.asarray(lo, dtype=dt.int32), init_val), None, length=n,
                       unroll=1 if unroll is None else unroll)
    return out


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """body_fun applied while cond_fun holds, as jax.lax.while_loop: under jit and vmap,
    on concrete values, and in forward mode.

    cond_fun and body_fun are traced once into one While node (`trace/ops.py`). Its
    trip count is only known by running, so its lowering runs a chunk of steps per
    submission and reads back whether the predicate still holds (one step, then chunks
    of 2, 4, ... 32: `vulkan/dispatch.py` says why), each step selecting the new carry
    only where the predicate holds, so the steps past the end of a chunk change nothing.
    Under vmap the predicate is batched: the loop runs while any lane's holds, and a
    lane that is done keeps its carry. jvp goes through it (a While over (carry,
    tangent)); reverse mode under jit or vmap raises JAX's error. Under grad, jvp and vjp
    outside jit (whose traces know their arguments' values) the trip count n is computed
    first, and the loop becomes a scan of n steps, so it differentiates in reverse mode
    too, unlike JAX's (the trip count is piecewise constant: the derivative is that of
    its n steps). A loop whose predicate never fails warns after a while and raises
    past `vkml.vulkan.dispatch.WHILE_MAX_STEPS` steps if that is set.

    >>> import vkml, vkml.numpy as vnp
    >>> float(while_loop(lambda x: x < 10.0, lambda x: x * 2.0, vnp.asarray(1.0)))
    16.0
    >>> vkml.jit(lambda n: while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2), (0, 1))[1])(5).item()
    32
    """
    leaves, tree = tree_flatten(init_val)
    leaves = [vnp.asarray(l) for l in leaves]
    if not _traced(leaves):
        return _eagerly(lambda v: while_loop(cond_fun, body_fun, v), [tree_unflatten(tree, leaves)])
    body, cond, consts = _trace_while(cond_fun, body_fun, tree, leaves)
    known = _peek(leaves + consts)
    if known is not None:
        return tree_unflatten(tree, _counted_while(body, cond, consts, leaves, known))
    nc, nk = len(consts), len(leaves)
    tok = bind(OpKind.While, consts + leaves, body=body, cond=cond, n_consts=nc, n_carry=nk,
               transpose=None)
    return tree_unflatten(tree, [bind(OpKind.Part, [tok], index=k, shape=tuple(l.shape), dtype=l.dtype)
                                 for k, l in enumerate(leaves)])


def _trace_while(cond_fun, body_fun, tree, leaves):
    """cond_fun and body_fun traced once, on the same stand-ins: (body Graph, cond Graph,
    the constants both close over). Both graphs take (constants, carries)."""
    with tracer.Trace() as t:
        c_in = [Array._traced(t, t.new_input(c.shape, c.dtype)) for c in leaves]
        val = tree_unflatten(tree, c_in)
        p = vnp.asarray(cond_fun(val))
        if tuple(p.shape) != () or p.dtype != dt.bool_:
            raise TypeError(f"while_loop: cond_fun must return a boolean scalar, but got output type "
                            f"{p.dtype}{list(p.shape)}")
        o_leaves, o_tree = tree_flatten(body_fun(val))
        o_leaves = [vnp.asarray(o) for o in o_leaves]
        _check_same("while_loop", "body_fun output and input", tree, leaves, o_tree, o_leaves)
        pn = t.lift(p)
        nodes = [t.lift(o) for o in o_leaves]
    n = len(leaves)
    ins = t.inputs[n:] + t.inputs[:n]
    body, cond = Graph(ins, nodes), Graph(ins, [pn])
    body.keep = cond.keep = []
    return body, cond, list(t.captured)


def _peek(arrays: Sequence) -> list | None:
    """Concrete values of arrays traced in transforms that know their arguments' values
    (`graphs.trace_flat(known=True)`: grad, jvp, vjp), computed from those values; None
    where one was traced by a transform that does not (jit, vmap)."""
    out: list = list(arrays)
    by_trace: dict[int, tuple] = {}
    for k, a in enumerate(arrays):
        t = getattr(a, "_trace", None)
        if t is not None:
            by_trace.setdefault(id(t), (t, []))[1].append(k)
    for t, ks in by_trace.values():
        vals = getattr(t, "values", None)
        if vals is None or len(t.inputs) != len(vals) + len(t.captured):
            return None
        vals = _peek(vals)
        if vals is None:
            return None
        caps = _peek(t.captured) if t.captured else []
        if caps is None:
            return None
        g = Graph(t.inputs, [arrays[k]._node for k in ks])
        with tracer.suspended():
            res = execute(g, list(vals) + caps)
        for k, r in zip(ks, res):
            out[k] = r
    return out

def _counted_while(body: Graph, cond: Graph, consts: list, leaves: list, known: list) -> list:
    """while_loop on values a trace knows (grad, jvp, vjp): the trip count found by
    running the step on those values, then a scan of that many steps."""
    from ..array import run_compiled
    from ..graphs import for_execution
    from ..vulkan.compiled import Compiled
    nk = len(leaves)
    v, cv = known[:nk], known[nk:]
    with tracer.suspended():
        step = Compiled(for_execution(body))
        test = Compiled(for_execution(cond))
        n = 0
        while bool(run_compiled(test, cv + v)[0].item()):
            v = run_compiled(step, cv + v)
            n += 1
    return _loop(body, consts, leaves, [], n, False, 1, None)[0]


def _pred(who: str, pred) -> Array:
    p = vnp.asarray(pred)
    if p.shape != ():
        raise TypeError(f"{who}: the predicate must be a scalar, got shape {p.shape}")
    if p.dtype not in (dt.bool_, dt.int32, dt.float32, dt.float64):
        raise TypeError(f"{who}: the predicate must be a boolean or a number, got {p.dtype}")
    return p


def _branches(who: str, fns: Sequence[Callable], operands: tuple, labels: Sequence[str]):
    """Every branch traced on the operands (in the active trace) and type-checked."""
    outs = []
    for fn in fns:
        leaves, tree = tree_flatten(fn(*operands))
        outs.append((tree, [vnp.asarray(l) for l in leaves]))
    if who == "cond":     # JAX's order of the names (the branches are [false_fun, true_fun])
        _check_same(who, "true_fun and false_fun output", outs[1][0], outs[1][1], outs[0][0], outs[0][1],
                    ("true_fun", "false_fun"))
        return outs
    for (tree, leaves), label in zip(outs[1:], labels[1:]):
        _check_same(who, f"{labels[0]} and {label} output", outs[0][0], outs[0][1], tree, leaves,
                    (labels[0], label))
    return outs


def _select_branch(who, index: Array, fns, operands, labels):
    """The branch `index` picks: run alone for a concrete index outside any trace (after
    checking every branch's types by tracing it), else every branch and a select."""
    if not _traced([index] + tree_flatten(operands)[0]):
        i = int(index.item())
        _eagerly(lambda *ops: [l for _, ls in _branches(who, fns, tuple(ops), labels) for l in ls][:0],
                 operands)
        return tree_map(vnp.asarray, fns[i](*operands))
    outs = _branches(who, fns, operands, labels)
    if getattr(index, "_trace", None) is None:
        tree, leaves = outs[int(index.item())]
        return tree_unflatten(tree, leaves)
    tree, sel = outs[-1]
    for k in range(len(fns) - 2, -1, -1):
        hit = index == k
        sel = [vnp.where(hit, a, b) for a, b in zip(outs[k][1], sel)]
    return tree_unflatten(tree, sel)


def cond(pred, true_fun: Callable, false_fun: Callable, *operands) -> Any:
    """true_fun(*operands) if pred else false_fun(*operands), as jax.lax.cond. Both
    branches must return the same types. Traced, both branches run and the result is a
    select, so it differentiates (each branch's gradient masked) and batches (a batched
    predicate selects per example); a concrete predicate outside any trace runs one.

    >>> import vkml.numpy as vnp
    >>> float(cond(vnp.asarray(2.0) > 1.0, lambda x: x * 10.0, lambda x: -x, vnp.asarray(3.0)))
    30.0
    """
    p = _pred("cond", pred)
    index = vnp.where(p.astype(bool), vnp.asarray(1, dtype=dt.int32), vnp.asarray(0, dtype=dt.int32)) \
        if getattr(p, "_trace", None) is not None else vnp.asarray(int(bool(p.item())), dtype=dt.int32)
    return _select_branch("cond", index, [false_fun, true_fun], operands, ["false_fun", "true_fun"])


def switch(index, branches: Sequence[Callable], *operands) -> Any:
    """branches[index](*operands), index clamped to [0, len(branches) - 1], as
    jax.lax.switch (every branch returning the same types).

    >>> import vkml.numpy as vnp
    >>> fs = [lambda x: x + 1.0, lambda x: x * 2.0, lambda x: -x]
    >>> [float(switch(i, fs, vnp.asarray(3.0))) for i in (0, 1, 5)]
    [4.0, 6.0, -3.0]
    """
    branches = list(branches)
    if not branches:
        raise ValueError("switch: empty branch sequence (branches must be a non-empty sequence of functions)")
    for b in branches:
        if not callable(b):
            raise TypeError(f"switch: branches must be callables, got {type(b).__name__}")
    i = vnp.asarray(index)
    if i.shape != () or not np.issubdtype(i.dtype, np.integer):
        raise TypeError(f"switch: index must be an int scalar, got {_aval(i)}")
    i = vnp.clip(i, 0, len(branches) - 1)
    if len(branches) == 1:
        return branches[0](*operands)
    return _select_branch("switch", i, branches, operands, [f"branch {k}" for k in range(len(branches))])


def associative_scan(fn: Callable, elems: Any, reverse: bool = False, axis: int = 0) -> Any:
    """Inclusive scan of the associative fn(a, b) over axis of every leaf of elems, as
    jax.lax.associative_scan: [a, fn(a, b), fn(fn(a, b), c), ...] (from the end when
    reverse), in O(log n) levels of slices and fn (Blelloch's up and down sweep).

    >>> import vkml.numpy as vnp
    >>> associative_scan(vnp.add, vnp.arange(4)).numpy().tolist()
    [0, 1, 3, 6]
    >>> associative_scan(vnp.add, vnp.arange(4), reverse=True).numpy().tolist()
    [6, 6, 5, 3]
    """
    if not callable(fn):
        raise TypeError("associative_scan: fn argument should be callable")
    leaves, tree = tree_flatten(elems)
    leaves = [vnp.asarray(l) for l in leaves]
    if not leaves:
        return elems
    ax = [axis % l.ndim if l.ndim else None for l in leaves]
    if any(a is None for a in ax):
        raise ValueError("associative_scan: the inputs must have an axis to scan over")
    sizes = [l.shape[a] for l, a in zip(leaves, ax)]
    if len(set(sizes)) > 1:
        raise ValueError(f"associative_scan: array inputs must have the same size along axis "
                         f"{axis} (saw: {sizes})")

    def sl(x, a, start, stop=None, step=1):
        idx = [slice(None)] * x.ndim
        idx[a] = slice(start, stop, step)
        return x[tuple(idx)]

    def combine(a_flat, b_flat):
        out, t = tree_flatten(fn(tree_unflatten(tree, a_flat), tree_unflatten(tree, b_flat)))
        if t != tree:
            raise TypeError(f"associative_scan: fn must return the structure of elems ({tree}), got {t}")
        return [vnp.asarray(o) for o in out]

    def rec(xs):
        n = xs[0].shape[ax[0]]
        if n < 2:
            return xs
        even = [sl(x, a, 0, None, 2) for x, a in zip(xs, ax)]
        odd = [sl(x, a, 1, None, 2) for x, a in zip(xs, ax)]
        h = odd[0].shape[ax[0]]
        r = rec(combine([sl(e, a, 0, h) for e, a in zip(even, ax)], odd))
        ne = even[0].shape[ax[0]]
        rest = combine([sl(v, a, 0, ne - 1) for v, a in zip(r, ax)], [sl(e, a, 1) for e, a in zip(even, ax)])
        ev = [vnp.concatenate([sl(e, a, 0, 1), z], axis=a) for e, z, a in zip(even, rest, ax)]
        out = []
        for e, o, a in zip(ev, r, ax):
            if e.shape[a] > o.shape[a]:
                o = vnp.concatenate([o, sl(o, a, h - 1, h)], axis=a)
            both = vnp.stack([e, o], axis=a + 1)
            shape = e.shape[:a] + (2 * e.shape[a],) + e.shape[a + 1:]
            out.append(sl(vnp.reshape(both, shape), a, 0, n))
        return out
    if reverse:
        leaves = [vnp.flip(l, axis=a) for l, a in zip(leaves, ax)]
    out = rec(leaves)
    if reverse:
        out = [vnp.flip(o, axis=a) for o, a in zip(out, ax)]
    return tree_unflatten(tree, out)
