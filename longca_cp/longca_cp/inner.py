"""The inner kernel of a strategy: any registered kernel with the forward/backward-with-lse primitives."""
from __future__ import annotations

import math
from dataclasses import dataclass

from longca.capability import inner_unsupported
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
