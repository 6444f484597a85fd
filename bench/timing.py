"""Best-of-N wall-clock timing after warm-up runs, within a time budget."""
from __future__ import annotations

import time
from typing import Callable


def best_time(run: Callable[[], object], repeats: int = 5, warmup: int = 2,
              budget_s: float = 3.0) -> tuple[float, int]:
    """(seconds of the fastest timed call of run(), number of timed calls).

    run must not return before its result exists (it synchronises its device). The
    first warm-up call pays compilation (jit, torch.compile, shader builds); once the
    calls have used budget_s, no more are made, so a workload that takes seconds per call
    on a CPU device is timed once or twice instead of `repeats` times. The minimum, not
    the mean, because other processes share the machine: interference only adds time.

    >>> best_time(lambda: sum(range(1000)), repeats=3)[1]
    3
    """
    spent = 0.0
    for _ in range(max(warmup, 0)):
        t0 = time.perf_counter()
        run()
        spent += time.perf_counter() - t0
        if spent > budget_s:
            break
    best, n, spent = float("inf"), 0, 0.0
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter()
        run()
        dt = time.perf_counter() - t0
        best, n, spent = min(best, dt), n + 1, spent + dt
        if spent > budget_s:
            break
    return best, n
