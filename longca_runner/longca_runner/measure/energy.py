"""Energy per call from NVML's energy counter (`--energy`, spec `energy = true`; off by default).

The counter advances in steps of tens of milliseconds, far coarser than one attention call, so
the step runs back to back for at least `SECONDS` between two reads and the difference is divided
by the calls made: joules per call, the whole GPU's draw while it computes (idle power included,
as a user pays it). It costs about `SECONDS` a row, which is why it is asked for, not default."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from longca_runner import gpustate
from longca_runner.timing import synchronize

SECONDS = 1.0
MIN_CALLS = 5


def energy_per_call(step: Callable[[], Any], device: Any, seconds: float | None = None,
                    counter: Callable[[str], float | None] | None = None) -> tuple[float, int] | None:
    """(joules per call, calls) of `step` on `device` over at least `seconds` (default SECONDS), or None
    where its energy counter (default NVML's, `gpustate.energy_mj`) cannot be read."""
    seconds = SECONDS if seconds is None else seconds
    counter = counter or gpustate.energy_mj
    name = str(device)
    synchronize(device)
    before = counter(name)
    if before is None:
        return None
    calls, start = 0, time.perf_counter()
    while calls < MIN_CALLS or time.perf_counter() - start < seconds:
        for _ in range(MIN_CALLS):
            step()
        calls += MIN_CALLS
        synchronize(device)
    after = counter(name)
    if after is None or after < before:
        return None
    return (after - before) / 1000.0 / calls, calls
