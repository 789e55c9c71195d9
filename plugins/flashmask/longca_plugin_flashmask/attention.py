"""Launchers and autograd around the Triton kernels, and the CP primitives forward/backward_lse.

Tensors are (batch, seqlen, heads, head_dim) with a contiguous last dimension; GQA maps query
head h to KV head h // (Hq // Hkv). lse is float32, natural log, (B, Hq, Sq), -inf on rows that
see nothing (their output is 0).
"""
from __future__ import annotations

import math
from types import ModuleType

import torch

from longca.plugin import lse_attention

from .configs import config
from .plan import Plan, plan_from_slices

LOG2E = 1.4426950408889634


def _interpret(device_type: str) -> bool:
    """Whether the kernels run in Triton's interpreter; CPU tensors need it."""
    from .hooks import interpreting

    if interpreting():
        return True
    if device_type != "cuda":
        raise RuntimeError("flashmask runs on the CPU only in Triton's interpreter: set TRITON_INTERPRET=1 "
                           "before triton is first imported")
    return False


def _mode() -> str:
    """"interpreter" or "cuda": which table of tile sizes applies."""
    from .hooks import interpreting

    return "interpreter" if interpreting() else "cuda"


def _kernels(device_type: str) -> ModuleType:
    """The kernel module (importing triton), after checking the device can run it."""
    _interpret(device_type)
    from . import kernels

    return kernels


def _last_contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _interpreter_upcast(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Triton's interpreter has no bf16 arithmetic: there, bf16 inputs run in float32."""
    from .hooks import interpreting

    if xs[0].dtype != torch.bfloat16 or not interpreting():
        return xs
    return tuple(x.float() for x in xs)


def _scale(q: torch.Tensor, softmax_scale: float | None) -> float:
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if not scale > 0:
        raise ValueError(f"softmax_scale must be positive, got {softmax_scale}")
    return scale


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan) -> None:
    if q.shape[0] != k.shape[0] or k.shape != v.shape or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not match "
                         "(expected (B, Sq, Hq, D) and (B, Sk, Hkv, D) twice)")
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"{q.shape[2]} query heads are not a multiple of {k.shape[2]} KV heads")
    if (q.shape[1], k.shape[1]) != (plan.seqlen_q, plan.seqlen_k):
        raise ValueError(f"the plan is for Sq={plan.seqlen_q}, Sk={plan.seqlen_k}; "
                         f"got Sq={q.shape[1]}, Sk={k.shape[1]}")
    d = q.shape[-1]
    if d < 16 or d & (d - 1):
        raise ValueError(f"head_dim {d} is not supported: a power of two >= 16 is required")


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan,
            softmax_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of masked attention over the plan's mask."""
    _check(q, k, v, plan)
    dtype = q.dtype
    q, k, v = (_last_contiguous(x) for x in _interpreter_upcast(q, k, v))
    batch, sq, heads, dim = q.shape
    sk = k.shape[1]
    cfg = config(dim, _mode(), max(sq, sk))
    bm, bn = cfg.fwd_m, cfg.fwd_n
    tiles = plan.tiles("rows", bm, bn)
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, sq), dtype=torch.float32, device=q.device)
    scale = _scale(q, softmax_scale)
    _kernels(q.device.type).fwd_kernel[(batch * heads, tiles.order.numel())](
        q, k, v, out, lse, plan.bounds, tiles.cnt, tiles.idx, tiles.order, scale * LOG2E,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        sq, sk, tiles.inner,
        H=heads, GROUP=heads // k.shape[2], D=dim, BM=bm, BN=bn,
        EVEN_M=sq % bm == 0, EVEN_N=sk % bn == 0,
        num_warps=cfg.fwd_warps, num_stages=cfg.fwd_stages,
    )
    return out.to(dtype), lse


def backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
             lse: torch.Tensor, plan: Plan, softmax_scale: float | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) from the forward's output and lse."""
    _check(q, k, v, plan)
    dtype = q.dtype
    q, k, v, out, dout = (_last_contiguous(x) for x in _interpreter_upcast(q, k, v, out, dout))
    batch, sq, heads, dim = q.shape
    sk, heads_kv = k.shape[1], k.shape[2]
    group = heads // heads_kv
    cfg = config(dim, _mode(), max(sq, sk))
    scale = _scale(q, softmax_scale)
    lse = lse.float().contiguous()
    delta = torch.empty_like(lse)
    lse2 = torch.empty_like(lse)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    common = (q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
              v.stride(0), v.stride(1), v.stride(2), dout.stride(0), dout.stride(1), dout.stride(2))
    kern = _kernels(q.device.type)
    pre_m = 64
    kern.bwd_preprocess_kernel[(batch * heads, -(-sq // pre_m))](
        out, dout, lse, delta, lse2, out.stride(0), out.stride(1), out.stride(2),
        dout.stride(0), dout.stride(1), dout.stride(2), sq, H=heads, D=dim, BM=pre_m)

    def launch_dkdv(dq_acc: torch.Tensor | None, bm: int, bn: int, warps: int, stages: int) -> None:
        """The dK/dV kernel; given a float32 dq_acc, it also adds dQ there (the fused backward)."""
        cols = plan.tiles("cols", bm, bn)
        dq_arg = dq_acc if dq_acc is not None else dk  # unused without FUSED_DQ
        dq_desc = _dq_descriptor(dq_acc, bm) if dq_acc is not None and cfg.fused_tma else None
        kern.bwd_dkdv_kernel[(batch * heads_kv, cols.order.numel())](
            q, k, v, dout, lse2, delta, dk, dv, dq_arg, plan.bounds, cols.cnt, cols.idx, cols.order,
            scale, scale * LOG2E, *common,
            dk.stride(0), dk.stride(1), dk.stride(2), dv.stride(0), dv.stride(1), dv.stride(2),
            dq_arg.stride(0), dq_arg.stride(1), dq_arg.stride(2),
            sq, sk, cols.inner, H=heads, GROUP=group, D=dim, BM=bm, BN=bn,
            EVEN_M=sq % bm == 0, EVEN_N=sk % bn == 0, HEAD_MINOR=bool(cfg.dkv_head_minor),
            FUSED_DQ=dq_acc is not None, ROTATE=dq_acc is not None and bool(cfg.fused_rotate),
            DQ_DESC=dq_desc, num_warps=warps, num_stages=stages,
        )

    if cfg.bwd_fused:
        dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        launch_dkdv(dq_acc, cfg.fused_m, cfg.fused_n, cfg.fused_warps, cfg.fused_stages)
        return dq_acc.to(dtype), dk.to(dtype), dv.to(dtype)

    dq = torch.empty_like(q)
    rows = plan.tiles("rows", cfg.dq_m, cfg.dq_n)

    def launch_dq() -> None:
        kern.bwd_dq_kernel[(batch * heads, rows.order.numel())](
            q, k, v, dout, lse2, delta, dq, plan.bounds, rows.cnt, rows.idx, rows.order,
            scale, scale * LOG2E, *common,
            dq.stride(0), dq.stride(1), dq.stride(2),
            sq, sk, rows.inner, H=heads, GROUP=group, D=dim, BM=cfg.dq_m, BN=cfg.dq_n,
            EVEN_M=sq % cfg.dq_m == 0, EVEN_N=sk % cfg.dq_n == 0,
            num_warps=cfg.dq_warps, num_stages=cfg.dq_stages,
        )

    def launch_split_dkdv() -> None:
        launch_dkdv(None, cfg.dkv_m, cfg.dkv_n, cfg.dkv_warps, cfg.dkv_stages)

    if cfg.bwd_streams > 1 and q.is_cuda:
        _side_by_side(launch_split_dkdv, launch_dq, (dk, dv))
    else:
        launch_split_dkdv()
        launch_dq()
    return dq.to(dtype), dk.to(dtype), dv.to(dtype)


def _dq_descriptor(dq_acc: torch.Tensor, block_m: int):
    """A TMA descriptor of the float32 dQ buffer (B, Sq, H, D), blocks of one head's block_m rows."""
    from .hooks import interpreting

    if interpreting() or not dq_acc.is_cuda or torch.cuda.get_device_capability(dq_acc.device) < (9, 0):
        raise RuntimeError("fused_tma=1: dQ by TMA reductions needs a GPU of compute capability >= 9.0 "
                           "(not Triton's interpreter); set fused_tma=0")
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError as exc:
        raise RuntimeError(f"fused_tma=1 needs triton >= 3.4 (tensor descriptors): {exc}") from None
    return TensorDescriptor.from_tensor(dq_acc, [1, block_m, 1, dq_acc.shape[-1]])


_SIDE_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


def _side_by_side(first, second, first_outputs) -> None:
    """Run `first` on a side stream and `second` on the current one, then join.

    The dK/dV grid has few, long programs; with the dQ kernel beside it the GPU fills the last,
    partly empty wave of one with programs of the other.
    """
    main = torch.cuda.current_stream()
    side = _SIDE_STREAMS.setdefault(main.device, torch.cuda.Stream(main.device))
    side.wait_stream(main)
    with torch.cuda.stream(side):
        first()
    second()
    for t in first_outputs:
        t.record_stream(side)
    main.wait_stream(side)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan,
              softmax_scale: float | None = None) -> torch.Tensor:
    """Masked attention with autograd."""
    return lse_attention(lambda q_, k_, v_: forward(q_, k_, v_, plan, softmax_scale),
                         lambda dout, q_, k_, v_, out, lse: backward(dout, q_, k_, v_, out, lse, plan, softmax_scale),
                         q, k, v)


def forward_lse(q, k, v, slices, softmax_scale: float | None = None):
    """CP primitive: (out, lse) over `slices` in the local coordinates of q (rows) and k (columns)."""
    return forward(q, k, v, plan_from_slices(slices, q.shape[1], k.shape[1], q.device), softmax_scale)


def backward_lse(dout, q, k, v, out, lse, slices, softmax_scale: float | None = None):
    """CP primitive: (dq, dk, dv) over `slices` from the forward's output and lse."""
    return backward(dout, q, k, v, out, lse, plan_from_slices(slices, q.shape[1], k.shape[1], q.device),
                    softmax_scale)


def prepare_plan(bounds, q: torch.Tensor, k: torch.Tensor) -> Plan:
    """A plan for q and k over FlashMask bounds, with the tile lists the kernels will ask for."""
    from .plan import make_plan

    plan = make_plan(bounds, q.shape[1], k.shape[1], q.device)
    cfg = config(q.shape[-1], _mode(), max(q.shape[1], k.shape[1]))
    plan.tiles("rows", cfg.fwd_m, cfg.fwd_n)
    if cfg.bwd_fused:
        plan.tiles("cols", cfg.fused_m, cfg.fused_n)
    else:
        plan.tiles("cols", cfg.dkv_m, cfg.dkv_n)
        plan.tiles("rows", cfg.dq_m, cfg.dq_n)
    return plan
