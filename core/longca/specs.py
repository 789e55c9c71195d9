"""The typed objects plugins register through the hooks (see `hookspecs`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

    from .masks.mask import Mask, MaskContext
    from .problem import Problem

MASK_KINDS = ("regular", "heterogeneous", "block_sparse")
FAMILIES = ("dense", "sparse")
DTYPES = ("bfloat16", "float16", "float32")
DEVICES = ("cpu", "cuda")
# In a kernel's or strategy's `masks`: every registered mask of that group, third-party ones included
# (for kernels that work from any slices, or any block-sparse layout). The groups are the ones a
# sweep's `masks = "static" | "block_sparse" | "all"` names (`Registry.mask_group`).
ANY_STATIC = "any:static"
ANY_BLOCK_SPARSE = "any:block_sparse"
ANY_MASK = "any:all"
MASK_GROUPS = ("static", "block_sparse", "all")


@dataclass(frozen=True)
class MaskSpec:
    """A mask pattern: `build(ctx)` draws its random parameters from ctx and returns a Mask."""

    name: str
    kind: str
    description: str
    build: Callable[["MaskContext"], "Mask"]
    params: dict[str, str] = field(default_factory=dict)  # parameter name -> what it means
    uses_documents: bool = False
    seqlen_multiple: int = 1
    aliases: dict[str, str] = field(default_factory=dict)  # short name -> parameter (`w` -> `window`)
    # flex_mask_mod(mask, device) -> FlexAttention mask_mod for one draw, as a Flex user writes it
    # (`longca.masks.mask_mods`); None: Flex kernels use the generic FlashMask-bounds form.
    flex_mask_mod: Optional[Callable[["Mask", Any], Callable[..., Any]]] = None


@dataclass(frozen=True)
class SamplerSpec:
    """Document lengths: `sample(total, rng, **params)` returns lengths that sum to `total`."""

    name: str
    description: str
    sample: Callable[..., "np.ndarray"]
    params: dict[str, str] = field(default_factory=dict)


# forward(q, k, v, slices, softmax_scale) -> (out, lse); lse float32 natural log, shape (B, Hq, Sq)
ForwardFn = Callable[..., tuple["torch.Tensor", "torch.Tensor"]]
# backward(dout, q, k, v, out, lse, slices, softmax_scale) -> (dq, dk, dv)
BackwardFn = Callable[..., tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]]


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
    family: str
    description: str
    masks: tuple[str, ...]
    prepare: Callable[..., Any]
    run: Callable[..., "torch.Tensor"]
    dtypes: tuple[str, ...] = DTYPES
    head_dims: Optional[tuple[int, ...]] = None  # None: any
    gqa: bool = True
    backward: bool = True
    devices: tuple[str, ...] = DEVICES
    min_compute_capability: Optional[tuple[int, int]] = None
    available: Callable[[], Optional[str]] = lambda: None
    supports: Optional[Callable[["Problem"], Optional[str]]] = None
    supports_mask: Optional[Callable[["Problem", "Mask"], Optional[str]]] = None
    forward_lse: Optional[ForwardFn] = None
    backward_lse: Optional[BackwardFn] = None
    backend: Callable[[], str] = lambda: ""  # which implementation runs, recorded in results
    # caveat(problem) -> what a row of this problem must say beside its number (a slow fallback path), or None;
    # recorded as the row's `caveat`, marked in every report cell
    caveat: Optional[Callable[["Problem"], Optional[str]]] = None
    # bytes a problem needs (longca.memory.linear / quadratic); None: the O(S) flash-family model
    memory: Optional[Callable[["Problem"], int]] = None
    # compiled per mask, shape and direction on first use (torch.compile, Triton): `longca bench` on
    # CUDA compiles its cases first in parallel processes (longca.prewarm), a warm-up of the caches only
    compiles: bool = False
    url: str = ""


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
    """

    name: str
    description: str
    masks: tuple[str, ...]
    prepare: Callable[..., Any]
    dispatch: Callable[..., Any]
    attention: Callable[..., Any]
    undispatch: Callable[..., Any]
    supports: Optional[Callable[["Problem", dict], Optional[str]]] = None
    resolve_options: Optional[Callable[["Problem", dict], dict]] = None
    options: dict[str, str] = field(default_factory=dict)
    schedule: Optional[Callable[..., Any]] = None
