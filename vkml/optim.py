"""vkml.optim: optimisers, both optax-style pure transformations and PyTorch-style objects.

Pure side (works on any pytree: dicts of arrays, vkml.nn models, ...): an optimiser is a
`GradientTransformation` with `init(params) -> state` and
`update(grads, state, params=None) -> (updates, new_state)`; `apply_updates(params,
updates)` adds the updates. All update arithmetic runs on the device; step counts live in
the state as int32 Arrays, so learning-rate schedules (functions of the step count) trace.

>>> import vkml, vkml.numpy as vnp
>>> params = {"w": vnp.asarray([1.0, -2.0])}
>>> opt = adam(0.1)
>>> state = opt.init(params)
>>> grads = vkml.grad(lambda p: (p["w"] ** 2).sum())(params)
>>> updates, state = opt.update(grads, state, params)
>>> [round(v, 3) for v in apply_updates(params, updates)["w"].numpy().tolist()]
[0.9, -1.9]

Stateful side: `SGD`, `Adam`, `AdamW` over a list of parameter objects with `.step()` and
`.zero_grad()`, as in torch.optim.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

from . import numpy as vnp
from .array import Array
from .autodiff import no_grad
from .trace import dtypes as dt
from .tree_util import tree_flatten, tree_leaves, tree_map, tree_unflatten
# mixed precision (dtype policies, loss scaling) lives in its own module
from .mixed_precision import (DynamicLossScale, NoOpLossScale, Policy, StaticLossScale, all_finite,
                              get_policy, select_tree)

__all__ = ["GradientTransformation", "sgd", "adam", "adamw", "chain", "clip_by_global_norm",
           "scale", "scale_by_adam", "scale_by_schedule", "scale_by_learning_rate", "trace",
           "add_decayed_weights", "apply_updates", "global_norm", "constant_schedule",
           "linear_schedule", "cosine_decay_schedule", "warmup_cosine_decay_schedule",
           "Optimizer", "SGD", "Adam", "AdamW", "Policy", "get_policy", "NoOpLossScale", "StaticLossScale",
           "DynamicLossScale", "all_finite", "select_tree"]

Schedule = Callable[[Any], Any]
LR = float | Schedule


class GradientTransformation(NamedTuple):
    """A pure optimiser: init(params) -> state; update(grads, state, params) -> (updates, state)."""
    init: Callable[[Any], Any]
    update: Callable[..., tuple[Any, Any]]


class EmptyState(NamedTuple):
    pass


class TraceState(NamedTuple):
    trace: Any


class ScaleByAdamState(NamedTuple):
    count: Array
    mu: Any
    nu: Any


class ScaleByScheduleState(NamedTuple):
    count: Array


def _count0() -> Array:
    return vnp.zeros((), dt.int32)


def _float_dtype(a: Array):
    return a.dtype if dt.is_float(a.dtype) else dt.float32


# --------------------------------------------------------------------------- schedules


def constant_schedule(value: float) -> Schedule:
    """count -> value.

    >>> float(constant_schedule(0.5)(10))
    0.5
    """
    return lambda count: vnp.full((), float(value), dt.float32)


def linear_schedule(init_value: float, end_value: float, transition_steps: int,
                    transition_begin: int = 0) -> Schedule:
    """Linear from init_value (at transition_begin) to end_value (transition_steps later),
    constant outside.

    >>> float(linear_schedule(0.0, 1.0, 4)(2))
    0.5
    """
    if transition_steps <= 0:
        return constant_schedule(init_value)

    def fn(count):
        c = vnp.clip(vnp.asarray(count).astype(dt.float32) - float(transition_begin), 0.0,
                     float(transition_steps))
        return (end_value - init_value) * (c / float(transition_steps)) + init_value
    return fn


def cosine_decay_schedule(init_value: float, decay_steps: int, alpha: float = 0.0) -> Schedule:
    """init_value * ((1 - alpha) * (1 + cos(pi * min(count, decay_steps) / decay_steps)) / 2
    + alpha), as optax.

    >>> round(float(cosine_decay_schedule(1.0, 10)(5)), 6)
    0.5
    """
    if not isinstance(decay_steps, int) or decay_steps <= 0:
        raise ValueError(f"cosine_decay_schedule: decay_steps {decay_steps!r} must be a positive int")

    def fn(count):
        c = vnp.minimum(vnp.asarray(count).astype(dt.float32), float(decay_steps))
        cosine = (vnp.cos(c * (math.pi / decay_steps)) + 1.0) * 0.5
        return ((1.0 - alpha) * cosine + alpha) * init_value
    return fn


def warmup_cosine_decay_schedule(init_value: float, peak_value: float, warmup_steps: int,
                                 decay_steps: int, end_value: float = 0.0) -> Schedule:
    """Linear warm-up from init_value to peak_value over warmup_steps, then cosine decay to
    end_value, reached at decay_steps (counted from 0, warm-up included), as optax.

    >>> s = warmup_cosine_decay_schedule(0.0, 1.0, 2, 10)
    >>> [round(float(s(i)), 4) for i in (0, 1, 2, 10)]
    [0.0, 0.5, 1.0, 0.0]
    """
    if decay_steps <= warmup_steps:
        raise ValueError(f"warmup_cosine_decay_schedule: decay_steps ({decay_steps}) must exceed "
                         f"warmup_steps ({warmup_steps})")
    alpha = 0.0 if peak_value == 0 else end_value / peak_value
    warm = linear_schedule(init_value, peak_value, warmup_steps)
    decay = cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha)

    def fn(count):
        c = vnp.asarray(count).astype(dt.int32)
        if warmup_steps <= 0:
            return decay(c)
        return vnp.where(c < warmup_steps, warm(c), decay(c - warmup_steps))
    return fn


# --------------------------------------------------------------------------- building blocks


def scale(step_size: float) -> GradientTransformation:
    """updates * step_size."""
    return GradientTransformation(
        lambda params: EmptyState(),
        lambda updates, state, params=None: (tree_map(lambda g: g * step_size, updates), state))


def scale_by_schedule(fn: Schedule) -> GradientTransformation:
    """updates * fn(count); the count starts at 0 and is kept as an int32 Array."""
    def update(updates, state, params=None):
        s = fn(state.count)
        out = tree_map(lambda g: g * (s.astype(_float_dtype(g)) if isinstance(s, Array) else s), updates)
        return out, ScaleByScheduleState(state.count + 1)
    return GradientTransformation(lambda params: ScaleByScheduleState(_count0()), update)


def scale_by_learning_rate(lr: LR) -> GradientTransformation:
    """updates * -lr, lr a float or a schedule."""
    if callable(lr):
        return scale_by_schedule(lambda c: lr(c) * -1.0)
    return scale(-float(lr))


def trace(decay: float, nesterov: bool = False) -> GradientTransformation:
    """Momentum: t = g + decay * t; the update is t (or g + decay * t with nesterov)."""
    def init(params):
        return TraceState(tree_map(lambda p: vnp.zeros_like(p, _float_dtype(p)), params))

    def update(updates, state, params=None):
        new = tree_map(lambda g, t: g + t * decay, updates, state.trace)
        out = tree_map(lambda g, t: g + t * decay, updates, new) if nesterov else new
        return out, TraceState(new)
    return GradientTransformation(init, update)


def scale_by_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> GradientTransformation:
    """Adam's direction: mu_hat / (sqrt(nu_hat) + eps) with bias-corrected moments."""
    def init(params):
        z = lambda p: vnp.zeros_like(p, _float_dtype(p))  # noqa: E731
        return ScaleByAdamState(_count0(), tree_map(z, params), tree_map(z, params))

    def update(updates, state, params=None):
        mu = tree_map(lambda g, m: m * b1 + g * (1.0 - b1), updates, state.mu)
        nu = tree_map(lambda g, v: v * b2 + g * g * (1.0 - b2), updates, state.nu)
        count = state.count + 1
        corr: dict = {}

        def bias(d):
            if d not in corr:
                # in float32 at least, then cast: 1 - 0.999 ** 1 in bfloat16 would be 1 - 1 = 0
                w = dt.promote(d, dt.float32)
                t = count.astype(w)
                corr[d] = ((1.0 - vnp.power(b1, t)).astype(d), (1.0 - vnp.power(b2, t)).astype(d))
            return corr[d]

        def direction(m, v):
            c1, c2 = bias(m.dtype)
            return (m / c1) / (vnp.sqrt(v / c2) + eps)
        return tree_map(direction, mu, nu), ScaleByAdamState(count, mu, nu)
    return GradientTransformation(init, update)


def _decay_mask_leaves(params: Any) -> list[bool]:
    """True per leaf, except leaves a module declares as buffers (BatchNorm running stats)."""
    is_mod = lambda x: hasattr(x, "parameter_mask") and hasattr(x, "_named_leaves")  # noqa: E731
    out: list[bool] = []
    for x in tree_leaves(params, is_leaf=is_mod):
        if is_mod(x):
            out += [bool(b) for b in tree_leaves(x.parameter_mask())]
        else:
            out.append(True)
    return out


def add_decayed_weights(weight_decay: float, mask: Any = None) -> GradientTransformation:
    """updates + weight_decay * params where mask is True.

    mask: None (every leaf, except the buffers of vkml.nn modules), a pytree of bools with
    the params' structure, or a function params -> such a pytree.
    """
    def update(updates, state, params=None):
        if params is None:
            raise ValueError("add_decayed_weights (adamw): update(grads, state, params) needs params")
        g_leaves, g_td = tree_flatten(updates)
        p_leaves, p_td = tree_flatten(params)
        if g_td != p_td:
            raise ValueError(f"add_decayed_weights: gradients {g_td} and params {p_td} differ in structure")
        if mask is None:
            flags = _decay_mask_leaves(params)
        else:
            m = mask(params) if callable(mask) else mask
            flags = tree_flatten(m)[0]
            if len(flags) != len(p_leaves):
                raise ValueError(f"add_decayed_weights: mask has {len(flags)} leaves, params have "
                                 f"{len(p_leaves)}; build it with tree_map over the params")
        out = [g + p * weight_decay if f else g for g, p, f in zip(g_leaves, p_leaves, flags)]
        return tree_unflatten(g_td, out), state
    return GradientTransformation(lambda params: EmptyState(), update)


def global_norm(tree: Any) -> Array:
    """sqrt of the sum of squares of every leaf (float64 if any leaf is float64)."""
    leaves = [vnp.asarray(l) for l in tree_leaves(tree)]
    acc = dt.float64 if any(l.dtype == dt.float64 for l in leaves) else dt.float32
    total = vnp.zeros((), acc)
    for l in leaves:
        total = total + vnp.sum(vnp.square(l.astype(acc)))
    return vnp.sqrt(total)


def clip_by_global_norm(max_norm: float) -> GradientTransformation:
    """Scale all updates by max_norm / global_norm when the global norm exceeds max_norm.

    >>> u, _ = clip_by_global_norm(1.0).update({"g": vnp.asarray([3.0, 4.0])}, None)
    >>> [round(v, 3) for v in u["g"].numpy().tolist()]
    [0.6, 0.8]
    """
    def update(updates, state, params=None):
        norm = global_norm(updates)
        factor = vnp.where(norm < max_norm, 1.0, max_norm / vnp.maximum(norm, 1e-30))
        return tree_map(lambda g: g * factor.astype(_float_dtype(g)), updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Apply transforms in order (their states form a tuple).

    >>> opt = chain(clip_by_global_norm(1.0), sgd(0.1))
    """
    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(updates, state, params=None):
        if len(state) != len(transforms):
            raise ValueError(f"chain: state has {len(state)} entries for {len(transforms)} transforms")
        new = []
        for t, s in zip(transforms, state):
            updates, s = t.update(updates, s, params)
            new.append(s)
        return updates, tuple(new)
    return GradientTransformation(init, update)


# --------------------------------------------------------------------------- optimisers


def sgd(lr: LR, momentum: float = 0.0, nesterov: bool = False) -> GradientTransformation:
    """SGD, with heavy-ball or Nesterov momentum (PyTorch's formulation, dampening 0).

    >>> u, _ = sgd(0.5).update({"w": vnp.ones(2)}, sgd(0.5).init({"w": vnp.ones(2)}))
    >>> u["w"].numpy().tolist()
    [-0.5, -0.5]
    """
    if nesterov and not momentum:
        raise ValueError("sgd: nesterov=True needs momentum > 0")
    parts = ([trace(momentum, nesterov)] if momentum else []) + [scale_by_learning_rate(lr)]
    return chain(*parts)


def adam(lr: LR, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> GradientTransformation:
    """Adam (Kingma & Ba): -lr * mu_hat / (sqrt(nu_hat) + eps)."""
    return chain(scale_by_adam(b1, b2, eps), scale_by_learning_rate(lr))


def adamw(lr: LR, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 1e-2,
          mask: Any = None) -> GradientTransformation:
    """Adam with decoupled weight decay (Loshchilov & Hutter):
    -lr * (mu_hat / (sqrt(nu_hat) + eps) + weight_decay * params). update needs params.
    mask as in add_decayed_weights (by default module buffers are not decayed)."""
    return chain(scale_by_adam(b1, b2, eps), add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(lr))


def apply_updates(params: Any, updates: Any) -> Any:
    """params + updates leafwise, keeping each parameter's dtype.

    >>> apply_updates({"w": vnp.ones(2)}, {"w": vnp.ones(2)})["w"].numpy().tolist()
    [2.0, 2.0]
    """
    def one(p, u):
        p = vnp.asarray(p)
        if u is None:
            return p
        return (p + u).astype(p.dtype)
    return tree_map(one, params, updates)


# --------------------------------------------------------------------------- PyTorch style


def _value(p: Any) -> Array:
    """The parameter's current value as an Array without history."""
    d = getattr(p, "data", None)
    if isinstance(d, Array):
        return d
    return p.detach() if hasattr(p, "detach") else p


def _hyper(v: Any) -> Any:
    """A saved hyperparameter as the Python value the optimiser computes with (a state
    dict that went through vkml.nn.save or NumPy holds 0-d arrays; betas a list)."""
    if isinstance(v, (list, tuple)):
        return tuple(_hyper(x) for x in v)
    if isinstance(v, Array) or hasattr(v, "item") and getattr(v, "shape", None) == ():
        return v.item()
    return v


class Optimizer:
    """Base of the stateful optimisers.

    Parameter protocol (what vkml.Tensor provides): `p.grad` (an Array or None, assignable),
    the current value as `p.data` (a plain Array; else `p.detach()`), and
    `p._set_value(new_array)` to replace it in place.
    Updates run under no_grad.
    """

    def __init__(self, params: Any, defaults: dict):
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        for i, p in enumerate(params):
            if not (hasattr(p, "_set_value") and hasattr(p, "grad")):
                raise TypeError(f"{type(self).__name__}: parameter {i} ({type(p).__name__}) has no "
                                f"`.grad` / `_set_value`; stateful optimisers update vkml.Tensor "
                                f"parameters (requires_grad=True). For plain Arrays use the pure "
                                f"optimisers (vkml.optim.adam(...).update + apply_updates)")
        self.defaults = dict(defaults)
        self.param_groups = [dict(defaults, params=params)]
        self.state: dict[int, dict] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient (call between steps: gradients accumulate)."""
        for g in self.param_groups:
            for p in g["params"]:
                p.grad = None

    def _indexed(self) -> list:
        return [p for g in self.param_groups for p in g["params"]]

    def state_dict(self) -> dict:
        """torch's layout: {"state": {param index: {"step", "exp_avg", ...}}, "param_groups":
        [{hyperparameters..., "params": [indices]}]}, parameters numbered in the order the
        optimiser was given them. The arrays are the optimiser's own (immutable) values and
        the dicts are copies, so a later step does not change a saved state.

        >>> import vkml
        >>> w = vkml.Tensor([1.0], requires_grad=True)
        >>> SGD([w], lr=0.1, momentum=0.9).state_dict()["param_groups"][0]["params"]
        [0]
        """
        index = {id(p): i for i, p in enumerate(self._indexed())}
        groups = []
        for g in self.param_groups:
            groups.append({**{k: v for k, v in g.items() if k != "params"},
                           "params": [index[id(p)] for p in g["params"]]})
        state = {index[k]: dict(st) for k, st in self.state.items() if k in index and st}
        return {"state": dict(sorted(state.items())), "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Resume from state_dict() of an optimiser of the same kind over parameters of the
        same shapes (or torch's, converted to NumPy): hyperparameters and per-parameter state
        are replaced, and the next step() continues exactly where the saved one stopped.

        >>> import vkml
        >>> w = vkml.Tensor([1.0], requires_grad=True)
        >>> a = Adam([w])
        >>> b = Adam([vkml.Tensor([1.0], requires_grad=True)])
        >>> b.load_state_dict(a.state_dict())
        """
        name = type(self).__name__
        try:
            groups, saved = state_dict["param_groups"], state_dict["state"]
        except (TypeError, KeyError):
            raise ValueError(f"{name}.load_state_dict: expected a dict with 'state' and "
                             f"'param_groups' (what state_dict() returns)") from None
        if len(groups) != len(self.param_groups):
            raise ValueError(f"{name}.load_state_dict: loaded state dict has {len(groups)} parameter "
                             f"groups, this optimiser {len(self.param_groups)}")
        for i, (g, own) in enumerate(zip(groups, self.param_groups)):
            if len(g["params"]) != len(own["params"]):
                raise ValueError(f"{name}.load_state_dict: loaded state dict contains a parameter "
                                 f"group ({i}) of {len(g['params'])} parameters that doesn't match "
                                 f"the size of optimizer's group ({len(own['params'])})")
        where = {int(saved_i): p for g, own in zip(groups, self.param_groups)
                 for saved_i, p in zip(g["params"], own["params"])}
        state: dict[int, dict] = {}
        for k, st in saved.items():
            k = int(k)
            if k not in where:
                raise ValueError(f"{name}.load_state_dict: state for parameter {k}, which no "
                                 f"parameter group lists")
            p = where[k]
            v = _value(p)
            out = {}
            for key, val in st.items():
                if key == "step":
                    out[key] = int(val)    # torch keeps it as a float tensor
                    continue
                a = vnp.asarray(val)
                if a.shape != v.shape:
                    raise ValueError(f"{name}.load_state_dict: state {key!r} of parameter {k} has "
                                     f"shape {a.shape}, the parameter {v.shape}")
                out[key] = a if a.dtype == v.dtype else a.astype(v.dtype)
            state[id(p)] = out
        for g, own in zip(groups, self.param_groups):
            for key, val in g.items():
                if key != "params":
                    own[key] = _hyper(val)
        self.state = state

    def step(self, closure: Callable | None = None):
        """Update every parameter that has a gradient; returns closure() if given."""
        loss = closure() if closure is not None else None
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    v = _value(p)
                    g = vnp.asarray(p.grad)
                    if g.shape != v.shape:
                        raise ValueError(f"{type(self).__name__}: gradient of shape {g.shape} for a "
                                         f"parameter of shape {v.shape}")
                    st = self.state.setdefault(id(p), {})
                    p._set_value(self._update(v, g.astype(v.dtype), st, group).astype(v.dtype))
        return loss


class SGD(Optimizer):
    """torch.optim.SGD: g += weight_decay * p; buf = momentum * buf + (1 - dampening) * g
    (buf = g on the first step); g = g + momentum * buf (nesterov) or buf; p -= lr * g."""

    def __init__(self, params: Any, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov momentum needs momentum > 0 and dampening 0")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))

    def _update(self, v, g, st, group):
        if group["weight_decay"]:
            g = g + v * group["weight_decay"]
        m = group["momentum"]
        if m:
            buf = st.get("momentum_buffer")
            buf = g if buf is None else buf * m + g * (1.0 - group["dampening"])
            st["momentum_buffer"] = buf
            g = g + buf * m if group["nesterov"] else buf
        return v - g * group["lr"]


class Adam(Optimizer):
    """torch.optim.Adam (weight_decay is L2 added to the gradient)."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    _decoupled = False

    def _update(self, v, g, st, group):
        b1, b2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        if wd and self._decoupled:
            v = v * (1.0 - lr * wd)
        elif wd:
            g = g + v * wd
        t = st.get("step", 0) + 1
        st["step"] = t
        m = st.get("exp_avg")
        s = st.get("exp_avg_sq")
        m = g * (1.0 - b1) if m is None else m * b1 + g * (1.0 - b1)
        s = g * g * (1.0 - b2) if s is None else s * b2 + g * g * (1.0 - b2)
        st["exp_avg"], st["exp_avg_sq"] = m, s
        c1, c2 = 1.0 - b1 ** t, 1.0 - b2 ** t
        denom = vnp.sqrt(s) * (1.0 / math.sqrt(c2)) + group["eps"]
        return v - m / denom * (lr / c1)


class AdamW(Adam):
    """torch.optim.AdamW: decoupled weight decay p *= 1 - lr * weight_decay, then Adam."""
    _decoupled = True

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)
