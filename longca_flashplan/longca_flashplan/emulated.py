"""A CPU stand-in for a FlashAttention kernel: the same call contract, computed by the reference.

It lets the planner and the executor be tested exactly on a CPU: any error in packing, windows,
lse merging or gradient accumulation shows up as a mismatch with `longca.reference`.
"""
from __future__ import annotations

import torch

from longca import reference
from longca.masks import slices as sl

from .plan import INF, any_window


def window_slices(len_q: int, len_k: int, left: int, right: int):
    """The (bottom-right aligned) FlashAttention window as slices of a len_q x len_k rectangle."""
    shift = len_k - len_q
    dlo = -INF if left < 0 else shift - left
    dhi = INF if right < 0 else shift + right
    return sl.as_array(sl.band_to_slices(0, len_q, 0, len_k, dlo, dhi))


class EmulatedFlash:
    """Adapter with FlashAttention's contract, computed by longca.reference (float32)."""

    name = "emulated"

    def __init__(self, window_ok=any_window):
        self.window_ok = window_ok
        self.calls = 0

    def _sequences(self, args):
        cu_q, cu_k = args.cu_q.tolist(), args.cu_k.tolist()
        return [(cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]) for i in range(len(cu_q) - 1)]

    def fwd(self, q, k, v, args):
        self.calls += 1
        if not args.varlen:
            return reference.forward_lse(q, k, v, window_slices(q.shape[1], k.shape[1], args.left, args.right),
                                         args.scale)
        outs, lses = [], []
        for qa, qb, ka, kb in self._sequences(args):
            o, lse = reference.forward_lse(q[None, qa:qb], k[None, ka:kb], v[None, ka:kb],
                                           window_slices(qb - qa, kb - ka, args.left, args.right), args.scale)
            outs.append(o[0])
            lses.append(lse[0])
        return torch.cat(outs), torch.cat(lses, dim=1)

    def bwd(self, dout, q, k, v, out, lse, args):
        if not args.varlen:
            return reference.backward_lse(dout, q, k, v, out, lse,
                                          window_slices(q.shape[1], k.shape[1], args.left, args.right), args.scale)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for qa, qb, ka, kb in self._sequences(args):
            g = reference.backward_lse(dout[None, qa:qb], q[None, qa:qb], k[None, ka:kb], v[None, ka:kb],
                                       out[None, qa:qb], lse[None, :, qa:qb],
                                       window_slices(qb - qa, kb - ka, args.left, args.right), args.scale)
            dq[qa:qb] += g[0][0]
            dk[ka:kb] += g[1][0]
            dv[ka:kb] += g[2][0]
        return dq, dk, dv
