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
from ..trace.control import WHILE_REVERSE, normalized, parts_of, scan_nodes, substitute, with_saved, zeros
from ..trace.graph import Graph, Node, input_node
from ..trace.ops import OpKind as K
from .expr import E


def _fresh(nodes, shapes=None) -> list[Node]:
    return [input_node(n.shape if shapes is None else shapes[k], n.dtype, k) for k, n in enumerate(nodes)]


HOIST = True


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
    # A constant's cotangent of the form a_t^T q_t (a weight's, from x @ W in the body)
    # is not accumulated step by step: a and q are stacked and the sum over the steps is
    # one matmul after the loop (a contraction over T * batch rows instead of T small
    # matmuls, T adds and T copies of the accumulator). a read from the saved carries or
    # the scanned slices is taken from those stacked arrays as they are.
    stacked_in = {b.id: v for b, v in zip(b_carry + b_xs, saved + xs)}
    hoist = {i: _outer(gk) for i, gk in enumerate(g_k)} if HOIST else {}
    hoist = {i: h for i, h in hoist.items() if h is not None}
    keep_acc = [i for i in range(len(fc)) if i not in hoist]
    extra = []                      # step outputs the hoisted sums read
    for i in hoist:
        for v in hoist[i]:
            # one a slice's cotangent is already (the gate gradients of x @ W + h @ W_h)
            # is read from that output, not stored a second time
            if v.id not in stacked_in and all(v is not e for e in extra + g_x):
                extra.append(v)
    new_acc = [Node(K.Add, [acc[i], g_k[i]], {}) for i in keep_acc]
    acc = [acc[i] for i in keep_acc]
    vjp_body = Graph(b_consts + ct_c + acc + b_carry + b_xs + ct_y, g_c + new_acc + g_x + extra)
    vjp_body.keep = []
    rk = len(ct_c) + len(acc)
    rev = normalized(vjp_body, nc, rk)
    ct_final = [cts[k].n if k in cts else zeros(init[k].shape, init[k].dtype) for k in fk]
    stacked = [cts[j].n for j in fy]
    operands = (consts + ct_final + [zeros(consts[fc[i]].shape, consts[fc[i]].dtype) for i in keep_acc]
                + saved + xs + stacked)
    parts = scan_nodes(with_saved(rev, nc, rk), operands, T, not a["reverse"], nc, rk, True)
    out: list = [None] * len(ins)
    for i, k in enumerate(fk):
        out[nc + k] = E(parts[i])
    for j, i in enumerate(keep_acc):
        out[fc[i]] = E(parts[len(fk) + j])
    for i, k in enumerate(fx):
        out[nc + nk + k] = E(parts[rk + i])
    at = {v.id: parts[rk + len(fx) + j] for j, v in enumerate(extra)}
    for i, v in enumerate(g_x):
        at.setdefault(v.id, parts[rk + i])
    for i, (pa, q) in hoist.items():
        A, Q = (stacked_in.get(v.id) or at[v.id] for v in (pa, q))
        A = Node(K.Reshape, [A], {"shape": (T * pa.shape[0], pa.shape[1])})
        Q = Node(K.Reshape, [Q], {"shape": (T * q.shape[0], q.shape[1])})
        out[fc[i]] = E(Node(K.MatMul, [Node(K.Permute, [A], {"perm": (1, 0)}), Q], {}))
    return out


def _outer(g: Node):
    """(a, q) where g is MatMul(Permute(a, (1, 0)), q) of 2-D per-step values, else None."""
    if g.op is not K.MatMul or len(g.shape) != 2:
        return None
    p, q = g.inputs
    if p.op is not K.Permute or tuple(p.attrs["perm"]) != (1, 0) or len(q.shape) != 2:
        return None
    return p.inputs[0], q


# --------------------------------------------------------------------------- while

def _tangent_body(body: Graph, nc: int, nk: int, fc: list, fk: list):
    """Inputs (constants, constant tangents, carries, carry tangents) -> (new carries, their
    tangents): body's forward mode, as the transpose of its reverse mode (the reverse walk
    is linear in its seeds `us`, whose values then never matter)."""
    from .grad import backward
    b_consts, b_carry = _fresh(body.inputs[:nc]), _fresh(body.inputs[nc:nc + nk])
    t_consts = [input_node(b_consts[k].shape, b_consts[k].dtype, k) for k in fc]
    t_carry = [input_node(b_carry[k].shape, b_carry[k].dtype, k) for k in fk]
    outs = substitute(body, b_consts + b_carry)
    wrt = [b_carry[k] for k in fk] + [b_consts[k] for k in fc]
    us = [zeros(outs[k].shape, outs[k].dtype) for k in fk]
    if fk:
        g1 = backward([outs[k] for k in fk], us, wrt, list(getattr(body, "keep", [])))
        pairs = [(a, b) for a, b in zip(g1, t_carry + t_consts)]
        tang = backward([a for a, _ in pairs], [b for _, b in pairs], us)
    else:
        tang = []
    ins = b_consts + t_consts + b_carry + t_carry
    return ins, list(outs) + list(tang)


def while_vjp(n: Node, cts: dict[int, E]) -> list:
    """Cotangents of a While's operands. JAX's while_loop has no reverse mode, nor does
    this one: the cotangents are the results of a While marked `transpose`, which cannot
    run (its lowering raises JAX's error). Its own reverse rule, the transpose of a
    linear map, is forward mode: a While over (carry, tangent). So vkml's jvp, which
    transposes the vjp (`autodiff._jvp_graph`), goes through a while_loop, and the
    transposed node is dead code of its result."""
    a = n.attrs
    nc, nk = a["n_consts"], a["n_carry"]
    ins = list(n.inputs)
    is_f = lambda x: dt.is_float(x.dtype)  # noqa: E731
    t = a.get("transpose")
    if t is None:
        fk = [k for k in range(nk) if is_f(ins[nc + k])]
        fc = [k for k in range(nc) if is_f(ins[k])]
        if not any(k in cts for k in fk):
            return [None] * len(ins)
        ct_final = [cts[k].n if k in cts else zeros(ins[nc + k].shape, ins[nc + k].dtype) for k in fk]
        wt = Node(K.While, ins + ct_final, {**a, "transpose": (tuple(fk), tuple(fc))})
        parts = parts_of(wt)
        out: list = [None] * len(ins)
        for i, k in enumerate(fk):
            out[nc + k] = E(parts[i])
        for i, k in enumerate(fc):
            out[k] = E(parts[len(fk) + i])
        return out
    fk, fc = list(t[0]), list(t[1])
    consts, init = ins[:nc], ins[nc:nc + nk]
    if not any(i in cts for i in range(len(fk) + len(fc))):
        return [None] * len(ins)
    # the cotangents of this node's results are the tangents of the loop's inputs
    s_init = [cts[i].n if i in cts else zeros(init[k].shape, init[k].dtype) for i, k in enumerate(fk)]
    s_consts = [cts[len(fk) + i].n if len(fk) + i in cts else zeros(consts[k].shape, consts[k].dtype)
                for i, k in enumerate(fc)]
    t_ins, t_outs = _tangent_body(a["body"], nc, nk, fc, fk)
    cond = a["cond"]
    b_consts, b_carry = t_ins[:nc], t_ins[nc + len(fc):nc + len(fc) + nk]
    t_cond = Graph(t_ins, substitute(cond, b_consts + b_carry))
    t_body = Graph(t_ins, t_outs)
    t_body.keep = t_cond.keep = []
    tw = Node(K.While, consts + s_consts + init + s_init,
              {"body": t_body, "cond": t_cond, "n_consts": nc + len(fc), "n_carry": nk + len(fk),
               "transpose": None})
    parts = parts_of(tw)
    out = [None] * len(ins)
    for i in range(len(fk)):
        out[nc + nk + i] = E(parts[nk + i])
    # second order through the primal operands: the reverse rule again, which cannot run
    wt = parts_of(n)
    for i, k in enumerate(fk):
        out[nc + k] = E(wt[i])
    for i, k in enumerate(fc):
        out[k] = E(wt[len(fk) + i])
    return out


def batch_while(ctx, n: Node, ins, bat) -> E:
    """The batched While: every carry carries the batch and the predicate is batched (the
    loop runs while any lane's holds, and each lane selects its own new carry)."""
    from .vmap import vmap_graph
    a = n.attrs
    if a.get("transpose") is not None:
        raise NotImplementedError(WHILE_REVERSE)
    nc, nk = a["n_consts"], a["n_carry"]
    ops, axes = [], []
    for k, (x, b) in enumerate(zip(ins, bat)):
        if nc <= k < nc + nk:
            x, b = ctx.materialize(x, b), True
        ops.append(x.n)
        axes.append(0 if b else None)
    body = vmap_graph(a["body"], axes, ctx.size, [0] * nk)
    cond = vmap_graph(a["cond"], axes, ctx.size, [0])
    body.keep = cond.keep = []
    return E(Node(K.While, ops, {**a, "body": body, "cond": cond}, tag=ctx.tag))


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
    scans = [m for m in graph.nodes if m.op in (K.Scan, K.While)]
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
        elif m.op is K.While:
            a = m.attrs
            new[m.id] = Node(K.While, ins, {**a, "body": prepare(a["body"]), "cond": prepare(a["cond"])},
                             tag=m.tag)
            remap[m.id] = {k: k for k in range(len(ins))}
        elif m.op is K.Part:
            k = remap[m.inputs[0].id][m.attrs["index"]]
            new[m.id] = Node(K.Part, ins, {**m.attrs, "index": k}, tag=m.tag)
        else:
            new[m.id] = m if all(x is y for x, y in zip(ins, m.inputs)) else Node(
                m.op, ins, m.attrs, tag=m.tag, shape=m.shape, dtype=m.dtype)
    return Graph(graph.inputs, [new[o.id] for o in graph.outputs])


__all__ = ["scan_vjp", "while_vjp", "batch_scan", "batch_while", "batch_part", "prune_scans", "parts_of",
           "WHILE_REVERSE"]
