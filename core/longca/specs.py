"""The typed objects plugins register through the hooks (see `hookspecs`)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

    from .masks.mask import Mask, MaskContext
    from .problem import Problem

# the closed vocabularies of the specs: mypy checks a plugin's literals, `plugins.check_spec` its values
MaskKind = Literal["regular", "heterogeneous", "block_sparse"]
Family = Literal["dense", "sparse"]
DType = Literal["bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2"]
Device = Literal["cpu", "cuda"]
Direction = Literal["fwd", "bwd", "fwdbwd"]
MASK_KINDS: tuple[MaskKind, ...] = ("regular", "heterogeneous", "block_sparse")
FAMILIES: tuple[Family, ...] = ("dense", "sparse")
DTYPES: tuple[DType, ...] = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2")
FP8_DTYPES: tuple[DType, ...] = ("float8_e4m3fn", "float8_e5m2")
# What a kernel that declares no dtypes runs: FP8 only where a kernel says so (it must quantize in prepare)
DEFAULT_DTYPES: tuple[DType, ...] = ("bfloat16", "float16", "float32")
# A kernel's head dims: d (Q/K and V both d) or a (d_qk, d_v) pair (MLA-style (192, 128))
HeadDims = tuple[int | tuple[int, int], ...]
DEVICES: tuple[Device, ...] = ("cpu", "cuda")
DIRECTIONS: tuple[Direction, ...] = ("fwd", "bwd", "fwdbwd")
# In a kernel's or strategy's `masks`: every registered mask of that group, third-party ones included
# (for kernels that work from any slices, or any block-sparse layout). The groups are the ones a
# sweep's `masks = "static" | "block_sparse" | "all"` names (`Registry.mask_group`).
ANY_STATIC = "any:static"
ANY_BLOCK_SPARSE = "any:block_sparse"
ANY_MASK = "any:all"
MASK_GROUPS = ("static", "block_sparse", "all")


# The callables of the specs, positional-only (the core calls them positionally; plugins name the
# parameters as they like), so mypy checks every plugin's functions against the contract.

class PrepareFn(Protocol):
    """`prepare(problem, mask, q, k, v) -> prepared`: what the kernel needs from the mask (timed apart)."""

    def __call__(self, problem: Problem, mask: Mask, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 /) -> Any: ...


class RunFn(Protocol):
    """`run(prepared, q, k, v) -> out`: the timed call."""

    def __call__(self, prepared: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, /) -> torch.Tensor: ...


class SupportsFn(Protocol):
    """`supports(problem) -> None | reason`: refusals beyond the declared fields; never raises."""

    def __call__(self, problem: Problem, /) -> str | None: ...


class SupportsMaskFn(Protocol):
    """`supports_mask(problem, mask) -> None | reason`: refusals from the mask built for the run."""

    def __call__(self, problem: Problem, mask: Mask, /) -> str | None: ...


class MemoryFn(Protocol):
    """`memory(problem) -> bytes` the problem needs (`longca.memory.linear` / `quadratic`)."""

    def __call__(self, problem: Problem, /) -> int: ...


class ForwardFn(Protocol):
    """`forward_lse(q, k, v, slices, softmax_scale=None) -> (out, lse)`; lse float32 natural log, (B, Hq, Sq)."""

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slices: np.ndarray,
                 softmax_scale: float | None = None, /) -> tuple[torch.Tensor, torch.Tensor]: ...


class BackwardFn(Protocol):
    """`backward_lse(dout, q, k, v, out, lse, slices, softmax_scale=None) -> (dq, dk, dv)` from the merged out, lse."""

    def __call__(self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: torch.Tensor, slices: np.ndarray, softmax_scale: float | None = None,
                 /) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


class StrategyPrepareFn(Protocol):
    """`prepare(problem, mask, inner, group, options) -> plan`: collective on every rank of `group`."""

    def __call__(self, problem: Problem, mask: Mask, inner: Any, group: Any, options: dict[str, Any], /) -> Any: ...


class StrategySupportsFn(Protocol):
    """`supports(problem, options) -> None | reason`."""

    def __call__(self, problem: Problem, options: dict[str, Any], /) -> str | None: ...


class ResolveOptionsFn(Protocol):
    """`resolve_options(problem, options) -> options` with defaults filled; unknown names raise LongcaError."""

    def __call__(self, problem: Problem, options: dict[str, Any], /) -> dict[str, Any]: ...


class ScheduleFn(Protocol):
    """`schedule(problem, mask, options) -> longca_cp.schedule.Schedule`, no process group needed."""

    def __call__(self, problem: Problem, mask: Mask, options: dict[str, Any], /) -> Any: ...


class VariantsFn(Protocol):
    """`variants(world, heads_q, gpus_per_node) -> option sets` a simulator or `longca recommend` tries."""

    def __call__(self, world: int, heads_q: int, gpus_per_node: int, /) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class MaskSpec:
    """A mask pattern: `build(ctx)` draws its random parameters from ctx and returns a Mask."""

    name: str
    kind: MaskKind
    description: str
    build: Callable[[MaskContext], Mask]
    params: dict[str, str] = field(default_factory=dict)  # parameter name -> what it means
    uses_documents: bool = False
    seqlen_multiple: int = 1
    aliases: dict[str, str] = field(default_factory=dict)  # short name -> parameter (`w` -> `window`)
    # flex_mask_mod(mask, device) -> FlexAttention mask_mod for one draw, as a Flex user writes it
    # (`longca.masks.mask_mods`); None: Flex kernels use the generic FlashMask-bounds form.
    flex_mask_mod: Callable[[Mask, Any], Callable[..., Any]] | None = None


@dataclass(frozen=True)
class SamplerSpec:
    """Document lengths: `sample(total, rng, **params)` returns lengths that sum to `total`.

    `takes_draw`: `sample` is also given `draw=i`, the index of the mask draw, for samplers that replay a
    fixed list (the i-th draw is the i-th pack of a published benchmark) instead of drawing from `rng`."""

    name: str
    description: str
    sample: Callable[..., np.ndarray]
    params: dict[str, str] = field(default_factory=dict)
    takes_draw: bool = False


@dataclass(frozen=True)
class KernelSpec:
    """An attention kernel and what it can do, declared before anything is run.

    `prepare(problem, mask, q, k, v)` builds what the kernel needs from the mask (timed apart as
    prepare_ms); `run(prepared, q, k, v)` is the timed call and returns the output, with autograd
    if `backward`. `available()` returns None, or why the kernel cannot run here (a missing
    library); it must import lazily. `supports(problem)` returns None, or why this problem is
    refused beyond the declared capabilities, without building the mask; `supports_mask(problem,
    mask)` answers the same from the mask already built for the run (a planner that cannot map
    some slices), and `prepare` may raise `UnsupportedError` for the same purpose.
    `forward_lse`/`backward_lse` are the primitives that context-parallel strategies use as their
    inner kernel.
    """

    name: str
    family: Family
    description: str
    masks: tuple[str, ...]
    prepare: PrepareFn
    run: RunFn
    dtypes: tuple[DType, ...] = DEFAULT_DTYPES
    # the (Q/K, V) head dims it runs: d means (d, d); (192, 128) a pair; None: any pair; `supports` refines
    head_dims: HeadDims | None = None
    gqa: bool = True
    backward: bool = True
    devices: tuple[Device, ...] = DEVICES
    min_compute_capability: tuple[int, int] | None = None
    available: Callable[[], str | None] = lambda: None
    supports: SupportsFn | None = None
    supports_mask: SupportsMaskFn | None = None
    forward_lse: ForwardFn | None = None
    backward_lse: BackwardFn | None = None
    backend: Callable[[], str] = lambda: ""  # which implementation runs, recorded in results
    # caveat(problem) -> what a row of this problem must say beside its number (a slow fallback path), or None;
    # recorded as the row's `caveat`, marked in every report cell
    caveat: Callable[[Problem], str | None] | None = None
    # bytes a problem needs (longca.memory.linear / quadratic); None: the O(S) flash-family model
    memory: MemoryFn | None = None
    # compiled per mask, shape and direction on first use (torch.compile, Triton): `longca bench` on
    # CUDA compiles its cases first in parallel processes (longca_runner.prewarm), a warm-up of the caches only
    compiles: bool = False
    url: str = ""
    # a deterministic backward (Problem.deterministic): True if the kernel offers one (`prepare` reads
    # problem.deterministic and asks its library for it); else why not, or False (the generic refusal)
    deterministic: bool | str = False
    # learnable sinks (Problem.sinks): True if `run(prepared, q, k, v, sinks=...)` takes the (heads_q,)
    # float32 logits and gives their gradient; else why not, or False (the generic refusal)
    sinks: bool | str = False
    # what a quantized kernel computes in fewer bits on 16-bit inputs ("INT8 Q·K per block, FP16 P·V"):
    # its rows say so (`quantized`) and are judged by the 8-bit tolerance, not the dtype's
    quantized: str = ""
    # its library's backward frees what the forward saved (one backward per forward: TransformerEngine's fused
    # attention): `bwd` times each backward after a fresh forward made outside the timed region (no CUDA-graph
    # timing, and no energy of its own: the forward would be counted)
    backward_once: bool = False

    def head_dim_pairs(self) -> list[tuple[int, int]] | None:
        """`head_dims` as (Q/K, V) pairs, None for any."""
        if self.head_dims is None:
            return None
        return [(d, d) if isinstance(d, int) else (int(d[0]), int(d[1])) for d in self.head_dims]

    def takes_head_dims(self, head_dim: int, head_dim_v: int | None = None) -> bool:
        """Whether the declared head dims include (head_dim, head_dim_v or head_dim)."""
        pairs = self.head_dim_pairs()
        return pairs is None or (head_dim, head_dim_v or head_dim) in pairs


def head_dims_text(head_dims: HeadDims | None) -> str:
    """`64, 128, 192/128`, or `any`."""
    if head_dims is None:
        return "any"
    same = sorted(d for d in head_dims if isinstance(d, int))
    step = same[1] - same[0] if len(same) > 1 else 0
    if len(same) >= 4 and same == list(range(same[0], same[-1] + 1, step)) and same[0] == step:
        parts = [f"multiples of {step} up to {same[-1]}"]  # fa2's 8, 16, ..., 256
    else:
        parts = [str(d) for d in head_dims if isinstance(d, int)]
    return ", ".join(parts + [f"{d[0]}/{d[1]}" for d in head_dims if not isinstance(d, int)])


@dataclass(frozen=True)
class CPStrategySpec:
    """A context-parallel strategy over torch.distributed (shared pieces: `longca_cp`).

    `prepare(problem, mask, inner, group, options) -> plan` builds, on every rank of `group`
    together (it may create subgroups), what the strategy needs for one mask: the sequence layout,
    the process subgroups and the mask slices of every inner-kernel call; it is timed apart as
    prepare_ms. `inner` is a `longca_cp.inner.InnerKernel` (the inner kernel's primitives).
    `dispatch(x, plan) -> local` shards a global (B, S, H, D) tensor for this rank;
    `attention(q, k, v, plan) -> out` runs distributed attention on the local shards (autograd-aware);
    `undispatch(local, plan) -> global` gathers a sharded tensor back.
    `resolve_options(problem, options) -> options` fills defaults and rejects unknown names (raise
    LongcaError); `supports(problem, options) -> None | reason` refuses what the strategy cannot
    run (heads that do not divide, lengths the layout cannot split). `options` documents each
    option: name -> description.
    `schedule(problem, mask, options) -> longca_cp.schedule.Schedule` (optional) gives, without a
    process group, every rank's calls per step and transfers: what `prepare` builds its plan from,
    and what the accounting and `longca simulate` read.
    `variants(world, heads_q, gpus_per_node) -> [options, ...]` (optional) lists the option sets a
    simulator or `longca recommend` should try for a cluster; None: the defaults only (`[{}]`).
    `inner_kernels` (optional): for a strategy that computes with its own library's attention (torch's
    context_parallel), the kernel names it accepts as `--inner`, naming what it runs; those need no
    forward_lse/backward_lse and any other is refused. None: any kernel with those primitives.
    """

    name: str
    description: str
    masks: tuple[str, ...]
    prepare: StrategyPrepareFn
    dispatch: Callable[[torch.Tensor, Any], torch.Tensor]
    attention: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Any], torch.Tensor]
    undispatch: Callable[[torch.Tensor, Any], torch.Tensor]
    supports: StrategySupportsFn | None = None
    resolve_options: ResolveOptionsFn | None = None
    options: dict[str, str] = field(default_factory=dict)
    schedule: ScheduleFn | None = None
    variants: VariantsFn | None = None
    inner_kernels: tuple[str, ...] | None = None

    def resolved_options(self, problem: Problem, options: dict[str, Any]) -> dict[str, Any]:
        """The options with defaults filled (unknown names raise LongcaError): the capability check a
        sweep's grid makes before anything runs, without importing the CP runtime."""
        return self.resolve_options(problem, dict(options)) if self.resolve_options else dict(options)

    def option_variants(self, world: int, heads_q: int, gpus_per_node: int) -> list[dict[str, Any]]:
        """The option sets to try: `variants(...)`, or the defaults only."""
        return self.variants(world, heads_q, gpus_per_node) if self.variants is not None else [{}]
