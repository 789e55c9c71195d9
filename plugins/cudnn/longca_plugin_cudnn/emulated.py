"""A CPU stand-in for `graphs.CudnnGraphs`: the same GraphSpec and buffers, computed in float32.

It reads and writes the buffers the way cuDNN's SDPA does by its documentation and its own
reference (cudnn-frontend test/python/test_mhas.py): a data pointer with BHSD strides; in the
ragged layout sequence i starting `offset_*[i]` elements in, `seq_len_*[i]` long; stats float32
(batch, heads, seqlen, 1) = max + ln(sum(exp)) of the scaled scores. The mask is the diagonal
band: key j is seen by query i when `j <= i + shift + right_bound` and `j > i + shift -
left_bound`, where shift is 0 for TOP_LEFT and `seq_len_kv - seq_len_q` (of that sequence) for
BOTTOM_RIGHT. So the tests check the whole frontend path on a CPU (planning, band bounds,
alignment, ragged offsets, stats layout, lse merging) against `longca.reference`; they check
nothing about the cuDNN API calls themselves, which only a GPU run does.

Fused sinks (`spec.sink`), as cuDNN's graph reads them: the sink joins each row's softmax
(stats = logaddexp(lse, sink[h]), the output normalised by it), the backward takes p from those
stats, and dSink[h] = -sum over rows of exp(sink[h] - stats) * rowsum(dO * O). That gradient is
ADDED into the dSink_token buffer, sequence by sequence, without zeroing it first: cuDNN may
accumulate into it, so the stand-in does, and the tests check that the caller zeroes it.
`version`: the cuDNN the stand-in poses as, for the fused-sinks decision (None: every feature).
"""
from __future__ import annotations

import torch

from .graphs import GraphSpec, packed_strides, stats_strides


def band_mask(len_q: int, len_k: int, top_left: bool, left_bound, right_bound) -> torch.Tensor:
    """(len_q, len_k) bool: which keys each query sees under cuDNN's diagonal band."""
    i = torch.arange(len_q)[:, None]
    j = torch.arange(len_k)[None, :]
    shift = 0 if top_left else len_k - len_q
    keep = torch.ones(len_q, len_k, dtype=torch.bool)
    if right_bound is not None:
        keep &= j <= i + shift + right_bound
    if left_bound is not None:
        keep &= j > i + shift - left_bound
    return keep


def _view(buf: torch.Tensor, strides, start: int, heads: int, length: int, width: int) -> torch.Tensor:
    """(heads, length, width) at element `start` of buf's data, with BHSD strides (b unused)."""
    return buf.as_strided((heads, length, width), (strides[1], strides[2], strides[3]), buf.storage_offset() + start)


class EmulatedGraphs:
    """Counts graphs "built" per spec, as CudnnGraphs does, and executes them in float32."""

    def __init__(self, version: int | None = None):
        self.version = version  # as CudnnGraphs.version: cudnn.backend_version(), None for no limit
        self.built: set[GraphSpec] = set()
        self.builds = 0
        self.executions = 0

    def build(self, spec: GraphSpec, device=None) -> None:
        if spec not in self.built:
            self.built.add(spec)
            self.builds += 1

    def execute(self, spec: GraphSpec, buffers: dict[str, torch.Tensor]) -> None:
        self.build(spec)
        self.executions += 1
        for i in range(spec.batch):
            self._sequence(spec, buffers, i)

    def _where(self, spec: GraphSpec, buffers, i: int, side: str) -> tuple[int | None, int]:
        """(start element of sequence i in the q- or kv-side tensors, its length); start None if not ragged."""
        if spec.ragged:
            return int(buffers[f"offset_{side}"].view(-1)[i]), int(buffers[f"seq_len_{side}"].view(-1)[i])
        return None, spec.seqlen_q if side == "q" else spec.seqlen_kv

    def _sequence(self, spec: GraphSpec, buffers, i: int) -> None:
        start_q, len_q = self._where(spec, buffers, i, "q")
        start_kv, len_kv = self._where(spec, buffers, i, "kv")
        d = spec.head_dim

        def view(role, start, heads, length, width=d, strides=None):
            strides = strides or spec.stride(role)
            return _view(buffers[role], strides, i * strides[0] if start is None else start, heads, length, width)

        out_strides = {"dQ": packed_strides(spec.seqlen_q, spec.heads_q, d),
                       "dK": packed_strides(spec.seqlen_kv, spec.heads_kv, d),
                       "dV": packed_strides(spec.seqlen_kv, spec.heads_kv, d)}
        q = view("q", start_q, spec.heads_q, len_q)
        k, v = (view(r, start_kv, spec.heads_kv, len_kv) for r in ("k", "v"))
        stats = _view(buffers["stats"], stats_strides(spec), i * stats_strides(spec)[0], spec.heads_q, len_q, 1)
        group = spec.heads_q // spec.heads_kv
        kf, vf = (x.float().repeat_interleave(group, dim=0) for x in (k, v))
        keep = band_mask(len_q, len_kv, spec.top_left, spec.left_bound, spec.right_bound)
        scores = (q.float() @ kf.transpose(1, 2) * spec.scale).masked_fill(~keep, float("-inf"))
        sink = buffers["sink_token"].view(-1, 1, 1).float() if spec.sink else None  # (heads_q, 1, 1)
        if not spec.backward:
            lse = torch.logsumexp(scores, dim=-1, keepdim=True)
            if sink is not None:
                lse = torch.logaddexp(lse, sink)
            view("o", start_q, spec.heads_q, len_q).copy_(torch.exp(scores - lse) @ vf)
            stats.copy_(lse)
            return
        o, do = (view(r, start_q, spec.heads_q, len_q).float() for r in ("o", "dO"))
        p = torch.exp(scores - stats.float())
        rows = (do * o).sum(-1, keepdim=True)
        ds = p * (do @ vf.transpose(1, 2) - rows)
        if sink is not None:
            buffers["dSink_token"].view(-1).sub_((torch.exp(sink - stats.float()) * rows).sum((1, 2)))
        dq = ds @ kf * spec.scale
        dk = (ds.transpose(1, 2) @ q.float() * spec.scale).unflatten(0, (spec.heads_kv, group)).sum(1)
        dv = (p.transpose(1, 2) @ do).unflatten(0, (spec.heads_kv, group)).sum(1)
        for role, grad, start, heads, length in (("dQ", dq, start_q, spec.heads_q, len_q),
                                                 ("dK", dk, start_kv, spec.heads_kv, len_kv),
                                                 ("dV", dv, start_kv, spec.heads_kv, len_kv)):
            view(role, start, heads, length, strides=out_strides[role]).copy_(grad)
