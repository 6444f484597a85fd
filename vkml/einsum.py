"""einsum: NumPy's Einstein summation, composed from existing vkml.numpy operations.

There is no einsum operator: a spec is parsed on the host, repeated indices become
diagonals by movement ops (move the pair last, flatten it, slice with step n + 1), indices
of one operand only are summed, and operands are contracted a pair at a time, each pair
as one batched `matmul` on (batch, m, k) @ (batch, k, n) views (or a broadcast multiply
when the pair shares no summed index). Being a composition it runs on Vulkan and grad,
jvp, vmap and jit go through it unchanged.

>>> import vkml.numpy as vnp
>>> a = vnp.asarray([[1, 2], [3, 4]])
>>> einsum("ij,jk->ik", a, a).numpy().tolist()
[[7, 10], [15, 22]]
>>> einsum("ii", a).numpy().tolist()
5
"""
from __future__ import annotations

import math
import string
from typing import Any, Sequence

from . import numpy as vnp
from .array import Array
from .trace import dtypes as dt
from .trace.shapes import ShapeError, size_of

_LETTERS = string.ascii_letters
_WHAT = "subscripts must be letters a-z, A-Z, the ellipsis '...', ',' and one '->'"


def einsum(subscripts: Any, *operands, out=None, optimize: Any = "auto", dtype=None) -> Array:
    """Einstein summation over the operands as NumPy's `einsum` spells it.

    subscripts: `'ij,jk->ik'` (explicit output), `'ij,jk'` (implicit: the indices seen
    once, in alphabetical order, after any ellipsis dims), with `...` for broadcast
    dims; or NumPy's sublist form `einsum(a, [0, 1], b, [1, 2], [0, 2])`.
    optimize: the contraction order: False contracts left to right; True, 'auto',
    'greedy' or 'optimal' take the pair with the smallest result first; a path from
    `numpy.einsum_path` (['einsum_path', (0, 1), ...]) is followed. The result does not
    depend on it beyond rounding.
    dtype: compute in this dtype (operands are cast first). `out` is not supported.
    Bool operands give a bool result (an OR of ANDs, as NumPy and jax.numpy).

    >>> import vkml.numpy as vnp
    >>> x = vnp.asarray([[1.0, 2.0], [3.0, 4.0]])
    >>> einsum("ij->j", x).numpy().tolist()
    [4.0, 6.0]
    """
    if out is not None:
        raise TypeError("einsum: out= is not supported (vkml arrays are immutable); use the "
                        "returned array")
    if not isinstance(subscripts, str):
        subscripts, operands = _from_sublists((subscripts,) + operands)
    if not operands:
        raise ValueError("einsum: must specify the einstein sum subscripts string and at least "
                         "one operand")
    terms, out_terms = _parse(subscripts, len(operands))
    xs, d = vnp._operands("einsum", *operands)
    if dtype is not None:
        d = dt.canonical(dtype, "einsum")
        xs = [x.astype(d) for x in xs]
    if d == dt.bool_:
        xs = [x.astype(dt.int32) for x in xs]   # sums of products as counts, then != 0
    ops, out_labels = _labels(subscripts, terms, out_terms, xs)
    ops = [_diagonals(x, ls, i, subscripts) for i, (x, ls) in enumerate(ops)]
    ops = _broadcast_size1(ops, subscripts)
    r, ls = _contract(ops, out_labels, optimize)
    r, ls = _reduce(r, ls, set(out_labels))
    r = _permute(r, ls, out_labels)
    return vnp.not_equal(r, 0) if d == dt.bool_ else r


# --------------------------------------------------------------------------- parsing


def _from_sublists(args: tuple) -> tuple[str, tuple]:
    """NumPy's interleaved form (op0, sub0, op1, sub1, ..., [out]) as a subscripts string."""
    ops, subs = list(args[0::2]), list(args[1::2])
    out = None
    if len(args) % 2:          # an odd count: the last one is the output sublist
        out = ops.pop()
        if len(args) == 1:
            raise TypeError(f"einsum: subscripts must be a string (or the sublist form "
                            f"einsum(op0, sublist0, ...)), got {type(args[0]).__name__}")

    def term(sub) -> str:
        if isinstance(sub, str) or not hasattr(sub, "__iter__"):
            raise TypeError(f"einsum: in the sublist form each subscript list must be a list of "
                            f"ints in [0, 52) and Ellipsis, got {sub!r}")
        s = ""
        for v in sub:
            if v is Ellipsis:
                s += "..."
            elif hasattr(v, "__index__") and not isinstance(v, bool) and 0 <= int(v) < 52:
                s += _LETTERS[(int(v) + 26) % 52]    # NumPy: 0-25 are 'A'-'Z', 26-51 'a'-'z'
            else:
                raise ValueError(f"einsum: subscript {v!r} in the sublist form must be an int in "
                                 f"[0, 52) or Ellipsis")
        return s
    spec = ",".join(term(s) for s in subs)
    if out is not None:
        spec += "->" + term(out)
    return spec, tuple(ops)


def _tokens(term: str, where: str, subscripts: str) -> list[str]:
    """A term's labels, with '...' as one token; ValueError for anything else."""
    toks, i = [], 0
    while i < len(term):
        c = term[i]
        if c == ".":
            if term[i:i + 3] != "...":
                raise ValueError(f"einsum: subscripts {subscripts!r} contain a '.' that is not part "
                                 f"of an ellipsis ('...') in {where}")
            if "..." in toks:
                raise ValueError(f"einsum: subscripts {subscripts!r} contain more than one "
                                 f"ellipsis ('...') in {where}")
            toks.append("...")
            i += 3
            continue
        if c not in _LETTERS:
            raise ValueError(f"einsum: invalid subscript {c!r} in einstein sum subscripts string "
                             f"{subscripts!r}; {_WHAT}")
        toks.append(c)
        i += 1
    return toks


def _parse(subscripts: str, n: int) -> tuple[list[list[str]], list[str] | None]:
    """Per-operand token lists and the output's (None when implicit)."""
    s = subscripts.replace(" ", "")        # NumPy ignores spaces
    out = None
    if "->" in s:
        s, _, rhs = s.partition("->")
        out = _tokens(rhs, "the output", subscripts)
    elif "-" in s or ">" in s:
        raise ValueError(f"einsum: subscripts {subscripts!r} do not contain a proper '->' output "
                         f"specification")
    terms = s.split(",")
    if len(terms) != n:
        more = "more" if n > len(terms) else "fewer"
        raise ValueError(f"einsum: {more} operands provided to einstein sum function than "
                         f"specified in the subscripts string {subscripts!r} ({n} operands, "
                         f"{len(terms)} terms)")
    terms = [_tokens(t, f"operand {i}", subscripts) for i, t in enumerate(terms)]
    if out is not None:
        seen = set()
        for c in out:
            if c in seen and c != "...":
                raise ValueError(f"einsum: subscripts {subscripts!r} include output subscript "
                                 f"{c!r} multiple times")
            seen.add(c)
            if c != "..." and not any(c in t for t in terms):
                raise ValueError(f"einsum: subscripts {subscripts!r} include output subscript "
                                 f"{c!r} which never appeared in an input")
    return terms, out


def _labels(subscripts, terms, out_terms, xs):
    """(array, labels) per operand with the ellipsis expanded into internal labels '.0',
    '.1', ... (right-aligned, so they broadcast as NumPy's), and the output's labels."""
    ranks = []
    for i, (t, x) in enumerate(zip(terms, xs)):
        named = len([c for c in t if c != "..."])
        if named > x.ndim:
            raise ValueError(f"einsum: subscripts {subscripts!r} contain too many subscripts for "
                             f"operand {i} (shape {x.shape}: {x.ndim} dims, {named} subscripts)")
        if "..." not in t and named < x.ndim:
            raise ValueError(f"einsum: operand {i} has more dimensions (shape {x.shape}) than "
                             f"subscripts given ({''.join(t)!r}), but no '...' ellipsis provided "
                             f"to broadcast the extra dimensions")
        ranks.append(x.ndim - named)
    e = max(ranks)
    ell = [f".{j}" for j in range(e)]
    ops = []
    for t, x, r in zip(terms, xs, ranks):
        ls = []
        for c in t:
            ls += ell[e - r:] if c == "..." else [c]
        ops.append((x, ls))
    if out_terms is None:
        counts: dict[str, int] = {}
        for t in terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + sorted(c for c, k in counts.items() if k == 1 and c != "...")
    else:
        if "..." not in out_terms and e:
            raise ValueError(f"einsum: output of {subscripts!r} has fewer dimensions than the "
                             f"operands' ellipsis ({e} dims), but no '...' in the output to keep "
                             f"them; write '...' in the output")
        out = []
        for c in out_terms:
            out += ell if c == "..." else [c]
    return ops, out


def _describe(label: str) -> str:
    return f"subscript {label!r}" if not label.startswith(".") else \
        f"ellipsis dimension {int(label[1:])}"


# --------------------------------------------------------------------------- movement


def _permute(x: Array, ls: list[str], target: list[str]) -> Array:
    return vnp.transpose(x, [ls.index(c) for c in target])


def _diagonals(x: Array, ls: list[str], i: int, subscripts: str):
    """Collapse each repeated label of one operand to its diagonal: move the two axes last,
    flatten them to n*n and take every (n+1)-th element (no gather, no new operator)."""
    while len(set(ls)) < len(ls):
        c = next(c for c in ls if ls.count(c) > 1)
        p, q = [k for k, l in enumerate(ls) if l == c][:2]
        n = x.shape[p]
        if x.shape[q] != n:
            raise ShapeError(f"einsum: dimensions in operand {i} (shape {x.shape}) for collapsing "
                             f"index {c!r} don't match ({n} != {x.shape[q]}) in {subscripts!r}; "
                             f"a repeated index takes a diagonal and needs equal sizes")
        rest = [k for k in range(len(ls)) if k not in (p, q)]
        x = vnp.transpose(x, rest + [p, q])
        x = vnp.reshape(x, x.shape[:-2] + (n * n,))[..., ::n + 1]
        ls = [ls[k] for k in rest] + [c]
    return x, ls


def _broadcast_size1(ops, subscripts):
    """NumPy lets a size-1 dimension broadcast against the others of its label: drop it from
    the operand, which then does not depend on that label (the same values for every index)."""
    sizes: dict[str, tuple[int, int]] = {}     # label -> (size, operand that has it)
    for i, (x, ls) in enumerate(ops):
        for c, n in zip(ls, x.shape):
            if n == 1:
                continue
            if c in sizes and sizes[c][0] != n:
                j = sizes[c][1]
                raise ShapeError(
                    f"einsum: operands could not be broadcast together in {subscripts!r}: "
                    f"{_describe(c)} has size {sizes[c][0]} in operand {j} (shape "
                    f"{ops[j][0].shape}) and {n} in operand {i} (shape {x.shape}); the sizes of "
                    f"one subscript must match or be 1")
            sizes.setdefault(c, (n, i))
    res = []
    for x, ls in ops:
        keep = [k for k, (c, n) in enumerate(zip(ls, x.shape)) if not (n == 1 and c in sizes)]
        if len(keep) < len(ls):
            x = vnp.reshape(x, tuple(x.shape[k] for k in keep))
            ls = [ls[k] for k in keep]
        res.append((x, ls))
    return res


def _reduce(x: Array, ls: list[str], keep: set) -> tuple[Array, list[str]]:
    """Sum out the labels of x that nothing later needs."""
    axes = tuple(k for k, c in enumerate(ls) if c not in keep)
    if not axes:
        return x, ls
    return vnp.sum(x, axis=axes), [c for c in ls if c in keep]


# --------------------------------------------------------------------------- contraction


def _pair(a, la, b, lb, keep: set):
    """Contract two operands, keeping the labels in `keep`: one batched matmul over the
    shared summed labels, or a broadcast (outer) product when there are none."""
    a, la = _reduce(a, la, keep | set(lb))
    b, lb = _reduce(b, lb, keep | set(la))
    batch = [c for c in la if c in lb and c in keep]
    summed = [c for c in la if c in lb and c not in keep]
    m = [c for c in la if c not in lb]
    n = [c for c in lb if c not in la]
    size = dict(zip(la, a.shape)) | dict(zip(lb, b.shape))

    def dims(cs):
        return tuple(size[c] for c in cs)

    if not summed:
        a = vnp.reshape(_permute(a, la, batch + m), dims(batch + m) + (1,) * len(n))
        b = vnp.reshape(_permute(b, lb, batch + n), dims(batch) + (1,) * len(m) + dims(n))
        return vnp.multiply(a, b), batch + m + n
    lead = (size_of(dims(batch)),) if batch else ()
    k = size_of(dims(summed))
    a = vnp.reshape(_permute(a, la, batch + m + summed), lead + (size_of(dims(m)), k))
    b = vnp.reshape(_permute(b, lb, batch + summed + n), lead + (k, size_of(dims(n))))
    r = vnp.matmul(a, b)
    return vnp.reshape(r, dims(batch + m + n)), batch + m + n


def _needed(ops, out_labels, skip) -> set:
    s = set(out_labels)
    for i, (_, ls) in enumerate(ops):
        if i not in skip:
            s.update(ls)
    return s


def _contract(ops, out_labels, optimize):
    """Contract all operands to one, in the order `optimize` asks for (see einsum)."""
    ops = [_reduce(x, ls, _needed(ops, out_labels, {i})) for i, (x, ls) in enumerate(ops)]
    if isinstance(optimize, (list, tuple)):
        return _follow_path(ops, out_labels, optimize)
    if optimize not in (False, True, "auto", "greedy", "optimal"):
        raise ValueError(f"einsum: optimize={optimize!r} is not one of False, True, 'auto', "
                         f"'greedy', 'optimal' or an einsum_path list")
    if optimize is False:
        x, ls = ops[0]
        for i in range(1, len(ops)):
            x, ls = _pair(x, ls, *ops[i], _needed(ops, out_labels, set(range(i + 1))))
        return x, ls
    while len(ops) > 1:
        i, j = _greedy_pick(ops, out_labels)
        _step(ops, (i, j), out_labels)
    return ops[0]


def _greedy_pick(ops, out_labels) -> tuple[int, int]:
    """The pair with a shared label and the smallest result (outer products last; ties go
    to the leftmost pair)."""
    best = None
    for i in range(len(ops)):
        for j in range(i + 1, len(ops)):
            (xa, la), (xb, lb) = ops[i], ops[j]
            keep = _needed(ops, out_labels, {i, j})
            size = dict(zip(la, xa.shape)) | dict(zip(lb, xb.shape))
            res = math.prod(size[c] for c in set(la) | set(lb) if c in keep)
            key = (not set(la) & set(lb), res, i, j)
            best = key if best is None or key < best else best
    return best[2], best[3]


def _step(ops, idx: Sequence[int], out_labels) -> None:
    """Replace ops[idx...] by their contraction, appended at the end (einsum_path's rule)."""
    idx = sorted(idx)
    taken = [ops[k] for k in idx]
    keep = _needed(ops, out_labels, set(idx))
    for k in reversed(idx):
        ops.pop(k)
    x, ls = taken[0]
    for t, (y, ly) in enumerate(taken[1:], 1):
        rest = set().union(*[set(l) for _, l in taken[t + 1:]])
        x, ls = _pair(x, ls, y, ly, keep | rest)
    ops.append(_reduce(x, ls, keep))


def _follow_path(ops, out_labels, path):
    steps = list(path)
    if steps and steps[0] == "einsum_path":
        steps = steps[1:]
    for s in steps:
        if (not isinstance(s, (list, tuple)) or not s or len(set(s)) != len(s)
                or not all(isinstance(k, int) and 0 <= k < len(ops) for k in s)):
            raise ValueError(f"einsum: optimize path step {s!r} must be a tuple of distinct "
                             f"operand positions in [0, {len(ops)})")
        _step(ops, s, out_labels)
    if len(ops) != 1:
        raise ValueError(f"einsum: optimize path {list(path)!r} leaves {len(ops)} operands "
                         f"uncontracted; it must contract them all to one")
    return ops[0]
