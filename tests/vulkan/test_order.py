"""The memory-aware kernel order (`vkml.vulkan.order`) and what it promises in training
graphs: planned peaks under each checkpoint policy, stated as inequalities."""
from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest

import vkml
import vkml.numpy as vnp
from vkml.vulkan import fusion, order, regions

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository, for bench
from bench.workloads import DEEP_BATCH, DEEP_WIDTH, deep_mlp_data, deep_mlp_loss  # noqa: E402

ACT = DEEP_BATCH * DEEP_WIDTH * 4          # bytes of one activation


def _mlp(n: int, policy: str):
    """The Lowering of `jit(value_and_grad)` of the bench's depth-n tanh MLP."""
    (ws, bs), x = deep_mlp_data(n)
    params = ([vnp.asarray(w) for w in ws], [vnp.asarray(b) for b in bs])
    loss = deep_mlp_loss(vnp, vkml.checkpoint, n, policy)
    return vkml.jit(vkml.value_and_grad(loss)).lower(params, vnp.asarray(x))


@pytest.mark.parametrize("n", [16, 64])
@pytest.mark.parametrize("policy", ["none", "layer"])
def test_training_step_keeps_about_n_activations(n, policy):
    """Reverse mode's order: each weight gradient right after its cotangent, so only the
    saved activations (one per layer) and a few cotangents are alive at once."""
    arena = _mlp(n, policy).arena_bytes / ACT
    assert n - 1 <= arena <= n + 4, arena


@pytest.mark.parametrize("n", [16, 64])
def test_sqrt_checkpointing_keeps_order_sqrt_n(n):
    arena = _mlp(n, "sqrt").arena_bytes / ACT
    assert arena <= 3 * math.sqrt(n), arena


def test_sqrt_checkpointing_grows_as_sqrt_n():
    small, large = (_mlp(n, "sqrt").arena_bytes for n in (16, 64))
    assert large / small <= 2.5, (small, large)     # sqrt: 2; linear: 4


# --------------------------------------------------------------------------- the orders

def _node(i: int, nbytes: int):
    return NS(id=i, size=nbytes // 4, dtype=np.dtype(np.float32))


def _groups(rng, n: int):
    """A random DAG of n groups, each reading up to three earlier outputs or inputs."""
    inputs = [_node(-1 - i, 4096) for i in range(3)]
    outs = []
    gs = []
    for t in range(n):
        pool = inputs + outs
        k = int(rng.integers(1, 4))
        reads = tuple(pool[j] for j in rng.choice(len(pool), size=min(k, len(pool)), replace=False))
        o = _node(t, int(rng.choice([256, 4096, 65536])))
        outs.append(o)
        gs.append(NS(out=o, reads=reads))
    return gs, {gs[-1].out.id, gs[-2].out.id}


@pytest.mark.parametrize("seed", range(20))
def test_list_order_is_a_topological_order_and_never_raises_the_peak(seed):
    rng = np.random.default_rng(seed)
    gs, outs = _groups(rng, 60)
    got = order.list_order(gs, outs)
    assert sorted(g.out.id for g in got) == sorted(g.out.id for g in gs)
    done = set()
    for g in got:
        assert all(r.id < 0 or r.id in done for r in g.reads)
        done.add(g.out.id)
    best = order.memory_order(gs, [NS(id=i) for i in outs])
    assert order.live_peak(best, outs) <= order.live_peak(gs, outs)


def test_live_peak_counts_what_is_alive():
    a, b, c = _node(0, 1024), _node(1, 2048), _node(2, 4096)
    gs = [NS(out=a, reads=()), NS(out=b, reads=(a,)), NS(out=c, reads=(b,))]
    assert order.live_peak(gs, {2}) == 1024 + 2048       # c is an output: not the arena's
    assert order.live_peak(gs, set()) == 2048 + 4096


def test_order_frees_a_cotangent_before_making_the_next():
    """x -> a (big), then b = f(a) and the independent c = g(x): after a, running b (the
    last reader of a) first keeps a and c from being alive together."""
    x = _node(-1, 256)
    a, b, c = _node(0, 1 << 20), _node(1, 256), _node(2, 1 << 20)
    gs = [NS(out=a, reads=(x,)), NS(out=c, reads=(x,)), NS(out=b, reads=(a,)),
          NS(out=_node(3, 256), reads=(b, c))]
    got = order.memory_order(gs, [NS(id=3)])
    assert [g.out.id for g in got] == [0, 1, 2, 3]      # a, b, c, d
    assert order.live_peak(got, {3}) == (1 << 20) + 256 < order.live_peak(gs, {3})


# --------------------------------------------------------------------------- fusion's cost

def _chain(n: int):
    def f(x):
        for i in range(n):
            x = vnp.tanh(x) if i % 3 == 0 else (x * 1.0001 if i % 3 == 1 else x + 0.5)
        return x
    return vkml.make_graph(f, vnp.ones(8))


def test_fusion_of_a_chain_costs_linear_work(monkeypatch):
    """Region builds, and the nodes they visit, grow linearly with a chain's length (a
    split rebuilds only the regions holding the split node)."""
    calls = {"builds": 0, "visits": 0}
    real = fusion.build_region

    def counting(root, inside, *a, **k):
        calls["builds"] += 1

        def counted(x):
            calls["visits"] += 1
            return inside(x)
        return real(root, counted, *a, **k)
    monkeypatch.setattr(fusion, "build_region", counting)
    work = {}
    for n in (1500, 6000):
        calls.update(builds=0, visits=0)
        groups = fusion.schedule(_chain(n))
        assert len(groups) >= n // regions.MAX_DEPTH
        work[n] = dict(calls)
    for k in ("builds", "visits"):
        # N log N would allow 4 * log(6000) / log(1500) = 4.8; quadratic, 16
        assert work[6000][k] <= 4.8 * work[1500][k], work
