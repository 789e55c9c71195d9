"""One single-GPU case in this process (`run_problem`): refusals, memory check, mask draws, the
checked first call, timing, the correctness check, and the row. Never raises for kernel failures."""
from __future__ import annotations

import logging

import torch

from longca import memory
from longca.capability import unsupported_reason
from longca.errors import LongcaError, UnsupportedError
from longca.flops import problem_flops
from longca.plugins import Registry, get_registry
from longca.problem import Problem, build_mask, check_mask_params, make_inputs, make_sinks
from longca.results import Checked, ResultRow, new_row
from longca.specs import KernelSpec
from longca_runner.measure.checks import check_mode, full_check, spot_check
from longca_runner.measure.checks import shared as shared_reference
from longca_runner.measure.energy import energy_per_call
from longca_runner.measure.options import RunOptions, tolerance_for
from longca_runner.measure.phases import Phases
from longca_runner.measure.readback import Readback
from longca_runner.measure.repeatable import repeatability
from longca_runner.measure.samples import Sample, n_samples, summarize_samples
from longca_runner.measure.status import fail, failure_reason, finish
from longca_runner.measure.step import checked_step, seeded_dout, time_step
from longca_runner.timing import host_ms

log = logging.getLogger(__name__)


def check_device(device: str) -> None:
    """A CUDA device asked for on a machine without one is an input error."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise LongcaError(f"--device {device}: no CUDA GPU is visible (torch {torch.__version__}, "
                          f"CUDA build: {torch.version.cuda or 'none'}); use --device cpu")


def fits(spec: KernelSpec, problem: Problem, options: RunOptions) -> str | None:
    """Why the case cannot fit in memory (from the kernel's memory model, plus the check), or None."""
    try:
        needs = (spec.memory or memory.linear)(problem)
    except Exception:  # noqa: BLE001 - a broken memory model falls back to the linear one
        needs = memory.linear(problem)
    if options.check:
        needs += memory.check_bytes(problem)
    return memory.too_big(problem, int(needs))


def mask_refusal(spec: KernelSpec, problem: Problem, mask, phases: Phases | None = None) -> str | None:
    """The kernel's `supports_mask(problem, mask)` on the mask built for the run (never builds one)."""
    if spec.supports_mask is None:
        return None
    (phases or Phases())("supports")
    try:
        return spec.supports_mask(problem, mask)
    except Exception as exc:  # noqa: BLE001 - a raising check is a refusal with its reason
        return f"supports_mask() raised {failure_reason(exc)}"


def mask_of(problem: Problem, sample: int, registry: Registry, phases: Phases | None = None):
    """The problem's mask; a mask that cannot be built from the given parameters is an input error."""
    (phases or Phases())("mask")
    try:
        return build_mask(problem, sample, registry)
    except LongcaError:
        raise
    except Exception as exc:  # noqa: BLE001 - bad parameters (density=abc), reported as one line
        params = ", ".join(f"{k}={v!r}" for k, v in problem.mask_params.items()) or "default parameters"
        raise LongcaError(f"mask {problem.mask!r} ({params}, sampler {problem.sampler!r}"
                          f"{' ' + str(problem.sampler_params) if problem.sampler_params else ''}): "
                          f"{failure_reason(exc)}") from None


def _measure_sample(spec: KernelSpec, problem: Problem, mask, sample: int, options: RunOptions,
                    check: Checked, phases: Phases) -> Sample:
    device = torch.device(problem.device)
    needs_grad = problem.direction != "fwd"
    phases("inputs")
    q, k, v = make_inputs(problem, sample, requires_grad=needs_grad)
    sinks = make_sinks(problem, sample, requires_grad=needs_grad) if problem.sinks else None
    inputs = (q, k, v) if sinks is None else (q, k, v, sinks)  # the sinks' gradient is part of the backward
    phases("prepare")
    prepare_ms, prepared = host_ms(lambda: spec.prepare(problem, mask, q, k, v), device)
    dout = seeded_dout(problem, sample) if needs_grad else None
    extra = {} if sinks is None else {"sinks": sinks}  # asked only of kernels that take them (KernelSpec.sinks)
    step = checked_step(lambda: spec.run(prepared, q, k, v, **extra), inputs, problem.direction, dout, phases,
                        fresh_forward=spec.backward_once)
    readback = Readback(options.repeat, keep=check != "no", output_only=check == "spot")  # the check judges it
    timed = time_step(step, device, options, phases=phases, after=readback)
    readback.verify()
    repeat = None
    if needs_grad and sample == 0:
        phases("repeatability")
        repeat = repeatability(step)
    energy = None
    if options.energy and sample == 0 and not hasattr(step, "before"):  # a fresh forward would be counted
        phases("energy")
        energy = energy_per_call(step, device)
    flops = problem_flops(problem, mask.area)
    errors = None
    if check != "no":
        assert readback.kept is not None  # the kept call is one of the first repeat (>= 1) timed calls
        errors = (full_check(problem, mask, readback.kept, q, k, v, dout, phases, sample, sinks) if check == "full"
                  else spot_check(problem, mask, readback.kept[0], q, k, v, phases, sample, sinks))
    return Sample(timed.summary, timed.times, mask.area, flops, timed.peak, prepare_ms, errors, checked=check,
                  repeatability=repeat, energy=energy)


def _refused(spec: KernelSpec, problem: Problem, options: RunOptions, registry: Registry, row: ResultRow,
             phases: Phases) -> bool:
    """Fill the row of a case refused before any mask is built (capabilities, memory); True if refused."""
    phases("supports")
    try:
        reason = unsupported_reason(spec, problem, registry)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a supports() that raises is its row, not the sweep's end
        row.status, row.reason, row.phase = "error", f"supports() raised {failure_reason(exc)}", "supports"
        return True
    if reason:
        row.status, row.reason = "unsupported", str(reason)
        return True
    try:
        row.backend = spec.backend() or spec.name
    except Exception:  # noqa: BLE001 - a backend label must not stop a run
        row.backend = spec.name
    row.quantized = spec.quantized or None
    phases("memory check")
    too_big = fits(spec, problem, options)
    if too_big:
        row.status, row.reason, row.phase = "oom", too_big, "memory check"
        return True
    return False


def too_slow(problem: Problem, mask, options: RunOptions, samples: int, phases: Phases) -> str | None:
    """Why the case cannot finish on this machine (`longca_runner.estimate`), or None; the supervisor hears
    the default deadline that follows from the estimate."""
    from .. import estimate

    phases("estimate")
    found = estimate.estimate(problem, mask.area, options, samples)
    if found is None:  # no matmul could be timed here: the case's own calls will say why
        return None
    phases.estimated(found.deadline_s)
    return estimate.refusal(found)


def interrupted_by_user(exc: BaseException) -> bool:
    """A KeyboardInterrupt that Ctrl-C can have sent: it ends the run. In workers and ranks SIGINT
    is ignored (`procs.become_worker`), so there one can only come from the kernel: a row."""
    import signal
    import threading

    return (isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN)


def run_problem(problem: Problem, options: RunOptions | None = None,
                registry: Registry | None = None, phases: Phases | None = None) -> ResultRow:
    """Measure one problem in this process and return its row; never raises for kernel failures.

    Unknown names and bad parameters raise LongcaError (input errors); everything that goes
    wrong inside the kernel becomes the row's status: unsupported, oom, error or incorrect.
    `phases` hears each stage (a supervising worker forwards them).
    """
    options = options or RunOptions()
    registry = registry or get_registry()
    phases = phases or Phases()
    spec = registry.kernel(problem.kernel)
    registry.mask(problem.mask)
    registry.sampler(problem.sampler)
    check_mask_params(problem, registry)
    check_device(problem.device)
    row = new_row(problem)
    row.timing = options.timing
    shared_reference.forget_others(problem)  # an earlier case's reference is not kept through this one
    if _refused(spec, problem, options, registry, row, phases):
        return row
    samples = []
    draws = n_samples(problem, options, registry)
    for sample in range(draws):
        mask = mask_of(problem, sample, registry, phases)
        refusal = mask_refusal(spec, problem, mask, phases) or (too_slow(problem, mask, options, draws, phases)
                                                                  if sample == 0 else None)
        if refusal:
            row.status, row.reason = "unsupported", refusal
            return row
        try:
            mode = check_mode(problem, mask, options) if sample == 0 else "no"
            samples.append(_measure_sample(spec, problem, mask, sample, options, mode, phases))
        except UnsupportedError as exc:  # the kernel refused this problem once it saw it
            row.status, row.reason = "unsupported", str(exc)
            return row
        except BaseException as exc:  # noqa: BLE001 - recorded in the row, the sweep goes on
            if interrupted_by_user(exc):
                raise
            log.debug("case failed", exc_info=True)
            if problem.device_type == "cuda":
                torch.cuda.empty_cache()
            return fail(row, exc, phases.current)
    summarize_samples(row, samples)
    return finish(row, samples[0].errors, options.tolerance or tolerance_for(problem, spec), samples[0].checked)
