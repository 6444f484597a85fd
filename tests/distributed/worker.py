"""The program each rank runs under `mpirun` (tests/distributed/test_mpi.py): one scenario
per invocation, `python worker.py <scenario>`; it asserts on every rank and prints
"<scenario> ok rank <r>" at the end, so the test can see each rank got through."""
from __future__ import annotations

import gc
import sys

import numpy as np

import vkml
import vkml.numpy as vnp
from vkml import distributed as dist
from vkml.tree_util import tree_leaves

dist.initialize()
RANK, SIZE = dist.process_index(), dist.process_count()


def tree_of(rank: int) -> dict:
    """Rank r's values (any rank can rebuild any other's: the NumPy oracle)."""
    rng = np.random.default_rng(100 + rank)
    return {"w": rng.standard_normal((3, 5)).astype(np.float32),
            "b": [rng.standard_normal(7).astype(np.float32), rng.standard_normal(()).astype(np.float32)],
            "i": rng.integers(-50, 50, (4,)).astype(np.int32),
            "m": rng.random(6) > 0.5,
            "big": rng.standard_normal(3000).astype(np.float32)}


def on_device(t):
    return vkml.tree_util.tree_map(vnp.asarray, t)


def collectives():
    dist.BUCKET_BYTES = 4096    # several buckets per dtype: the big leaf alone, the rest packed
    mine = on_device(tree_of(RANK))
    all_np = [tree_of(r) for r in range(SIZE)]
    stack = [np.stack([np.asarray(leaf) for leaf in leaves]) for leaves in
             zip(*[tree_leaves(t) for t in all_np])]
    reducers = {"sum": lambda s: s.sum(0, dtype=s.dtype), "max": lambda s: s.max(0),
                "min": lambda s: s.min(0), "mean": lambda s: s.mean(0, dtype=np.float64).astype(s.dtype)}
    for op, fn in reducers.items():
        # bool leaves have no sum; mean needs float leaves
        keep = [k for k in sorted(mine) if not (op == "sum" and k == "m")
                and not (op == "mean" and k in ("i", "m"))]
        got = tree_leaves(dist.all_reduce({k: mine[k] for k in keep}, op=op))
        want = [fn(np.stack([np.asarray(x) for x in leaves])) for leaves in
                zip(*[tree_leaves({k: t[k] for k in keep}) for t in all_np])]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert np.asarray(g).dtype == w.dtype, (op, g.dtype, w.dtype)
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6, atol=1e-6, err_msg=op)
        # results that share one bucket's memory (host-memory devices) outlive each other:
        # drop all but the last, allocate over whatever was freed, the last is intact
        last, want_last = got[-1], want[-1]
        del got
        gc.collect()
        junk = [vnp.full((1024,), 7.0) for _ in range(8)]
        np.testing.assert_allclose(np.asarray(last), want_last, rtol=1e-6, atol=1e-6, err_msg=op)
        used = sum(j.size for j in junk)     # they stay alive until the check is done
        assert used == 8192
        # and a result used in a kernel reads its own range
        np.testing.assert_allclose(np.asarray(last * 1), want_last, rtol=1e-6, atol=1e-6)
    root = SIZE - 1
    got = dist.broadcast(mine, root=root)
    for g, w in zip(tree_leaves(got), tree_leaves(all_np[root])):
        np.testing.assert_array_equal(np.asarray(g), w)
    got = dist.all_gather(mine)
    for g, s in zip(tree_leaves(got), stack):
        np.testing.assert_array_equal(np.asarray(g), s)
    assert dist.local_device() == 0        # one lavapipe device: every rank on it


def mlp_problem():
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((8, 16)).astype(np.float32) * 0.3,
              "b1": np.zeros(16, np.float32),
              "w2": rng.standard_normal((16, 1)).astype(np.float32) * 0.3,
              "b2": np.zeros(1, np.float32)}
    x = rng.standard_normal((20, 64, 8)).astype(np.float32)      # 20 global batches of 64
    y = np.sin(x.sum(-1, keepdims=True)).astype(np.float32)
    return params, x, y


def loss_fn(p, x, y):
    h = vnp.tanh(x @ p["w1"] + p["b1"])
    return ((h @ p["w2"] + p["b2"] - y) ** 2).mean()


def step(p, x, y):
    loss, g = vkml.value_and_grad(loss_fn)(p, x, y)
    return vkml.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g), loss


def run(stepper, params, x, y, shard: bool):
    p = on_device(params)
    per = x.shape[1] // SIZE
    for k in range(x.shape[0]):
        xs, ys = (x[k, RANK * per:(RANK + 1) * per], y[k, RANK * per:(RANK + 1) * per]) if shard else (x[k], y[k])
        p, loss = stepper(p, vnp.asarray(xs), vnp.asarray(ys))
    return p


def data_parallel():
    params, x, y = mlp_problem()
    # every rank starts from rank 0's parameters (its own differ)
    params = {k: v + RANK for k, v in params.items()}
    start = dist.broadcast(on_device(params), root=0)
    params0 = {k: np.asarray(v) for k, v in start.items()}
    reference = run(vkml.jit(step), params0, x, y, shard=False)      # one process, full batch
    for name, stepper in [("jit", dist.data_parallel(vkml.jit(step), check=True)),
                          ("eager", dist.data_parallel(step, check=True))]:
        got = run(stepper, params0, x, y, shard=True)
        for k in sorted(got):
            np.testing.assert_allclose(np.asarray(got[k]), np.asarray(reference[k]), rtol=1e-5, atol=1e-5,
                                       err_msg=f"{name} {k}")
        gathered = dist.all_gather(got)        # bit-equal on every rank
        for k in gathered:
            g = np.asarray(gathered[k])
            for r in range(1, SIZE):
                np.testing.assert_array_equal(g[r].view(np.uint32), g[0].view(np.uint32), err_msg=f"{name} {k}")
    # and the update differs from a local-shard run: the averaging did something
    local = run(vkml.jit(step), params0, x, y, shard=True)
    assert SIZE == 1 or not np.allclose(np.asarray(local["w1"]), np.asarray(reference["w1"]), atol=1e-6)


def one_rank_raises():
    if RANK == 1:
        raise RuntimeError("rank 1 fails on purpose")
    dist.all_reduce({"w": vnp.ones(4)})      # rank 0 waits here: the launcher must end it
    raise AssertionError("rank 0 got through an all_reduce that rank 1 never joined")


def mismatch():
    cases = [({"w": vnp.ones((2, 3 + RANK))}, "shapes"),
             ({"w": vnp.ones(3), **({"extra": vnp.ones(1)} if RANK else {})}, "structure"),
             ({"w": vnp.ones(3, dtype="float32" if RANK == 0 else "int32")}, "dtypes")]
    for tree, what in cases:
        for fn in (dist.all_reduce, dist.broadcast, dist.all_gather):
            try:
                fn(tree) if fn is not dist.all_reduce or what != "dtypes" else fn(tree, op="sum")
            except dist.DistributedError as e:
                assert "rank 0" in str(e) and "rank 1" in str(e), str(e)
            else:
                raise AssertionError(f"{fn.__name__}: no error for mismatched {what}")
    try:
        dist.check_replicated({"w": vnp.ones(3) * (1.0 + RANK)})
    except dist.DistributedError as e:
        assert "differ" in str(e)
    else:
        raise AssertionError("check_replicated: no error for different values")
    dist.all_reduce({"w": vnp.ones(2)})       # and the world still works afterwards


if __name__ == "__main__":
    name = sys.argv[1]
    globals()[name]()
    print(f"{name} ok rank {RANK} of {SIZE}", flush=True)
