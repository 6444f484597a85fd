"""Where tracing, transforms and the Vulkan executor meet.

`execute` runs a Graph on concrete arrays; `inline` re-emits a Graph into the active
trace (how a transform's result composes with an enclosing transform); `call_graph`
picks between the two. Transforms produce Graphs and finish with `call_graph`.
"""
from __future__ import annotations

from typing import Callable, Sequence

from .array import Array, bind
from .trace import tracer
from .trace.graph import Graph
from .trace.ops import OpKind
from .tree_util import tree_flatten, tree_unflatten


def execute(graph: Graph, args: Sequence[Array]) -> list[Array]:
    """Run graph on the device with concrete args; returns concrete outputs."""
    from .transforms.simplify import simplify
    from .vulkan import runtime
    rt = runtime.get()
    if len(graph.nodes) > len(graph.inputs) + 1:
        graph = simplify(graph, for_execution=True)
    bufs = rt.run(graph, [a._buf for a in args])
    return [Array._concrete(b, o.shape, o.dtype) for b, o in zip(bufs, graph.outputs)]


def inline(graph: Graph, args: Sequence[Array]) -> list[Array]:
    """Re-emit graph's nodes into the active trace, with its inputs bound to args."""
    env: dict[int, Array] = {}
    for node, a in zip(graph.inputs, args):
        env[node.id] = a
    for n in graph.nodes:
        if n.id in env:
            continue
        if n.op is OpKind.Const:
            env[n.id] = n.attrs["value"]
        else:
            env[n.id] = bind(n.op, [env[i.id] for i in n.inputs], _tag=n.tag, **n.attrs)
    return [env[o.id] for o in graph.outputs]


def call_graph(graph: Graph, args: Sequence[Array]) -> list[Array]:
    """Inline into the active trace if there is one, else run on the device."""
    if tracer.current() is not None or any(a._trace is not None for a in args):
        if tracer.current() is None:
            raise tracer.LeakedTracerError("a traced value was passed to a transform outside its trace")
        return inline(graph, args)
    return execute(graph, args)


def trace_flat(f: Callable, args: Sequence, tag=None):
    """Trace f(*args) with every array leaf as an input.

    Returns (graph, out_treedef, captured): the graph's inputs are the flattened args in
    order, then one input per captured outer value (listed in `captured`).
    """
    from . import numpy as vnp
    leaves, treedef = tree_flatten(list(args))
    leaves = [vnp.asarray(l) for l in leaves]
    with tracer.Trace(tag) as t:
        tr = [Array._traced(t, t.new_input(l.shape, l.dtype)) for l in leaves]
        out = f(*tree_unflatten(treedef, tr))
        out_leaves, out_tree = tree_flatten(out)
        out_leaves = [vnp.asarray(o) for o in out_leaves]
        nodes = [t.lift(o) for o in out_leaves]
        effects = [(obj, name, t.lift(v)) for obj, name, v in getattr(t, "effects", [])]
    graph = t.graph(nodes)
    graph.effects = effects   # state assignments (vkml.state), as (obj, name, node)
    return graph, out_tree, list(t.captured), leaves


def make_graph(f: Callable, *args) -> Graph:
    """The Graph f traces to on args (for inspection).

    >>> import vkml, vkml.numpy as vnp
    >>> print(vkml.make_graph(lambda x: vnp.sin(x) * 2.0, vnp.ones(3)))  # doctest: +SKIP
    """
    return trace_flat(f, args)[0]
