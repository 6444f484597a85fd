"""vkml benchmarks against NumPy, JAX and PyTorch (whichever import), on CPU and GPU.

Run ``python -m bench`` (``--help`` lists the flags). Each workload prints its best time
on every target (vkml, numpy, jax, torch, torch.compile, and on a CUDA machine
torch-cuda, torch.compile-cuda, jax-gpu) and the ratios vkml time / other time (above 1:
vkml is slower), then a bandwidth and a matmul summary, and rewrites this device's
section of ``bench/RESULTS.md``.

    python -m bench --only=matmul1024,chain_jit --repeats=20
    python -m bench --frameworks=numpy,torch-cuda --results=    # fewer columns, no file

Modules: ``timing`` (warm-up and best-of-N within a budget), ``frameworks`` (the targets
and their devices), ``workloads`` (one setup per framework per workload), ``report`` (the
tables and RESULTS.md sections).
"""
