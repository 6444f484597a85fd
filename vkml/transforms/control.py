"""Scan through the transforms: its reverse rule, its batching rule, and the pruning of
results nothing reads before it runs.

Reverse mode. A Scan outputs the carry every step began from (`saved`); its cotangent is
a Scan in the other direction whose body is the body's own reverse rule: from a step's
saved carry and slices it recomputes the step and pulls the cotangents of the new carry
and of the step outputs back to the old carry (carried to the previous step), the slices
(stacked, as that Scan's step outputs) and the constants (summed, carried). It is an
ordinary Scan of ordinary operators, so differentiating it again (a Hessian-vector
product, forward mode through the transpose) is the same rule once more. Memory is one
carry per step; `lax.scan(remat="sqrt")` makes it about sqrt(T) (a loop of blocks).

Batching. A batched Scan batches its body (`vmap_graph`): every carry carries the batch
(so the carry types stay fixed), scanned arrays are moved to (T, B, ...), and each
stacked result is moved back to (B, T, ...).
"""
from __future__ import annotations

from typing import Callable

from ..trace import dtypes as dt
from ..trace.control import normalized, parts_of, scan_nodes, substitute, with_saved, zeros
from ..trace.graph import Graph, Node, input_node
from ..trace.ops import OpKind as K
from .expr import E


def _fresh(nodes, shapes=None) -> list[Node]:
    return [input_node(n.shape if shapes is None else shapes[k], n.dtype, k) for k, n in enumerate(nodes)]


def scan_vjp(n: Node, cts: dict[int, E]) -> list:
    """Cotangents of a Scan's operands (None where none flows) from those of its results
    (index -> E; missing results have none)."""
    from .grad import backward
    a = n.attrs
    body, T, nc, nk = a["body"], a["length"], a["n_consts"], a["n_carry"]
    ins = list(n.inputs)
    consts, init, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]
    nx = len(xs)
    n_out = len(body.outputs)
    if a["saved"]:
        saved = [Node(K.Part, [n], {"index": k, "shape": (T,) + tuple(init[k - n_out + nk].shape),
                                    "dtype": init[k - n_out + nk].dtype}) for k in range(n_out - nk, n_out)]
    else:   # a Scan built without its carries: run it again, saving them
        saved = scan_nodes(with_saved(body, nc, nk), ins, T, a["reverse"], nc, nk, True)[n_out:]
    is_f = lambda x: dt.is_float(x.dtype)  # noqa: E731
    # the body on fresh inputs: its constants, the step's saved carry, its slices
    b_consts, b_carry = _fresh(body.inputs[:nc]), _fresh(body.inputs[nc:nc + nk])
    b_xs = _fresh(body.inputs[nc + nk:])
    keep = list(getattr(body, "keep", []))
    outs = substitute(Graph(body.inputs, list(body.outputs) + keep), b_consts + b_carry + b_xs)
    keep = outs[n_out:]
    outs = outs[:n_out]
    fk = [k for k in range(nk) if is_f(init[k])]
    fc = [k for k in range(nc) if is_f(consts[k])]
    fx = [k for k in range(nx) if is_f(xs[k])]
    fy = [j for j in range(nk, n_out) if j in cts and is_f(outs[j])]
    if not any(k in cts for k in fk) and not fy:
        return [None] * len(ins)
    ct_c = [input_node(init[k].shape, init[k].dtype, k) for k in fk]      # carried cotangents
    acc = [input_node(consts[k].shape, consts[k].dtype, k) for k in fc]   # summed constant ones
    ct_y = [input_node(outs[j].shape, outs[j].dtype, j) for j in fy]      # per-step slices
    roots = [outs[k] for k in fk] + [outs[j] for j in fy]
    seeds = ct_c + ct_y
    wrt = [b_carry[k] for k in fk] + [b_consts[k] for k in fc] + [b_xs[k] for k in fx]
    g = backward(roots, seeds, wrt, keep) if roots else [zeros(w.shape, w.dtype) for w in wrt]
    g_c, g_k, g_x = g[:len(fk)], g[len(fk):len(fk) + len(fc)], g[len(fk) + len(fc):]
    new_acc = [Node(K.Add, [s, d], {}) for s, d in zip(acc, g_k)]
    vjp_body = Graph(b_consts + ct_c + acc + b_carry + b_xs + ct_y, g_c + new_acc + g_x)
    vjp_body.keep = []
    rk = len(ct_c) + len(acc)
    rev = normalized(vjp_body, nc, rk)
    ct_final = [cts[k].n if k in cts else zeros(init[k].shape, init[k].dtype) for k in fk]
    stacked = [cts[j].n for j in fy]
    operands = consts + ct_final + [zeros(consts[k].shape, consts[k].dtype) for k in fc] + saved + xs + stacked
    parts = scan_nodes(with_saved(rev, nc, rk), operands, T, not a["reverse"], nc, rk, True)
    out: list = [None] * len(ins)
    for i, k in enumerate(fk):
        out[nc + k] = E(parts[i])
    for i, k in enumerate(fc):
        out[k] = E(parts[len(fk) + i])
    for i, k in enumerate(fx):
        out[nc + nk + k] = E(parts[rk + i])
    return out


# --------------------------------------------------------------------------- batching

def batch_scan(ctx, n: Node, ins, bat) -> E:
    """The batched Scan (a token: its Parts are batched by `batch_part`)."""
    from .vmap import move_axis, vmap_graph
    a = n.attrs
    body, nc, nk = a["body"], a["n_consts"], a["n_carry"]
    ops, axes = [], []
    for k, (x, b) in enumerate(zip(ins, bat)):
        if nc <= k < nc + nk:
            x = ctx.materialize(x, b)       # every carry carries the batch
            b = True
        elif k >= nc + nk and b:
            x = E(move_axis(x.n, 0, 1))     # (B, T, ...) -> (T, B, ...)
        ops.append(x.n)
        axes.append(0 if b else None)
    bb = vmap_graph(body, axes, ctx.size, [0] * len(body.outputs))
    bb.keep = []
    return E(Node(K.Scan, ops, {**a, "body": bb}, tag=ctx.tag))


def batch_part(ctx, n: Node, ins, bat) -> E:
    scan = ins[0].n
    k = n.attrs["index"]
    shape, dtype = scan.attrs["body"].outputs[k].shape, n.dtype
    if k < scan.attrs["n_carry"]:
        return E(Node(K.Part, [scan], {"index": k, "shape": tuple(shape), "dtype": dtype}, tag=ctx.tag))
    T = scan.attrs["length"]
    p = Node(K.Part, [scan], {"index": k, "shape": (T,) + tuple(shape), "dtype": dtype}, tag=ctx.tag)
    return ctx.permute(E(p), (1, 0) + tuple(range(2, len(shape) + 1)))


# --------------------------------------------------------------------------- execution

def prune_scans(graph: Graph, prepare: Callable[[Graph], Graph]) -> Graph:
    """graph with every Scan's step outputs that no Part reads dropped (the carries
    saved for a gradient that was never taken) and its body prepared to run by
    `prepare` (the caller's `for_execution`, so nested loops are pruned too)."""
    scans = [m for m in graph.nodes if m.op is K.Scan]
    if not scans:
        return graph
    used: dict[int, set] = {}
    for m in graph.nodes:
        if m.op is K.Part:
            used.setdefault(m.inputs[0].id, set()).add(m.attrs["index"])
    new: dict[int, Node] = {}
    remap: dict[int, dict[int, int]] = {}
    for m in graph.nodes:
        if m.op is K.Input:
            new[m.id] = m
            continue
        ins = [new[i.id] for i in m.inputs]
        if m.op is K.Scan:
            a = m.attrs
            nk = a["n_carry"]
            body = a["body"]
            ys = sorted(k for k in used.get(m.id, ()) if k >= nk)
            pb = Graph(body.inputs, list(body.outputs[:nk]) + [body.outputs[k] for k in ys])
            pb = prepare(pb)
            remap[m.id] = {**{k: k for k in range(nk)}, **{k: nk + j for j, k in enumerate(ys)}}
            new[m.id] = Node(K.Scan, ins, {**a, "body": pb, "saved": False}, tag=m.tag)
        elif m.op is K.Part:
            k = remap[m.inputs[0].id][m.attrs["index"]]
            new[m.id] = Node(K.Part, ins, {**m.attrs, "index": k}, tag=m.tag)
        else:
            new[m.id] = m if all(x is y for x, y in zip(ins, m.inputs)) else Node(
                m.op, ins, m.attrs, tag=m.tag, shape=m.shape, dtype=m.dtype)
    return Graph(graph.inputs, [new[o.id] for o in graph.outputs])


__all__ = ["scan_vjp", "batch_scan", "batch_part", "prune_scans", "parts_of"]
