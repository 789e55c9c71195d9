"""Measuring one case: capability check, mask draws, prepare, timing, memory, correctness, status."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from . import reference
from .errors import LongcaError
from .flops import attention_flops
from .plugins import Registry, get_registry
from .problem import Problem, build_mask, check_mask_params, make_inputs
from .results import UNAVAILABLE, new_row
from .specs import KernelSpec
from .timing import host_ms, summarize, time_ms

log = logging.getLogger(__name__)
TOLERANCE = {"bfloat16": 1e-2, "float16": 1e-2, "float32": 1e-3}


@dataclass
class RunOptions:
    """How to measure: iterations, mask samples for document masks, correctness check."""

    warmup: int = 5
    repeat: int = 20
    samples: int = 5
    check: bool = False
    flush_l2: bool = True
    tolerance: Optional[float] = None


def check_device(device: str) -> None:
    """A CUDA device asked for on a machine without one is an input error."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise LongcaError(f"--device {device}: no CUDA GPU is visible (torch {torch.__version__}, "
                          f"CUDA build: {torch.version.cuda or 'none'}); use --device cpu")


def unsupported_reason(spec: KernelSpec, problem: Problem, registry: Optional[Registry] = None) -> Optional[str]:
    """Why this kernel cannot run this problem here, from its declared capabilities; None if it can."""
    try:
        missing = spec.available()
    except Exception as exc:  # noqa: BLE001 - an availability probe must not crash a sweep
        missing = f"{type(exc).__name__}: {exc}"
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


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """norm(out - ref) / norm(ref), in float32; NaN anywhere gives NaN."""
    out, ref = out.float(), ref.float()
    denom = torch.linalg.vector_norm(ref).item()
    return torch.linalg.vector_norm(out - ref).item() / (denom or 1.0)


def _grads(out: torch.Tensor, inputs, dout: torch.Tensor):
    return torch.autograd.grad(out, inputs, dout, retain_graph=True)


def _check(spec, problem, mask, prepared, q, k, v, dout) -> dict[str, float]:
    """Relative errors of output (and gradients) against the float32 reference on the same mask."""
    qf, kf, vf = (t.detach().float().requires_grad_(problem.direction != "fwd") for t in (q, k, v))
    ref = reference.attention(qf, kf, vf, mask)
    out = spec.run(prepared, q, k, v)
    errors = {"out": rel_err(out, ref)}
    if problem.direction != "fwd":
        got = _grads(out, (q, k, v), dout)
        want = _grads(ref, (qf, kf, vf), dout.float())
        errors.update({f"d{n}": rel_err(g, w) for n, g, w in zip("qkv", got, want)})
    return errors


def _measure_sample(spec: KernelSpec, problem: Problem, mask, sample: int, options: RunOptions,
                    check: bool) -> dict[str, Any]:
    device = torch.device(problem.device)
    needs_grad = problem.direction != "fwd"
    q, k, v = make_inputs(problem, sample, requires_grad=needs_grad)
    prepare_ms, prepared = host_ms(lambda: spec.prepare(problem, mask, q, k, v), device)
    dout = torch.randn_like(q) if needs_grad else None
    if problem.direction == "fwd":
        def step():
            with torch.no_grad():
                return spec.run(prepared, q, k, v)
    elif problem.direction == "bwd":
        out = spec.run(prepared, q, k, v)

        def step():
            return _grads(out, (q, k, v), dout)
    else:
        def step():
            return _grads(spec.run(prepared, q, k, v), (q, k, v), dout)
    if device.type == "cuda":
        step()  # first call outside the peak: JIT compilation, workspace creation
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
    else:
        peak = None
    times = time_ms(step, device, options.warmup, options.repeat, options.flush_l2)
    median, p20, p80 = summarize(times)
    flops = attention_flops(mask.area, problem.heads_q, problem.head_dim, problem.batch, problem.direction)
    result = {"ms": (median, p20, p80), "area": mask.area, "flops": flops, "peak": peak,
              "prepare_ms": prepare_ms, "tflops": flops / (median * 1e-3) / 1e12 if median > 0 else None}
    if check:
        result["errors"] = _check(spec, problem, mask, prepared, q, k, v, dout)
    return result


def run_problem(problem: Problem, options: Optional[RunOptions] = None,
                registry: Optional[Registry] = None) -> dict[str, Any]:
    """Measure one problem and return its result row; never raises for kernel failures.

    Unknown names and bad parameters raise LongcaError (input errors); everything that goes
    wrong inside the kernel becomes the row's status: unsupported, oom, error or incorrect.
    """
    options = options or RunOptions()
    registry = registry or get_registry()
    spec = registry.kernel(problem.kernel)
    mask_spec = registry.mask(problem.mask)
    registry.sampler(problem.sampler)
    check_mask_params(problem, registry)
    check_device(problem.device)
    row = new_row(problem)
    reason = unsupported_reason(spec, problem, registry)
    if reason:
        row.update(status="unsupported", reason=reason)
        return row
    try:
        row["backend"] = spec.backend() or spec.name
    except Exception:  # noqa: BLE001
        row["backend"] = spec.name
    n_samples = max(1, options.samples) if mask_spec.uses_documents else 1
    results = []
    try:
        for sample in range(n_samples):
            mask = build_mask(problem, sample, registry)
            results.append(_measure_sample(spec, problem, mask, sample, options, options.check and sample == 0))
    except LongcaError:
        raise
    except Exception as exc:  # noqa: BLE001 - recorded in the row, the sweep goes on
        status = "oom" if is_oom(exc) else "error"
        log.debug("case failed", exc_info=True)
        row.update(status=status, reason=failure_reason(exc))
        if problem.device_type == "cuda":
            torch.cuda.empty_cache()
        return row
    fill_summary(row, results)
    return finish(row, results[0].get("errors"), options.tolerance or TOLERANCE[problem.dtype])


def failure_reason(exc: BaseException) -> str:
    """One line for a row's reason: the exception type and the first line of its message."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]


def finish(row: dict[str, Any], errors: Optional[dict[str, float]], tolerance: float) -> dict[str, Any]:
    """Status ok, or incorrect when the worst relative error (NaN counts as worst) is over tolerance."""
    if errors is not None:
        worst = max(errors.values(), key=lambda e: math.inf if math.isnan(e) else e)
        row.update(rel_err=worst, rel_err_detail=errors)
        if math.isnan(worst) or worst > tolerance:
            row.update(status="incorrect", reason=f"relative error {worst:.3g} > tolerance {tolerance:g}")
            return row
    row["status"] = "ok"
    return row


def fill_summary(row: dict[str, Any], results: list[dict[str, Any]]) -> None:
    """Median over mask samples: times, TFLOP/s (each sample's own FLOPs / its time); mean area."""
    med = lambda key, i=None: float(np.median([r[key][i] if i is not None else r[key] for r in results]))  # noqa: E731
    peaks = [r["peak"] for r in results if r["peak"] is not None]
    row.update(
        samples=len(results), area=float(np.mean([r["area"] for r in results])),
        flops=float(np.mean([r["flops"] for r in results])), ms_median=med("ms", 0), ms_p20=med("ms", 1),
        ms_p80=med("ms", 2), tflops=med("tflops") if all(r["tflops"] for r in results) else None,
        peak_mem_bytes=max(peaks) if peaks else None, prepare_ms=med("prepare_ms"),
    )
