"""vkml.nn.save / vkml.nn.load: pytrees of arrays to and from `.npz` files, never pickle.

Each leaf is stored under its path in the tree, joined with dots: dict keys, list and
tuple positions, namedtuple and Module field names (`layers.0.weight`). So a model saved
with `save` loads into a model of the same architecture (`load(path, like=model)`), and
the flat dict `load(path)` returns is what `Module.load_state_dict` takes.

>>> import tempfile, os, vkml.numpy as vnp
>>> p = os.path.join(tempfile.mkdtemp(), "ckpt.npz")
>>> save(p, {"w": vnp.ones((2,)), "layers": [vnp.zeros(())]})
>>> sorted(load(p))
['layers.0', 'w']
"""
from __future__ import annotations

import os
import tempfile
import zipfile
from typing import Any

import numpy as np

from .. import numpy as vnp
from ..array import Array
from ..trace import dtypes as dt
from ..tree_util import tree_flatten, tree_unflatten
from .base import Module, _fields
from . import modules as _modules

__all__ = ["save", "load", "tree_paths", "SerializationError"]

_ROOT = "<root>"   # the key of a tree that is a single leaf


class SerializationError(ValueError):
    """A checkpoint that cannot be read, or does not match the template it is loaded into."""


def _children(x: Any) -> list[tuple[str, Any]] | None:
    """(name, child) pairs of a pytree node in flattening order, or None for a leaf."""
    if isinstance(x, Module):
        return [(n, v) for n, dyn, v in _fields(x) if dyn]
    if type(x) is dict:
        return [(str(k), x[k]) for k in sorted(x)]
    if type(x) in (list, tuple):
        return [(str(i), c) for i, c in enumerate(x)]
    if isinstance(x, tuple) and hasattr(type(x), "_fields"):
        return list(zip(type(x)._fields, x))
    if x is None:
        return []
    # any other registered node: flatten one level and name children by position
    kids, td = tree_flatten(x, is_leaf=lambda y: y is not x)
    if td.kind is None:
        return None
    return [(str(i), c) for i, c in enumerate(kids)]


def tree_paths(tree: Any) -> list[tuple[str, Any]]:
    """(dotted path, leaf) for every leaf, in tree_flatten's order.

    >>> tree_paths({"a": [1, 2], "b": None})
    [('a.0', 1), ('a.1', 2)]
    """
    out: list[tuple[str, Any]] = []

    def go(prefix: str, x: Any) -> None:
        kids = _children(x)
        if kids is None:
            out.append((prefix or _ROOT, x))
            return
        for name, c in kids:
            go(f"{prefix}.{name}" if prefix else name, c)
    go("", tree)
    go = None    # noqa: F841 -- breaks the closure's cycle, which would hold the tree's arrays
    return out


def _host(where: str, key: str, leaf: Any) -> np.ndarray:
    """A leaf as a NumPy array of a device dtype (readback for Arrays)."""
    if isinstance(leaf, Array):
        return np.asarray(leaf)
    try:
        return np.asarray(vnp.asarray(leaf))
    except (TypeError, ValueError) as e:
        raise SerializationError(f"{where}: leaf {key!r} of type {type(leaf).__name__} is not an "
                                 f"array ({e})") from None


def save(path: str | os.PathLike, tree: Any) -> None:
    """Write every array leaf of tree to an `.npz` file at path (exactly that name), one
    entry per leaf keyed by its dotted path. The file is replaced atomically.

    >>> import tempfile, os, vkml.numpy as vnp
    >>> save(os.path.join(tempfile.mkdtemp(), "w.npz"), [vnp.ones(3)])
    """
    paths = tree_paths(tree)
    seen: dict[str, int] = {}
    for k, _ in paths:
        if k in seen:
            raise SerializationError(f"save: two leaves share the key {k!r} (a dict key containing "
                                     f"'.' collides with a nested path); rename one")
        seen[k] = 1
    arrays = [(k, _host("save", k, leaf)) for k, leaf in paths]
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".vkml-save-", suffix=".npz", dir=d)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
            for k, a in arrays:
                with zf.open(k + ".npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, a, allow_pickle=False)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _read(path: str) -> dict[str, np.ndarray]:
    try:
        npz = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise SerializationError(f"load: {path!r} is not a readable .npz file ({e})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise SerializationError(f"load: {path!r} holds a single .npy array, not an .npz archive "
                                 f"of named arrays (write it with vkml.nn.save)")
    out = {}
    with npz:
        for k in npz.files:
            try:
                out[k] = npz[k]
            except ValueError as e:
                if "pickle" in str(e):
                    raise SerializationError(f"load: entry {k!r} of {path!r} is a pickled (object) "
                                             f"array; vkml never unpickles, save plain arrays") from None
                raise SerializationError(f"load: entry {k!r} of {path!r} is corrupted ({e})") from None
            except (OSError, zipfile.BadZipFile, EOFError) as e:
                raise SerializationError(f"load: entry {k!r} of {path!r} is corrupted ({e})") from None
    return out


def _dtype_of(x: Any) -> np.dtype:
    if isinstance(x, Array):
        return x.dtype
    if isinstance(x, np.ndarray):
        return dt.canonical(x.dtype, "load")
    return vnp.asarray(x).dtype


def check_entry(where: str, key: str, value: Any, template: Any) -> Array:
    """value as an Array, checked against the template leaf's shape and dtype; template
    leaves that are Array subclasses (Tensor parameters) get the same treatment again
    through the modules' _param hook."""
    got = value if isinstance(value, Array) else vnp.asarray(value)
    want_shape, want_dtype = tuple(np.shape(template)), _dtype_of(template)
    if got.shape != want_shape or got.dtype != want_dtype:
        raise SerializationError(f"{where}: key {key!r} has shape {got.shape} {got.dtype} in the "
                                 f"file but {want_shape} {want_dtype} in the template")
    if isinstance(template, Array) and type(template) is not Array and type(got) is Array:
        return _modules._param(got)
    return got


def load(path: str | os.PathLike, like: Any = None) -> Any:
    """Read an `.npz` written by save (never unpickling).

    Without `like`: a dict {dotted path: Array} in file order. With `like` (a template
    pytree, e.g. a freshly built model): the template's structure with the loaded arrays
    as leaves, after checking that the keys match exactly and each shape and dtype agrees;
    errors name the key and both shapes.

    >>> import tempfile, os, vkml.numpy as vnp
    >>> p = os.path.join(tempfile.mkdtemp(), "t.npz")
    >>> save(p, {"a": vnp.ones(2)})
    >>> load(p, like={"a": vnp.zeros(2)})["a"].numpy().tolist()
    [1.0, 1.0]
    """
    path = os.fspath(path)
    data = _read(path)
    if like is None:
        return {k: vnp.asarray(v) for k, v in data.items()}
    paths = tree_paths(like)
    leaves, td = tree_flatten(like)
    keys = [k for k, _ in paths]
    missing = [k for k in keys if k not in data]
    extra = [k for k in data if k not in set(keys)]
    if missing or extra:
        raise SerializationError(f"load: {path!r} does not match the template: missing keys "
                                 f"{missing}, unexpected keys {extra}")
    new = [check_entry("load", k, data[k], t) for k, t in paths]
    assert len(new) == len(leaves)
    return tree_unflatten(td, new)
