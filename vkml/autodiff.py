"""The differentiation transforms users call: grad, value_and_grad, vjp, jvp, jacrev,
jacfwd, hessian, stop_gradient, no_grad, checkpoint/remat, custom_vjp.

Each traces the function to a Graph, applies `transforms.grad.backward` (a graph to
graph transform), simplifies, and calls the result: run on the device when called on
concrete arrays, inlined into the enclosing trace when called inside another transform.
So nesting needs nothing special: `grad(grad(f))` traces a function that contains grad.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from . import numpy as vnp
from .array import Array, bind
from .graphs import call_graph, trace_flat
from .trace import dtypes as dt
from .trace import tracer
from .trace.dtypes import DTypeError
from .trace.graph import Graph, Node, input_node
from .trace.ops import OpKind
from .trace.shapes import size_of
from .transforms import checkpoint as _ckpt
from .transforms.custom import CustomRecord, CustomTag, inline_nodes
from .transforms.expr import E, expand as eexpand, full, op as eop, reshape as ereshape
from .transforms.grad import backward, seed_ones
from .transforms.simplify import simplify
from .transforms.vmap import batch_nodes, move_axis
from .tree_util import _leaf_paths, tree_flatten, tree_map, tree_unflatten


def _argnums(argnums, nargs: int, name: str) -> tuple[int, ...]:
    t = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in t:
        if isinstance(a, bool) or not isinstance(a, int):
            raise TypeError(f"{name}: argnums must be an int or a sequence of ints, got {argnums!r}")
        if not -nargs <= a < nargs:
            # TypeError, as JAX: the call passed too few arguments
            raise TypeError(f"{name}: differentiating with respect to argnums={argnums!r} needs "
                            f"at least {(a if a >= 0 else -a - 1) + 1} positional arguments, but "
                            f"the function was called with {nargs}")
    return tuple(a % nargs for a in t)


def _arg_slices(args: Sequence) -> list[tuple[int, int, Any]]:
    """(start, stop, treedef) of each positional argument's leaves in the flat list."""
    out, pos = [], 0
    for a in args:
        leaves, td = tree_flatten(a)
        out.append((pos, pos + len(leaves), td))
        pos += len(leaves)
    return out


def _per_arg(sl, idx: Sequence[int], argnums, flat: Sequence) -> Any:
    """Regroup flat leaves (one per leaf of the differentiated arguments, laid out as `sl`
    says) into one tree per requested argument: argument idx[k] of the differentiated ones
    for the k-th entry of argnums; one tree for an int argnums, a tuple for a sequence."""
    out = [tree_unflatten(sl[k][2], flat[sl[k][0]:sl[k][1]]) for k in idx]
    return out[0] if isinstance(argnums, int) else tuple(out)


class _GradientHook:
    """Set by `vkml.distributed.data_parallel`: `fn` sees every gradient pytree that grad,
    value_and_grad and a vjp's vjp_fn return at the outermost level (not those of a grad
    nested inside a differentiated function) and returns what the caller gets instead."""
    fn: Callable | None = None
    depth = 0                   # > 0 while a differentiated function is being traced


@contextlib.contextmanager
def _inner():
    _GradientHook.depth += 1
    try:
        yield
    finally:
        _GradientHook.depth -= 1


def _returned(grads: Any) -> Any:
    fn = _GradientHook.fn
    return grads if fn is None or _GradientHook.depth else fn(grads)


def _leaf_dtype(x) -> np.dtype | None:
    """The dtype x becomes as an input to a transform, None when x is no array at all."""
    if isinstance(x, Array):
        return x.dtype
    if isinstance(x, bool):
        return dt.bool_
    if isinstance(x, int):
        return dt.int32
    if isinstance(x, float):
        return np.dtype(x.dtype) if isinstance(x, np.generic) else dt.float32
    if isinstance(x, (np.ndarray, np.generic)):
        return dt.canonical(x.dtype, "asarray")
    return None


def _check_differentiable(name: str, i: int, argnums, arg: Any) -> None:
    """Refuse, naming the argument (and the leaf in a pytree), what cannot be
    differentiated: JAX's TypeError for a non-float input, raised before f runs."""
    leaves = tree_flatten(arg)[0]
    for leaf, path in zip(leaves, _leaf_paths(arg, "")):
        path = f"its leaf {path}" if path else "it"
        d = _leaf_dtype(leaf)
        if d is None:
            raise TypeError(f"{name}: argument {i} is in argnums={argnums!r}, but {path} is a "
                            f"{type(leaf).__name__}, not an array; only float arrays and Python "
                            f"floats can be differentiated (pass other values at a position not "
                            f"in argnums: f gets them as they are)")
        if not dt.is_float(d):
            shape = tuple(getattr(leaf, "shape", ()))
            raise DTypeError(f"{name}: argument {i} is in argnums={argnums!r}, but {path} has "
                             f"dtype {d} (shape {shape}); {name} differentiates only with respect "
                             f"to float inputs (float32, float64): pass integer and bool values "
                             f"at a position not in argnums (f gets them as they are, so they can "
                             f"steer Python control flow), or cast them with .astype(float)")


def _dyn_args(name: str, f: Callable, args: tuple, kwargs: dict, argnums):
    """(fn, dyn, idx) for differentiating f(*args, **kwargs) with respect to args[argnums]:
    fn takes just the differentiated arguments `dyn` (each once, in positional order) and
    calls f with every other argument and keyword as given, untraced (as JAX's grad does:
    a Python int there can drive `range(n)` or `if n > 2:` inside f); idx[k] is the index
    in dyn of argnums' k-th entry."""
    nums = _argnums(argnums, len(args), name)
    pos = sorted(set(nums))
    for i in pos:
        _check_differentiable(name, i, argnums, args[i])
    dyn = [args[i] for i in pos]

    def fn(*d):
        full = list(args)
        for i, v in zip(pos, d):
            full[i] = v
        return f(*full, **kwargs)
    return fn, dyn, [pos.index(a) for a in nums]


def _check_float_inputs(name: str, nodes: Sequence[Node]) -> None:
    for n in nodes:
        if not dt.is_float(n.dtype):
            raise DTypeError(f"{name}: cannot differentiate with respect to a {n.dtype} input of shape "
                             f"{n.shape}; use float32/float64 inputs (integer or bool arguments "
                             f"can be passed through a position not in argnums)")


def value_and_grad(f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """A function returning (f(*args), gradient of f with respect to args[argnums]).

    f must return a float scalar (or (scalar, aux) with has_aux=True). argnums, and the
    arguments outside it reaching f as they are, as in `grad`.

    >>> import vkml, vkml.numpy as vnp
    >>> v, g = vkml.value_and_grad(lambda x: (x ** 2).sum())(vnp.asarray([1.0, 2.0]))
    >>> float(v), g.numpy().tolist()
    (5.0, [2.0, 4.0])
    """
    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        fn, dyn, idx = _dyn_args("grad", f, args, kwargs, argnums)
        with _inner():
            graph, out_tree, captured, leaves = trace_flat(fn, dyn, known=True)
        if has_aux:
            if out_tree.kind is not tuple or len(out_tree.children) != 2:
                raise TypeError("grad(has_aux=True): f must return a pair (output, aux)")
            n_main = out_tree.children[0].num_leaves
        else:
            n_main = out_tree.num_leaves
        if n_main != 1:
            raise TypeError(f"grad: f must return a single scalar array, got a pytree with {n_main} leaves")
        root = graph.outputs[0]
        if root.shape != ():
            raise TypeError(f"grad: f must return a scalar (shape ()), got shape {root.shape}; use "
                            f"vkml.vjp or vkml.jacrev for non-scalar outputs, or reduce with .sum()")
        if not dt.is_float(root.dtype):
            raise DTypeError(f"grad: f returned dtype {root.dtype}; only float outputs have gradients")
        sl = _arg_slices(dyn)
        wrt = list(graph.inputs[:len(leaves)])
        grads = backward([root], [seed_ones(root)], wrt, graph.keep)
        g = simplify(Graph(graph.inputs, list(graph.outputs) + grads))
        res = call_graph(g, leaves + captured)
        outs, gl = res[:len(graph.outputs)], res[len(graph.outputs):]
        value = tree_unflatten(out_tree, outs)
        gout = _returned(_per_arg(sl, idx, argnums, gl))
        return (value, gout)
    return wrapped


def grad(f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """The gradient of a scalar function (pytrees in, same structure out).

    >>> import vkml, vkml.numpy as vnp
    >>> vkml.grad(lambda x: vnp.sin(x).sum())(vnp.zeros(2)).numpy().tolist()
    [1.0, 1.0]
    >>> float(vkml.grad(vkml.grad(lambda x: x ** 3))(vnp.asarray(2.0)))  # 6x
    12.0

    argnums: the position (int) or positions (tuple: a tuple of gradients) differentiated;
    each must hold float arrays or Python floats (anything else raises `DTypeError`, a
    TypeError, naming the argument). The other arguments and the keyword arguments reach
    f as they are, untraced, as in JAX: a Python int there can steer Python control flow.

    >>> def power(x, n):
    ...     for _ in range(n - 1):
    ...         x = x * x if n > 2 else x
    ...     return x
    >>> float(vkml.grad(power)(vnp.asarray(3.0), 2)), float(vkml.grad(power)(vnp.asarray(3.0), 3))
    (1.0, 108.0)
    >>> vkml.grad(power, argnums=1)(vnp.asarray(3.0), 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    vkml.trace.dtypes.DTypeError: grad: argument 1 is in argnums=1, but it has dtype int32 ...
    """
    vg = value_and_grad(f, argnums, has_aux)

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        (v, g) = vg(*args, **kwargs)
        return (g, v[1]) if has_aux else g
    return wrapped


def vjp(f: Callable, *primals, has_aux: bool = False):
    """(f(*primals), vjp_fn) where vjp_fn(cotangent) gives one cotangent per primal.

    >>> import vkml, vkml.numpy as vnp
    >>> y, back = vkml.vjp(lambda x: x * 3.0, vnp.ones(2))
    >>> back(vnp.asarray([1.0, 2.0]))[0].numpy().tolist()
    [3.0, 6.0]
    """
    with _inner():
        graph, out_tree, captured, leaves = trace_flat(f, primals, known=True)
    n_main = out_tree.children[0].num_leaves if has_aux else out_tree.num_leaves
    outs = call_graph(simplify(graph), leaves + captured)
    sl = _arg_slices(primals)
    n_primal = sl[-1][1] if sl else 0
    wrt = list(graph.inputs[:n_primal])
    main_tree = out_tree.children[0] if has_aux else out_tree

    def vjp_fn(ct):
        ct_leaves, ct_tree = tree_flatten(ct)
        if ct_tree != main_tree:
            raise ValueError(f"vjp: cotangent structure {ct_tree} does not match the output {main_tree}")
        roots = list(graph.outputs[:n_main])
        seeds, seed_inputs = [], []
        for k, (r, c) in enumerate(zip(roots, ct_leaves)):
            c = vnp.asarray(c)
            if c.shape != r.shape:
                raise ValueError(f"vjp: cotangent {k} has shape {c.shape}, output has {r.shape}")
            s = input_node(r.shape, r.dtype, len(graph.inputs) + k)
            seed_inputs.append((s, c.astype(r.dtype)))
            seeds.append(s)
        float_roots = [(r, s) for r, s in zip(roots, seeds) if dt.is_float(r.dtype)]
        _check_float_inputs("vjp", [w for w in wrt])
        grads = backward([r for r, _ in float_roots], [s for _, s in float_roots], wrt, graph.keep)
        g = simplify(Graph(list(graph.inputs) + seeds, grads))
        res = call_graph(g, leaves + captured + [c for _, c in seed_inputs])
        return _returned(tuple(tree_unflatten(sl[i][2], res[sl[i][0]:sl[i][1]]) for i in range(len(primals))))

    out = tree_unflatten(out_tree, outs)
    if has_aux:
        return out[0], vjp_fn, out[1]
    return out, vjp_fn


def _jvp_graph(graph: Graph, n_primal: int, n_out: int):
    """(graph computing outputs and J @ tangents, tangent inputs) via the transpose of the
    vjp: the vjp is linear in its cotangent u, so differentiating <vjp(u), t> by u gives J t.
    """
    wrt = list(graph.inputs[:n_primal])
    roots = list(graph.outputs[:n_out])
    base = len(graph.inputs)
    us = [input_node(r.shape, r.dtype, base + k)
          for k, r in enumerate(roots)]
    ts = [input_node(w.shape, w.dtype, base + len(us) + k)
          for k, w in enumerate(wrt)]
    float_out = [k for k, r in enumerate(roots) if dt.is_float(r.dtype)]
    g1 = backward([roots[k] for k in float_out], [us[k] for k in float_out], wrt, graph.keep)
    jt = backward(g1, ts, [us[k] for k in float_out])
    tangents, it = [], iter(jt)
    for k, r in enumerate(roots):
        tangents.append(next(it) if k in float_out else full(r.shape, 0, r.dtype).n)
    return Graph(list(graph.inputs) + us + ts, roots + tangents), us, ts


def jvp(f: Callable, primals: Sequence, tangents: Sequence):
    """(f(*primals), J(primals) @ tangents), exactly (transpose of the vjp).

    >>> import vkml, vkml.numpy as vnp
    >>> y, t = vkml.jvp(lambda x: x * x, (vnp.asarray(3.0),), (vnp.asarray(1.0),))
    >>> float(y), float(t)
    (9.0, 6.0)
    """
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    graph, out_tree, captured, leaves = trace_flat(f, primals, known=True)
    t_leaves, t_tree = tree_flatten(list(tangents))
    p_tree = tree_flatten(list(primals))[1]
    if t_tree != p_tree:
        raise ValueError(f"jvp: tangent structure {t_tree} does not match primals {p_tree}")
    n_primal = len(leaves)
    t_arr = []
    for p, t in zip(leaves, t_leaves):
        t = vnp.asarray(t)
        if t.shape != p.shape:
            raise ValueError(f"jvp: tangent shape {t.shape} does not match primal shape {p.shape}")
        t_arr.append(t.astype(p.dtype))
    _check_float_inputs("jvp", graph.inputs[:n_primal])
    g, us, ts = _jvp_graph(graph, n_primal, len(graph.outputs))
    us_vals = [vnp.zeros(u.shape, u.dtype) for u in us]
    res = call_graph(simplify(g), leaves + captured + us_vals + t_arr)
    n = len(graph.outputs)
    return tree_unflatten(out_tree, res[:n]), tree_unflatten(out_tree, res[n:])


def _basis_block(total: int, offset: int, shape: tuple, dtype) -> Node:
    """Rows offset..offset+size(shape) of the total x total identity, as (total,) + shape:
    example b of a vmap over it is the b-th standard basis vector's piece of this shape.
    Made on the device (Arange == Arange), so the graph does not grow with `total`."""
    size = size_of(shape)
    rows = ereshape(eop(OpKind.Arange, n=total, start=0, step=1, dtype=dt.int32), (total, 1))
    cols = ereshape(eop(OpKind.Arange, n=size, start=offset, step=1, dtype=dt.int32), (1, size))
    eye = eop(OpKind.Cast, eop(OpKind.Equal, rows, cols), dtype=np.dtype(dtype))
    return ereshape(eye, (total,) + tuple(shape)).n


def _batch_rows(node: Node, batched: bool, total: int, start: int, stop: int) -> Node:
    """Rows start..stop of a vmap result over `total` examples (broadcast first when the
    result did not depend on the mapped input)."""
    x = E(node) if batched else eexpand(E(node), (total,) + node.shape)
    if (start, stop) == (0, total):
        return x.n
    nd = len(x.shape)
    return eop(OpKind.Slice, x, starts=(start,) + (0,) * (nd - 1), stops=(stop,) + x.shape[1:],
               steps=(1,) * nd).n


def jacrev(f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """The Jacobian by reverse mode: the vjp graph vmapped over the standard basis of the
    outputs, so every row comes from one batched backward pass (the graph and the number
    of kernel dispatches do not grow with the output size).

    Result leaves have shape out.shape + in.shape (JAX's layout). As in `grad`, the
    arguments outside argnums (and keyword arguments) reach f as they are, untraced.

    >>> import vkml, vkml.numpy as vnp
    >>> vkml.jacrev(lambda x: x * 2.0)(vnp.ones(2)).numpy().tolist()
    [[2.0, 0.0], [0.0, 2.0]]
    """

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        fn, dyn, idx = _dyn_args("jacrev", f, args, kwargs, argnums)
        graph, out_tree, captured, leaves = trace_flat(fn, dyn, known=True)
        n_main = out_tree.children[0].num_leaves if has_aux else out_tree.num_leaves
        sl = _arg_slices(dyn)
        wrt = list(graph.inputs[:len(leaves)])
        outs = list(graph.outputs)
        roots = outs[:n_main]
        for r in roots:
            if not dt.is_float(r.dtype):
                raise DTypeError(f"jacrev: output of dtype {r.dtype} has no Jacobian")
        total = sum(r.size for r in roots)
        offsets = [sum(r.size for r in roots[:k]) for k in range(len(roots))]
        base = len(graph.inputs)
        us = [input_node(r.shape, r.dtype, base + k)
              for k, r in enumerate(roots)]
        grads = backward(roots, us, wrt, graph.keep) if total else []
        env = {i.id: (i, False) for i in graph.inputs}
        env.update({u.id: (_basis_block(total, off, r.shape, r.dtype), True)
                    for u, r, off in zip(us, roots, offsets)})
        rows = batch_nodes(grads, env, total) if total else []
        flat = []               # per output leaf, per wrt leaf
        for r, off in zip(roots, offsets):
            for k, w in enumerate(wrt):
                if r.size == 0:
                    flat.append(full(r.shape + w.shape, 0, w.dtype).n)
                    continue
                block = _batch_rows(*rows[k], total, off, off + r.size)
                flat.append(ereshape(E(block), r.shape + w.shape).n)
        g = simplify(Graph(graph.inputs, outs + flat))
        res = call_graph(g, leaves + captured)
        vals, jl = res[:len(outs)], res[len(outs):]
        nw = len(wrt)
        per_out = []
        for j in range(n_main):
            row = jl[j * nw:(j + 1) * nw]
            per_out.append(_per_arg(sl, idx, argnums, row))
        main_tree = out_tree.children[0] if has_aux else out_tree
        jac = tree_unflatten(main_tree, per_out)
        if has_aux:
            return jac, tree_unflatten(out_tree, vals)[1]
        return jac
    return wrapped


def jacfwd(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """The Jacobian by forward mode: the jvp graph vmapped over the standard basis of the
    inputs, so every column comes from one batched pass (the graph and the number of
    kernel dispatches do not grow with the input size).

    >>> import vkml, vkml.numpy as vnp
    >>> vkml.jacfwd(lambda x: x * x)(vnp.asarray([1.0, 2.0])).numpy().tolist()
    [[2.0, 0.0], [0.0, 4.0]]
    >>> vkml.jacfwd(lambda x, n: x ** n if n > 1 else x)(vnp.asarray([1.0, 2.0]), 3).numpy().tolist()
    [[3.0, 0.0], [0.0, 12.0]]
    """

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        fn, dyn, idx = _dyn_args("jacfwd", f, args, kwargs, argnums)
        graph, out_tree, captured, leaves = trace_flat(fn, dyn, known=True)
        sl = _arg_slices(dyn)
        wrt = list(graph.inputs[:len(leaves)])
        roots = list(graph.outputs)
        for r in roots:
            if not dt.is_float(r.dtype):
                raise DTypeError(f"jacfwd: output of dtype {r.dtype} has no Jacobian")
        base = len(graph.inputs)
        us = [input_node(r.shape, r.dtype, base + k)
              for k, r in enumerate(roots)]
        ts = [input_node(w.shape, w.dtype, base + len(us) + k)
              for k, w in enumerate(wrt)]
        total = sum(w.size for w in wrt)
        offsets = [sum(w.size for w in wrt[:k]) for k in range(len(wrt))]
        cols = []
        if total and any(r.size for r in roots):
            g1 = backward(roots, us, wrt, graph.keep)          # linear in us
            jt = backward(g1, ts, us)             # J t for every output: the jvp graph
            env = {i.id: (i, False) for i in list(graph.inputs) + us}
            env.update({t.id: (_basis_block(total, off, w.shape, w.dtype), True)
                        for t, w, off in zip(ts, wrt, offsets)})
            cols = batch_nodes(jt, env, total)   # (total,) + r.shape per output
        flat = []
        for oi, r in enumerate(roots):
            for k, w in enumerate(wrt):
                if w.size == 0 or r.size == 0:
                    flat.append(full(r.shape + w.shape, 0, r.dtype).n)
                    continue
                block = _batch_rows(*cols[oi], total, offsets[k], offsets[k] + w.size)
                last = move_axis(block, 0, len(r.shape))      # r.shape + (w.size,)
                flat.append(ereshape(E(last), r.shape + w.shape).n)
        g = simplify(Graph(list(graph.inputs) + us, flat))
        res = call_graph(g, leaves + captured + [vnp.zeros(u.shape, u.dtype) for u in us])
        nw = len(wrt)
        per_out = []
        for oi in range(len(roots)):
            row = res[oi * nw:(oi + 1) * nw]
            per_out.append(_per_arg(sl, idx, argnums, row))
        return tree_unflatten(out_tree, per_out)
    return wrapped


def hessian(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """jacfwd(jacrev(f)): the matrix of second derivatives.

    >>> import vkml, vkml.numpy as vnp
    >>> vkml.hessian(lambda x: (x ** 3).sum())(vnp.asarray([1.0, 2.0])).numpy().tolist()
    [[6.0, 0.0], [0.0, 12.0]]
    """
    return jacfwd(jacrev(f, argnums), argnums)


def stop_gradient(x: Any) -> Any:
    """The same values with no gradient flowing back (pytrees map leafwise).

    >>> import vkml, vkml.numpy as vnp
    >>> float(vkml.grad(lambda x: x * vkml.stop_gradient(x))(vnp.asarray(3.0)))
    3.0
    """
    def one(a):
        a = vnp.asarray(a)
        return bind(OpKind.StopGradient, [a]) if dt.is_float(a.dtype) else a
    return tree_map(one, x)


@contextlib.contextmanager
def no_grad():
    """Record no gradient path for the operations in this scope.

    >>> import vkml, vkml.numpy as vnp
    >>> def f(x):
    ...     with vkml.no_grad():
    ...         c = x * 2.0
    ...     return (c * x).sum()
    >>> vkml.grad(f)(vnp.asarray([1.0])).numpy().tolist()
    [2.0]
    """
    old = tracer.set_grad_enabled(False)
    try:
        yield
    finally:
        tracer.set_grad_enabled(old)


def checkpoint(f: Callable, policy: str = "nothing_saveable", prevent_cse: bool = True,
               static_argnums: Sequence[int] = ()) -> Callable:
    """Same values and gradients as f; the backward pass recomputes f's intermediates
    instead of keeping them alive. policy: "nothing_saveable" (default), "dots_saveable"
    (keep matmul outputs) or "everything_saveable".

    >>> import vkml, vkml.numpy as vnp
    >>> layer = vkml.checkpoint(lambda x: vnp.tanh(vnp.tanh(x)))
    >>> vkml.grad(lambda x: layer(x).sum())(vnp.zeros(2)).numpy().tolist()
    [1.0, 1.0]
    """
    if isinstance(policy, str):
        _ckpt.Segment.new(policy)  # validates the name now, not at first call

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        t = tracer.current()
        if t is None:
            return f(*args, **kwargs)
        region = _ckpt.Segment.new(policy)
        old = t.tag
        t.tag = region
        try:
            return f(*args, **kwargs)
        finally:
            t.tag = old
    return wrapped


remat = checkpoint


class CustomVJPError(TypeError, ValueError):
    """A custom_vjp's bwd returned cotangents of the wrong structure (TypeError, as JAX,
    and ValueError, as every other malformed-cotangent error here)."""


def _match_cotangent(name: str, k: int, ta, tc, leaves: Iterator) -> list:
    """c's leaves in the order of argument k's leaves (ta: its treedef), None where c has
    None in place of a subtree (zeros)."""
    if tc.kind is type(None) and ta.kind is not type(None):
        return [None] * ta.num_leaves
    if ta.kind is None and tc.kind is None:
        return [next(leaves)]
    if ta.kind is None or tc.kind is None or ta.kind != tc.kind or ta.aux != tc.aux or \
            len(ta.children) != len(tc.children):
        raise CustomVJPError(f"custom_vjp {name}: bwd's cotangent for argument {k} has structure "
                             f"{tc}, but the argument has structure {ta}; it must match (None "
                             f"for a zero subtree)")
    return [x for a, c in zip(ta.children, tc.children) for x in _match_cotangent(name, k, a, c, leaves)]


def _bwd_cotangents(name: str, args: Sequence, leaves: Sequence[Array], cts: Any) -> list:
    """The flat cotangent leaves (None for zero) bwd returned for args, checked against the
    arguments: one entry per argument, each of its pytree structure, and each leaf of its
    argument leaf's shape and (for a float argument) dtype, as JAX requires."""
    if not isinstance(cts, (tuple, list)) or len(cts) != len(args):
        got = f"a {type(cts).__name__} of length {len(cts)}" if isinstance(cts, (tuple, list)) \
            else type(cts).__name__
        raise CustomVJPError(f"custom_vjp {name}: bwd must return a tuple with one cotangent per "
                             f"argument ({len(args)}), got {got}")
    flat: list = []
    for k, (a, c) in enumerate(zip(args, cts)):
        ta = tree_flatten(a)[1]
        cl, tc = tree_flatten(c)
        got = _match_cotangent(name, k, ta, tc, iter(cl))
        for j, x in enumerate(got):
            if x is None:
                flat.append(None)
                continue
            x = vnp.asarray(x)
            want = leaves[len(flat)]
            where = f"argument {k}" + (f" (leaf {j})" if ta.num_leaves > 1 else "")
            if x.shape != want.shape or (dt.is_float(want.dtype) and x.dtype != want.dtype):
                raise ValueError(f"custom_vjp {name}: bwd returned a cotangent of shape {x.shape} "
                                 f"{x.dtype} for {where} of shape {want.shape} {want.dtype}; each "
                                 f"cotangent must have its argument's shape and dtype")
            flat.append(x if dt.is_float(want.dtype) else None)   # no gradient for int args
    return flat


class custom_vjp:
    """A function with a user-defined reverse-mode rule (JAX's interface).

    >>> import vkml, vkml.numpy as vnp
    >>> @vkml.custom_vjp
    ... def clip_grad(x):
    ...     return x
    >>> clip_grad.defvjp(lambda x: (x, None), lambda res, g: (vnp.clip(g, -1.0, 1.0),))
    >>> vkml.grad(lambda x: (clip_grad(x) * 5.0).sum())(vnp.ones(2)).numpy().tolist()
    [1.0, 1.0]

    `fwd(*args)` returns (output, residuals); `bwd(residuals, output_cotangent)` returns a
    tuple with one cotangent (pytree, or None for zero) per argument. bwd must not close
    over traced values: pass what it needs as residuals. Differentiating a function that
    calls this one again (second order) differentiates bwd and, through the residuals, fwd.
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.fwd = self.bwd = None
        if nondiff_argnums:
            raise NotImplementedError("custom_vjp: nondiff_argnums is not supported; close over "
                                      "non-differentiable values instead")

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        if self.fwd is None:
            raise TypeError(f"custom_vjp {self.__name__}: call defvjp(fwd, bwd) before using it")
        t = tracer.current()
        if t is None or getattr(self, "_in_fwd", False):
            # eager, or fwd calling this very function (JAX's idiom): the primal function
            return self.fun(*args)
        self._in_fwd = True
        try:
            fwd_graph, out_tree, captured, leaves = trace_flat(lambda *a: self.fwd(*a), args)
        finally:
            self._in_fwd = False
        if out_tree.kind is not tuple or len(out_tree.children) != 2:
            raise TypeError(f"custom_vjp {self.__name__}: fwd must return (output, residuals)")
        prim_tree, res_tree = out_tree.children
        n_out, n_res = prim_tree.num_leaves, res_tree.num_leaves
        user_bwd, name = self.bwd, self.__name__

        def bwd_nodes(res_nodes, g_nodes):
            with tracer.Trace() as bt:
                ins = [Array._traced(bt, bt.new_input(n.shape, n.dtype)) for n in res_nodes + g_nodes]
                r = tree_unflatten(res_tree, ins[:n_res])
                g = tree_unflatten(prim_tree, ins[n_res:])
                cts = user_bwd(r, g)
                flat = _bwd_cotangents(name, args, leaves, cts)
                nodes = [bt.lift(x) for x in flat if x is not None]
                if bt.captured:
                    raise TypeError(f"custom_vjp {name}: bwd closes over a traced value; pass it "
                                    f"through the residuals instead")
            outs = iter(inline_nodes(bt.graph(nodes), list(res_nodes) + list(g_nodes)))
            return [None if x is None else next(outs) for x in flat]

        rec = CustomRecord(bwd_nodes, len(leaves), n_out, n_res, name,
                           tuple((o.shape, o.dtype) for o in fwd_graph.outputs[:n_out]))
        role = {}
        for k, o in enumerate(fwd_graph.outputs):
            role.setdefault(o.id, []).append(("out", k) if k < n_out else ("res", k - n_out))
        # arguments enter through tagged copies so the region's boundary is explicit
        marked = [bind(OpKind.Copy, [a], _tag=CustomTag(rec, (("in", k),)))
                  for k, a in enumerate(leaves)]
        env = {i.id: m for i, m in zip(fwd_graph.inputs, marked + captured)}
        for n in fwd_graph.nodes:
            if n.id in env and n.id not in role:
                continue
            if n.id in env:   # an argument returned as output or residual: tag a copy
                env[n.id] = bind(OpKind.Copy, [env[n.id]], _tag=CustomTag(rec, tuple(role[n.id])))
                continue
            tag = CustomTag(rec, tuple(role.get(n.id, ())))
            env[n.id] = (bind(OpKind.Copy, [n.attrs["value"]], _tag=tag) if n.op is OpKind.Const
                         else bind(n.op, [env[i.id] for i in n.inputs], _tag=tag, **n.attrs))
        outs = [env[o.id] for o in fwd_graph.outputs[:n_out]]
        # residuals and argument markers no output reaches must still be found by the walk
        t.keep = getattr(t, "keep", []) + [env[o.id] for o in fwd_graph.outputs[n_out:]] + marked
        return tree_unflatten(prim_tree, outs)
