"""Conformance case `timing-integrity-DEV`: the timed call really does the work it is credited with.

A copy of the plugin template whose forward remembered its output per input buffers passed every
other case and recorded 81 TFLOP/s on a 2-core CPU. So the forward is timed through longca's own
step and timer (`make_step`, `time_ms`, no_grad as in every fwd row), and (docs/timing-integrity.md):

- every timed call runs on fresh values (drawn from the OS) in fresh buffers, prepared again (a
  kernel may keep what `prepare` derives from its inputs, as FP8 kernels quantize there), and its
  output, read right after its timer stopped, matches the reference on those inputs;
- the output read after a synchronisation and a pause equals the one read right after the call
  (work left on a thread or a side stream fails); an output buffer the next call reuses is legal;
- calls repeated on inputs the kernel has seen take about as long as calls on inputs it has not
  (an output cached per buffer, per version, per a hash of the values, fails);
- the timer, `time.perf_counter`, `torch.cuda.Event` and `torch.cuda.synchronize` are the
  originals after the kernel was imported, prepared and run.

Conformance case `work-scaling-DEV` (`check_work`): four times the heads (four times the FLOPs)
takes clearly longer (a result made in `prepare`, or work that does not grow with the problem,
fails).

The two timing comparisons judge ratios of the fastest calls with wide margins (a cheat is off by
10x and more, an honest kernel by a few tens of percent) and are measured again, with new inputs,
before they fail: a loaded machine's bursts pass on a retry, a cheat never does.
"""
from __future__ import annotations

import inspect
import math
import os
import secrets
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import torch

from longca import reference
from longca.plugins import Registry
from longca.problem import Problem, build_mask, make_inputs
from longca.specs import KernelSpec
from longca_runner import measure, timing
from longca_runner.measure import make_step, rel_err, result_tensors, tolerance_for

CALLS = 3  # timed calls judged against the reference, each on its own fresh inputs
SETTLE_S = 0.2  # pause before the second read: longer than any honest call at the suite's sizes
REPEATS = 5  # calls per side of the seen-vs-fresh and the small-vs-large comparisons
SEEN_FASTER = 4.0  # fastest call on seen inputs this many times faster than the fastest fresh one: a cache
ATTEMPTS = 3  # a comparison that fails is measured again, on new inputs, at most this often
SCALE = 4  # the large problem of the work check has this many times the heads (and FLOPs)
GROWTH = 1.6  # it must take more than this many times as long (reference, sdpa, torch on CPU: about 3-4x)
WORK_MASKS = ("causal", "full")
CUDA_WORK_SEQLEN, CUDA_WORK_HEADS = 4096, 8  # the work check's small problem on a GPU: past launch-bound sizes
# ... and where a kernel's fastest call there is under WORK_MIN_MS (per device type), both problems' length
# doubles until it is not, at most to WORK_MAX_SEQLEN: an honest call with a fixed host cost (cuDNN's
# flex_attn_func: 1.29x for 4x the heads at 4096 while 16 test processes shared the H200) is compared where
# its work shows, and a call that does no work grows to the longest length and is compared there; a pair that
# fails where the ladder stopped is compared again at the longest length (TE's DotProductAttention, 2026-12-07: a
# host cost per call above WORK_MIN_MS, 1.12x for 4x the heads at 4096 while nvcc compiled beside it)
WORK_MIN_MS: dict[str, float] = {"cuda": 0.5}
WORK_MAX_SEQLEN = 16384


def _under(fn: Any, folder: str) -> bool:
    code = getattr(fn, "__code__", None) or getattr(getattr(fn, "__func__", None), "__code__", None)
    return code is not None and os.path.abspath(code.co_filename).startswith(folder)


def timer_tampering() -> list[str]:
    """Which of the clocks and timers longca measures with are not the originals."""
    problems = []
    clock = sys.modules["time"]
    for name in ("perf_counter", "perf_counter_ns", "monotonic"):
        fn = getattr(clock, name)
        if not (isinstance(fn, types.BuiltinFunctionType) and fn.__module__ == "time"):
            problems.append(f"time.{name} is {fn!r}, not the builtin")
    if timing.time is not clock:
        problems.append("longca_runner.timing.time is not the time module")
    longca_timing = os.path.abspath(inspect.getfile(timing))
    for name in ("time_ms", "time_interleaved", "time_graph_ms", "time_profiler_ms", "time_by_mode", "host_ms",
                 "synchronize", "_flush"):
        fn = getattr(timing, name)
        if getattr(getattr(fn, "__code__", None), "co_filename", None) is None \
                or os.path.abspath(fn.__code__.co_filename) != longca_timing:
            problems.append(f"longca_runner.timing.{name} is replaced ({fn!r})")
    for module, name in ((measure.step, "time_by_mode"), (measure.case, "host_ms")):  # where the path calls them
        if getattr(module, name) is not getattr(timing, name):
            problems.append(f"{module.__name__}.{name} is not longca_runner.timing.{name}")
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    event = torch.cuda.Event
    if event is not torch.cuda.streams.Event or not event.__module__.startswith("torch.cuda"):
        problems.append(f"torch.cuda.Event is {event!r}, not torch's")
    for name in ("record", "elapsed_time", "synchronize", "__new__"):
        if not _under(getattr(event, name, None), torch_dir):
            problems.append(f"torch.cuda.Event.{name} is replaced")
    if not _under(torch.cuda.synchronize, torch_dir):
        problems.append("torch.cuda.synchronize is replaced")
    return problems


_alive: list[Any] = []  # every input set of one check: no later set gets a freed one's addresses


class Inputs:
    """One fresh draw of q, k, v (own buffers, values from a seed drawn from the OS), what `prepare`
    made of them, and the fwd step of longca's measurement path over them."""

    def __init__(self, spec: KernelSpec, problem: Problem, mask: Any):
        _alive.append(self)
        self.q, self.k, self.v = make_inputs(problem, secrets.randbits(30))
        self.state = spec.prepare(problem, mask, self.q, self.k, self.v)
        self.call = make_step(lambda: spec.run(self.state, self.q, self.k, self.v), (self.q, self.k, self.v), "fwd")


class Cycle:
    """A timed function that runs the next input set on each call."""

    def __init__(self, sets: list[Inputs]):
        self.sets, self.i = sets, 0

    def __call__(self) -> Any:
        step = self.sets[self.i % len(self.sets)].call
        self.i += 1
        return step()


def _fault(describe: Callable[[Problem], str], problem: Problem, text: str) -> AssertionError:
    return AssertionError(f"{describe(problem)}: {text}")


def check_fresh_calls(spec: KernelSpec, problem: Problem, mask: Any, describe: Callable[[Problem], str]) -> None:
    """Each timed call on fresh inputs is right, read right after its timer and after a pause."""
    device = torch.device(problem.device)
    tolerance = tolerance_for(problem, spec)
    sets = [Inputs(spec, problem, mask) for _ in range(CALLS)]
    results: list[tuple[torch.Tensor, ...]] = []
    snaps: list[torch.Tensor] = []

    def read(result: Any) -> None:  # right after the timer stopped (stream-ordered on CUDA)
        tensors = result_tensors(result)
        results.append(tensors)
        snaps.append(tensors[0].detach().clone())

    try:
        timing.time_ms(Cycle(sets), device, warmup=0, repeat=CALLS, after=read)
    except measure.KernelFailure as exc:
        raise _fault(describe, problem, str(exc)) from None
    time.sleep(SETTLE_S)
    timing.synchronize(device)
    try:
        measure.check_tensor("the output", results[-1][0], sets[-1].q, (*sets[-1].q.shape[:-1], problem.dv))
    except measure.KernelFailure as exc:
        raise _fault(describe, problem, str(exc)) from None
    for i, (out, snap, given) in enumerate(zip(results, snaps, sets, strict=True)):
        reused = any(later[0].data_ptr() == out[0].data_ptr() for later in results[i + 1:])  # legal
        if not reused and not torch.equal(out[0].detach(), snap):
            raise _fault(describe, problem, f"timed call {i + 1}'s output changed after the timer stopped: work runs "
                                            f"past the timed call (a thread, a side stream, a lazy result), so its "
                                            f"time is not the work's")
        want = reference.attention(given.q.float(), given.k.float(), given.v.float(), mask)
        err = rel_err(snap, want)
        if not err <= tolerance:
            same = i > 0 and torch.equal(snap, snaps[i - 1])
            raise _fault(describe, problem, f"timed call {i + 1} on fresh inputs (new values, new buffers, prepared "
                                            f"again) is off the reference by {err:.3g} > {tolerance:g}"
                         + (": it returned the previous call's output, a result cached per something other "
                            "than the values" if same else ""))


def _fastest(make: Callable[[], dict[str, Callable[[], object]]], device: torch.device,
             ratio: Callable[[dict[str, float]], float], passes: Callable[[float], bool]) -> float:
    """The ratio of the fastest calls of each side (the statistic a loaded machine moves least),
    measured again on new inputs (`make`) up to ATTEMPTS times while it fails."""
    value = float("nan")
    for _ in range(ATTEMPTS):
        times = timing.time_interleaved(make(), device, warmup=1, repeat=REPEATS)
        value = ratio({name: min(t) for name, t in times.items()})
        if passes(value):
            break
    return value


def check_seen_inputs(spec: KernelSpec, problem: Problem, mask: Any, describe: Callable[[Problem], str]) -> None:
    """Calls on inputs the kernel has seen are not much faster than calls on inputs it has not."""
    def sides() -> dict[str, Callable[[], object]]:
        fresh = Cycle([Inputs(spec, problem, mask) for _ in range(REPEATS + 1)])  # one more: the warm-up
        return {"seen": Inputs(spec, problem, mask).call, "fresh": fresh}

    faster = _fastest(sides, torch.device(problem.device), lambda t: t["fresh"] / max(t["seen"], 1e-9),
                      lambda x: x <= SEEN_FASTER)
    if not faster <= SEEN_FASTER:
        raise _fault(describe, problem, f"calls on inputs it has seen are {faster:.1f}x faster than calls on fresh "
                                        f"inputs (fastest of {REPEATS} each, {ATTEMPTS} tries): the output is "
                                        f"remembered (a cache keyed by the buffers or the values), the timed "
                                        f"loop's repeats are not doing the work")


def work_problems(spec: KernelSpec, problem: Problem, registry: Registry) -> tuple[Problem, Problem] | str:
    """The small and the large (SCALE x the heads) problem of the work check, or why the kernel
    refuses them: on a plain mask where claimed (a document mask's per-slice overhead hides the
    heads' work at the suite's sizes), past launch-bound sizes on a GPU."""
    claimed = registry.claimed_masks(spec.masks)
    small = problem.with_(mask=next((m for m in WORK_MASKS if m in claimed), problem.mask), mask_params={})
    if small.mask == problem.mask:
        small = problem
    if problem.device_type == "cuda":
        small = small.with_(seqlen=CUDA_WORK_SEQLEN, heads_q=CUDA_WORK_HEADS, heads_kv=CUDA_WORK_HEADS)
    large = small.with_(heads_q=small.heads_q * SCALE, heads_kv=small.heads_kv * SCALE)
    refused = refusal(spec, small) or refusal(spec, large)
    return (small, large) if refused is None else f"{small.heads_q * SCALE} heads refused: {refused}"


def check_work_grows(spec: KernelSpec, small: Problem, large: Problem, registry: Registry,
                     describe: Callable[[Problem], str]) -> str | None:
    """SCALE x the FLOPs (`work_problems`) takes more than GROWTH x the time: the work is done in the
    timed call. Returns why the kernel refused a built mask (nothing compared), else None."""
    masks = _pair_masks(small, large, registry)
    refused = _pair_refusal(spec, small, large, masks)
    if refused:
        return refused

    def sides() -> dict[str, Callable[[], object]]:
        return {"small": Inputs(spec, small, masks["small"]).call, "large": Inputs(spec, large, masks["large"]).call}

    laddered = small.device_type in WORK_MIN_MS
    if laddered:
        small, large, masks = past_launch_bound(spec, small, large, masks, registry)
    ratio = _fastest(sides, torch.device(small.device), lambda t: t["large"] / max(t["small"], 1e-9),
                     lambda x: x > GROWTH)
    if not ratio > GROWTH and laddered:  # a host cost above WORK_MIN_MS stopped the ladder early: the longest length
        longest = past_launch_bound(spec, small, large, masks, registry, least=math.inf)
        if longest[0].seqlen != small.seqlen:
            small, large, masks = longest
            ratio = _fastest(sides, torch.device(small.device), lambda t: t["large"] / max(t["small"], 1e-9),
                             lambda x: x > GROWTH)
    if not ratio > GROWTH:
        raise _fault(describe, large, f"{SCALE}x the heads ({SCALE}x the FLOPs) took {ratio:.2f}x the time of "
                                      f"{small.heads_q}:{small.heads_kv} heads (honest kernels: about {SCALE}x; "
                                      f"more than {GROWTH:g}x required, fastest of {REPEATS} calls, {ATTEMPTS} "
                                      f"tries): the timed call does not do work that grows with the problem (a "
                                      f"result made in prepare, or work skipped)")
    return None


def past_launch_bound(spec: KernelSpec, small: Problem, large: Problem, masks: dict[str, Any],
                      registry: Registry, least: float | None = None) -> tuple[Problem, Problem, dict[str, Any]]:
    """The work check's pair (and masks) at the shortest length, doubling from the given one, where
    the small problem's fastest call takes `least` ms (default: WORK_MIN_MS of its device type), or at
    the longest the kernel takes up to WORK_MAX_SEQLEN (`least=math.inf`: the longest, untimed)."""
    least = WORK_MIN_MS[small.device_type] if least is None else least
    while True:
        if small.seqlen * 2 > WORK_MAX_SEQLEN:
            return small, large, masks
        if least != math.inf:
            fastest = min(timing.time_interleaved({"small": Inputs(spec, small, masks["small"]).call},
                                                  torch.device(small.device), warmup=1, repeat=REPEATS)["small"])
            _alive.clear()
            if fastest >= least:
                return small, large, masks
        longer_small, longer_large = small.with_(seqlen=small.seqlen * 2), large.with_(seqlen=large.seqlen * 2)
        if refusal(spec, longer_small) or refusal(spec, longer_large):
            return small, large, masks
        bigger = _pair_masks(longer_small, longer_large, registry)
        if _pair_refusal(spec, longer_small, longer_large, bigger):
            return small, large, masks
        small, large, masks = longer_small, longer_large, bigger


def _pair_masks(small: Problem, large: Problem, registry: Registry) -> dict[str, Any]:
    return {"small": build_mask(small, 0, registry), "large": build_mask(large, 0, registry)}


def _pair_refusal(spec: KernelSpec, small: Problem, large: Problem, masks: dict[str, Any]) -> str | None:
    """Why the kernel refuses either built mask of the pair, or None."""
    return measure.mask_refusal(spec, small, masks["small"]) or measure.mask_refusal(spec, large, masks["large"])


def check(spec: KernelSpec, problem: Problem, registry: Registry, describe: Callable[[Problem], str]) -> None:
    """Raise AssertionError naming the first integrity fault of the kernel's timed forward."""
    mask = build_mask(problem, 0, registry)
    try:
        check_fresh_calls(spec, problem, mask, describe)
        check_seen_inputs(spec, problem, mask, describe)
        tampered = timer_tampering()
        if tampered:
            raise _fault(describe, problem, "after import, prepare and run, the timers are not the originals: "
                         + "; ".join(tampered))
    finally:
        _alive.clear()


def check_work(spec: KernelSpec, small: Problem, large: Problem, registry: Registry,
               describe: Callable[[Problem], str]) -> str | None:
    """The `work-scaling-DEV` case (`check_work_grows`); returns a refusal's reason, else None."""
    try:
        return check_work_grows(spec, small, large, registry, describe)
    finally:
        _alive.clear()


def refusal(spec: KernelSpec, problem: Problem) -> str | None:
    """supports()' answer, where the case cannot run (the mask cases report a raising supports())."""
    try:
        return spec.supports(problem) if spec.supports else None
    except Exception as exc:  # noqa: BLE001 - reported by the mask cases
        return f"supports() raised {type(exc).__name__}: {exc}"
