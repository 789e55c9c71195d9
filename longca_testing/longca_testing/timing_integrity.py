"""Conformance case `timing-integrity-DEV`: the timed call really does the work it is credited with.

A copy of the plugin template whose forward remembered its output per input buffers passed every
other case and recorded 81 TFLOP/s on a 2-core CPU. So the forward is timed with longca's own timer
while the inputs change in place between calls, and:

- every call's output matches the reference on that call's inputs (an output cached per buffer,
  or per anything but the values, fails);
- the output read right after the call, inside the timed region, equals the output read after a
  synchronisation and a pause (work left running on a thread, or on a stream the timer does not
  wait for, fails);
- the timer, `time.perf_counter`, `torch.cuda.Event` and `torch.cuda.synchronize` are the
  originals after the kernel was imported, prepared and run;
- a fresh prepare on fresh buffers after the timing still matches the reference.
"""
from __future__ import annotations

import inspect
import os
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
from longca_runner.measure import TOLERANCE, rel_err

CALLS = 3  # timed calls, each on new input values in the same buffers
SETTLE_S = 0.2  # pause before the second read: longer than any honest call at the suite's sizes


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


def _refill(tensors: tuple[torch.Tensor, ...], seed: int) -> tuple[torch.Tensor, ...]:
    """New random values written into the same buffers (data pointers unchanged); their copies."""
    gen = torch.Generator().manual_seed(seed)
    for t in tensors:
        t.copy_(torch.randn(t.shape, generator=gen, dtype=torch.float32).to(t.dtype))
    return tuple(t.detach().clone() for t in tensors)


def check(spec: KernelSpec, problem: Problem, registry: Registry, describe: Callable[[Problem], str]) -> None:
    """Raise AssertionError naming the first integrity fault of the kernel's timed forward."""
    device = torch.device(problem.device)
    tolerance = TOLERANCE[problem.dtype]
    mask = build_mask(problem, 0, registry)
    q, k, v = make_inputs(problem, 0)
    prepared = spec.prepare(problem, mask, q, k, v)
    inputs: list[tuple[torch.Tensor, ...]] = []
    outs: list[Any] = []
    snaps: list[torch.Tensor] = []

    def timed() -> None:
        inputs.append(_refill((q, k, v), 1000 + len(inputs)))  # the values change between timed calls
        with torch.no_grad():
            out = spec.run(prepared, q, k, v)
        outs.append(out)
        snaps.append(out.detach().clone())  # read before the timer stops (stream-ordered on CUDA)

    timing.time_ms(timed, device, warmup=0, repeat=CALLS)
    time.sleep(SETTLE_S)
    timing.synchronize(device)
    try:
        measure.check_tensor("the output", outs[-1], q)
    except measure.KernelFailure as exc:
        raise AssertionError(f"{describe(problem)}: {exc}") from None
    for i, (out, snap, (qi, ki, vi)) in enumerate(zip(outs, snaps, inputs, strict=True)):
        if not torch.equal(out.detach(), snap):
            raise AssertionError(f"{describe(problem)}: timed call {i + 1}'s output changed after the timer "
                                 f"stopped: work runs past the timed call (a thread, a side stream, a lazy "
                                 f"result), so its time is not the work's")
        want = reference.attention(qi.float(), ki.float(), vi.float(), mask)
        err = rel_err(snap, want)
        if not err <= tolerance:
            same = i > 0 and torch.equal(snap, snaps[i - 1])
            raise AssertionError(f"{describe(problem)}: timed call {i + 1} on new input values (same buffers) "
                                 f"is off the reference by {err:.3g} > {tolerance:g}"
                                 + (": it returned the previous call's output, a result cached per input "
                                    "buffer" if same else ""))
    tampered = timer_tampering()
    if tampered:
        raise AssertionError(f"{describe(problem)}: after import, prepare and run, the timers are not the "
                             f"originals: " + "; ".join(tampered))
    fresh = make_inputs(problem, 1)
    with torch.no_grad():
        out = spec.run(spec.prepare(problem, mask, *fresh), *fresh)
    qf, kf, vf = (t.float() for t in fresh)
    err = rel_err(out, reference.attention(qf, kf, vf, mask))
    if not err <= tolerance:
        raise AssertionError(f"{describe(problem)}: after timing, a fresh prepare on fresh inputs is off the "
                             f"reference by {err:.3g} > {tolerance:g}")


def refusal(spec: KernelSpec, problem: Problem) -> str | None:
    """supports()' answer, where the case cannot run (the mask cases report a raising supports())."""
    try:
        return spec.supports(problem) if spec.supports else None
    except Exception as exc:  # noqa: BLE001 - reported by the mask cases
        return f"supports() raised {type(exc).__name__}: {exc}"
