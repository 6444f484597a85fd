"""vkml.nn.save / vkml.nn.load: pytrees of arrays to and from `.npz` files, never pickle.

Each leaf is stored under its path in the tree, joined with dots: dict keys, list and
tuple positions, namedtuple and Module field names, as torch names them (`0.weight` in a
Sequential, `encoder.weight`). So a model saved
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
from ..vulkan import runtime
from .base import Module, _fields
from . import modules as _modules

__all__ = ["save", "load", "tree_paths", "SerializationError", "MAX_BYTES"]

_ROOT = "<root>"   # the key of a tree that is a single leaf


class SerializationError(ValueError):
    """A checkpoint that cannot be read, or does not match the template it is loaded into."""


def _children(x: Any) -> list[tuple[str, Any]] | None:
    """(name, child) pairs of a pytree node in flattening order, or None for a leaf."""
    if isinstance(x, Module):
        out = []
        for n, dyn, v in _fields(x):
            if dyn and n in type(x)._unnamed:   # Sequential's layers: `0.weight`, as torch
                out += _children(v) or []
            elif dyn:
                out.append((n, v))
        return out
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


# the most bytes load() inflates from one file unless told otherwise (max_bytes)
MAX_BYTES = 4 << 30
_NPY_MAGIC = b"\x93NUMPY"
_HEADER_MAX = 10016   # magic, version, length and the 10,000 bytes numpy reads of a header


def _device_limit() -> int:
    """The largest array the device holds (the allocator's size error)."""
    return runtime.get().dev.max_tensor_bytes


def _check_name(path: str, name: str) -> str:
    """The key of a member named as save writes them (`<key>.npy`), refusing anything
    else: folders, path separators and control characters have no place in a key."""
    key = name[:-4] if name.endswith(".npy") else None
    if not key or any(c in key for c in "/\\") or any(ord(c) < 32 for c in key):
        raise SerializationError(f"load: {path!r} has a member named {name!r}, outside the key "
                                 f"scheme of vkml.nn.save ('<dotted.key>.npy', no folders)")
    return key


def _member_header(path: str, key: str, fp, size: int, limit: int) -> tuple:
    """(shape, fortran_order, dtype) from a member's .npy header, checked before any data
    is read: a plain (never pickled) dtype the device has, and a shape whose bytes are
    exactly those the member holds and within the limit."""
    try:
        version = np.lib.format.read_magic(fp)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read(fp, max_header_size=_HEADER_MAX - 16)
    except Exception as e:    # numpy's parser raises ValueError, SyntaxError, TokenError, ...
        raise SerializationError(f"load: entry {key!r} of {path!r} has no valid .npy header "
                                 f"({e})") from None
    if dtype.hasobject:
        raise SerializationError(f"load: entry {key!r} of {path!r} is a pickled (object) array; "
                                 f"vkml never unpickles, save plain arrays")
    try:
        dt.canonical(dtype.newbyteorder("="), "load")
    except TypeError as e:
        raise SerializationError(f"load: entry {key!r} of {path!r}: {e}") from None
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if nbytes > limit:
        raise SerializationError(f"load: entry {key!r} of {path!r} claims shape {shape} {dtype} "
                                 f"({nbytes / 2**20:.1f} MiB), over the limit of "
                                 f"{limit / 2**20:.0f} MiB")
    if fp.tell() + nbytes != size:
        raise SerializationError(f"load: entry {key!r} of {path!r} claims shape {shape} {dtype} "
                                 f"({nbytes} bytes) but holds {size - fp.tell()} bytes of data")
    return shape, fortran, dtype


def _read(path: str, max_bytes: int | None) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive, every size checked before it is inflated.

    The declared uncompressed size of each member (which zipfile never reads past) must
    fit the device's one-array limit and their total max_bytes, so a small file that
    inflates to gigabytes (a zip bomb) is refused before anything is decompressed; each
    member's .npy header is then checked before its data is read (no pickles, a shape
    that matches the data), and big-endian arrays are converted to native order."""
    with open(path, "rb") as f:      # FileNotFoundError and the like pass through as such
        head = f.read(len(_NPY_MAGIC))
    if head == _NPY_MAGIC:
        raise SerializationError(f"load: {path!r} holds a single .npy array, not an .npz archive "
                                 f"of named arrays (write it with vkml.nn.save)")
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise SerializationError(f"load: {path!r} is not a readable .npz file ({e})") from None
    with zf:
        infos = zf.infolist()
        one = _device_limit()
        total = 0
        keys: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            key = _check_name(path, info.filename)
            if key in keys:
                raise SerializationError(f"load: {path!r} has two members named {info.filename!r}")
            keys[key] = info
            # np.savez writes stored or deflated members; zipfile caps a deflated member's
            # output at its declared size, but inflates a bzip2 or lzma chunk whole first
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise SerializationError(
                    f"load: entry {key!r} of {path!r} uses zip compression method "
                    f"{info.compress_type}; an .npz holds stored or deflated members only")
            total += info.file_size
            if info.file_size > one + _HEADER_MAX:
                raise SerializationError(
                    f"load: entry {key!r} of {path!r} inflates to {info.file_size / 2**20:.1f} MiB, "
                    f"more than this device's largest array ({one / 2**20:.0f} MiB)")
            if max_bytes is not None and total > max_bytes:
                raise SerializationError(
                    f"load: {path!r} inflates to more than max_bytes={max_bytes} bytes "
                    f"({total / 2**20:.1f} MiB declared so far); pass a larger max_bytes to "
                    f"load it")
        out = {}
        for key, info in keys.items():
            try:
                with zf.open(info) as fp:
                    shape, fortran, dtype = _member_header(path, key, fp, info.file_size, one)
                with zf.open(info) as fp:
                    a = np.lib.format.read_array(fp, allow_pickle=False)
            except SerializationError:
                raise
            except (ValueError, OSError, EOFError, zipfile.BadZipFile, NotImplementedError,
                    RuntimeError) as e:
                raise SerializationError(f"load: entry {key!r} of {path!r} is corrupted ({e})") from None
            if a.shape != shape or a.dtype != dtype:
                raise SerializationError(f"load: entry {key!r} of {path!r} is corrupted")
            if not a.dtype.isnative:
                a = a.astype(a.dtype.newbyteorder("="))
            out[key] = a
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


def load(path: str | os.PathLike, like: Any = None, *, max_bytes: int | None = MAX_BYTES) -> Any:
    """Read an `.npz` written by save (never unpickling).

    Without `like`: a dict {dotted path: Array} in file order. With `like` (a template
    pytree, e.g. a freshly built model): the template's structure with the loaded arrays
    as leaves, after checking that the keys match exactly and each shape and dtype agrees;
    errors name the key and both shapes.

    A malformed or hostile file (not a zip, truncated, pickled or unsupported dtypes,
    members outside the `<key>.npy` scheme or named twice, a header whose shape does not
    match its data) raises SerializationError (a ValueError) before anything runs or is
    allocated. The archive may inflate to max_bytes in all (MAX_BYTES, 4 GiB, by default;
    None for no limit), each array to the device's largest binding; both are checked
    against the sizes the archive declares, before any member is decompressed.

    >>> import tempfile, os, vkml.numpy as vnp
    >>> p = os.path.join(tempfile.mkdtemp(), "t.npz")
    >>> save(p, {"a": vnp.ones(2)})
    >>> load(p, like={"a": vnp.zeros(2)})["a"].numpy().tolist()
    [1.0, 1.0]
    """
    path = os.fspath(path)
    data = _read(path, max_bytes)
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
