"""Pytrees: nested tuples, lists, dicts, None, namedtuples and registered classes.

Same model as jax.tree_util: flattening gives the leaves in a fixed order (dict keys
sorted) and a treedef that rebuilds the structure around new leaves.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

_REGISTRY: dict[type, tuple[Callable, Callable]] = {}


class PyTreeDef:
    """The structure of a pytree without its leaves."""
    __slots__ = ("kind", "aux", "children", "num_leaves", "_hash")

    def __init__(self, kind, aux, children):
        self.kind, self.aux, self.children = kind, aux, tuple(children)
        self.num_leaves = 1 if kind is None else sum(c.num_leaves for c in self.children)
        self._hash = None

    def __eq__(self, other):
        # every leaf shares one treedef (`_LEAF`): most comparisons end at `is`
        return self is other or (isinstance(other, PyTreeDef) and self.kind == other.kind
                                 and self.aux == other.aux and self.children == other.children)

    def __hash__(self):
        # immutable, and a jit call hashes its arguments' treedef every time
        if self._hash is None:
            try:
                self._hash = hash((self.kind, self.aux, self.children))
            except TypeError:
                self._hash = hash((self.kind, self.children))
        return self._hash

    def __repr__(self):
        if self.kind is None:
            return "*"
        name = getattr(self.kind, "__name__", str(self.kind))
        return f"{name}({', '.join(map(repr, self.children))})"

    def unflatten(self, leaves: Iterable) -> Any:
        return tree_unflatten(self, leaves)


def register_pytree_node(cls: type, flatten: Callable, unflatten: Callable) -> None:
    """Make cls a pytree node: flatten(obj) -> (children, aux); unflatten(aux, children) -> obj.

    >>> class Pair:
    ...     def __init__(self, a, b): self.a, self.b = a, b
    >>> register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda aux, c: Pair(*c))
    >>> tree_leaves(Pair(1, (2, 3)))
    [1, 2, 3]
    """
    _REGISTRY[cls] = (flatten, unflatten)
    _LEAF_TYPES.clear()


def register_dataclass(cls: type, data_fields: list[str] | None = None,
                       meta_fields: list[str] | None = None) -> type:
    """Register a dataclass: data fields are children, meta fields static structure.

    >>> @register_dataclass
    ... @dataclasses.dataclass
    ... class P:
    ...     w: Any
    ...     b: Any
    >>> tree_leaves(P(1, 2))
    [1, 2]
    """
    if data_fields is None:
        meta_fields = meta_fields or []
        data_fields = [f.name for f in dataclasses.fields(cls) if f.name not in meta_fields]
    meta_fields = meta_fields or []

    def flat(o):
        return [getattr(o, n) for n in data_fields], tuple(getattr(o, n) for n in meta_fields)

    def unflat(aux, ch):
        obj = object.__new__(cls)
        for n, v in zip(data_fields, ch):
            object.__setattr__(obj, n, v)
        for n, v in zip(meta_fields, aux):
            object.__setattr__(obj, n, v)
        return obj
    register_pytree_node(cls, flat, unflat)
    return cls


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


# types found to be leaves (neither registered nor under a registered base), so that a
# leaf costs one lookup: a jitted training step flattens its arguments at every call
_LEAF_TYPES: set = set()


def _node(x):
    """(kind, aux, children) for a node, or None for a leaf."""
    t = type(x)
    if t in _LEAF_TYPES:
        return None
    if t is tuple or t is list:
        return t, None, list(x)
    if t in _REGISTRY:
        ch, aux = _REGISTRY[t][0](x)
        return t, aux, list(ch)
    if x is None:
        return type(None), None, []
    if t is tuple or t is list:
        return t, None, list(x)
    if t is dict:
        keys = sorted(x)
        return dict, tuple(keys), [x[k] for k in keys]
    if _is_namedtuple(x):
        return t, None, list(x)
    for base, fns in _REGISTRY.items():
        if isinstance(x, base):
            ch, aux = fns[0](x)
            return base, aux, list(ch)
    _LEAF_TYPES.add(t)
    return None


_LEAF = PyTreeDef(None, None, ())


def _leaf_paths(tree, prefix: str) -> list[str]:
    """A readable path per leaf, in flattening order, e.g. "args[0]['w']"."""
    nd = _node(tree)
    if nd is None:
        return [prefix]
    kind, aux, ch = nd
    if kind is dict:
        keys = [f"[{k!r}]" for k in aux]
    elif hasattr(kind, "_fields"):
        keys = [f".{f}" for f in kind._fields]
    else:
        keys = [f"[{i}]" for i in range(len(ch))]
    return [p for k, c in zip(keys, ch) for p in _leaf_paths(c, prefix + k)]


def tree_flatten(tree: Any, is_leaf: Callable | None = None) -> tuple[list, PyTreeDef]:
    """(leaves, treedef)."""
    leaves: list = []
    return leaves, _flatten(tree, is_leaf, leaves)


# Module-level recursion, not a closure calling itself: such a closure is a reference
# cycle that keeps every leaf (device arrays) alive until the cyclic collector runs.
def _flatten(x, is_leaf, leaves: list) -> PyTreeDef:
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return _LEAF
    nd = _node(x)
    if nd is None:
        leaves.append(x)
        return _LEAF
    kind, aux, ch = nd
    return PyTreeDef(kind, aux, [_flatten(c, is_leaf, leaves) for c in ch])


def tree_unflatten(treedef: PyTreeDef, leaves: Iterable) -> Any:
    """Rebuild a pytree of treedef's structure around leaves."""
    return _unflatten(treedef, iter(leaves))


def _unflatten(td: PyTreeDef, it) -> Any:
    if td.kind is None:
        return next(it)
    ch = [_unflatten(c, it) for c in td.children]
    k = td.kind
    if k is type(None):
        return None
    if k is tuple:
        return tuple(ch)
    if k is list:
        return ch
    if k is dict:
        return dict(zip(td.aux, ch))
    if k in _REGISTRY:
        return _REGISTRY[k][1](td.aux, ch)
    return k(*ch)  # namedtuple


def tree_leaves(tree: Any, is_leaf: Callable | None = None) -> list:
    """The leaves of tree, in flattening order."""
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: Callable | None = None) -> PyTreeDef:
    return tree_flatten(tree, is_leaf)[1]


def tree_map(f: Callable, tree: Any, *rest: Any, is_leaf: Callable | None = None) -> Any:
    """Apply f leafwise across trees of the same structure.

    >>> tree_map(lambda a, b: a + b, {"x": 1, "y": (2, 3)}, {"x": 10, "y": (20, 30)})
    {'x': 11, 'y': (22, 33)}
    """
    leaves, td = tree_flatten(tree, is_leaf)
    others = []
    for r in rest:
        rl, rtd = tree_flatten(r, is_leaf)
        if rtd != td:
            raise ValueError(f"tree_map: structures differ: {td} vs {rtd}")
        others.append(rl)
    return tree_unflatten(td, [f(*xs) for xs in zip(leaves, *others)])
