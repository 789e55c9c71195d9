"""Timing: CUDA events with warm-up and an L2 flush between iterations; the host clock on CPU."""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current GPU's L2 (H200: 60 MB)
_flush_buffers: dict[str, torch.Tensor] = {}


def _flush(device: torch.device) -> None:
    key = str(device)
    if key not in _flush_buffers:
        _flush_buffers[key] = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    _flush_buffers[key].zero_()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn: Callable[[], object], device: torch.device, warmup: int = 5, repeat: int = 20,
            flush_l2: bool = True) -> list[float]:
    """Milliseconds of each of `repeat` calls of fn, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    if device.type != "cuda":
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return times
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    for start_event, end_event in zip(starts, ends):
        if flush_l2:
            _flush(device)
        start_event.record()
        fn()
        end_event.record()
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def time_interleaved(fns: dict[str, Callable[[], object]], device: torch.device, warmup: int = 2,
                     repeat: int = 20, flush_l2: bool = True) -> dict[str, list[float]]:
    """Milliseconds of `repeat` calls of each fn, the fns taking turns call by call (A B, B A, ...).

    Comparing two calls of the same kernel (a plugin and the library called directly) needs
    their difference, not their absolute times: alternating every call exposes both to the same
    clock, temperature and allocator state, which blocks of calls one after the other do not.
    The order rotates every turn, so no fn always takes the same place in a turn (a place that
    always follows the same kernel could bias a ratio; on the H200 rotating did not change the
    ratios seen with a fixed order).
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    synchronize(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    turns = [names[i % len(names):] + names[:i % len(names)] for i in range(repeat)]  # A B, B A, ...
    if device.type != "cuda":
        for turn in turns:
            for name in turn:
                start = time.perf_counter()
                fns[name]()
                times[name].append((time.perf_counter() - start) * 1e3)
        return times
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(repeat)] for name in fns}
    for i, turn in enumerate(turns):
        for name in turn:
            fn = fns[name]
            if flush_l2:
                _flush(device)
            start_event, end_event = events[name][i]
            start_event.record()
            fn()
            end_event.record()
    torch.cuda.synchronize(device)
    return {name: [s.elapsed_time(e) for s, e in pairs] for name, pairs in events.items()}


def host_ms(fn: Callable[[], object], device: torch.device) -> tuple[float, object]:
    """Wall time of one call (device synchronised around it) and its result."""
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return (time.perf_counter() - start) * 1e3, result


def summarize(times: list[float]) -> tuple[float, float, float]:
    """(median, 20th percentile, 80th percentile)."""
    arr = np.asarray(times, dtype=np.float64)
    return float(np.median(arr)), float(np.percentile(arr, 20)), float(np.percentile(arr, 80))
