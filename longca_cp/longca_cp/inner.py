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


def _own_kernels(problem: Problem, registry: Registry) -> tuple[str, ...] | None:
    """The inner kernels a strategy that computes with its own library accepts (None: any with primitives)."""
    if not problem.strategy or problem.strategy not in registry.entries["strategies"]:
        return None
    return registry.strategy(problem.strategy).inner_kernels


def inner_unsupported(problem: Problem, registry: Registry | None = None) -> str | None:
    """Why `problem.kernel` cannot be the inner kernel of a strategy for this problem, or None."""
    from longca_runner.measure import unsupported_reason

    registry = registry or get_registry()
    spec = registry.kernel(problem.kernel)
    # the inner kernel runs through its bfloat16/float16 lse primitives, which take no FP8 inputs and no
    # deterministic flag: such a CP row would time something else than it says
    if problem.fp8:
        return "context parallelism runs its inner kernel's 16-bit lse primitives: no FP8 cases"
    if problem.deterministic:
        return "context parallelism: the inner kernel's lse primitives take no deterministic flag"
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


def _not_a_primitive(name: str):
    def call(*args, **kwargs):
        raise UnsupportedError(f"kernel {name!r} has no forward_lse/backward_lse: the strategy calls it itself")
    return call


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
    forward = spec.forward_lse or _not_a_primitive(spec.name)  # absent only where the strategy names the kernel
    backward = spec.backward_lse or _not_a_primitive(spec.name)
    return InnerKernel(spec.name, forward, backward, 1.0 / math.sqrt(problem.head_dim), backend)
