"""Rendering of `vkml.vulkan.program`: kernels carry only the library items they name."""
from __future__ import annotations

from vkml.vulkan import program

LIB = ("#define LIB_ONE 1.0\n"
       "// the square\nfloat sq(float v) { return v * v; }\n"
       "float quad(float v) {\n  return sq(sq(v));\n}\n"
       "float unused_fn(float v) { return v; }\n"
       "// like quad, but unused_fn is named here only in a comment\nfloat other(float v) { return v; }\n")


def _prog(name, call):
    p = program.Program(name)
    p.meta = program.Meta(("n", 1))
    o = p.buffer("o", "float")
    p.library("mini", LIB)
    p.main("uint i = gidx();", f"if (i >= uint({p.m('n')})) return;", f"{o}[i] = {call}(float(i));")
    return p


def test_a_kernel_keeps_the_items_it_names_and_what_they_name():
    src = _prog("k_quad", "quad").render()
    assert "float quad(" in src and "float sq(" in src and "// the square" in src
    assert "unused_fn" not in src and "float other(" not in src
    assert "#define LIB_ONE" in src                  # directives are always kept


def test_a_kernel_naming_no_item_keeps_only_the_directives():
    p = program.Program("k_none")
    p.meta = program.Meta(("n", 1))
    o = p.buffer("o", "float")
    p.library("mini", LIB)
    p.main("uint i = gidx();", f"{o}[i] = 1.0;")
    src = p.render()
    assert "#define LIB_ONE" in src and "float sq(" not in src and "quad" not in src


def test_a_merged_kernel_keeps_the_items_any_part_names():
    a, b = _prog("k_sq", "sq"), _prog("k_unused", "unused_fn")
    m = program.merged([(a, 1, 0), (b, 1, 1)], 64, 1)
    src = m.render()
    assert "float sq(" in src and "float unused_fn(" in src and "float quad(" not in src
    # each part's identifiers are read once and kept with it
    assert "sq" in a.identifiers() and "unused_fn" in b.identifiers()


def test_names_in_comments_are_not_references():
    items = dict((n, u) for n, _, u in program.library_items(LIB) if n)
    assert "unused_fn" not in items["other"] and "quad" not in items["other"]
