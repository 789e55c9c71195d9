"""Checks of the context-parallel primitives `forward_lse` / `backward_lse` against the reference.

Strategies call the primitives on pieces of a mask: the whole mask, an off-diagonal block (ring
steps) and local queries against every key (all-gather). The checks use the same pieces, in the
slices' local coordinates, one of them with an explicit softmax_scale.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from .. import reference
from ..bench import rel_err
from ..masks.mask import Mask
from ..specs import KernelSpec


def windows(seqlen: int) -> list[tuple[tuple[int, int], tuple[int, int], Optional[float]]]:
    """(q range, k range, softmax_scale) pieces: whole, ring block, all-gather rows (scale 0.1)."""
    half = seqlen // 2
    return [((0, seqlen), (0, seqlen), None), ((half, seqlen), (0, half), None), ((half, seqlen), (0, seqlen), 0.1)]


def _lse_error(lse: torch.Tensor, ref: torch.Tensor, tolerance: float) -> Optional[str]:
    """Why lse differs from the reference's (shape, dtype, -inf rows, values), or None."""
    if tuple(lse.shape) != tuple(ref.shape):
        return f"lse has shape {tuple(lse.shape)}, expected (batch, heads_q, seqlen_q) = {tuple(ref.shape)}"
    if lse.dtype != torch.float32:
        return f"lse is {lse.dtype}, expected torch.float32"
    lse = lse.detach().cpu()
    ref = ref.detach().cpu()
    empty = torch.isneginf(ref)
    if not torch.equal(torch.isneginf(lse), empty):
        return "lse must be -inf exactly on the rows that see no key"
    diff = (lse[~empty] - ref[~empty]).abs()
    if diff.numel() and (torch.isnan(diff).any() or (diff / (1 + ref[~empty].abs())).max().item() > tolerance):
        return f"lse differs from the reference by up to {diff.max().item():.3g}"
    return None


def compare_primitives(spec: KernelSpec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Mask,
                       tolerance: float, backward: bool) -> list[str]:
    """Failures of spec.forward_lse (or backward_lse) on pieces of `mask`; empty when all agree."""
    failures = []
    seqlen = mask.seqlen
    gen = torch.Generator(device="cpu").manual_seed(7)
    for q_range, k_range, scale in windows(seqlen):
        slices = mask.crop(q_range, k_range)
        if not len(slices):
            continue
        where = f"mask {mask.name} rows {q_range} keys {k_range}" + (f" scale {scale}" if scale else "")
        qs, ks, vs = (x[:, slice(*r)].contiguous() for x, r in ((q, q_range), (k, k_range), (v, k_range)))
        ref_out, ref_lse = reference.forward_lse(qs.float(), ks.float(), vs.float(), slices, scale)
        try:
            out, lse = spec.forward_lse(qs, ks, vs, np.ascontiguousarray(slices), scale)
        except Exception as exc:  # noqa: BLE001 - a failing primitive is a failure, not a crash
            failures.append(f"{where}: forward_lse raised {type(exc).__name__}: {exc}")
            continue
        if not backward:
            err = rel_err(out, ref_out)
            if tuple(out.shape) != tuple(qs.shape[:3]) + (vs.shape[-1],):
                failures.append(f"{where}: out has shape {tuple(out.shape)}, expected {tuple(ref_out.shape)}")
            elif math.isnan(err) or err > tolerance:
                failures.append(f"{where}: out relative error {err:.3g} > {tolerance:g}")
            problem = _lse_error(lse, ref_lse, tolerance)
            if problem:
                failures.append(f"{where}: {problem}")
            continue
        dout = torch.randn(out.shape, generator=gen, dtype=torch.float32).to(device=q.device, dtype=q.dtype)
        want = reference.backward_lse(dout.float(), qs.float(), ks.float(), vs.float(), ref_out, ref_lse, slices, scale)
        try:
            got = spec.backward_lse(dout, qs, ks, vs, out, lse, np.ascontiguousarray(slices), scale)
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{where}: backward_lse raised {type(exc).__name__}: {exc}")
            continue
        for name, g, w, like in zip(("dq", "dk", "dv"), got, want, (qs, ks, vs)):
            err = rel_err(g, w)
            if tuple(g.shape) != tuple(like.shape):
                failures.append(f"{where}: {name} has shape {tuple(g.shape)}, expected {tuple(like.shape)}")
            elif math.isnan(err) or err > tolerance:
                failures.append(f"{where}: {name} relative error {err:.3g} > {tolerance:g}")
    return failures
