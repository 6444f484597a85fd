"""vkml.vmap: vectorising map, as in JAX.

`vmap(f)` traces f once on per-example shapes, batches the graph (every operator gets
one extra leading axis, see `transforms/vmap.py`) and calls the result: on the device
when called on concrete arrays, inlined when called inside another transform. So
`vmap(grad(f))` gives per-example gradients, `grad` of a function that uses vmap
differentiates through it, and `vmap(vmap(f))` maps over two axes.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from . import numpy as vnp
from .array import Array
from .graphs import call_graph
from .trace import tracer
from .trace.shapes import ShapeError
from .transforms.simplify import simplify
from .transforms.vmap import vmap_graph
from .tree_util import _leaf_paths as _paths, _node, tree_flatten, tree_unflatten

__all__ = ["vmap"]


def _is_axis(a) -> bool:
    return a is None or (hasattr(a, "__index__") and not isinstance(a, bool))


def _prefix_axes(prefix, tree, what: str, where: str) -> list:
    """One axis (int or None) per leaf of tree, from `prefix`, a pytree prefix of tree
    whose leaves are ints or None."""
    if _is_axis(prefix):
        return [None if prefix is None else int(prefix)] * len(tree_flatten(tree)[0])
    pn, tn = _node(prefix), _node(tree)
    if pn is None:
        raise TypeError(f"vmap: {what} entry {prefix!r} for {where} must be an int, None, or a "
                        f"container of them")
    if tn is None or pn[0] is not tn[0] or pn[1] != tn[1] or len(pn[2]) != len(tn[2]):
        raise ValueError(f"vmap: {what} for {where} has structure {tree_flatten(prefix)[1]}, "
                         f"which is not a prefix of the value's structure {tree_flatten(tree)[1]}")
    return [a for pc, tc in zip(pn[2], tn[2]) for a in _prefix_axes(pc, tc, what, where)]


def _arg_axes(in_axes, args: tuple, kwargs: dict) -> list:
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if isinstance(in_axes, tuple):
        if len(in_axes) != len(args):
            raise ValueError(f"vmap: in_axes has {len(in_axes)} entries but the function was called "
                             f"with {len(args)} positional arguments; give one entry (an int, None "
                             f"or a pytree prefix) per positional argument, or a single int/None")
        per_arg = in_axes
    elif _is_axis(in_axes):
        per_arg = (in_axes,) * len(args)
    else:
        raise TypeError(f"vmap: in_axes must be an int, None, or a tuple with one entry per "
                        f"positional argument, got {in_axes!r} (wrap a dict prefix in a tuple)")
    axes = [a for i, (p, x) in enumerate(zip(per_arg, args))
            for a in _prefix_axes(p, x, "in_axes", f"argument {i}")]
    # keyword arguments are always mapped over their axis 0 (as in JAX)
    return axes + [0] * len(tree_flatten(kwargs)[0])


def _mappable(x, ax, name: str) -> Array:
    """x, a leaf to map over axis ax, as an Array (refused clearly when it is no array)."""
    if isinstance(x, Array):
        return x
    if not isinstance(x, (bool, int, float, np.ndarray, np.generic)):
        raise TypeError(f"vmap: {name} is a {type(x).__name__}, which has no axis to map (in_axes "
                        f"{ax}); give it in_axes None to pass it to the function as it is")
    return vnp.asarray(x)


def _normalize(ax, shape: tuple, what: str, name: str) -> int | None:
    if ax is None:
        return None
    r = len(shape)
    if not -r <= ax < r:
        if r:
            valid = f"valid axes are {-r}..{r - 1}"
        elif name.startswith("argument kwargs"):   # keyword arguments are always mapped
            valid = ("a 0-d value has no axis to map, and keyword arguments are always mapped "
                     "over axis 0; pass it positionally with in_axes None, or close over it")
        else:
            valid = "a 0-d value has no axis to map; use in_axes None to pass it as it is"
        raise ShapeError(f"vmap: {what} {ax} is out of range for {name} of shape {shape}; {valid}")
    return ax % r


def _batch_size(leaves, axes, names, axis_size) -> int:
    mapped = [(n, l.shape, a) for l, a, n in zip(leaves, axes, names) if a is not None]
    sizes = {s[a] for _, s, a in mapped}
    if axis_size is not None:
        if not hasattr(axis_size, "__index__") or isinstance(axis_size, bool) or axis_size < 0:
            raise ValueError(f"vmap: axis_size must be a non-negative int, got {axis_size!r}")
        sizes.add(int(axis_size))
    if not sizes:
        raise ValueError("vmap: no argument is mapped (every in_axes is None) and axis_size is "
                         "not given; pass axis_size=n to say how many examples to make")
    if len(sizes) > 1:
        parts = [f"{n} of shape {s} has size {s[a]} along axis {a}" for n, s, a in mapped]
        if axis_size is not None:
            parts.append(f"axis_size is {axis_size}")
        raise ValueError("vmap: mapped axes have different sizes: " + "; ".join(parts))
    return sizes.pop()


def vmap(f: Callable, in_axes: Any = 0, out_axes: Any = 0, axis_size: int | None = None) -> Callable:
    """f mapped over an axis of its arguments, without a Python loop over the batch.

    in_axes: an int (the mapped axis of every argument), None (not mapped), or a tuple
    with one entry per positional argument, each an int, None or a pytree prefix of that
    argument. An unmapped (None) leaf reaches f as it is, as in JAX: a Python scalar or
    string stays one (so it can steer Python control flow), an array is used unbatched.
    Keyword arguments are always mapped over axis 0. out_axes: where the batch axis goes
    in each output (an int or a pytree prefix of the output; None only for outputs that
    do not depend on a mapped argument). Negative axes count from the end. axis_size: the
    batch size, needed when no argument is mapped. Mapped axes of different sizes, an
    in_axes that is no prefix of the arguments, or nothing mapped without axis_size
    raise ValueError naming the arguments.

    >>> import vkml, vkml.numpy as vnp
    >>> from vkml.vmap import vmap
    >>> vmap(lambda x, y: x @ y, in_axes=(0, None))(vnp.ones((4, 3)), vnp.ones(3)).shape
    (4,)
    >>> per_example = vmap(vkml.grad(lambda w, x: (w * x).sum() ** 2), (None, 0))
    >>> per_example(vnp.ones(2), vnp.asarray([[1.0, 0.0], [1.0, 1.0]])).numpy().tolist()
    [[2.0, 0.0], [4.0, 4.0]]
    >>> def poly(x, n):
    ...     return x ** n if n > 1 else x
    >>> vmap(poly, in_axes=(0, None))(vnp.asarray([1.0, 2.0, 3.0]), 2).numpy().tolist()
    [1.0, 4.0, 9.0]
    >>> vmap(lambda x, scale: x * scale)(vnp.ones((2, 1)), scale=vnp.asarray([[1.0], [5.0]])).shape
    (2, 1)
    """
    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        axes = _arg_axes(in_axes, args, kwargs)
        leaves, treedef = tree_flatten((list(args), kwargs))
        names = (_paths(list(args), "args") if args else []) + (_paths(kwargs, "kwargs") if kwargs else [])
        # an unmapped leaf reaches f as it is (JAX's rule): a Python scalar stays one, so it
        # can steer Python control flow; an array is used unbatched (broadcast where needed)
        names = [f"argument {n}" for n in names]
        leaves = [l if a is None else _mappable(l, a, n) for l, a, n in zip(leaves, axes, names)]
        axes = [_normalize(a, l.shape, "in_axes", n) if a is not None else None
                for a, l, n in zip(axes, leaves, names)]
        size = _batch_size(leaves, axes, names, axis_size)
        mapped = [(l, a) for l, a in zip(leaves, axes) if a is not None]
        with tracer.Trace() as t:
            tr = [Array._traced(t, t.new_input(l.shape[:a] + l.shape[a + 1:], l.dtype)) for l, a in mapped]
            it = iter(tr)
            a_list, kw = tree_unflatten(treedef, [l if a is None else next(it) for l, a in zip(leaves, axes)])
            out = f(*a_list, **kw)
            out_leaves, out_tree = tree_flatten(out)
            nodes = [t.lift(vnp.asarray(o)) for o in out_leaves]
        graph = t.graph(nodes)
        captured = list(t.captured)
        o_names = _paths(out, "output")
        o_axes = _prefix_axes(out_axes, out, "out_axes", "the output")
        o_axes = [None if a is None else _normalize(a, (size,) + n.shape, "out_axes", nm)
                  for a, n, nm in zip(o_axes, nodes, o_names)]
        g = vmap_graph(graph, [a for _, a in mapped] + [None] * len(captured), size, o_axes, o_names)
        res = call_graph(simplify(g), [l for l, _ in mapped] + captured)
        return tree_unflatten(out_tree, res)
    return wrapped
