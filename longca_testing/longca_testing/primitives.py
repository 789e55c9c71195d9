"""Checks of the context-parallel primitives `forward_lse` / `backward_lse` against the reference.

Strategies call the primitives on pieces of a mask: the whole mask, an off-diagonal block (ring
steps) and local queries against every key (all-gather). The checks use the same pieces, in the
slices' local coordinates, one of them with an explicit softmax_scale.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from longca import reference
from longca.errors import UnsupportedError
from longca.masks.mask import Mask
from longca.specs import KernelSpec
from longca_runner.measure import rel_err


class BackwardRefused(Exception):
    """backward_lse raised UnsupportedError on every piece it was given: the kernel refuses CP backward
    (its rows say so), which is a refusal, not a wrong gradient. Raised once every forward part was checked."""


def windows(seqlen: int) -> list[tuple[tuple[int, int], tuple[int, int], float | None]]:
    """(q range, k range, softmax_scale) pieces: whole, ring block, all-gather rows (scale 0.1)."""
    half = seqlen // 2
    return [((0, seqlen), (0, seqlen), None), ((half, seqlen), (0, half), None), ((half, seqlen), (0, seqlen), 0.1)]


def _lse_error(lse: torch.Tensor, ref: torch.Tensor, tolerance: float) -> str | None:
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
    forward_lse, backward_lse = spec.forward_lse, spec.backward_lse
    if forward_lse is None or (backward and backward_lse is None):
        return [f"kernel {spec.name} declares no {'backward_lse' if forward_lse else 'forward_lse'}"]
    failures: list[str] = []
    refused: list[str] = []
    checked = 0  # backward_lse calls
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
            out, lse = forward_lse(qs, ks, vs, np.ascontiguousarray(slices), scale)
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
        assert backward_lse is not None  # checked above
        checked += 1
        try:
            got = backward_lse(dout, qs, ks, vs, out, lse, np.ascontiguousarray(slices), scale)
        except UnsupportedError as exc:
            refused.append(f"{where}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - whatever the kernel under test raises is a failure message
            failures.append(f"{where}: backward_lse raised {type(exc).__name__}: {exc}")
            continue
        for name, g, w, like in zip(("dq", "dk", "dv"), got, want, (qs, ks, vs), strict=False):
            err = rel_err(g, w)
            if tuple(g.shape) != tuple(like.shape):
                failures.append(f"{where}: {name} has shape {tuple(g.shape)}, expected {tuple(like.shape)}")
            elif math.isnan(err) or err > tolerance:
                failures.append(f"{where}: {name} relative error {err:.3g} > {tolerance:g}")
    return _refused_or(failures, refused, checked)


def _refused_or(failures: list[str], refused: list[str], checked: int) -> list[str]:
    """The failures; or BackwardRefused when backward_lse refused every call and nothing failed."""
    if refused and not failures and checked == len(refused):
        raise BackwardRefused(refused[0])
    if refused:  # refusing some pieces and computing others is a failure: a strategy would hit both
        failures = failures + [f"backward_lse refused {len(refused)} of {checked} pieces: {refused[0]}"]
    return failures


def pieces(seqlen: int, n: int) -> list[tuple[int, int]]:
    """`n` uneven consecutive ranges covering [0, seqlen) (sizes roughly 1 : 2 : 3 ...; odd cuts)."""
    weights = np.arange(1, n + 1)
    inner = [(int(c) | 1) for c in np.cumsum(weights)[:-1] * seqlen // weights.sum()]
    cuts = sorted({0, seqlen, *(c for c in inner if 0 < c < seqlen)})
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def _errors(got, want) -> dict[str, float]:
    return {name: rel_err(g, w) for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=False)}


def compare_cp_pieces(spec: KernelSpec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Mask,
                      tolerance: float) -> list[str]:
    """The primitives used the way every CP strategy uses them; failures, empty when all agree.

    Queries and keys are cut into uneven pieces. For each query piece: `forward_lse` on every key
    piece, the partial results merged through their lse (longca.merge), then `backward_lse` on
    every key piece with the *merged* out and lse; the summed gradients must equal the reference's
    on the whole mask. A backward_lse that recomputes its own forward instead of using the out and
    lse it is given normalises over one key piece only: that is named as such.
    """
    from longca.merge import merge_

    forward_lse, backward_lse = spec.forward_lse, spec.backward_lse
    if forward_lse is None or backward_lse is None:
        return [f"kernel {spec.name} declares no {'backward_lse' if forward_lse else 'forward_lse'}"]
    failures: list[str] = []
    refused: list[str] = []
    checked = 0  # backward_lse calls
    seqlen, batch, heads = mask.seqlen, q.shape[0], q.shape[2]
    gen = torch.Generator(device="cpu").manual_seed(11)
    dout = torch.randn(q.shape[:3] + (v.shape[-1],), generator=gen).to(device=q.device, dtype=q.dtype)
    ref_out, ref_lse = reference.forward_lse(q.float(), k.float(), v.float(), mask)
    want = reference.backward_lse(dout.float(), q.float(), k.float(), v.float(), ref_out, ref_lse, mask)
    got = [torch.zeros(x.shape, dtype=torch.float32, device=x.device) for x in (q, k, v)]
    own_grads_match = 0
    q_pieces, k_pieces = pieces(seqlen, 2), pieces(seqlen, 3)
    where = f"mask {mask.name}, queries cut at {[a for a, _ in q_pieces[1:]]}, keys at {[a for a, _ in k_pieces[1:]]}"
    for qa, qb in q_pieces:
        qs, dos = q[:, qa:qb].contiguous(), dout[:, qa:qb].contiguous()
        out_acc = torch.zeros(batch, qb - qa, heads, v.shape[-1], dtype=torch.float32, device=q.device)
        lse_acc = torch.full((batch, heads, qb - qa), -math.inf, dtype=torch.float32, device=q.device)
        calls = []
        for ka, kb in k_pieces:
            slices = np.ascontiguousarray(mask.crop((qa, qb), (ka, kb)))
            if not len(slices):
                continue
            ks, vs = k[:, ka:kb].contiguous(), v[:, ka:kb].contiguous()
            try:
                out, lse = forward_lse(qs, ks, vs, slices, None)
            except Exception as exc:  # noqa: BLE001 - whatever the kernel under test raises is a failure message
                return [f"{where}: forward_lse raised {type(exc).__name__}: {exc} on rows {qa}:{qb} keys {ka}:{kb}"]
            merge_(out_acc, lse_acc, out, lse)
            calls.append((ka, kb, ks, vs, slices, out, lse))
        err = rel_err(out_acc, ref_out[:, qa:qb])
        if math.isnan(err) or err > tolerance:
            failures.append(f"{where}: rows {qa}:{qb}: the lse-merged output of forward_lse over the key pieces "
                            f"has relative error {err:.3g} > {tolerance:g} (is lse the natural-log log-sum-exp "
                            f"of the scaled scores, -inf on rows that see no key?)")
            continue
        merged_out = out_acc.to(q.dtype)
        for ka, kb, ks, vs, slices, _out, _lse in calls:
            checked += 1
            try:
                dq, dk, dv = backward_lse(dos, qs, ks, vs, merged_out, lse_acc, slices, None)
            except UnsupportedError as exc:  # the forward merges of the other query pieces are still checked
                refused.append(f"{where}: backward_lse on rows {qa}:{qb} keys {ka}:{kb}: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - whatever the kernel under test raises is a failure message
                return failures + [f"{where}: backward_lse raised {type(exc).__name__}: {exc}"]
            if len(calls) > 1:  # does it match the gradients of this piece alone (its own out and lse)?
                own_out, own_lse = reference.forward_lse(qs.float(), ks.float(), vs.float(), slices)
                own = reference.backward_lse(dos.float(), qs.float(), ks.float(), vs.float(), own_out, own_lse,
                                             slices)
                exact = reference.backward_lse(dos.float(), qs.float(), ks.float(), vs.float(), merged_out.float(),
                                               lse_acc, slices)
                mine, theirs = _errors((dq, dk, dv), own), _errors((dq, dk, dv), exact)
                if max(mine.values()) < tolerance < max(theirs.values()):
                    own_grads_match += 1
            got[0][:, qa:qb] += dq.float()
            got[1][:, ka:kb] += dk.float()
            got[2][:, ka:kb] += dv.float()
    if failures or refused:
        return _refused_or(failures, refused, checked)
    errors = _errors(got, want)
    worst = max(errors.values(), key=lambda e: math.inf if math.isnan(e) else e)
    if math.isnan(worst) or worst > tolerance:
        detail = ", ".join(f"{n} {e:.3g}" for n, e in errors.items())
        if own_grads_match:
            failures.append(f"{where}: backward_lse ignores the merged out and lse it is given: its gradients "
                            f"on {own_grads_match} key pieces are those of that piece's own forward, so the summed "
                            f"gradients are off ({detail}). It must compute the probabilities as "
                            f"exp(scale * q k^T - lse) with the lse passed in, and delta = rowsum(dout * out) with "
                            f"the out passed in (see longca.reference.backward_lse)")
        else:
            failures.append(f"{where}: gradients summed over the key pieces, each from backward_lse with the "
                            f"merged out and lse, differ from the reference: {detail} (tolerance {tolerance:g})")
    return failures
