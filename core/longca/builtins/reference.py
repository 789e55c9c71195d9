"""The built-in `reference` kernel's registration (`longca.reference` does the work, imported on first use)."""
from __future__ import annotations

from typing import Any

from ..flops import reference_refusal
from ..hookspecs import hookimpl
from ..specs import ANY_BLOCK_SPARSE, ANY_STATIC, KernelSpec


def forward_lse(q, k, v, source: Any, softmax_scale: float | None = None, **kwargs: Any):
    from .. import reference

    return reference.forward_lse(q, k, v, source, softmax_scale, **kwargs)


def backward_lse(dout, q, k, v, out, lse, source: Any, softmax_scale: float | None = None):
    from .. import reference

    return reference.backward_lse(dout, q, k, v, out, lse, source, softmax_scale)


def _prepare(problem, mask, q, k, v):
    return mask


def _run(mask, q, k, v, sinks=None):
    from .. import reference

    return reference.attention(q, k, v, mask, sinks=sinks)


def _supports(problem) -> str | None:
    """Refuses sizes it cannot finish in reasonable time (full S x S area, the upper bound)."""
    return reference_refusal(float(problem.seqlen) ** 2, problem.heads_q, problem.head_dim, problem.batch,
                             problem.direction, problem.device, problem.head_dim_v)


REFERENCE = KernelSpec(
    name="reference",
    family="dense",
    description="exact attention in float32, chunked over query rows (the yardstick for --check)",
    masks=(ANY_STATIC, ANY_BLOCK_SPARSE),
    prepare=_prepare,
    run=_run,
    forward_lse=forward_lse,
    backward_lse=backward_lse,
    backend=lambda: "longca.reference",
    supports=_supports,
    # the same float32 operations in the same order on every call (no atomics): its backward is deterministic
    deterministic=True,
    sinks=True,
)


@hookimpl
def longca_kernels() -> list[KernelSpec]:
    return [REFERENCE]
