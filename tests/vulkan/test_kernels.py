"""Hoisting fixed meta reads (`Program.render(hoist)`, `profile.hoist_meta`): what the
rendering does, and that kernels compute the same bits hoisted or not."""
import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.vulkan.device import using
from vkml.vulkan.program import Meta, Program


def _program():
    p = Program("Hoist")
    p.meta = Meta(("n", 1), ("k", 1), ("base", 1), ("table", 4))
    o = p.buffer("o", "float")
    p.add(f"float f(int i) {{ return float({p.m('base')} + i); }}\n", names=("f",))
    p.main("uint i = gidx();", f"if (i >= uint({p.m('n')})) return;",
           f"if (i > 3u) {{ {o}[i] = f({p.m('k')}) + float({p.m('n')}); }}",
           f"{o}[i] += float({p.m('table', p.m('k'))});")
    return p


def test_hoisting_reads_fixed_meta_values_once_before_anything():
    p = _program()
    out = p.render(hoist=1)
    main = out[out.index("void main() {"):]
    # every fixed read (in main and in helper code) is one value set first thing in main()
    first = main.splitlines()[1:4]
    assert sorted(first) == ["  m_base = meta[2];", "  m_k = meta[1];", "  m_n = meta[0];"], main
    assert "int m_n;" in out and "#define m_n" not in out
    assert "m_table(m_k)" in main               # a read at a computed place stays a load
    assert "int m_table(int i) { return meta[3 + i]; }" in out
    assert "return float(m_base + i);" in out   # helper code reads the hoisted value
    # without hoisting (or with fewer fixed reads than asked for), reads stay in place
    for src in (p.render(0), p.render(hoist=4)):
        assert "#define m_n meta[0]" in src and "m_n = meta[0];" not in src
    assert p.hoisted(3) and not p.hoisted(4) and not p.hoisted(0)
    # the kernel cache keys the two renderings apart
    assert p.key(0) != p.key(1)


def _programs():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((37, 19)).astype(np.float32)
    w = rng.standard_normal((19, 11)).astype(np.float32)
    y = rng.integers(0, 11, 37).astype(np.int32)

    def f(x, w, y):
        h = vnp.tanh(x @ w + 1.0)
        z = vnp.exp(h - h.max(axis=1, keepdims=True))
        return (z / z.sum(axis=1, keepdims=True), (y[:, None] == vnp.arange(11)).sum(axis=0),
                h.T[::-1] * x[:, :1].T)
    return f, (x, w, y)


def _run(f, args, **profile):
    """f's results and its kernels' sources, jitted under a profile variant."""
    with using(**profile):
        jf = vkml.jit(f)
        got = [np.asarray(g) for g in jf(*args)]
        return got, [d.kernel.source for d in jf._entry(args)[0][0].lowered.dispatches]


@pytest.mark.parametrize("hoist", [1, 8])
def test_kernels_agree_with_and_without_hoisting(hoist):
    """Regions, reductions and a MatMul with an epilogue give the same bits with fixed
    meta reads hoisted (kernels with at least `hoist` of them) or read in place
    (`hoist_meta=0`), and merged or not; each profile variant compiles its own."""
    f, args = _programs()
    args = tuple(vnp.asarray(a) for a in args)
    got, srcs = _run(f, args, hoist_meta=hoist, merge=False)
    ref, plain = _run(f, args, hoist_meta=0, merge=False)
    hoisted = lambda src: "void main() {\n  m_" in src
    assert any(map(hoisted, srcs)) and not any(map(hoisted, plain))
    merged, _ = _run(f, args, hoist_meta=hoist)
    for g, r, m in zip(got, ref, merged):
        np.testing.assert_array_equal(g, r)
        np.testing.assert_array_equal(m, r)
    x, w, y = (a.astype(np.float64) if a.dtype == np.float32 else a for a in _programs()[1])
    h = np.tanh(x @ w + 1.0)
    z = np.exp(h - h.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got[0], z / z.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[1], (y[:, None] == np.arange(11)).sum(axis=0))
