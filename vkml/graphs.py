"""Between Python functions and Graphs: tracing a function to a Graph, and calling one.

`trace_flat` traces a function on flattened pytree arguments; `execute` runs a Graph on
concrete arrays; `inline` re-emits a Graph into the active trace (how a transform's
result composes with an enclosing transform); `call_graph` picks between the two.
Transforms produce Graphs and finish with `call_graph`.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from . import numpy as vnp
from .array import Array, bind
from .trace import tracer
from .trace.graph import Graph, Node
from .trace.ops import OpKind
from .transforms.control import prune_scans
from .transforms.simplify import simplify
from .tree_util import tree_flatten, tree_unflatten
from .vulkan import runtime


def _constant(n: Node) -> Node | None:
    """An Arange a program reads, computed now into a Const (see `simplify`); None inside
    a trace, where nothing may run."""
    if tracer.current() is not None:
        return None
    value = bind(n.op, [], **n.attrs)     # a graph of the Arange alone: it is the output
    attrs = {"shape": tuple(n.shape), "dtype": n.dtype, "value": value}
    if np.dtype(n.dtype).kind == "i":
        # an integer progression: a kernel that reads it may compute it from the index
        # instead (`elementwise.arange_leaf`); the values wrap alike either way
        attrs["arange"] = (int(n.attrs["start"]), int(n.attrs["step"]))
    return Node(OpKind.Const, (), attrs)


def for_execution(graph: Graph) -> Graph:
    """graph simplified to run: StopGradient gone, the Aranges it reads computed once.

    >>> import vkml, vkml.numpy as vnp
    >>> g = vkml.make_graph(lambda x: x * vnp.arange(3.0), vnp.ones(3))
    >>> [n.op.value for n in for_execution(g).nodes]
    ['Input', 'Const', 'Mul']
    """
    g = simplify(graph, for_execution=True, constant=_constant)
    # loops: results nothing reads dropped, bodies made ready to run the same way
    return prune_scans(g, for_execution)


def execute(graph: Graph, args: Sequence[Array]) -> list[Array]:
    """Run graph on the device with concrete args; returns concrete outputs.

    >>> import vkml, vkml.numpy as vnp
    >>> g = vkml.make_graph(lambda x: x + 1.0, vnp.ones(2))
    >>> execute(g, [vnp.zeros(2)])[0].numpy().tolist()
    [1.0, 1.0]
    """
    if len(graph.nodes) > len(graph.inputs) + 1:
        graph = for_execution(graph)
    bufs = runtime.get().run(graph, [a._buf for a in args])
    return [Array._concrete(b, o.shape, o.dtype) for b, o in zip(bufs, graph.outputs)]


def inline(graph: Graph, args: Sequence[Array]) -> list[Array]:
    """Re-emit graph's nodes into the active trace, with its inputs bound to args.

    >>> import vkml, vkml.numpy as vnp
    >>> g = vkml.make_graph(lambda x: x * 3.0, vnp.ones(()))
    >>> vkml.grad(lambda x: inline(g, [x])[0])(vnp.ones(())).item()
    3.0
    """
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
    """Inline into the active trace if there is one, else run on the device.

    >>> import vkml, vkml.numpy as vnp
    >>> g = vkml.make_graph(lambda x: x * 3.0, vnp.ones(()))
    >>> call_graph(g, [vnp.ones(())])[0].item(), vkml.grad(lambda x: call_graph(g, [x])[0])(vnp.ones(())).item()
    (3.0, 3.0)
    """
    if tracer.current() is not None or any(a._trace is not None for a in args):
        if tracer.current() is None:
            raise tracer.LeakedTracerError("a traced value was passed to a transform outside its trace")
        return inline(graph, args)
    return execute(graph, args)


def trace_flat(f: Callable, args: Sequence, tag=None, known: bool = False):
    """Trace f(*args) with every array leaf as an input.

    Returns (graph, out_treedef, captured, leaves): the graph's inputs are the flattened
    args in order (`leaves`, as arrays), then one input per captured outer value (listed
    in `captured`). known: the trace may read the values of concrete args (`Trace.values`).

    >>> import vkml.numpy as vnp
    >>> y = vnp.ones(2)
    >>> g, tree, captured, leaves = trace_flat(lambda d: d["x"] + y, [{"x": vnp.zeros(2)}])
    >>> len(g.inputs), captured, tree.num_leaves
    (1, [], 1)
    """
    leaves, treedef = tree_flatten(list(args))
    leaves = [vnp.asarray(l) for l in leaves]
    with tracer.Trace(tag) as t:
        if known:
            # a transform whose graph serves these argument values only (grad, jvp, vjp;
            # not jit, whose program serves any values of their types): what must be
            # known while tracing, such as a while_loop's trip count, may be computed
            # from them (`vkml.lax.control._peek`; values traced in turn, by a nested
            # grad, are computed from the enclosing transform's, where it knows them)
            t.values = leaves
        tr = [Array._traced(t, t.new_input(l.shape, l.dtype)) for l in leaves]
        out = f(*tree_unflatten(treedef, tr))
        out_leaves, out_tree = tree_flatten(out)
        out_leaves = [vnp.asarray(o) for o in out_leaves]
        nodes = [t.lift(o) for o in out_leaves]
    graph = t.graph(nodes)
    # nodes the reverse walk must see even if no output reaches them (custom_vjp residuals)
    graph.keep = [t.lift(v) for v in getattr(t, "keep", [])]
    return graph, out_tree, list(t.captured), leaves


def make_graph(f: Callable, *args) -> Graph:
    """The Graph f traces to on args (for inspection).

    >>> import vkml, vkml.numpy as vnp
    >>> print(vkml.make_graph(lambda x: vnp.sin(x) * 2.0, vnp.ones(3)))  # doctest: +ELLIPSIS
    graph(%...):
      %... = Sin(%...) : float32[3]
      %... = Full(shape=(), dtype=float32) : float32[]
      %... = Mul(%..., %...) : float32[3]
      return %...
    """
    return trace_flat(f, args)[0]
