"""Whether a kernel or a CP strategy can run a problem, from what its spec declares: the check a
sweep's grid makes before anything runs, the runner makes before each case, and a strategy's inner
kernel makes for its per-rank crops. Core-side, so none of them needs the CP runtime to ask."""
from __future__ import annotations

from typing import Any

from longca.bounded import HookHung, call_bounded
from longca.errors import LongcaError
from longca.plugins import Registry, get_registry
from longca.problem import Problem, check_mask_params
from longca.results import UNAVAILABLE
from longca.specs import KernelSpec, head_dims_text


def gpu_reason() -> str | None:
    """Why no CUDA GPU can be used here, or None (a GPU-only kernel's `available`). Never initialises
    CUDA beyond the check."""
    import torch

    if torch.version.cuda is None:
        return f"needs a CUDA GPU; torch {torch.__version__} is a CPU-only build"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU; none is visible"
    return None


def unsupported_reason(spec: KernelSpec, problem: Problem, registry: Registry | None = None) -> str | None:
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
    if not spec.takes_head_dims(problem.head_dim, problem.head_dim_v):
        what = "head_dim" if problem.head_dim_v is None else "head dims (Q/K, V)"
        return f"{what} {problem.head_dims_label} is not supported (supported: {head_dims_text(spec.head_dims)})"
    if not spec.gqa and problem.heads_q != problem.heads_kv:
        return "GQA (heads_q != heads_kv) is not supported"
    if problem.direction != "fwd" and not spec.backward:
        return "backward is not supported"
    if problem.deterministic and spec.deterministic is not True:
        return (f"a deterministic backward is not offered: {spec.deterministic}" if spec.deterministic
                else "a deterministic backward is not offered by this kernel")
    if problem.sinks and spec.sinks is not True:
        return (f"learnable sinks are not supported: {spec.sinks}" if spec.sinks
                else "learnable sinks are not supported by this kernel")
    if spec.min_compute_capability and problem.device_type == "cuda":
        import torch

        cc = torch.cuda.get_device_capability(problem.device)
        if cc < spec.min_compute_capability:
            need = ".".join(map(str, spec.min_compute_capability))
            return f"needs compute capability >= {need}, this GPU has {cc[0]}.{cc[1]}"
    return spec.supports(problem) if spec.supports else None


def _own_kernels(problem: Problem, registry: Registry) -> tuple[str, ...] | None:
    """The inner kernels a strategy that computes with its own library accepts (None: any with primitives)."""
    if not problem.strategy or problem.strategy not in registry.entries["strategies"]:
        return None
    return registry.strategy(problem.strategy).inner_kernels


def inner_unsupported(problem: Problem, registry: Registry | None = None) -> str | None:
    """Why `problem.kernel` cannot be the inner kernel of a strategy for this problem, or None."""
    registry = registry or get_registry()
    spec = registry.kernel(problem.kernel)
    # the inner kernel runs through its bfloat16/float16 lse primitives, which take no FP8 inputs and no
    # deterministic flag: such a CP row would time something else than it says
    if problem.fp8:
        return "context parallelism runs its inner kernel's 16-bit lse primitives: no FP8 cases"
    if problem.deterministic:
        return "context parallelism: the inner kernel's lse primitives take no deterministic flag"
    if problem.sinks:
        return "context parallelism: the inner kernel's lse primitives take no sinks"
    if problem.head_dim_v is not None:
        return "context parallelism: its schedules move and count V at Q/K's head dim; V of its own is not wired"
    own = _own_kernels(problem, registry)
    if own is not None and spec.name not in own:
        return (f"strategy {problem.strategy} computes with its own library's attention: its inner kernel is "
                f"{' or '.join(own)}, not {spec.name}")
    if own is None and (spec.forward_lse is None or spec.backward_lse is None):
        return (f"kernel {spec.name!r} has no forward_lse/backward_lse primitives, so it cannot be the inner "
                f"kernel of a context-parallel strategy")
    reason = unsupported_reason(spec, problem.with_(strategy=None, world_size=1), registry)
    return f"inner kernel {spec.name}: {reason}" if reason else None


def _resolved(problem: Problem, options: dict[str, Any], registry: Registry | None) -> dict[str, Any]:
    return (registry or get_registry()).strategy(problem.strategy).resolved_options(problem, options)


def check_options(problem: Problem, options: dict[str, Any], registry: Registry | None = None,
                  timeout_s: float | None = None) -> None:
    """Unknown option names as input errors, before anything runs; a resolve_options() that raises
    otherwise or does not return within `timeout_s` (default: the hook limit) is left to the case's
    own row (`longca_runner.cp.cases`)."""
    try:
        call_bounded(lambda: _resolved(problem, options, registry), f"resolve_options() of {problem.strategy}",
                     timeout_s)
    except HookHung:
        return
    except LongcaError:
        raise
    except (Exception, SystemExit):  # noqa: BLE001 - the case's row says it
        return


def strategy_unsupported(problem: Problem, options: dict[str, Any], registry: Registry | None = None) -> str | None:
    """Why this strategy / inner kernel cannot run the problem, or None. Unknown names raise LongcaError."""
    registry = registry or get_registry()
    spec = registry.strategy(problem.strategy)
    registry.kernel(problem.kernel)
    check_mask_params(problem, registry)
    claimed = registry.claimed_masks(spec.masks)
    if problem.mask not in claimed:
        return f"strategy {spec.name}: mask {problem.mask} is not supported (supported: {', '.join(claimed)})"
    reason = inner_unsupported(problem, registry)
    if reason:
        return reason
    return spec.supports(problem, options) if spec.supports else None
