"""Best-of-N wall-clock timing after warm-up runs."""
from __future__ import annotations

import time
from typing import Callable


def best_time(run: Callable[[], object], repeats: int = 5, warmup: int = 2) -> float:
    """Seconds of the fastest of `repeats` calls of run(), after `warmup` untimed calls.

    run must not return before its result exists (read it back or block on it). The
    minimum, not the mean, because other processes share the machine: interference
    only ever adds time.

    >>> best_time(lambda: sum(range(1000)), repeats=3) > 0
    True
    """
    for _ in range(max(warmup, 0)):
        run()
    best = float("inf")
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best
