"""The inner kernel of a strategy: any registered kernel with the forward/backward-with-lse primitives."""
from __future__ import annotations

import math
from dataclasses import dataclass

from longca.errors import UnsupportedError
from longca.plugins import Registry, get_registry
from longca.problem import Problem
from longca.specs import BackwardFn, ForwardFn


@dataclass(frozen=True)
class InnerKernel:
    """The primitives a strategy calls, with the softmax scale of the global problem."""

    name: str
    forward: ForwardFn
    backward: BackwardFn
    softmax_scale: float
    backend: str = ""


def inner_unsupported(problem: Problem, registry: Registry | None = None) -> str | None:
    """Why `problem.kernel` cannot be the inner kernel of a strategy for this problem, or None."""
    from longca.measure import unsupported_reason

    spec = (registry or get_registry()).kernel(problem.kernel)
    # the inner kernel runs through its bfloat16/float16 lse primitives, which take no FP8 inputs and no
    # deterministic flag: such a CP row would time something else than it says
    if problem.fp8:
        return "context parallelism runs its inner kernel's 16-bit lse primitives: no FP8 cases"
    if problem.deterministic:
        return "context parallelism: the inner kernel's lse primitives take no deterministic flag"
    if problem.head_dim_v is not None:
        return "context parallelism: its schedules move and count V at Q/K's head dim; V of its own is not wired"
    if spec.forward_lse is None or spec.backward_lse is None:
        return (f"kernel {spec.name!r} has no forward_lse/backward_lse primitives, so it cannot be the inner "
                f"kernel of a context-parallel strategy")
    reason = unsupported_reason(spec, problem.with_(strategy=None, world_size=1), registry)
    return f"inner kernel {spec.name}: {reason}" if reason else None


def inner_kernel(problem: Problem, registry: Registry | None = None) -> InnerKernel:
    """The inner kernel of a problem; raises UnsupportedError with the reason when it cannot be one."""
    registry = registry or get_registry()
    reason = inner_unsupported(problem, registry)
    if reason:
        raise UnsupportedError(reason)
    spec = registry.kernel(problem.kernel)
    try:
        backend = spec.backend() or spec.name
    except Exception:  # noqa: BLE001 - a backend label must not stop a run
        backend = spec.name
    assert spec.forward_lse is not None and spec.backward_lse is not None  # inner_unsupported checked both
    return InnerKernel(spec.name, spec.forward_lse, spec.backward_lse, 1.0 / math.sqrt(problem.head_dim), backend)
