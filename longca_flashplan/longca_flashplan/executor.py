"""Run a `Plan` with any FlashAttention-style kernel, forward and backward, exactly.

A kernel plugs in as an `Adapter` with two primitives that take the output and log-sum-exp
explicitly: `fwd(q, k, v, args) -> (out, lse)` and `bwd(dout, q, k, v, out, lse, args) ->
(dq, dk, dv)`. `args.varlen` says which layout: dense (B, L, H, D) tensors with lse (B, H, L),
or packed (T, H, D) tensors with `cu_seqlens` and lse (H, T).

Forward runs every call of the plan and writes (or, where calls share query rows, merges through
lse) the results. Backward gives each call the *merged* output and lse, which is exactly what
makes the per-call gradients of a split softmax add up to the true gradient (the ring-attention
identity), then adds them up. This also gives the `forward_lse` / `backward_lse` primitives that
context-parallel strategies use. torch is imported where a call runs, not with the module: the
kernels built on it register without torch (issue 26).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from longca.lru import SlicesCache

from .plan import Plan, WindowCheck, any_window, make_plan

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclass
class CallArgs:
    """What a kernel needs for one call besides the tensors."""

    varlen: bool
    left: int
    right: int
    scale: float = 1.0
    cu_q: torch.Tensor | None = None  # int32 (n+1,), varlen only
    cu_k: torch.Tensor | None = None
    max_q: int = 0
    max_k: int = 0

    @property
    def causal(self) -> bool:
        return (self.left, self.right) == (-1, 0)

    @property
    def unwindowed(self) -> bool:
        return (self.left, self.right) in ((-1, -1), (-1, 0))


class Adapter(Protocol):
    """A kernel's explicit-lse primitives (see module docstring)."""

    name: str

    @property
    def window_ok(self) -> WindowCheck: ...  # read-only: a class attribute `staticmethod(check)` satisfies it

    def fwd(self, q, k, v, args: CallArgs) -> tuple[torch.Tensor, torch.Tensor]: ...

    def bwd(self, dout, q, k, v, out, lse, args: CallArgs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


class _Rows:
    """A set of rows of a flattened (B*S, ...) tensor: all of them, one range, or an index."""

    def __init__(self, idx: np.ndarray, total: int, device):
        self.n = len(idx)
        if self.n == total and (idx == np.arange(total)).all():
            self.kind, self.a, self.b, self.t = "all", 0, total, None
        elif self.n and (np.diff(idx) == 1).all():
            self.kind, self.a, self.b, self.t = "range", int(idx[0]), int(idx[-1]) + 1, None
        else:
            import torch

            self.kind, self.a, self.b = "index", 0, 0
            self.t = torch.from_numpy(idx.astype(np.int64)).to(device)

    def _index(self) -> torch.Tensor:
        assert self.t is not None, "only an 'index' row set holds an index tensor"
        return self.t

    def take(self, x: torch.Tensor, dim: int = 0) -> torch.Tensor:
        if self.kind == "all":
            return x
        if self.kind == "range":
            return x.narrow(dim, self.a, self.b - self.a)
        return x.index_select(dim, self._index())

    def put(self, dst: torch.Tensor, src: torch.Tensor, dim: int = 0) -> None:
        if self.kind == "index":
            dst.index_copy_(dim, self._index(), src)
        else:
            dst.narrow(dim, self.a, self.b - self.a).copy_(src)

    def add(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        if self.kind == "index":
            dst.index_add_(0, self._index(), src.to(dst.dtype))
        else:
            dst.narrow(0, self.a, self.b - self.a).add_(src)


class ExecCall:
    """One call of a plan, with its index tensors on the device for a given batch size."""

    def __init__(self, call, batch: int, seqlen_q: int, seqlen_k: int, scale: float, device):
        left, right = call.window
        self.dense = len(call.bands) == 1
        self.args = CallArgs(varlen=not self.dense, left=left, right=right, scale=scale)
        if self.dense:
            b = call.bands[0]
            self.band = (b.q0, b.q1, b.k0, b.k1)
            return
        qi = np.concatenate([np.arange(b.q0, b.q1) for b in call.bands])
        ki = np.concatenate([np.arange(b.k0, b.k1) for b in call.bands])
        self.q_rows = _Rows(np.concatenate([qi + i * seqlen_q for i in range(batch)]), batch * seqlen_q, device)
        self.k_rows = _Rows(np.concatenate([ki + i * seqlen_k for i in range(batch)]), batch * seqlen_k, device)
        import torch

        lq = np.tile([b.len_q for b in call.bands], batch)
        lk = np.tile([b.len_k for b in call.bands], batch)
        self.args.cu_q = torch.from_numpy(np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)).to(device)
        self.args.cu_k = torch.from_numpy(np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)).to(device)
        self.args.max_q, self.args.max_k = int(lq.max()), int(lk.max())

    # packing (B, S, H, D) tensors into the call's layout
    def pack_q(self, x):
        if self.dense:
            return x[:, self.band[0]:self.band[1]]
        return self.q_rows.take(x.reshape(-1, *x.shape[2:]))

    def pack_k(self, x):
        if self.dense:
            return x[:, self.band[2]:self.band[3]]
        return self.k_rows.take(x.reshape(-1, *x.shape[2:]))

    def pack_lse(self, lse_hbs):
        """lse (H, B, S) -> the call's layout: (B, H, L) dense, (H, T) varlen."""
        if self.dense:
            return lse_hbs[:, :, self.band[0]:self.band[1]].permute(1, 0, 2).contiguous()
        return self.q_rows.take(lse_hbs.reshape(lse_hbs.shape[0], -1), dim=1).contiguous()

    def full_coverage(self, seqlen_q: int, seqlen_k: int) -> bool:
        """The call alone is the whole attention: every row, every key, identity packing."""
        if self.dense:
            return self.band == (0, seqlen_q, 0, seqlen_k)
        return self.q_rows.kind == "all" and self.k_rows.kind == "all"


class ExecPlan:
    """A plan made concrete for a batch size, scale and device."""

    def __init__(self, plan: Plan, batch: int, scale: float, device):
        self.plan = plan
        self.batch = batch
        self.calls = [ExecCall(c, batch, plan.seqlen_q, plan.seqlen_k, scale, device) for c in plan.calls]

    @property
    def single(self) -> ExecCall | None:
        """The one call that is the whole attention, if the plan is just that."""
        if len(self.calls) == 1 and self.calls[0].full_coverage(self.plan.seqlen_q, self.plan.seqlen_k):
            return self.calls[0]
        return None


def _to_flat(out, lse, call: ExecCall):
    """A call's (out, lse) as (rows, H, D) and (H, rows) in flat row order of its q rows."""
    if call.dense:
        b, lq, h, d = out.shape
        return out.reshape(b * lq, h, d), lse.permute(1, 0, 2).reshape(h, b * lq)
    return out, lse


def _dense_rows(call: ExecCall, batch: int, seqlen: int, device) -> _Rows:
    q0, q1 = call.band[:2]
    idx = np.concatenate([np.arange(q0, q1) + i * seqlen for i in range(batch)])
    return _Rows(idx, batch * seqlen, device)


def run_forward(adapter: Adapter, ex: ExecPlan, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, S, H, Dv) in q's dtype, lse (B, H, S) float32, -inf on rows that see nothing)."""
    import torch

    batch, seqlen, heads, _ = q.shape
    dv = v.shape[-1]
    n = batch * seqlen
    merge = ex.plan.needs_merge
    single = ex.single
    if single is not None:
        out, lse = adapter.fwd(single.pack_q(q), single.pack_k(k), single.pack_k(v), single.args)
        if single.dense:
            return out, lse
        return out.view(batch, seqlen, heads, dv), lse.view(heads, batch, seqlen).permute(1, 0, 2)
    acc = torch.zeros(n, heads, dv, dtype=torch.float32 if merge else q.dtype, device=q.device)
    lse_acc = torch.full((heads, n), -math.inf, dtype=torch.float32, device=q.device)
    for call in ex.calls:
        out, lse = adapter.fwd(call.pack_q(q), call.pack_k(k), call.pack_k(v), call.args)
        out, lse = _to_flat(out, lse, call)
        rows = _dense_rows(call, batch, seqlen, q.device) if call.dense else call.q_rows
        if not merge:
            rows.put(acc, out)
            rows.put(lse_acc, lse.float(), dim=1)
            continue
        cur = rows.take(lse_acc, dim=1)
        new = torch.logaddexp(cur, lse.float())
        keep = torch.exp(cur - new).transpose(0, 1).unsqueeze(-1)
        add = torch.exp(lse.float() - new).transpose(0, 1).unsqueeze(-1)
        rows.put(acc, rows.take(acc) * keep + out.float() * add)
        rows.put(lse_acc, new, dim=1)
    out = acc.to(q.dtype).view(batch, seqlen, heads, dv)
    return out, lse_acc.view(heads, batch, seqlen).permute(1, 0, 2)


def run_backward(adapter: Adapter, ex: ExecPlan, dout, q, k, v, out, lse):
    """(dq, dk, dv) from the merged out and lse (B, H, S) of `run_forward`."""
    import torch

    batch, seqlen, heads, _ = q.shape
    lse_hbs = lse.permute(1, 0, 2)
    single = ex.single
    if single is not None:
        one = adapter.bwd(single.pack_q(dout), single.pack_q(q), single.pack_k(k), single.pack_k(v),
                          single.pack_q(out), single.pack_lse(lse_hbs), single.args)
        return tuple(g.view(x.shape) for g, x in zip(one, (q, k, v), strict=False))
    grads = [torch.zeros(x.shape, dtype=torch.float32, device=x.device) for x in (q, k, v)]
    for call in ex.calls:
        dq, dk, dv = adapter.bwd(call.pack_q(dout), call.pack_q(q), call.pack_k(k), call.pack_k(v),
                                 call.pack_q(out), call.pack_lse(lse_hbs), call.args)
        if call.dense:
            q0, q1, k0, k1 = call.band
            grads[0][:, q0:q1] += dq
            grads[1][:, k0:k1] += dk
            grads[2][:, k0:k1] += dv
        else:
            call.q_rows.add(grads[0].view(-1, *q.shape[2:]), dq)
            call.k_rows.add(grads[1].view(-1, *k.shape[2:]), dk)
            call.k_rows.add(grads[2].view(-1, *v.shape[2:]), dv)
    return tuple(g.to(x.dtype) for g, x in zip(grads, (q, k, v), strict=True))


def plan_attention(q, k, v, adapter: Adapter, ex: ExecPlan, sinks=None) -> torch.Tensor:
    """`run_forward` with autograd through `run_backward`. With `sinks` (Hq,) they enter through the merged
    lse, as users of a library without sinks add them (`longca.reference.with_sinks`): the backward is the
    plan's own given the sink-including out and lse, and the sinks' gradient follows from them."""
    from longca.autograd import lse_attention
    from longca.reference import with_sinks

    def forward(q_, k_, v_, s_=None):
        out, lse = run_forward(adapter, ex, q_, k_, v_)
        return (out, lse) if s_ is None else with_sinks(out, lse, s_)

    return lse_attention(forward, lambda dout, *rest: run_backward(adapter, ex, dout.contiguous(), *rest),
                         q, k, v, sinks)


def resolve_scale(q, scale: float | None) -> float:
    return scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])


class PlanCache:
    """Plans for slices seen before (context-parallel strategies call the primitives many times)."""

    def __init__(self, size: int = 64):
        self._plans: SlicesCache[ExecPlan] = SlicesCache(size)

    def get(self, adapter: Adapter, slices, seqlen_q: int, seqlen_k: int, batch: int, scale: float, device) -> ExecPlan:
        def make(arr):
            return ExecPlan(make_plan(arr, seqlen_q, seqlen_k, getattr(adapter, "window_ok", any_window)),
                            batch, scale, device)

        return self._plans.get(slices, (adapter.name, seqlen_q, seqlen_k, batch, scale, str(device)), make)


def lse_primitives(adapter_factory):
    """`forward_lse` / `backward_lse` (the KernelSpec primitives) over an adapter."""
    cache = PlanCache()

    def forward_lse(q, k, v, slices, softmax_scale: float | None = None):
        import torch

        adapter = adapter_factory()
        ex = cache.get(adapter, slices, q.shape[1], k.shape[1], q.shape[0], resolve_scale(q, softmax_scale), q.device)
        with torch.no_grad():
            out, lse = run_forward(adapter, ex, q, k, v)
        return out, lse.contiguous()

    def backward_lse(dout, q, k, v, out, lse, slices, softmax_scale: float | None = None):
        import torch

        adapter = adapter_factory()
        ex = cache.get(adapter, slices, q.shape[1], k.shape[1], q.shape[0], resolve_scale(q, softmax_scale), q.device)
        with torch.no_grad():
            return run_backward(adapter, ex, dout.contiguous(), q, k, v, out, lse)

    return forward_lse, backward_lse
