"""The layers of docs/architecture (shared/design/architecture.md), read from the source.

`trace/` imports nothing of vkml outside it; `transforms/` only `trace/`; `vulkan/` only
`trace/` (it runs any graph, whatever made it); jit and the modules it joins import
nothing of `nn/`; the modules of `vulkan/` import one another without a cycle. Every
import counts: at module level and inside functions, relative ones resolved.
"""
from __future__ import annotations

import ast
import pathlib

import vkml
from vkml.trace.ops import SPECS, OpKind

ROOT = pathlib.Path(vkml.__file__).parent


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = ("vkml",) + p.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(name: str, path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, module) for every vkml module `name` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "vkml"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "vkml":
                continue
            # `from .x import y`: y is a module of its own or a name in module x
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            if subs:
                found += [(node.lineno, s) for s in subs]
            if len(subs) < len(node.names):
                found.append((node.lineno, target))
    return found


IMPORTS = {name: _imports(name, path) for name, path in MODULES.items()}


def _inside(module: str, layer: str) -> bool:
    return module == layer or module.startswith(layer + ".")


def _violations(layer: str, allowed: tuple[str, ...]) -> list[str]:
    bad = []
    for name, imps in IMPORTS.items():
        if not _inside(name, layer):
            continue
        for line, target in imps:
            if not any(_inside(target, a) for a in (layer,) + allowed):
                bad.append(f"{MODULES[name].relative_to(ROOT.parent)}:{line} imports {target}")
    return bad


def test_the_modules_are_found():
    assert {"vkml.trace.ops", "vkml.transforms.grad", "vkml.vulkan.executor", "vkml.jit"} <= set(MODULES)
    # the resolver: `from . import dtypes as dt` (a module), `from .shapes import size_of`
    # (a name in one), `from ..trace.graph import Node` (two levels), in-function imports
    ops = {t for _, t in IMPORTS["vkml.trace.ops"]}
    assert {"vkml.trace.dtypes", "vkml.trace.shapes"} <= ops
    assert "vkml.trace.graph" in {t for _, t in IMPORTS["vkml.transforms.expr"]}
    assert "vkml.numpy" in {t for _, t in IMPORTS["vkml.array"]}     # inside Array._np


def test_trace_imports_nothing_of_vkml_outside_it():
    assert _violations("vkml.trace", ()) == []


def test_transforms_import_only_trace():
    assert _violations("vkml.transforms", ("vkml.trace",)) == []


def test_vulkan_imports_only_trace():
    assert _violations("vkml.vulkan", ("vkml.trace",)) == []


def test_jit_imports_nothing_of_nn():
    # jit, and the modules it was split into: tracing and calling graphs, the compiled program
    for name in ("vkml.jit", "vkml.graphs", "vkml.vulkan.compiled"):
        bad = [f"{name}:{line} imports {t}" for line, t in IMPORTS[name] if _inside(t, "vkml.nn")]
        assert bad == []


def _cycles(names: list[str]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a self-import)."""
    edges = {n: sorted({t for _, t in IMPORTS[n] if t in names}) for n in names}
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):        # Tarjan, recursive: the vulkan package is small
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges[v]:
                out.append(sorted(comp))
    for v in names:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_among_vulkan_modules():
    names = [n for n in MODULES if _inside(n, "vkml.vulkan")]
    found = [" <-> ".join(c) + ": " + "; ".join(f"{MODULES[n].relative_to(ROOT.parent)}:{line} imports {t}"
                                                for n in c for line, t in IMPORTS[n] if t in c)
             for c in _cycles(names)]
    assert found == []


def test_the_cycle_finder_finds_a_cycle():
    saved = dict(IMPORTS)
    try:
        IMPORTS["vkml.trace.shapes"] = IMPORTS["vkml.trace.shapes"] + [(1, "vkml.trace.ops")]
        assert ["vkml.trace.ops", "vkml.trace.shapes"] in _cycles(["vkml.trace.ops", "vkml.trace.shapes"])
    finally:
        IMPORTS.clear()
        IMPORTS.update(saved)


def test_elementwise_batching_is_derived_from_the_registry():
    """Every operator of the elementwise kernel family is batched by one rule, and the
    table names none of them by hand (a new operator is batched without being listed)."""
    from vkml.transforms import batching_rules as br
    elementwise = {k for k, s in SPECS.items() if s.kernel == "elementwise"}
    assert {k for k in elementwise if br.BATCH_RULES[k] is br._elementwise} == elementwise
    tree = ast.parse(pathlib.Path(br.__file__).read_text())
    (table,) = [n.value for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
                and any(getattr(t, "id", None) == "BATCH_RULES"
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
    listed = {k.attr for k in table.keys if isinstance(k, ast.Attribute)}
    assert listed, "BATCH_RULES is no longer a dict literal: update this test"
    assert listed & {k.name for k in elementwise} == set()
    assert all(k.name in OpKind.__members__ for k in elementwise)
