"""vkml benchmarks against NumPy and, when they import, JAX (CPU, jit) and PyTorch (CPU).

Run ``python -m bench`` (``--help`` lists the flags). Each workload prints its best-of-N
time for every framework and the ratio vkml time / other time (above 1: vkml is slower).
vkml runs eagerly here: every operator is its own submission (no fusion, no jit yet).

    python -m bench --only=matmul,sum --repeats=10
    python -m bench --size_scale=4        # 64M-element elementwise/sum (GPU devices)

Modules: ``timing`` (warm-up and best-of-N), ``frameworks`` (what is importable, device
and host descriptions), ``workloads`` (one builder per framework per workload),
``report`` (the table).
"""
