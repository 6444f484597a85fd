"""Module: the base of vkml.nn layers, a pytree (as in equinox) with PyTorch's methods.

Every subclass is registered as a pytree node when it is defined. Its array fields (and
fields holding modules, or lists/tuples/dicts of arrays or modules) are the children; every
other field (sizes, strides, eps, the `training` flag, ...) is static structure kept in
the treedef's aux data, which is hashable and compares by value, so a transform can cache
on it. So `vkml.grad(loss)(model, x, y)` returns a model-shaped tree of gradients and an
optimiser updates a model like any pytree, while the same object also answers
`.parameters()`, `.train()`, `.eval()` and `zero_grad()`.

>>> import vkml, vkml.numpy as vnp
>>> from vkml.nn import Linear
>>> m = Linear(3, 2)
>>> [p.shape for p in m.parameters()]
[(2, 3), (2,)]
>>> g = vkml.grad(lambda m, x: m(x).sum())(m, vnp.ones((4, 3)))
>>> type(g).__name__, g.weight.shape
('Linear', (2, 3))
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from ..array import Array
from ..tree_util import register_pytree_node, tree_flatten, tree_unflatten

# names the fields held as children when the module was rebuilt by tree_unflatten, so a
# tree whose leaves are not arrays (a mask of bools, say) keeps the model's structure
_CHILDREN = "_vk_children"
_PRIVATE = (_CHILDREN,)


def _is_dynamic(v: Any) -> bool:
    """Whether a field's value is pytree data (arrays or modules) rather than configuration."""
    if isinstance(v, (Array, Module, np.ndarray)):
        return True
    if type(v) in (list, tuple):
        return any(_is_dynamic(c) for c in v)
    if type(v) is dict:
        return any(_is_dynamic(c) for c in v.values())
    return False


def _fields(m: "Module") -> list[tuple[str, bool, Any]]:
    """(name, is_child, value) for every field, in definition order."""
    recorded = m.__dict__.get(_CHILDREN, ())
    return [(k, k in recorded or _is_dynamic(v), v) for k, v in m.__dict__.items()
            if k not in _PRIVATE]


def _flatten(m: "Module"):
    f = _fields(m)
    children = [v for _, dyn, v in f if dyn]
    aux = (tuple(k for k, _, _ in f), tuple(d for _, d, _ in f),
           tuple(None if d else v for _, d, v in f))
    return children, aux


def _unflattener(cls: type) -> Callable:
    def unflatten(aux, children):
        obj = object.__new__(cls)
        it = iter(children)
        d = obj.__dict__
        for name, dyn, static in zip(*aux[:3]):
            d[name] = next(it) if dyn else static
        d[_CHILDREN] = tuple(n for n, dyn in zip(aux[0], aux[1]) if dyn)
        return obj
    return unflatten


def _walk(prefix: str, v: Any, buffer: bool) -> Iterator[tuple[str, Any, bool]]:
    """(dotted path, leaf, is_buffer) for the leaves under v, in tree_flatten's order."""
    if isinstance(v, Module):
        yield from v._named_leaves(prefix)
    elif type(v) is dict:
        for k in sorted(v):
            yield from _walk(f"{prefix}{k}.", v[k], buffer)
    elif type(v) in (list, tuple):
        for i, c in enumerate(v):
            yield from _walk(f"{prefix}{i}.", c, buffer)
    elif v is not None:
        yield prefix[:-1], v, buffer


class StateDictError(ValueError, RuntimeError):
    """load_state_dict's error, worded as torch's (a RuntimeError there, and vkml's
    ValueError for a state that does not fit)."""


class IncompatibleKeys(NamedTuple):
    """What load_state_dict(strict=False) skipped (torch's _IncompatibleKeys)."""
    missing_keys: list
    unexpected_keys: list


class Module:
    """Base class of layers: subclass it, set fields in __init__, define forward.

    Fields holding arrays are parameters, except those named in the class attribute
    `_buffers` (non-trainable state such as BatchNorm's running statistics). Fields named
    in `_unnamed` are left out of dotted names (Sequential's `layers`: its parameters are
    `0.weight`, ... as torch names them); state named in `_optional_state` may be missing
    from a state dict (BatchNorm's num_batches_tracked, as torch allows).

    >>> import vkml.numpy as vnp
    >>> class Scale(Module):
    ...     def __init__(self):
    ...         self.s = vnp.ones(())
    ...     def forward(self, x):
    ...         return x * self.s
    >>> float(Scale()(vnp.asarray(3.0)))
    3.0
    """
    _buffers: tuple[str, ...] = ()
    _unnamed: tuple[str, ...] = ()
    _optional_state: tuple[str, ...] = ()

    def __new__(cls, *args: Any, **kwargs: Any):
        obj = object.__new__(cls)
        obj.__dict__["training"] = True     # first field, so every instance has it
        return obj

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        register_pytree_node(cls, _flatten, _unflattener(cls))

    # ------------------------------------------------------------------ forward
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------------ traversal
    def _named_leaves(self, prefix: str = "") -> Iterator[tuple[str, Any, bool]]:
        for name, dyn, v in _fields(self):
            if dyn:
                here = prefix if name in type(self)._unnamed else f"{prefix}{name}."
                yield from _walk(here, v, name in type(self)._buffers)

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        """Direct submodules (also those inside list/tuple/dict fields), with their names."""
        for name, dyn, v in _fields(self):
            if not dyn:
                continue
            head = "" if name in type(self)._unnamed else f"{name}."
            if isinstance(v, Module):
                yield name, v
            elif type(v) in (list, tuple):
                yield from ((f"{head}{i}", c) for i, c in enumerate(v) if isinstance(c, Module))
            elif type(v) is dict:
                yield from ((f"{head}{k}", v[k]) for k in sorted(v) if isinstance(v[k], Module))

    def children(self) -> list["Module"]:
        return [m for _, m in self.named_children()]

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        """This module and every submodule, depth first."""
        yield prefix, self
        for name, m in self.named_children():
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self) -> list["Module"]:
        return [m for _, m in self.named_modules()]

    def named_parameters(self) -> list[tuple[str, Any]]:
        """(dotted name, array) of every trainable array, in the pytree's leaf order.

        >>> from vkml.nn import Linear
        >>> [n for n, _ in Linear(2, 3).named_parameters()]
        ['weight', 'bias']
        """
        return [(n, v) for n, v, buf in self._named_leaves() if not buf]

    def parameters(self) -> list[Any]:
        """Every trainable array (buffers excluded), in a stable order."""
        return [v for _, v in self.named_parameters()]

    def named_buffers(self) -> list[tuple[str, Any]]:
        return [(n, v) for n, v, buf in self._named_leaves() if buf]

    def buffers(self) -> list[Any]:
        return [v for _, v in self.named_buffers()]

    def parameter_mask(self) -> "Module":
        """A model-shaped tree of bools: True at parameters, False at buffers (for masking
        an optimiser's weight decay, as vkml.optim.adamw does by default)."""
        leaves, td = tree_flatten(self)
        flags = [not buf for _, _, buf in self._named_leaves()]
        assert len(flags) == len(leaves), "Module traversal disagrees with its pytree flattening"
        return tree_unflatten(td, flags)

    # ------------------------------------------------------------------ PyTorch face
    def train(self, mode: bool = True) -> "Module":
        """Set the training flag of this module and every submodule; returns self."""
        for m in self.modules():
            m.__dict__["training"] = bool(mode)
        return self

    def eval(self) -> "Module":
        """train(False): Dropout becomes the identity, BatchNorm uses running statistics."""
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear `.grad` of every parameter that has one (Tensor parameters)."""
        for p in self.parameters():
            if hasattr(p, "grad"):
                p.grad = None

    def state_dict(self) -> dict[str, Any]:
        """{dotted name: array} for parameters and buffers, named as torch names them
        (`0.weight` in a Sequential, BatchNorm's `running_mean`, `running_var`,
        `num_batches_tracked`); the keys vkml.nn.save writes.

        >>> from vkml.nn import Linear, Sequential
        >>> list(Sequential(Linear(2, 2)).state_dict())
        ['0.weight', '0.bias']
        """
        return {n: v for n, v, _ in self._named_leaves()}

    def _optional_keys(self) -> set[str]:
        return {f"{p}.{f}" if p else f for p, m in self.named_modules() for f in type(m)._optional_state}

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Replace this module's arrays, in place, by state's entries of the same names: a
        state_dict of a vkml module, or a torch one converted to NumPy
        (`{k: v.numpy() for k, v in sd.items()}`). Values are cast to the module's dtypes
        as torch's copy_ does (a float value into an integer or bool entry is refused);
        shapes must match. strict: no missing or unexpected keys. Errors are collected and
        raised together as torch words them (StateDictError, a RuntimeError and a
        ValueError). Returns (missing_keys, unexpected_keys), as torch.

        >>> from vkml.nn import Linear
        >>> a, b = Linear(2, 2), Linear(2, 2)
        >>> a.load_state_dict(b.state_dict())
        IncompatibleKeys(missing_keys=[], unexpected_keys=[])
        """
        from .. import numpy as vnp
        from ..trace import dtypes as dt
        own = self.state_dict()
        optional = self._optional_keys()
        missing = [k for k in own if k not in state and k not in optional]
        extra = [k for k in state if k not in own]
        errors, new = [], {}
        for k in own:
            if k not in state:
                continue
            try:
                v = vnp.asarray(state[k])
            except (TypeError, ValueError) as e:
                errors.append(f"value for {k}: {e}")
                continue
            want = own[k]
            if v.shape != tuple(want.shape):
                errors.append(f"size mismatch for {k}: copying a param with shape {v.shape} from "
                              f"checkpoint, the shape in current model is {tuple(want.shape)}.")
            elif v.dtype != want.dtype and dt.is_float(v.dtype) and not dt.is_float(want.dtype):
                errors.append(f"dtype mismatch for {k}: copying a param of dtype {v.dtype} from "
                              f"checkpoint into one of dtype {want.dtype} would lose its fraction.")
            else:
                new[k] = v if v.dtype == want.dtype else v.astype(want.dtype)
        if strict:
            if extra:
                errors.insert(0, "Unexpected key(s) in state_dict: "
                              + ", ".join(f'"{k}"' for k in extra) + ". ")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: "
                              + ", ".join(f'"{k}"' for k in missing) + ". ")
        if errors:
            raise StateDictError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                                 + "\n\t".join(errors))
        from .serialization import check_entry   # serialization is built on Module
        new = {k: check_entry("load_state_dict", k, v, own[k]) for k, v in new.items()}
        leaves, td = tree_flatten(self)
        names = [n for n, _, _ in self._named_leaves()]
        fresh = tree_unflatten(td, [new.get(n, v) for n, v in zip(names, leaves)])
        self._copy_from(fresh)
        return IncompatibleKeys(missing, extra)

    def _copy_from(self, other: "Module") -> None:
        """Adopt other's fields (same structure), recursing so submodule objects the user
        holds stay the ones that are updated; parameters with `_set_value` are updated in
        place."""
        for (name, dyn, v), (_, _, w) in zip(_fields(self), _fields(other)):
            if not dyn:
                continue
            if isinstance(v, Module):
                v._copy_from(w)
            elif type(v) is list and all(isinstance(c, Module) for c in v):
                for c, d in zip(v, w):
                    c._copy_from(d)
            elif hasattr(v, "_set_value") and v is not w:
                v._set_value(w)
            else:
                self.__dict__[name] = w

    # ------------------------------------------------------------------ display
    def _config(self) -> list[str]:
        return [f"{k}={v!r}" for k, dyn, v in _fields(self)
                if not dyn and k != "training" and not k.startswith("_")]

    def __repr__(self) -> str:
        subs = list(self.named_children())
        head = f"{type(self).__name__}({', '.join(self._config())}"
        if not subs:
            return head + ")"
        body = "".join(f"\n  ({n}): " + repr(m).replace("\n", "\n  ") for n, m in subs)
        return (head + ", " if self._config() else head) + body + "\n)"


register_pytree_node(Module, _flatten, _unflattener(Module))
