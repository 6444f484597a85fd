"""Mixed precision: dtype policies and loss scaling (re-exported by `vkml.optim`).

The recipe (as DeepMind's jmp): keep float32 master weights and optimiser state, cast
them to a 16-bit compute dtype at the top of the loss (`Policy.cast_to_compute`), cast
the outputs back up (`cast_to_output`) before the loss is reduced, and differentiate with
respect to the float32 weights, so the gradients arrive in float32 through the casts'
rules. float16's narrow range needs the loss scaled before the backward pass and the
gradients unscaled after it (`StaticLossScale`, `DynamicLossScale`); bfloat16 has
float32's range and needs none (`NoOpLossScale`).

>>> import vkml, vkml.numpy as vnp
>>> policy = get_policy("params=float32,compute=bfloat16,output=float32")
>>> w = {"w": vnp.asarray([0.5, -1.0])}
>>> scale = DynamicLossScale(vnp.asarray(2.0 ** 15))
>>> def loss(w, scale):
...     h = policy.cast_to_compute(w)
...     return scale.scale(policy.cast_to_output((h["w"] * h["w"]).sum()))
>>> g = scale.unscale(vkml.grad(loss)(w, scale))
>>> g["w"].dtype, g["w"].numpy().tolist()
(dtype('float32'), [1.0, -2.0])
>>> scale = scale.adjust(all_finite(g))
>>> int(scale.counter), float(scale.loss_scale)
(1, 32768.0)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import numpy as vnp
from .array import Array
from .trace import dtypes as dt
from .tree_util import register_dataclass, tree_leaves, tree_map

__all__ = ["Policy", "get_policy", "NoOpLossScale", "StaticLossScale", "DynamicLossScale", "all_finite",
           "select_tree"]


def _cast_floats(tree: Any, dtype) -> Any:
    """tree with every float leaf (Array or NumPy array) cast to dtype; the rest unchanged."""
    d = dt.canonical(dtype, "Policy")

    def one(x):
        if isinstance(x, (Array, np.ndarray)) and dt.is_float(x.dtype) and x.dtype != d:
            return vnp.asarray(x).astype(d)
        return x
    return tree_map(one, tree)


@dataclass(frozen=True)
class Policy:
    """Which dtype parameters are kept in, computed in and returned in.

    >>> import vkml.numpy as vnp
    >>> p = Policy(vnp.float32, vnp.bfloat16, vnp.float32)
    >>> p.cast_to_compute({"w": vnp.ones(2), "i": vnp.asarray([1])})["w"].dtype
    dtype(bfloat16)
    """
    param_dtype: Any = dt.float32
    compute_dtype: Any = dt.float32
    output_dtype: Any = dt.float32

    def __post_init__(self):
        for f in ("param_dtype", "compute_dtype", "output_dtype"):
            d = dt.canonical(getattr(self, f), "Policy")
            if not dt.is_float(d):
                raise dt.DTypeError(f"Policy: {f} {d} is not a float dtype; valid: float16, bfloat16, "
                                    f"float32, float64")
            object.__setattr__(self, f, d)

    def cast_to_param(self, tree: Any) -> Any:
        return _cast_floats(tree, self.param_dtype)

    def cast_to_compute(self, tree: Any) -> Any:
        return _cast_floats(tree, self.compute_dtype)

    def cast_to_output(self, tree: Any) -> Any:
        return _cast_floats(tree, self.output_dtype)


_ALIASES = {"p": "param", "params": "param", "param": "param", "c": "compute", "compute": "compute",
            "o": "output", "output": "output"}
_DTYPES = {"float32": dt.float32, "f32": dt.float32, "float16": dt.float16, "f16": dt.float16, "half": dt.float16,
           "bfloat16": dt.bfloat16, "bf16": dt.bfloat16, "float64": dt.float64, "f64": dt.float64}


def get_policy(spec: str) -> Policy:
    """A Policy from jmp's string form: "params=float32,compute=bfloat16,output=float32"
    (short names p/c/o and f32/bf16/f16 too); a single dtype name sets all three.

    >>> get_policy("p=f32,c=f16,o=f32").compute_dtype
    dtype('float16')
    """
    s = spec.strip().lower()
    if "=" not in s:
        if s not in _DTYPES:
            raise ValueError(f"get_policy: unknown dtype {spec!r}; valid: {', '.join(_DTYPES)}")
        return Policy(_DTYPES[s], _DTYPES[s], _DTYPES[s])
    out = {}
    for part in s.split(","):
        k, _, v = part.partition("=")
        k, v = k.strip(), v.strip()
        if k not in _ALIASES or v not in _DTYPES:
            raise ValueError(f"get_policy: cannot read {part!r} of {spec!r}; write e.g. "
                             f"'params=float32,compute=bfloat16,output=float32'")
        out[_ALIASES[k] + "_dtype"] = _DTYPES[v]
    return Policy(**out)


def all_finite(tree: Any) -> Array:
    """A bool scalar Array: whether every float element of tree is finite (traceable).

    >>> import vkml.numpy as vnp
    >>> bool(all_finite([vnp.ones(2), vnp.asarray([1.0, vnp.inf])]))
    False
    """
    leaves = [x for x in tree_leaves(tree) if isinstance(x, Array) and dt.is_float(x.dtype)]
    if not leaves:
        return vnp.asarray(True)
    ok = [vnp.all(vnp.isfinite(x)) for x in leaves]
    out = ok[0]
    for o in ok[1:]:
        out = vnp.logical_and(out, o)
    return out


def select_tree(pred: Array, a: Any, b: Any) -> Any:
    """Per leaf `where(pred, a, b)` for a bool scalar pred (keep a step's result only
    where its gradients were finite).

    >>> import vkml.numpy as vnp
    >>> select_tree(vnp.asarray(False), {"w": vnp.ones(1)}, {"w": vnp.zeros(1)})["w"].numpy().tolist()
    [0.0]
    """
    return tree_map(lambda x, y: vnp.where(pred, x, y), a, b)


def _scale_tree(tree: Any, s) -> Any:
    return tree_map(lambda x: x * s.astype(x.dtype) if isinstance(x, Array) and dt.is_float(x.dtype) else x,
                    tree)


@dataclass(frozen=True)
class NoOpLossScale:
    """No loss scaling (float32, bfloat16)."""

    @property
    def loss_scale(self) -> float:
        return 1.0

    def scale(self, tree: Any) -> Any:
        return tree

    def unscale(self, tree: Any) -> Any:
        return tree

    def adjust(self, grads_finite: Array) -> "NoOpLossScale":
        return self


@dataclass(frozen=True)
class StaticLossScale:
    """Multiply the loss by a fixed `loss_scale` and divide the gradients by it."""
    loss_scale: Any

    def scale(self, tree: Any) -> Any:
        return _scale_tree(tree, vnp.asarray(self.loss_scale, dt.float32))

    def unscale(self, tree: Any) -> Any:
        return _scale_tree(tree, 1.0 / vnp.asarray(self.loss_scale, dt.float32))

    def adjust(self, grads_finite: Array) -> "StaticLossScale":
        return self


@dataclass(frozen=True)
class DynamicLossScale:
    """A loss scale that halves (by `factor`, not below `min_loss_scale`) whenever the
    gradients hold an inf or nan, and doubles after `period` finite steps in a row (jmp's
    rule). loss_scale and counter are Arrays, so it is a pytree that a jitted step takes
    and returns."""
    loss_scale: Any
    counter: Any = None
    period: int = 2000
    factor: int = 2
    min_loss_scale: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "loss_scale", vnp.asarray(self.loss_scale, dt.float32))
        object.__setattr__(self, "counter", vnp.asarray(0 if self.counter is None else self.counter, dt.int32))

    def scale(self, tree: Any) -> Any:
        return _scale_tree(tree, vnp.asarray(self.loss_scale, dt.float32))

    def unscale(self, tree: Any) -> Any:
        return _scale_tree(tree, 1.0 / vnp.asarray(self.loss_scale, dt.float32))

    def adjust(self, grads_finite: Array) -> "DynamicLossScale":
        s = vnp.asarray(self.loss_scale, dt.float32)
        c = self.counter
        grow = vnp.logical_and(grads_finite, c + 1 >= self.period)
        s_new = vnp.where(grads_finite, vnp.where(grow, s * float(self.factor), s),
                          vnp.maximum(s / float(self.factor), float(self.min_loss_scale)))
        c_new = vnp.where(vnp.logical_and(grads_finite, vnp.logical_not(grow)), c + 1, 0)
        return DynamicLossScale(s_new, c_new.astype(dt.int32), self.period, self.factor, self.min_loss_scale)


register_dataclass(NoOpLossScale, [], [])
register_dataclass(StaticLossScale, ["loss_scale"], [])
register_dataclass(DynamicLossScale, ["loss_scale", "counter"], ["period", "factor", "min_loss_scale"])
