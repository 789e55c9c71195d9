"""The one measurement path: timing and peak memory of a step, output checks, the status rules,
and measuring a single-GPU case (`run_problem`). CP ranks (`longca_cp.measure`) and the benchmark
scripts time their steps with the same `time_step` and summarise with the same rules.

Phases: every stage of a case calls `phase(name)`; a supervisor that runs the case in a worker
process (`longca.supervisor`) hears them, so a case it has to stop says where it was stuck.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional, Sequence, Union

import numpy as np
import torch

from . import memory, reference
from .errors import LongcaError, UnsupportedError
from .flops import attention_flops
from .plugins import Registry, get_registry
from .problem import Problem, build_mask, check_mask_params, make_inputs
from .results import UNAVAILABLE, Checked, ResultRow, new_row
from .specs import KernelSpec
from .timing import TIMING_MODES, host_ms, summarize, time_by_mode

log = logging.getLogger(__name__)
TOLERANCE = {"bfloat16": 1e-2, "float16": 1e-2, "float32": 1e-3}


CHECK_MODES = ("auto", "spot")
# reference FLOPs (4 * area * heads_q * head_dim * batch, forward) up to which "auto" checks a case
# against the whole float32 reference; above it, the forward on SPOT_WINDOWS windows of query rows
FULL_CHECK_FLOPS = {"cuda": 5e12, "cpu": 2e10}
SPOT_WINDOWS, SPOT_ROWS = 4, 64


@dataclass
class RunOptions:
    """How to measure: iterations, mask samples for document masks, correctness check."""

    warmup: int = 5
    repeat: int = 20
    samples: int = 5
    # True: against the whole reference; "spot": the forward on a few query windows; "auto": the
    # whole reference where it is cheap (FULL_CHECK_FLOPS), else spot; False: not checked
    check: Union[bool, str] = False
    flush_l2: bool = True
    tolerance: Optional[float] = None
    timing: str = "events"  # longca.timing.TIMING_MODES: events, cuda_graph, profiler

    def __post_init__(self) -> None:
        for name, low in (("warmup", 0), ("repeat", 1), ("samples", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise LongcaError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.check, bool) and self.check not in CHECK_MODES:
            modes = " or ".join(repr(m) for m in CHECK_MODES)
            raise LongcaError(f"check must be true, false, {modes}, got {self.check!r}")
        if self.tolerance is not None and not (isinstance(self.tolerance, (int, float)) and self.tolerance > 0):
            raise LongcaError(f"tolerance must be a positive number, got {self.tolerance!r}")
        if self.timing not in TIMING_MODES:
            raise LongcaError(f"timing {self.timing!r}: use one of {', '.join(TIMING_MODES)}")


# --- phases ----------------------------------------------------------------------------------

_phase_listener: Optional[Callable[[str], None]] = None
_current_phase: Optional[str] = None


def set_phase_listener(listener: Optional[Callable[[str], None]]) -> None:
    """Who hears `phase(name)` calls (the worker forwards them to its supervisor)."""
    global _phase_listener
    _phase_listener = listener


def phase(name: str) -> None:
    global _current_phase
    _current_phase = name
    if _phase_listener is not None:
        _phase_listener(name)


def current_phase() -> Optional[str]:
    return _current_phase


class KernelFailure(Exception):
    """A kernel broke its contract (wrong layout, non-finite values): the row's reason, status error."""


# --- checks and status rules -----------------------------------------------------------------

def check_device(device: str) -> None:
    """A CUDA device asked for on a machine without one is an input error."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise LongcaError(f"--device {device}: no CUDA GPU is visible (torch {torch.__version__}, "
                          f"CUDA build: {torch.version.cuda or 'none'}); use --device cpu")


def is_oom(exc: BaseException) -> bool:
    return (isinstance(exc, (torch.OutOfMemoryError, MemoryError))
            or "out of memory" in str(exc).lower())


def failure_reason(exc: BaseException) -> str:
    """One line for a row's reason: the exception type and the first line of its message."""
    if isinstance(exc, KernelFailure):
        return str(exc)[:500]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:500]


def failure_status(exc: BaseException) -> Literal["oom", "error"]:
    return "oom" if is_oom(exc) else "error"


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """norm(out - ref) / norm(ref), in float32; NaN anywhere gives NaN."""
    out, ref = out.float(), ref.float()
    denom = torch.linalg.vector_norm(ref).item()
    return torch.linalg.vector_norm(out - ref).item() / (denom or 1.0)


def _layout(t: Any) -> str:
    if not isinstance(t, torch.Tensor):
        return f"a {type(t).__name__}"
    return f"shape {tuple(t.shape)} {str(t.dtype).replace('torch.', '')} on {t.device.type}"


def check_tensor(what: str, got: Any, like: torch.Tensor) -> None:
    """`got` must have the layout of `like` (shape, dtype, device) and only finite values."""
    if (not isinstance(got, torch.Tensor) or got.shape != like.shape or got.dtype != like.dtype
            or got.device != like.device):
        raise KernelFailure(f"wrong output layout: {what} has {_layout(got)}, expected {_layout(like)}")
    finite = torch.isfinite(got.detach())
    if not bool(finite.all()):
        bad = int((~finite).sum())
        raise KernelFailure(f"non-finite output: {what} has {bad} NaN/Inf of {got.numel()} values")


def check_grads(grads: Sequence[Any], inputs: Sequence[torch.Tensor]) -> None:
    if len(grads) != len(inputs):
        raise KernelFailure(f"wrong output layout: backward gave {len(grads)} gradients, expected {len(inputs)}")
    for name, g, x in zip(("dq", "dk", "dv"), grads, inputs):
        check_tensor(name, g, x)


def finish(row: ResultRow, errors: Optional[dict[str, float]], tolerance: float,
           checked: Checked = "full") -> ResultRow:
    """Status ok, or incorrect when the worst relative error (NaN counts as worst) is over tolerance.

    `checked` records how the errors were measured: full (output and gradients against the whole
    reference) or spot (the forward on a few query windows)."""
    if errors is not None:
        worst = max(errors.values(), key=lambda e: math.inf if math.isnan(e) else e)
        row.rel_err, row.rel_err_detail, row.checked = worst, dict(errors), checked
        if math.isnan(worst) or worst > tolerance:
            row.status, row.reason = "incorrect", f"relative error {worst:.3g} > tolerance {tolerance:g}"
            return row
    row.status = "ok"
    return row


def fail(row: ResultRow, exc: BaseException, where: Optional[str] = None) -> ResultRow:
    """The row of a case that raised: oom or error, the one-line reason, the phase it was in."""
    row.status, row.reason, row.phase = failure_status(exc), failure_reason(exc), where
    return row


# --- timing a step and summarising samples ---------------------------------------------------

@dataclass
class Timed:
    """The timed calls of one step: every iteration's ms and the peak memory of one call (CUDA)."""

    times: list[float]
    peak: Optional[int] = None

    @property
    def summary(self) -> tuple[float, float, float]:
        return summarize(self.times)


def time_step(step: Callable[[], Any], device: torch.device, options: RunOptions,
              before_timing: Callable[[], None] = lambda: None) -> Timed:
    """Peak memory of one warm call (CUDA), then `options.warmup` + `options.repeat` calls timed.

    The caller has made the first call already (it compiles kernels and validates the output).
    `before_timing` runs right before the timed loop (CP ranks meet at a barrier there)."""
    peak = None
    if device.type == "cuda":
        phase("peak memory")
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
    before_timing()
    phase("timing")
    return Timed(time_by_mode(options.timing, step, device, options.warmup, options.repeat, options.flush_l2), peak)


@dataclass
class Sample:
    """One mask draw's measurement."""

    ms: tuple[float, float, float]
    iter_times: list[float]
    area: float
    flops: float
    peak: Optional[int]
    prepare_ms: float
    errors: Optional[dict[str, float]] = None
    ms_max_rank: Optional[float] = None
    extra: dict[str, Any] = field(default_factory=dict)
    checked: Checked = "no"  # how `errors` were measured: full, spot

    @property
    def tflops(self) -> Optional[float]:
        return self.flops / (self.ms[0] * 1e-3) / 1e12 if self.ms[0] > 0 else None


def summarize_samples(row: ResultRow, samples: list[Sample]) -> None:
    """Median over mask samples: times, TFLOP/s (each sample's own FLOPs / its time); mean area."""
    def med(values: list[float]) -> float:
        return float(np.median(values))

    peaks = [s.peak for s in samples if s.peak is not None]
    tflops = [s.tflops for s in samples]
    row.samples = len(samples)
    row.area = float(np.mean([s.area for s in samples]))
    row.flops = float(np.mean([s.flops for s in samples]))
    row.ms_median, row.ms_p20, row.ms_p80 = (med([s.ms[i] for s in samples]) for i in range(3))
    row.iter_times_ms = [float(t) for s in samples for t in s.iter_times]
    row.tflops = med([t for t in tflops if t is not None]) if all(t is not None for t in tflops) else None
    row.peak_mem_bytes = max(peaks) if peaks else None
    row.prepare_ms = med([s.prepare_ms for s in samples])
    ranks = [s.ms_max_rank for s in samples if s.ms_max_rank is not None]
    if ranks:
        row.ms_max_rank = med(ranks)


def n_samples(problem: Problem, options: RunOptions, registry: Registry) -> int:
    """Document masks are measured over several draws; the others once."""
    return max(1, options.samples) if registry.mask(problem.mask).uses_documents else 1


# --- a single-GPU case -----------------------------------------------------------------------

def unsupported_reason(spec: KernelSpec, problem: Problem, registry: Optional[Registry] = None) -> Optional[str]:
    """Why this kernel cannot run this problem here, from its declared capabilities; None if it can."""
    try:
        missing = spec.available()
    except Exception as exc:  # noqa: BLE001 - an availability probe must not crash a sweep
        missing = f"available() raised {type(exc).__name__}: {exc}"
    if missing:
        return f"{UNAVAILABLE}{missing}"
    claimed = (registry or get_registry()).claimed_masks(spec.masks)
    if problem.mask not in claimed:
        return f"mask {problem.mask} is not supported (supported: {', '.join(claimed)})"
    if problem.device_type not in spec.devices:
        return f"device {problem.device_type} is not supported (supported: {', '.join(spec.devices)})"
    if problem.dtype not in spec.dtypes:
        return f"dtype {problem.dtype} is not supported (supported: {', '.join(spec.dtypes)})"
    if spec.head_dims is not None and problem.head_dim not in spec.head_dims:
        return f"head_dim {problem.head_dim} is not supported (supported: {spec.head_dims})"
    if not spec.gqa and problem.heads_q != problem.heads_kv:
        return "GQA (heads_q != heads_kv) is not supported"
    if problem.direction != "fwd" and not spec.backward:
        return "backward is not supported"
    if spec.min_compute_capability and problem.device_type == "cuda":
        cc = torch.cuda.get_device_capability(problem.device)
        if cc < spec.min_compute_capability:
            need = ".".join(map(str, spec.min_compute_capability))
            return f"needs compute capability >= {need}, this GPU has {cc[0]}.{cc[1]}"
    return spec.supports(problem) if spec.supports else None


def fits(spec: KernelSpec, problem: Problem, options: RunOptions) -> Optional[str]:
    """Why the case cannot fit in memory (from the kernel's memory model, plus the check), or None."""
    try:
        needs = (spec.memory or memory.linear)(problem)
    except Exception:  # noqa: BLE001 - a broken memory model falls back to the linear one
        needs = memory.linear(problem)
    if options.check:
        needs += memory.check_bytes(problem)
    return memory.too_big(problem, int(needs))


def _grads(out: torch.Tensor, inputs, dout: torch.Tensor):
    return torch.autograd.grad(out, inputs, dout, retain_graph=True)


def _check(spec, problem, mask, prepared, q, k, v, dout) -> dict[str, float]:
    """Relative errors of output (and gradients) against the float32 reference on the same mask."""
    phase("check")
    qf, kf, vf = (t.detach().float().requires_grad_(problem.direction != "fwd") for t in (q, k, v))
    ref = reference.attention(qf, kf, vf, mask)
    out = spec.run(prepared, q, k, v)
    errors = {"out": rel_err(out, ref)}
    if problem.direction != "fwd":
        got = _grads(out, (q, k, v), dout)
        want = _grads(ref, (qf, kf, vf), dout.float())
        errors.update({f"d{n}": rel_err(g, w) for n, g, w in zip("qkv", got, want)})
    return errors


def check_mode(problem: Problem, mask, options: RunOptions) -> Checked:
    """How a case is checked: "full", "spot" or "no" (see RunOptions.check)."""
    if options.check is True:
        return "full"
    if options.check is False:
        return "no"
    if options.check == "spot":
        return "spot"
    work = 4 * mask.area * problem.heads_q * problem.head_dim * problem.batch
    return "full" if work <= FULL_CHECK_FLOPS.get(problem.device_type, FULL_CHECK_FLOPS["cpu"]) else "spot"


def spot_windows(problem: Problem) -> list[tuple[int, int]]:
    """A few query windows, seeded by the case: random ones and the last rows (where tails go wrong)."""
    rows = min(SPOT_ROWS, problem.seqlen)
    rng = np.random.default_rng([problem.seed, problem.seqlen, 17])
    starts = {problem.seqlen - rows, *rng.integers(0, problem.seqlen - rows + 1, SPOT_WINDOWS - 1).tolist()}
    return [(int(a), int(a) + rows) for a in sorted(starts)]


def _spot_check(spec, problem, mask, prepared, q, k, v) -> dict[str, float]:
    """Relative error of the forward on a few query windows against the reference on those rows only."""
    phase("check")
    with torch.no_grad():
        out = spec.run(prepared, q, k, v)
        got, want = [], []
        for r0, r1 in spot_windows(problem):
            got.append(out[:, r0:r1])
            want.append(reference.forward_lse(q.detach(), k.detach(), v.detach(), mask, rows=(r0, r1))[0])
    return {"out_rows": rel_err(torch.cat(got, 1), torch.cat(want, 1))}


def _measure_sample(spec: KernelSpec, problem: Problem, mask, sample: int, options: RunOptions,
                    check: Checked) -> Sample:
    device = torch.device(problem.device)
    needs_grad = problem.direction != "fwd"
    phase("inputs")
    q, k, v = make_inputs(problem, sample, requires_grad=needs_grad)
    phase("prepare")
    prepare_ms, prepared = host_ms(lambda: spec.prepare(problem, mask, q, k, v), device)
    dout = torch.randn_like(q) if needs_grad else None
    phase("first call")
    if problem.direction == "fwd":
        def step():
            with torch.no_grad():
                return spec.run(prepared, q, k, v)
        check_tensor("the output", step(), q)  # also the warm call: JIT compilation, workspaces
    else:
        out = spec.run(prepared, q, k, v)
        check_tensor("the output", out, q)
        phase("backward")
        assert dout is not None  # made above for every direction but fwd
        check_grads(_grads(out, (q, k, v), dout), (q, k, v))
        if problem.direction == "bwd":
            def step():
                return _grads(out, (q, k, v), dout)
        else:
            def step():
                return _grads(spec.run(prepared, q, k, v), (q, k, v), dout)
    timed = time_step(step, device, options)
    flops = attention_flops(mask.area, problem.heads_q, problem.head_dim, problem.batch, problem.direction)
    errors = None
    if check == "full":
        errors = _check(spec, problem, mask, prepared, q, k, v, dout)
    elif check == "spot":
        errors = _spot_check(spec, problem, mask, prepared, q, k, v)
    return Sample(timed.summary, timed.times, mask.area, flops, timed.peak, prepare_ms, errors, checked=check)


def run_problem(problem: Problem, options: Optional[RunOptions] = None,
                registry: Optional[Registry] = None) -> ResultRow:
    """Measure one problem in this process and return its row; never raises for kernel failures.

    Unknown names and bad parameters raise LongcaError (input errors); everything that goes
    wrong inside the kernel becomes the row's status: unsupported, oom, error or incorrect.
    """
    options = options or RunOptions()
    registry = registry or get_registry()
    spec = registry.kernel(problem.kernel)
    registry.mask(problem.mask)
    registry.sampler(problem.sampler)
    check_mask_params(problem, registry)
    check_device(problem.device)
    row = new_row(problem)
    row.timing = options.timing
    phase("supports")
    try:
        reason = unsupported_reason(spec, problem, registry)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a supports() that raises is its row, not the sweep's end
        row.status, row.reason, row.phase = "error", f"supports() raised {failure_reason(exc)}", "supports"
        return row
    if reason:
        row.status, row.reason = "unsupported", str(reason)
        return row
    try:
        row.backend = spec.backend() or spec.name
    except Exception:  # noqa: BLE001 - a backend label must not stop a run
        row.backend = spec.name
    phase("memory check")
    too_big = fits(spec, problem, options)
    if too_big:
        row.status, row.reason, row.phase = "oom", too_big, "memory check"
        return row
    samples = []
    for sample in range(n_samples(problem, options, registry)):
        mask = mask_of(problem, sample, registry)
        refusal = mask_refusal(spec, problem, mask)
        if refusal:
            row.status, row.reason = "unsupported", refusal
            return row
        try:
            mode = check_mode(problem, mask, options) if sample == 0 else "no"
            samples.append(_measure_sample(spec, problem, mask, sample, options, mode))
        except UnsupportedError as exc:  # the kernel refused this problem once it saw it
            row.status, row.reason = "unsupported", str(exc)
            return row
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - recorded in the row, the sweep goes on
            log.debug("case failed", exc_info=True)
            if problem.device_type == "cuda":
                torch.cuda.empty_cache()
            return fail(row, exc, current_phase())
    summarize_samples(row, samples)
    return finish(row, samples[0].errors, options.tolerance or TOLERANCE[problem.dtype], samples[0].checked)


def mask_refusal(spec: KernelSpec, problem: Problem, mask) -> Optional[str]:
    """The kernel's `supports_mask(problem, mask)` on the mask built for the run (never builds one)."""
    if spec.supports_mask is None:
        return None
    phase("supports")
    try:
        return spec.supports_mask(problem, mask)
    except Exception as exc:  # noqa: BLE001 - a raising check is a refusal with its reason
        return f"supports_mask() raised {failure_reason(exc)}"


def mask_of(problem: Problem, sample: int, registry: Registry):
    """The problem's mask; a mask that cannot be built from the given parameters is an input error."""
    phase("mask")
    try:
        return build_mask(problem, sample, registry)
    except LongcaError:
        raise
    except Exception as exc:  # noqa: BLE001 - bad parameters (density=abc), reported as one line
        params = ", ".join(f"{k}={v!r}" for k, v in problem.mask_params.items()) or "default parameters"
        raise LongcaError(f"mask {problem.mask!r} ({params}, sampler {problem.sampler!r}"
                          f"{' ' + str(problem.sampler_params) if problem.sampler_params else ''}): "
                          f"{failure_reason(exc)}") from None
