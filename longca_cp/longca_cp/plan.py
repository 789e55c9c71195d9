"""What every strategy's plan holds, the generic dispatch/undispatch, and strategy options."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from longca.errors import LongcaError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .inner import InnerKernel
    from .layout import Layout


@dataclass
class CPPlan:
    """A strategy's precomputed state for one mask on one rank (built by the strategy's `prepare`)."""

    layout: Layout  # which global tokens each rank of `group` holds
    rank: int  # this rank's index in `group`
    group: Any
    inner: InnerKernel
    options: dict[str, Any] = field(default_factory=dict)  # the resolved strategy options


def dispatch(x: torch.Tensor, plan: CPPlan) -> torch.Tensor:
    """This rank's shard (B, S/W, H, D) of a global (B, S, H, D) tensor."""
    return plan.layout.take(x, plan.rank)


def undispatch(local: torch.Tensor, plan: CPPlan) -> torch.Tensor:
    """The global tensor, on every rank, from each rank's shard (an all-gather; not differentiable)."""
    from .comm import gather_seq  # torch.distributed: imported when a strategy runs, not when it registers

    return plan.layout.assemble(gather_seq(local.detach(), plan.group))


def resolve_options(strategy: str, given: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """`given` over `defaults`; unknown names and values of the wrong type are input errors."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        known = ", ".join(sorted(defaults)) or "none"
        raise LongcaError(f"strategy {strategy!r} has no option {', '.join(unknown)}; it takes: {known}")
    out = dict(defaults)
    for name, value in given.items():
        want = type(defaults[name]) if defaults[name] is not None else int
        try:
            out[name] = want(value)
        except (TypeError, ValueError):
            article = "an" if want.__name__[0] in "aeiou" else "a"
            raise LongcaError(f"strategy {strategy!r}: option {name}={value!r} should be {article} {want.__name__}") \
                from None
    return out
