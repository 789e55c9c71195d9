"""Timing: CUDA events with warm-up and an L2 flush between iterations; the host clock on CPU.

Two more modes a sweep (`timing = ...`) or `longca run --timing` can choose, for kernels whose
launch overhead or host work the events include: `cuda_graph` (the step captured once, each replay
timed by events, the L2 flushed between replays outside the graph) and `profiler` (the device time
of the kernels of each call from torch.profiler, the flush outside the profiled region; on a CPU,
the time inside the top-level torch ops). A row records its mode (`timing`)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from longca.errors import LongcaError, UnsupportedError

TIMING_MODES = ("events", "cuda_graph", "profiler")

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


# `repeat=None` (the default of runs and sweeps): timed calls in rounds of ROUND until the 95 %
# interval of the median is within +-CI_TARGET of it, at least MIN_REPEAT and at most MAX_REPEAT
# calls, or until the calls so far took MAX_TIMED_S (a slow case is precise after a few calls)
MIN_REPEAT, MAX_REPEAT, ROUND, CI_TARGET, MAX_TIMED_S = 5, 100, 5, 0.01, 2.0

# hears each timed call's result right after its timer stopped (outside the timed region): the
# measurement reads every timed call's output back (`longca_runner.measure.readback.Readback`)
After = Callable[[object], None] | None


def median_interval(times: list[float]) -> tuple[float, float]:
    """A distribution-free 95 % interval of the median: the order statistics at n/2 -+ 1.96 sqrt(n)/2
    (the binomial's normal approximation; with 5 calls it is their range)."""
    ordered = sorted(times)
    n = len(ordered)
    half = 1.96 * n ** 0.5 / 2
    return ordered[max(0, int(np.floor(n / 2 - half)))], ordered[min(n - 1, int(np.ceil(n / 2 + half)))]


def precise_enough(times: list[float]) -> bool:
    """True when the median of `times` is known to within +-CI_TARGET (`median_interval`)."""
    low, high = median_interval(times)
    median = float(np.median(times))
    return median > 0 and (high - low) / 2 <= CI_TARGET * median


def until_precise(timer: Callable[[int], list[float]], repeat: int | None) -> list[float]:
    """`timer(n)` (n more timed calls) once for a fixed `repeat`; for None, in rounds until
    `precise_enough`, MAX_REPEAT calls or MAX_TIMED_S of timed calls, whichever comes first."""
    if repeat is not None:
        return timer(repeat)
    times = timer(MIN_REPEAT)
    while (len(times) < MAX_REPEAT and sum(times) < MAX_TIMED_S * 1e3 and not precise_enough(times)):
        times += timer(min(ROUND, MAX_REPEAT - len(times)))
    return times


def untimed_setup(fn: Callable[[], object]) -> Callable[[], None]:
    """What runs before each timed call of `fn`, outside the timed region: `fn.before` where the step has
    one (a backward that needs a fresh forward: measure.step.FreshForwardBackward), else nothing."""
    return getattr(fn, "before", None) or (lambda: None)


def time_ms(fn: Callable[[], object], device: torch.device, warmup: int = 5, repeat: int | None = 20,
            flush_l2: bool = True, after: After = None) -> list[float]:
    """Milliseconds of each of `repeat` calls of fn (None: `until_precise`), after `warmup` untimed calls;
    `after` gets each timed call's result right after its timer stopped."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    return until_precise(lambda n: _timed_calls(fn, device, n, flush_l2, after), repeat)


def _timed_calls(fn: Callable[[], object], device: torch.device, repeat: int, flush_l2: bool,
                 after: After = None) -> list[float]:
    """`repeat` timed calls: the host clock on a CPU, CUDA events (L2 flushed before each) on a GPU;
    `after` reads each result once its timer stopped (on CUDA, stream-ordered after the end event)."""
    before = untimed_setup(fn)
    if device.type != "cuda":
        times = []
        for _ in range(repeat):
            before()
            start = time.perf_counter()
            result = fn()
            times.append((time.perf_counter() - start) * 1e3)
            if after is not None:
                after(result)
        return times
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    for start_event, end_event in zip(starts, ends, strict=True):
        before()
        if flush_l2:
            _flush(device)
        start_event.record()
        result = fn()
        end_event.record()
        if after is not None:
            after(result)
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


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
                untimed_setup(fns[name])()
                start = time.perf_counter()
                fns[name]()
                times[name].append((time.perf_counter() - start) * 1e3)
        return times
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(repeat)] for name in fns}
    for i, turn in enumerate(turns):
        for name in turn:
            fn = fns[name]
            untimed_setup(fn)()
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


def check_timing(mode: str, device: str) -> None:
    """A mode that does not exist, or cannot run on this device, is an input error (one line)."""
    if mode not in TIMING_MODES:
        raise LongcaError(f"timing {mode!r}: use one of {', '.join(TIMING_MODES)}")
    if mode == "cuda_graph" and not device.startswith("cuda"):
        raise LongcaError(f"timing cuda_graph needs a CUDA device (graphs replay CUDA kernels), not {device!r}; "
                          f"on a CPU use events or profiler")


def time_graph_ms(fn: Callable[[], object], device: torch.device, warmup: int = 5, repeat: int | None = 20,
                  flush_l2: bool = True, after: After = None) -> list[float]:
    """Milliseconds of `repeat` replays of fn captured once in a CUDA graph, each timed with events,
    the L2 flushed before each replay (outside the graph). A step that cannot be captured (host
    synchronisation, allocations the graph cannot hold, a library that refuses capture) raises
    UnsupportedError with the reason: its row says why, the sweep goes on. `after` reads the graph's
    own output buffers after each replay (every replay writes them)."""
    if hasattr(fn, "before"):
        raise UnsupportedError("cannot be timed as a CUDA graph: its backward runs once per forward, and each "
                               "timed backward gets a fresh forward outside the timed region (use events)")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    try:
        with torch.cuda.stream(side):  # capture wants a warm-up on a side stream
            fn()
        torch.cuda.current_stream(device).wait_stream(side)
        with torch.cuda.graph(graph):
            static = fn()
    except Exception as exc:  # noqa: BLE001 - every capture failure is the row's reason
        torch.cuda.synchronize(device)
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise UnsupportedError(f"cannot be captured in a CUDA graph: {type(exc).__name__}: {text}"[:500]) from None

    def replays(n: int) -> list[float]:
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for start_event, end_event in pairs:
            if flush_l2:
                _flush(device)
            start_event.record()
            graph.replay()
            end_event.record()
            if after is not None:
                after(static)
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) for s, e in pairs]

    return until_precise(replays, repeat)


def device_ms(events: Any, cuda: bool) -> float:
    """Milliseconds of one profiled call: the sum of its device kernels' durations (CUDA), or of its
    top-level torch ops' host time (CPU, where there is no device)."""
    from torch.autograd import DeviceType

    if cuda:
        return sum(e.time_range.elapsed_us() for e in events if e.device_type == DeviceType.CUDA) / 1e3
    return sum(e.cpu_time_total for e in events if e.device_type == DeviceType.CPU and e.cpu_parent is None) / 1e3


def time_profiler_ms(fn: Callable[[], object], device: torch.device, warmup: int = 5, repeat: int | None = 20,
                     flush_l2: bool = True, after: After = None) -> list[float]:
    """Device time of each of `repeat` calls from torch.profiler: the L2 flush runs before the
    profiled region, so it is never counted; launch gaps and host work between kernels are not
    counted either (what events include and this excludes is the harness's and the launch cost)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    synchronize(device)
    cuda = device.type == "cuda"

    before = untimed_setup(fn)

    def profiled(n: int) -> list[float]:
        times = []
        for _ in range(n):
            before()
            if flush_l2 and cuda:
                _flush(device)
                synchronize(device)
            with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
                result = fn()
                synchronize(device)
            times.append(device_ms(prof.events(), cuda))
            if after is not None:
                after(result)
        return times

    return until_precise(profiled, repeat)


def time_by_mode(mode: str, fn: Callable[[], object], device: torch.device, warmup: int = 5, repeat: int | None = 20,
                 flush_l2: bool = True, after: After = None) -> list[float]:
    """Milliseconds of each timed call in one of TIMING_MODES (events: `time_ms`); `after` as there."""
    check_timing(mode, str(device))
    timer = {"events": time_ms, "cuda_graph": time_graph_ms, "profiler": time_profiler_ms}[mode]
    return timer(fn, device, warmup, repeat, flush_l2, after)
