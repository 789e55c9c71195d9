"""FlexAttention as its users call it, for one choice of `kernel_options` (the Triton or the FLASH backend).

`prepare` builds the BlockMask the way a Flex user does: the mask's natural `mask_mod`
(`longca.masks.mask_mods`, registered with the mask) through `create_block_mask` (eager up to
EAGER_BLOCK_MASK_MAX_SEQLEN, as its default call is; compiled beyond, on CUDA). Masks that
register none, and the crops that context-parallel strategies pass to the lse primitives, get the
generic form built from slices (`blockmask.py`). `run` is the compiled
`flex_attention` (`torch.compile(partial(flex_attention, kernel_options=...))`); on a CPU it
runs eager unless LONGCA_FLEX_COMPILE=1.

The lse primitives keep the BlockMasks of the crops they were given (`BlockMaskCache`): a CP
strategy calls them with the same crops every step, and building a BlockMask from slices costs
milliseconds of host time (8-22 ms at 8K-32K on a 2-core CPU), as long as a short call itself.

Every distinct `mask_mod` and shape is a new compiled graph of the same function, so the
dynamo recompile limits are raised on first use: with torch's default (8), the ninth mask of a
sweep would silently fall back to an unfused path that materialises S² scores.
"""
from __future__ import annotations

import functools
import inspect
import math
import os
from typing import TYPE_CHECKING, Any

from longca.plugin import ANY_STATIC, KernelSpec, SlicesCache, UnsupportedError, mask_mod_builder, natural_mask_mod

from .blockmask import BLOCK, block_mask_from_slices

if TYPE_CHECKING:  # pragma: no cover - torch is imported where a call runs: the plugin registers without it
    import torch

RECOMPILE_LIMIT = 4096
# `create_block_mask` runs eager (its default) up to this length and compiled beyond it, on CUDA. Eager it
# evaluates the mask_mod at all S x S pairs at once on the GPU (a window's `q_idx - kv_idx` is an int64
# S x S: 2 GiB at 16K, 8 GiB at 32K, so no further): 15 ms at 16K and 59 ms at 48K on the H200
# (docs/results/h200/flex-blockmask). Compiled, the first build of a process took 28-33 s at 4K, 56-64 s
# at 8K and over 150 s at 16K there (every mask, in the bench's prewarm workers and in a fresh sweep
# worker alone, 2026-12-06; the same BlockMask): most of that bench's overrun of its 8 minutes.
EAGER_BLOCK_MASK_MAX_SEQLEN = 16384


def compile_wanted(device: torch.device) -> bool:
    forced = os.environ.get("LONGCA_FLEX_COMPILE", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return device.type == "cuda"


def raise_recompile_limits(limit: int = RECOMPILE_LIMIT) -> None:
    """Lift dynamo's per-function recompile limits, which a sweep of many masks and sizes exceeds.

    Also turns off donated buffers in compiled backward graphs: longca times backward by calling
    `autograd.grad(..., retain_graph=True)` repeatedly on one forward graph, which a backward
    compiled with donated buffers refuses (seen with BACKEND=FLASH on the H200, torch 2.11).
    """
    import torch._dynamo.config as dynamo_config
    import torch._functorch.config as functorch_config

    functorch_config.donated_buffer = False

    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if isinstance(getattr(dynamo_config, name, None), int) and getattr(dynamo_config, name) < limit:
            setattr(dynamo_config, name, limit)


class BlockMaskCache:
    """The BlockMasks of the last `size` distinct (slices, lengths, device), least recently used dropped."""

    def __init__(self, size: int = 64):
        self._masks: SlicesCache[Any] = SlicesCache(size)

    def get(self, slices, seqlen_q: int, seqlen_k: int, device):
        return self._masks.get(slices, (seqlen_q, seqlen_k, str(device)),
                               lambda arr: block_mask_from_slices(arr, seqlen_q, seqlen_k, device))


class FlexKernel:
    """prepare / run / lse primitives of flex_attention with fixed `kernel_options`."""

    def __init__(self, kernel_options: dict[str, Any] | None = None):
        self.kernel_options = dict(kernel_options or {})
        self._compiled: dict[str, Any] = {}
        self.block_masks = BlockMaskCache()

    def spec(self, name: str, description: str, **fields: Any) -> KernelSpec:
        """The KernelSpec of this kernel (flex, flex-fa4): every static mask, its natural mask_mod or
        FlashMask bounds (`supports_mask`), and the lse primitives; `fields` give the rest (and may
        leave a primitive out: `backward_lse=None`)."""
        fields = {"forward_lse": self.forward_lse, "backward_lse": self.backward_lse, **fields}
        return KernelSpec(name=name, family="dense", description=description, masks=(ANY_STATIC,),
                          prepare=self.prepare, run=self.run, supports_mask=supports_mask, **fields)

    def fn(self, device: torch.device):
        """flex_attention (with this kernel's options), compiled once per process where wanted."""
        import torch
        from torch.nn.attention.flex_attention import flex_attention

        eager = functools.partial(flex_attention, kernel_options=self.kernel_options) if self.kernel_options \
            else flex_attention
        if not compile_wanted(device):
            return eager
        if "fn" not in self._compiled:
            raise_recompile_limits()
            self._compiled["fn"] = torch.compile(eager, dynamic=False)
        return self._compiled["fn"]

    def call(self, q, k, v, block_mask, scale=None, lse: bool = False):
        """flex_attention on (B, S, H, D) tensors; returns out (and lse (B, H, S) if asked)."""
        fn = self.fn(q.device)
        args = (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        kwargs = {"block_mask": block_mask, "scale": scale, "enable_gqa": q.shape[2] != k.shape[2]}
        if not lse:
            return fn(*args, **kwargs).transpose(1, 2)
        try:
            from torch.nn.attention.flex_attention import AuxRequest

            out, aux = fn(*args, **kwargs, return_aux=AuxRequest(lse=True))
            out, lse_ = out.transpose(1, 2), aux.lse
        except ImportError:  # torch < 2.9
            out, lse_ = fn(*args, **kwargs, return_lse=True)
            out = out.transpose(1, 2)
        if self.kernel_options.get("BACKEND") == "FLASH" and flash_lse_scaled_by_ln2():
            lse_ = lse_ / math.log(2.0)
        return out, lse_

    def prepare(self, problem, mask, q, k, v):
        """The BlockMask: natural mask_mod + create_block_mask, or the generic form from slices."""
        return block_mask_for(mask, q.device)

    def run(self, block_mask, q, k, v, sinks=None):
        """flex_attention; with `sinks` (Hq,) the way torchtitan's gpt-oss runs them on Flex: the output
        and lse of the call, the output scaled by sigmoid(lse - sink) per row (autograd through both)."""
        if sinks is None:
            return self.call(q, k, v, block_mask)
        import torch

        out, lse = self.call(q, k, v, block_mask, lse=True)
        scale = torch.sigmoid(lse.float() - sinks.float()[None, :, None]).transpose(1, 2).unsqueeze(-1)
        return (out.float() * scale).to(out.dtype)

    def forward_lse(self, q, k, v, slices, softmax_scale: float | None = None):
        import torch

        lq = q.shape[1]
        q, k, v = pad_rows(q), pad_rows(k), pad_rows(v)
        bm = self.block_masks.get(slices, q.shape[1], k.shape[1], q.device)
        with torch.no_grad():
            out, lse = self.call(q, k, v, bm, softmax_scale, lse=True)
        return out[:, :lq], lse[..., :lq].float()

    def backward_lse(self, dout, q, k, v, out, lse, slices, softmax_scale: float | None = None):
        """Gradients of the part of a split softmax that `slices` covers, given the merged out and lse.

        flex_attention has no backward that takes another out and lse, so this recomputes the local
        (out_l, lse_l) under autograd (a forward pass more than an explicit-lse backward such as
        FlashAttention's) and back-propagates `split_softmax_grads` into them: exactly the gradient
        of the merged attention with respect to this part.
        """
        import torch

        lq, lk = q.shape[1], k.shape[1]
        q, k, v, dout, out = (pad_rows(x) for x in (q, k, v, dout, out))
        lse = pad_rows(lse, dim=-1, value=-float("inf"))
        bm = self.block_masks.get(slices, q.shape[1], k.shape[1], q.device)
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        with torch.enable_grad():
            out_l, lse_l = self.call(leaves[0], leaves[1], leaves[2], bm, softmax_scale, lse=True)
            grads_in = self.split_softmax_grads_for(q.device)(dout, out_l.detach(), out, lse_l.detach(), lse)
            try:
                grads = torch.autograd.grad((out_l, lse_l), leaves, grads_in, allow_unused=True)
            except Exception as exc:  # noqa: BLE001 - only the backend's dLSE refusal is translated
                if "dLSE" not in str(exc):
                    raise
                raise UnsupportedError(f"backward_lse needs the gradient through flex_attention's lse, which this "
                                       f"backend refuses: {dlse_refusal(exc)}") from exc
        grads = tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, (q, k, v), strict=True))
        return grads[0][:, :lq], grads[1][:, :lk], grads[2][:, :lk]

    def split_softmax_grads_for(self, device: torch.device):
        """`split_softmax_grads`, compiled where flex is: eager, it makes about ten passes over fp32 copies
        of the (B, S, H, D) activations; compiled, the reduction and the scaling are fused."""
        import torch

        if not compile_wanted(device):
            return split_softmax_grads
        if "grads" not in self._compiled:
            self._compiled["grads"] = torch.compile(split_softmax_grads, dynamic=False)
        return self._compiled["grads"]


@functools.cache
def flash_lse_scaled_by_ln2() -> bool:
    """Whether this torch returns the FLASH backend's lse multiplied by ln 2 (pytorch issue 181645).

    flash-attn-4 returns the natural-log lse; torch's finaliser took it for the Triton kernel's
    base-2 one and multiplied it by ln 2 until the fix, which made the conversion depend on
    whether the stats are base 2 (`stats_are_log2` in `torch.nn.attention.flex_attention`). Seen
    on the H200 with torch 2.11: lse off the reference by up to 1.99 on 256 keys, 0.307 of it.
    """
    from torch.nn.attention import flex_attention

    try:
        source = inspect.getsource(flex_attention)
    except (OSError, TypeError):  # no source shipped: assume the fixed torch, whose result is unchanged
        return False
    return "stats_are_log2" not in source


def pad_rows(x, dim: int = 1, value: float = 0.0):
    """`x` with its sequence dimension zero-padded to a multiple of BLOCK (itself when it is one).

    Crops of odd lengths (an 85 x 43 CP piece) make Inductor's flex template find no valid
    configuration on the H200 (`NoValidChoicesError`, torch 2.11); padded rows and keys lie outside
    every slice, so the padded call computes the same rows exactly and the padding is cut off again.
    Shards of real CP cases are multiples of BLOCK and are passed through untouched.
    """
    n = x.shape[dim]
    extra = -n % BLOCK
    if not extra:
        return x
    import torch

    shape = list(x.shape)
    shape[dim] = extra
    return torch.cat([x, torch.full(shape, value, dtype=x.dtype, device=x.device)], dim=dim)


def split_softmax_grads(dout, out_l, out, lse_l, lse):
    """(d out_l, d lse_l) that make the local attention's backward the merged attention's.

    With c = exp(lse_l - lse) per row, the merged output is sum over parts of c * out_l: the local
    part gets dout * c for its output and c * rowsum(dout * (out_l - out)) for its lse.
    Shapes: dout, out_l, out (B, S, H, D); lse_l, lse (B, H, S).
    """
    import torch

    c = torch.exp(lse_l.float() - lse.float()).nan_to_num(0.0)  # (B, H, S); a row with no keys here: 0
    rows = (dout.float() * (out_l.float() - out.float())).sum(-1).transpose(1, 2)  # (B, H, S)
    d_out = (dout.float() * c.transpose(1, 2).unsqueeze(-1)).to(out_l.dtype)
    return d_out, (c * rows).to(lse_l.dtype)


def dlse_refusal(exc: BaseException) -> str:
    """torch's own sentence, from the compile error that wraps it (e.g. BACKEND=FLASH in torch 2.11)."""
    text = " ".join(str(exc).split())
    start = text.find("FLASH backend")
    return text[start if start >= 0 else 0:][:200]


def supports_mask(problem, mask) -> str | None:
    """A mask with no natural mask_mod falls back to FlashMask bounds: at most two masked row intervals per key."""
    if mask.slices is not None and mask_mod_builder(mask.name) is not None:
        return None
    try:
        mask.flashmask_bounds()
    except ValueError as exc:
        return (f"mask {mask.name!r} registers no FlexAttention mask_mod, the generic one is built from FlashMask "
                f"bounds, and {exc}")
    return None


def block_mask_for(mask, device):
    """A user's BlockMask for one draw: `create_block_mask` over the mask's natural mask_mod."""
    mask_mod = natural_mask_mod(mask, device) if mask.slices is not None else None
    if mask_mod is None:
        return block_mask_from_slices(mask.slices, mask.seqlen, mask.seqlen, device)
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    device = torch.device(device)
    compiled = compile_wanted(device) and mask.seqlen > EAGER_BLOCK_MASK_MAX_SEQLEN
    if compiled:
        raise_recompile_limits()
    return create_block_mask(mask_mod, None, None, mask.seqlen, mask.seqlen, device=device, BLOCK_SIZE=BLOCK,
                             _compile=compiled)
