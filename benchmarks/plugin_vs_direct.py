"""Each kernel plugin against a hand-written call of the same library, same inputs, same process.

A benchmark is fair only if each kernel runs as its users run it. For every (kernel, mask, S,
direction) this times the plugin (`spec.prepare` + `spec.run`, what `longca` measures) and a
call written here by hand the way that library's users write it, on the same mask draw and the
same tensors, with the same timer (CUDA events, L2 flushed before each call), the two taking
turns call by call (`longca_runner.timing.time_interleaved`: plugin, direct, plugin, ...; at least
`--target-ms` of calls per side and round), for `--rounds` rounds; each side's time is the
median of all its calls. `ratio` = direct ms / plugin ms
(1.0: the plugin is as fast as the direct call; below 1: the plugin is slower). The forward
outputs of both are compared (`rel_diff`), so the direct call is known to compute the same mask.

The direct calls (nothing here imports longca's kernels or mask_mods):
- flex / flex-fa4: `create_block_mask` over an attention-gym-style mask_mod written below, and
  `torch.compile(flex_attention)` (flex-fa4: `kernel_options={"BACKEND": "FLASH"}`);
- sdpa: `F.scaled_dot_product_attention` with `is_causal` (full, causal; other masks need an
  S x S boolean mask, which this script does not time: that path is the same call in the plugin);
- fa2: with the flash_attn package (what the plugin then runs) `flash_attn_func` /
  `flash_attn_varlen_func`; else torch's bundled FlashAttention-2: SDPA's flash backend (full,
  causal), `torch.nn.attention.varlen.varlen_attn` (documents);
- fa3 / fa4: `flash_attn_func` with `causal` / `window_size`, `flash_attn_varlen_func` (documents);
  fa3 FP8 (`--dtype fp8`): the same calls on e4m3 copies with `q/k/v_descale` (made untimed, as the
  plugin's prepare does);
- cudnn: one nvidia-cudnn-frontend SDPA graph pair (forward with stats, backward) built by hand,
  causal / sliding windows as the diagonal band (full, causal, both sliding windows); with
  `--deterministic` the backward graph asks for `use_deterministic_algorithm`; with `--dtype fp8`
  (or fp8_e5m2) the `sdpa_fp8` / `sdpa_fp8_backward` pair (full, causal) with the plugin's recipe;
- sage: `sageattn(q, k, v, tensor_layout="NHD", is_causal=...)`, `sageattn_varlen` for documents;
- cudnn-flex: `cudnn.flex_attention.create_mask_plan` over endpoints written here per query row
  (full, causal, documents, the causal window) and `flex_attn_func`;
- nsa: `fla.ops.nsa.parallel_nsa` on `topk_sparse`, with `block_indices` built here from the mask's
  kept-block table the way fla's own tests build them (-1 padding sorted first, an int
  `block_counts`), not with the plugin's per-token counts;
- cudnn-bsa: `cudnn.block_sparse_attention.block_sparse_attention_forward` / `_backward` (joined by a
  torch.autograd.Function here) on `block_sparse_uniform` with `--mask-param block=64` or 128 (the
  catalog's default), `sparse_block_size` = the block, `q2k_block_index` built here from the mask's
  kept blocks (torch.nonzero, one count for every row), layout "bshd";
- te: `transformer_engine.pytorch.DotProductAttention` as TE's own attention tests build it: bshd with
  `attn_mask_type` "no_mask" / "causal" (full, causal), thd with `cu_seqlens_q/kv` and "padding" /
  "padding_causal" (documents);
- ffa: `magi_attention.functional.flex_flash_attn_func` on (S, H, D) with q_ranges / k_ranges /
  attn_type_map written here from the mask's own description (one causal or full range; one per document).
Masks a library has no one-call form for (the heterogeneous ones, except in Flex) are `n/a`.
`--mask-param NAME=VALUE` sets a mask parameter of every case (`block=64`).
`--head-dim-v` gives V (and the output) its own head dim (`--head-dim 192 --head-dim-v 128`);
`--deterministic` times the backward through each library's deterministic algorithm (plugin and
direct call alike: `deterministic=True` for flash_attn, FA3 and FA4); forward cases are skipped.

    python benchmarks/plugin_vs_direct.py --kernels flex,sdpa,fa2 --seqlens 16k,32k --out results/pvd
    python benchmarks/plugin_vs_direct.py --kernels nsa --masks topk_sparse --heads 64:4 --out results/pvd-nsa
    python benchmarks/plugin_vs_direct.py --kernels cudnn-bsa --masks block_sparse_uniform --heads 32:32 \
        --mask-param block=64 --out results/pvd-cudnn-bsa
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from longca.flops import attention_flops
from longca.given import parse_params
from longca.masks.catalog import STATIC_MASKS
from longca.plugins import get_registry
from longca.problem import Problem, build_mask, make_inputs
from longca.sizes import parse_heads, parse_size
from longca_runner.measure import make_step, seeded_dout, unsupported_reason
from longca_runner.timing import time_interleaved, time_ms

Direct = Callable[..., torch.Tensor]  # direct(q, k, v) -> out (B, S, H, D), autograd-aware


# ---------------------------------------------------------------- hand-written mask_mods (attention-gym style)


def user_mask_mod(mask, device) -> Callable:
    """The mask_mod a Flex user writes for this mask, from its parameters."""
    p, s = mask.params, mask.seqlen
    if "doc_lens" in p:
        lens = torch.as_tensor(np.asarray(p["doc_lens"]), dtype=torch.int64)
        doc = torch.repeat_interleave(torch.arange(len(lens), dtype=torch.int32), lens).to(device)
        starts = torch.cumsum(lens, 0) - lens
    name = mask.name
    if name == "full":
        return lambda b, h, q, kv: q >= 0
    if name == "causal":
        return lambda b, h, q, kv: q >= kv
    if name == "full_document":
        return lambda b, h, q, kv: doc[q] == doc[kv]
    if name == "causal_document":
        return lambda b, h, q, kv: (doc[q] == doc[kv]) & (q >= kv)
    if name == "sliding_window":
        w = int(p["window"])
        return lambda b, h, q, kv: (q - kv <= w) & (kv - q <= w)
    if name == "sliding_window_causal":
        w = int(p["window"])
        return lambda b, h, q, kv: (q >= kv) & (q - kv <= w)
    if name == "share_question":
        qlen = int(lens[0])
        return lambda b, h, q, kv: (q >= kv) & ((doc[q] == doc[kv]) | (kv < qlen))
    if name == "causal_blockwise":
        last = s - int(lens[-1])
        return lambda b, h, q, kv: (q >= kv) & ((doc[q] == doc[kv]) | (q >= last))
    if name == "prefix_lm_causal":
        prefix = int(p["prefix"])
        return lambda b, h, q, kv: (kv < prefix) | (q >= kv)
    if name == "prefix_lm_document":
        prefix_end = torch.repeat_interleave(starts + torch.clamp(lens, max=int(p["prefix"])), lens).to(device).int()
        return lambda b, h, q, kv: (doc[q] == doc[kv]) & ((kv < prefix_end[kv]) | (q >= kv))
    if name == "global_sliding_window":
        w, g = int(p["window"]), int(p["global_tokens"])
        return lambda b, h, q, kv: (q < g) | (kv < g) | ((q - kv <= w) & (kv - q <= w))
    if name == "block_causal_document":
        blk = int(p["block"])
        return lambda b, h, q, kv: (doc[q] == doc[kv]) & (q // blk >= kv // blk)
    raise KeyError(name)


_FLEX: dict[str, Any] = {}


def flex_direct(mask, q, k, v, kernel_options: dict | None = None) -> Direct:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    key = "flash" if kernel_options else "triton"
    on_gpu = q.device.type == "cuda"  # a CPU run (a test of this script) stays eager
    if key not in _FLEX:
        fn = functools.partial(flex_attention, kernel_options=kernel_options) if kernel_options else flex_attention
        _FLEX[key] = torch.compile(fn, dynamic=False) if on_gpu else fn
    compiled = _FLEX[key]
    s = mask.seqlen
    block_mask = create_block_mask(user_mask_mod(mask, q.device), None, None, s, s, device=q.device, _compile=on_gpu)
    gqa = q.shape[2] != k.shape[2]

    def run(q, k, v):
        return compiled(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=block_mask,
                        enable_gqa=gqa).transpose(1, 2)

    return run


# ---------------------------------------------------------------- FlashAttention-style libraries


def _window(mask) -> tuple[bool, int, int] | None:
    """(causal, left, right) for masks that are one FlashAttention call; None otherwise."""
    w = mask.params.get("window")
    return {"full": (False, -1, -1), "causal": (True, -1, 0), "full_document": (False, -1, -1),
            "causal_document": (True, -1, 0), "sliding_window": (False, w, w),
            "sliding_window_causal": (False, w, 0)}.get(mask.name)


def _cu_seqlens(mask, device) -> tuple[torch.Tensor, int]:
    lens = np.asarray(mask.params["doc_lens"], dtype=np.int64)
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device=device)
    return cu, int(lens.max())


def _first(res):
    return res[0] if isinstance(res, tuple) else res


def _fp8_copies(q, k, v, dtype: str, rows: int):
    """Per-tensor scaled e4m3 copies of q, k, v and their descales as FA3 takes them ((rows, heads_kv) each)."""
    from longca.fp8 import quantize_fp8

    pairs = [quantize_fp8(x, dtype) for x in (q, k, v)]
    descales = {f"{n}_descale": d.expand(rows, k.shape[2]).contiguous() for n, (_, d) in zip("qkv", pairs, strict=True)}
    return [x for x, _ in pairs], descales


def flash_direct(lib: str, mask, q, k, v, deterministic: bool = False, fp8: str | None = None) -> Direct:
    causal, left, right = _window(mask)  # a one-call mask: direct_refusal turned the others away
    if lib == "fa3":
        from flash_attn_interface import flash_attn_func, flash_attn_varlen_func
        window = (left, right) if not causal else (-1, -1)
    elif lib == "fa2":
        from flash_attn import flash_attn_func, flash_attn_varlen_func
        window = (left, right) if not causal else (-1, -1)
    else:
        from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
        window = (None if left < 0 else left, None if right < 0 else right) if not causal else (None, None)
    extra: dict[str, Any] = {"deterministic": True} if deterministic else {}
    docs = "doc_lens" in mask.params
    cu, longest = _cu_seqlens(mask, q.device) if docs else (None, 0)
    fp8_inputs = None
    if fp8:  # made here, untimed, as the plugin's prepare makes them
        fp8_inputs, descales = _fp8_copies(q, k, v, fp8, cu.numel() - 1 if cu is not None else q.shape[0])
        extra.update(descales)
    if not docs:
        def dense(q, k, v):
            q, k, v = fp8_inputs or (q, k, v)
            return _first(flash_attn_func(q, k, v, causal=causal, window_size=window, **extra))
        return dense

    def run(q, k, v):
        b, s, h, _ = q.shape
        dv = v.shape[-1]
        q, k, v = fp8_inputs or (q, k, v)
        out = flash_attn_varlen_func(q.reshape(b * s, h, -1), k.reshape(b * s, k.shape[2], -1),
                                     v.reshape(b * s, v.shape[2], -1), cu_seqlens_q=cu, cu_seqlens_k=cu,
                                     max_seqlen_q=longest, max_seqlen_k=longest, causal=causal, window_size=window,
                                     **extra)
        return _first(out).view(b, s, h, dv)

    return run


def fa2_direct(mask, q, k, v) -> Direct | str:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gqa = q.shape[2] != k.shape[2]
    if mask.name in ("full", "causal"):
        causal = mask.name == "causal"

        def run(q, k, v):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=causal, enable_gqa=gqa).transpose(1, 2)
        return run
    # documents only: direct_refusal turned windows and multi-call masks away
    import inspect

    from torch.nn.attention.varlen import varlen_attn

    params = inspect.signature(varlen_attn).parameters
    causal = mask.name == "causal_document"
    kwargs: dict[str, Any] = ({"window_size": (-1, 0 if causal else -1)} if "window_size" in params
                              else {"is_causal": causal})
    if gqa and "enable_gqa" not in params:
        return "n/a: this torch's varlen_attn has no GQA"
    if "enable_gqa" in params:
        kwargs["enable_gqa"] = gqa
    cu, longest = _cu_seqlens(mask, q.device)

    def run(q, k, v):
        b, s, h, _ = q.shape
        out = varlen_attn(q.reshape(b * s, h, -1), k.reshape(b * s, k.shape[2], -1), v.reshape(b * s, v.shape[2], -1),
                          cu, cu, longest, longest, **kwargs)
        return out.view(b, s, h, v.shape[-1])

    return run


def sdpa_direct(mask, q, k, v) -> Direct:
    import torch.nn.functional as F

    causal, gqa = mask.name == "causal", q.shape[2] != k.shape[2]
    return lambda q, k, v: F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                          is_causal=causal, enable_gqa=gqa).transpose(1, 2)


# ---------------------------------------------------------------- cuDNN frontend, by hand


def build_cudnn_graph(cudnn, g, device) -> torch.Tensor:
    """Validate, plan and build a cudnn-frontend graph as its samples do; its workspace."""
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8, device=device)


def cudnn_direct(mask, q, k, v, deterministic: bool = False) -> Direct:
    """A forward graph with stats and a backward graph, as cudnn-frontend's own SDPA samples write them."""
    import cudnn

    causal, left, right = _window(mask)  # a one-call, document-free mask: see direct_refusal
    b, s, hq, d = q.shape
    hkv = k.shape[2]
    scale = 1.0 / math.sqrt(d)
    handle = cudnn.create_handle()
    dt = {torch.bfloat16: cudnn.data_type.BFLOAT16, torch.float16: cudnn.data_type.HALF}[q.dtype]
    bounds = dict(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                  diagonal_band_left_bound=None if left < 0 else left + 1,
                  diagonal_band_right_bound=None if right < 0 else right)

    def strides(h):
        return [s * h * d, d, h * d, 1]

    def tensor(g, name, h):
        return g.tensor(name=name, dim=[b, h, s, d], stride=strides(h), data_type=dt)

    def new_graph():
        return cudnn.pygraph(io_data_type=dt, intermediate_data_type=cudnn.data_type.FLOAT,
                             compute_data_type=cudnn.data_type.FLOAT, handle=handle)

    def build(g):
        return build_cudnn_graph(cudnn, g, q.device)

    fg = new_graph()
    fq, fk, fv = tensor(fg, "q", hq), tensor(fg, "k", hkv), tensor(fg, "v", hkv)
    fo, fstats = fg.sdpa(name="sdpa", q=fq, k=fk, v=fv, generate_stats=True, attn_scale=scale, **bounds)
    fo.set_output(True).set_dim([b, hq, s, d]).set_stride(strides(hq)).set_data_type(dt)
    fstats.set_output(True).set_dim([b, hq, s, 1]).set_stride([hq * s, s, 1, 1]).set_data_type(cudnn.data_type.FLOAT)
    fws = build(fg)
    bg = new_graph()
    bq, bk, bv, bo, bdo = (tensor(bg, n, h) for n, h in (("q", hq), ("k", hkv), ("v", hkv), ("o", hq), ("dO", hq)))
    bstats = bg.tensor(name="stats", dim=[b, hq, s, 1], stride=[hq * s, s, 1, 1], data_type=cudnn.data_type.FLOAT)
    det = {"use_deterministic_algorithm": True} if deterministic else {}
    bdq, bdk, bdv = bg.sdpa_backward(name="sdpa_backward", q=bq, k=bk, v=bv, o=bo, dO=bdo, stats=bstats,
                                     attn_scale=scale, **bounds, **det)
    for t, h in ((bdq, hq), (bdk, hkv), (bdv, hkv)):
        t.set_output(True).set_dim([b, h, s, d]).set_stride(strides(h)).set_data_type(dt)
    bws = build(bg)

    def stream():
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            o = torch.empty_like(q)
            stats = torch.empty(b, hq, s, 1, dtype=torch.float32, device=q.device)
            stream()
            fg.execute({fq: q, fk: k, fv: v, fo: o, fstats: stats}, fws, handle=handle)
            ctx.save_for_backward(q, k, v, o, stats)
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, stats = ctx.saved_tensors
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            stream()
            bg.execute({bq: q, bk: k, bv: v, bo: o, bdo: do.contiguous(), bstats: stats, bdq: dq, bdk: dk, bdv: dv},
                       bws, handle=handle)
            return dq, dk, dv

    return Attention.apply


# ---------------------------------------------------------------- fla's NSA selected attention


def nsa_direct(mask, q, k, v) -> Direct:
    """parallel_nsa with the mask's blocks as an fla user passes a selection: (B, S, H, W), -1 padded."""
    from fla.ops.nsa import parallel_nsa

    layout = mask.layout
    block = int(mask.params["block"])
    keep = torch.from_numpy(layout.keep)  # (KV heads, query blocks, key blocks), causal
    width = 1 << max(0, int(keep.sum(-1).max()) - 1).bit_length()  # a power of two (fla's block inversion)
    blocks = torch.arange(keep.shape[-1]).expand_as(keep)
    picked = torch.where(keep, blocks, -1).sort(-1).values[..., -width:]  # kept ones last, -1 before them
    if picked.shape[-1] < width:
        picked = torch.cat([picked.new_full((*picked.shape[:-1], width - picked.shape[-1]), -1), picked], -1)
    token_block = torch.arange(mask.seqlen) // block
    indices = picked[:, token_block].permute(1, 0, 2)[None].expand(q.shape[0], -1, -1, -1).contiguous().to(q.device)
    return lambda q, k, v: parallel_nsa(q, k, v, block_indices=indices, block_counts=width, block_size=block)


# ---------------------------------------------------------------- cuDNN's block-sparse attention


def cudnn_bsa_direct(mask, q, k, v) -> Direct:
    """block_sparse_attention_forward / _backward on uniform 64- or 128-token blocks: each query block's kept
    key blocks, ascending (torch.nonzero's order), one list per query head, one count for every row."""
    from cudnn.block_sparse_attention import block_sparse_attention_backward, block_sparse_attention_forward

    block, kept = int(mask.params["block"]), int(mask.params["kept_per_row"])
    keep = torch.from_numpy(mask.layout.keep)  # (KV groups, query blocks, key blocks)
    cols = torch.nonzero(keep)[:, 2].view(*keep.shape[:2], kept)
    index = cols.repeat_interleave(q.shape[2] // keep.shape[0], dim=0)[None].expand(q.shape[0], -1, -1, -1)
    index = index.to(torch.int32).contiguous().to(q.device)

    class BlockSparse(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            out, lse = block_sparse_attention_forward(q, k, v, index, kept, sparse_block_size=block, layout="bshd")
            ctx.save_for_backward(q, k, v, out, lse)
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v, out, lse = ctx.saved_tensors
            dq, dk, dv = block_sparse_attention_backward(dout.contiguous(), q, k, v, out, lse, index, kept,
                                                         sparse_block_size=block, layout="bshd")
            return dq, dk, dv

    return BlockSparse.apply


def fa2_library() -> str:
    """'flash_attn' where the package is installed (the fa2 plugin then runs it), else 'torch'."""
    import importlib.util
    import os

    forced = os.environ.get("LONGCA_FA2_BACKEND", "").strip()
    if forced in ("flash_attn", "torch"):
        return forced
    found = importlib.util.find_spec("flash_attn_2_cuda") and importlib.util.find_spec("flash_attn")
    return "flash_attn" if found else "torch"


def _quantize(x, fp8):
    """Per-tensor scaled FP8 copy of x and its (1, 1, 1, 1) float32 descale (amax / the format's largest value)."""
    amax = x.detach().abs().amax().float().clamp_min(1e-12)
    descale = (amax / torch.finfo(fp8).max).reshape(1, 1, 1, 1)
    return (x.detach().float() / descale.reshape(())).to(fp8), descale


def cudnn_fp8_direct(mask, q, k, v, dtype: str, deterministic: bool = False) -> Direct:
    """cudnn-frontend's FP8 SDPA written as its own FP8 samples do (sdpa_fp8 / sdpa_fp8_backward), dense,
    full or causal, with the same recipe as the plugin: per-tensor input scales made here (untimed),
    probabilities scaled by the format's largest value, dO quantized in the backward, dP's scale from one
    calibration backward with half headroom. Outputs are bfloat16 on Blackwell; on Hopper (where cuDNN builds
    only FP8 outputs) O, dQ, dK, dV are FP8 with calibrated scales and dequantized to bfloat16 after the call."""
    import cudnn

    fp8 = getattr(torch, dtype)
    b, s, hq, d = q.shape
    hkv, dv = k.shape[2], v.shape[3]
    causal, scale, largest = mask.name == "causal", 1.0 / math.sqrt(d), torch.finfo(fp8).max
    handle = cudnn.create_handle()
    it = {torch.float8_e4m3fn: cudnn.data_type.FP8_E4M3, torch.float8_e5m2: cudnn.data_type.FP8_E5M2}[fp8]
    hopper = torch.cuda.get_device_capability(q.device)[0] < 10
    otorch = fp8 if hopper else torch.bfloat16
    ot = it if hopper else cudnn.data_type.BFLOAT16
    f32 = cudnn.data_type.FLOAT

    def st(h, dim):
        return [s * h * dim, dim, h * dim, 1]

    def graph():
        return cudnn.pygraph(io_data_type=it, intermediate_data_type=f32, compute_data_type=f32, handle=handle)

    def one(g, name):
        return g.tensor(name=name, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32)

    def out(t, dims, stride, dt):
        t.set_output(True).set_dim(dims).set_stride(stride).set_data_type(dt)

    def build(g):
        return build_cudnn_graph(cudnn, g, q.device)

    fg = graph()
    fq = fg.tensor(name="q", dim=[b, hq, s, d], stride=st(hq, d), data_type=it)
    fk = fg.tensor(name="k", dim=[b, hkv, s, d], stride=st(hkv, d), data_type=it)
    fv = fg.tensor(name="v", dim=[b, hkv, s, dv], stride=st(hkv, dv), data_type=it)
    fsc = {n: one(fg, n) for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")}
    fo, fstats, famax_s, famax_o = fg.sdpa_fp8(q=fq, k=fk, v=fv, **fsc, generate_stats=True, attn_scale=scale,
                                               use_causal_mask=causal)
    out(fo, [b, hq, s, dv], st(hq, dv), ot)
    out(fstats, [b, hq, s, 1], [hq * s, s, 1, 1], f32)
    for a in (famax_s, famax_o):
        out(a, [1, 1, 1, 1], [1, 1, 1, 1], f32)
    fws = build(fg)
    bg = graph()
    bt = {"q": bg.tensor(name="q", dim=[b, hq, s, d], stride=st(hq, d), data_type=it),
          "k": bg.tensor(name="k", dim=[b, hkv, s, d], stride=st(hkv, d), data_type=it),
          "v": bg.tensor(name="v", dim=[b, hkv, s, dv], stride=st(hkv, dv), data_type=it),
          "o": bg.tensor(name="o", dim=[b, hq, s, dv], stride=st(hq, dv), data_type=ot),
          "dO": bg.tensor(name="dO", dim=[b, hq, s, dv], stride=st(hq, dv), data_type=it),
          "stats": bg.tensor(name="stats", dim=[b, hq, s, 1], stride=[hq * s, s, 1, 1], data_type=f32)}
    names = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_dO", "descale_s", "descale_dP", "scale_s",
             "scale_dQ", "scale_dK", "scale_dV", "scale_dP")
    bsc = {n: one(bg, n) for n in names}
    det = {"use_deterministic_algorithm": True} if deterministic else {}
    *grads, amax_dq, amax_dk, amax_dv, amax_dp = bg.sdpa_fp8_backward(
        q=bt["q"], k=bt["k"], v=bt["v"], o=bt["o"], dO=bt["dO"], stats=bt["stats"], **bsc, attn_scale=scale,
        use_causal_mask=causal, **det)
    for g_, h, dim in zip(grads, (hq, hkv, hkv), (d, d, dv), strict=True):
        out(g_, [b, h, s, dim], st(h, dim), ot)
    for a in (amax_dq, amax_dk, amax_dv, amax_dp):
        out(a, [1, 1, 1, 1], [1, 1, 1, 1], f32)
    bws = build(bg)

    def full(x):
        return torch.full((1, 1, 1, 1), float(x), dtype=torch.float32, device=q.device)

    (q8, dq_), (k8, dk_), (v8, dv_) = (_quantize(x, fp8) for x in (q, k, v))
    values = {"descale_q": dq_, "descale_k": dk_, "descale_v": dv_, "descale_s": full(1 / largest),
              "scale_s": full(largest), "scale_o": full(1), "descale_o": full(1), "scale_dQ": full(1),
              "scale_dK": full(1), "scale_dV": full(1), "scale_dP": full(1), "descale_dP": full(1)}

    def stream():
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)

    def forward():
        o = torch.empty(b, s, hq, dv, dtype=otorch, device=q.device)
        stats = torch.empty(b, hq, s, 1, dtype=torch.float32, device=q.device)
        amax = [torch.empty(1, 1, 1, 1, device=q.device) for _ in range(2)]
        stream()
        fg.execute({fq: q8, fk: k8, fv: v8, fo: o, fstats: stats, famax_s: amax[0], famax_o: amax[1],
                    **{fsc[n]: values[n] for n in fsc}}, fws, handle=handle)
        return o, stats, amax[1]

    def backward(o, stats, do):
        do8, do_descale = _quantize(do, fp8)
        dq, dk, dv = (torch.empty(x.shape, dtype=otorch, device=x.device) for x in (q8, k8, v8))
        amax = [torch.empty(1, 1, 1, 1, device=q.device) for _ in range(4)]
        stream()
        pack = {bt["q"]: q8, bt["k"]: k8, bt["v"]: v8, bt["o"]: o, bt["dO"]: do8.contiguous(), bt["stats"]: stats,
                **{bsc[n]: values[n] for n in names if n != "descale_dO"}, bsc["descale_dO"]: do_descale,
                grads[0]: dq, grads[1]: dk, grads[2]: dv, amax_dq: amax[0], amax_dk: amax[1], amax_dv: amax[2],
                amax_dp: amax[3]}
        bg.execute(pack, bws, handle=handle)
        return dq, dk, dv, amax

    def calibrate(name, amax):  # the scale that maps the calibration call's amax to half of the range
        scale = largest / (float(amax.item()) or 1.0) * 0.5
        values.update({f"scale_{name}": full(scale), f"descale_{name}": full(1 / scale)})

    def bf16(x, name):
        return (x.float() * values[f"descale_{name}"]).to(torch.bfloat16) if hopper else x

    o, stats, amax_o = forward()
    if hopper:
        calibrate("o", amax_o)
    if q.requires_grad:  # dP's (and on Hopper dQ/dK/dV's) scales from one calibration backward, as the plugin's
        o, stats, _ = forward()
        amaxes = backward(o, stats, torch.randn(o.shape, dtype=torch.bfloat16, device=o.device))[3]
        for name, amax in zip(("dQ", "dK", "dV", "dP"), amaxes, strict=True):
            if hopper or name == "dP":
                calibrate(name, amax)

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            o, stats, _ = forward()
            ctx.save_for_backward(o, stats)
            return bf16(o, "o")

        @staticmethod
        def backward(ctx, do):
            o, stats = ctx.saved_tensors
            dq, dk, dv, _ = backward(o, stats, do)
            return bf16(dq, "dQ"), bf16(dk, "dK"), bf16(dv, "dV")

    return Attention.apply


def sage_direct(mask, q, k, v) -> Direct:
    """SageAttention as its README calls it: `sageattn` (NHD) for full and causal, `sageattn_varlen` for documents."""
    from sageattention import sageattn, sageattn_varlen

    causal = mask.name in ("causal", "causal_document")
    if "doc_lens" not in mask.params:
        return lambda q, k, v: sageattn(q, k, v, tensor_layout="NHD", is_causal=causal)
    cu, longest = _cu_seqlens(mask, q.device)

    def run(q, k, v):
        b, s, h, d = q.shape
        out = sageattn_varlen(q.reshape(b * s, h, d), k.reshape(b * s, *k.shape[2:]), v.reshape(b * s, *v.shape[2:]),
                              cu, cu, longest, longest, is_causal=causal)
        return out.view(b, s, h, v.shape[-1])

    return run


def cudnn_flex_direct(mask, q, k, v, deterministic: bool = False) -> Direct:
    """cudnn.flex_attention with endpoints written by hand per query row q: causal [0, q+1); full [0, S);
    documents [0, 0) U [doc start, q+1 or doc end); the causal window [0, 0) U [q-w, q+1)."""
    from cudnn.flex_attention import create_mask_plan, flex_attn_func

    s = mask.seqlen
    rows = torch.arange(s, dtype=torch.int32)
    if mask.name in ("full", "causal"):
        funcs = torch.stack([torch.full_like(rows, s) if mask.name == "full" else rows + 1])
    elif mask.name in ("full_document", "causal_document"):
        lens = torch.tensor(np.asarray(mask.params["doc_lens"]), dtype=torch.int32)
        start = torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens)
        end = rows + 1 if mask.name == "causal_document" else torch.repeat_interleave(torch.cumsum(lens, 0), lens)
        funcs = torch.stack([torch.zeros_like(rows), start.int(), end.int()])
    else:  # sliding_window_causal
        w = int(mask.params["window"])
        funcs = torch.stack([torch.zeros_like(rows), torch.clamp(rows - w, min=0), rows + 1])
    funcs = funcs.repeat(1, q.shape[0])[None].contiguous().to(q.device)
    plan = create_mask_plan(funcs, q, k, v, build_backward=q.requires_grad)
    return lambda q, k, v: flex_attn_func(q, k, v, mask_plan=plan, deterministic=deterministic)


def te_direct(mask, q, k, v) -> Direct:
    """TE's DotProductAttention, bshd for full / causal, thd with cu_seqlens for documents."""
    from transformer_engine.pytorch import DotProductAttention

    docs = "doc_lens" in mask.params
    causal = mask.name in ("causal", "causal_document")
    kind = ("padding_causal" if causal else "padding") if docs else ("causal" if causal else "no_mask")
    module = DotProductAttention(q.shape[2], q.shape[3], num_gqa_groups=k.shape[2], attention_dropout=0.0,
                                 qkv_format="thd" if docs else "bshd", attn_mask_type=kind).to(q.device)
    if not docs:
        return lambda q, k, v: module(q, k, v).view(*q.shape[:3], v.shape[-1])
    cu, longest = _cu_seqlens(mask, q.device)

    def run(q, k, v):
        b, s, h, _ = q.shape
        out = module(q.reshape(b * s, h, -1), k.reshape(b * s, k.shape[2], -1), v.reshape(b * s, v.shape[2], -1),
                     cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=longest, max_seqlen_kv=longest)
        return out.view(b, s, h, v.shape[-1])

    return run


def ffa_user_ranges(mask) -> tuple[np.ndarray, np.ndarray]:
    """(ranges (n, 2), attn types (n,)) as FFA's users write them: [0, S) causal (1) or full (0); one per document."""
    lens = np.asarray(mask.params.get("doc_lens", [mask.seqlen]), dtype=np.int64)
    ends = np.cumsum(lens)
    kind = 1 if mask.name in ("causal", "causal_document") else 0
    return np.stack([ends - lens, ends], axis=1).astype(np.int32), np.full(len(lens), kind, dtype=np.int32)


def ffa_direct(mask, q, k, v) -> Direct:
    """flex_flash_attn_func on the ranges of `ffa_user_ranges`."""
    from magi_attention.functional import flex_flash_attn_func

    ranges, types = (torch.from_numpy(a).to(q.device) for a in ffa_user_ranges(mask))

    def run(q, k, v):
        out = flex_flash_attn_func(q[0], k[0], v[0], ranges, ranges, attn_type_map=types)
        return _first(out).unsqueeze(0)

    return run


def direct_refusal(kernel: str, mask, deterministic: bool = False, fp8: bool = False) -> str | None:
    """Why this script has no direct call of `kernel` for `mask` (decided before any tensor is made), or None."""
    one_call = _window(mask) is not None
    if fp8 and kernel not in ("fa3", "cudnn"):
        return f"n/a: no hand-written FP8 call of {kernel!r} here"
    if fp8 and kernel == "cudnn" and mask.name not in ("full", "causal"):
        return "n/a: the FP8 graphs (plugin and direct) are dense: full and causal"
    if kernel == "fa2" and fa2_library() == "flash_attn":
        return None if one_call else "n/a: no one-call form in the library (the plugin merges several calls)"
    if deterministic and kernel in ("flex", "flex-fa4", "sdpa", "fa2", "te", "ffa"):
        return f"n/a: {kernel} (as called here) takes no deterministic flag"
    if kernel in ("flex", "flex-fa4"):
        return None
    if kernel in ("fa3", "fa4") and not one_call:
        return "n/a: no one-call form in the library (the plugin merges several calls through lse)"
    if kernel == "fa2" and mask.name not in ("full", "causal", "full_document", "causal_document"):
        return "n/a: torch exposes FlashAttention-2 windows and multi-call masks only through private aten ops"
    if kernel == "sdpa" and mask.name not in ("full", "causal"):
        return "not timed: an S x S boolean attn_mask, the same call in the plugin (memory-efficient/math backend)"
    if kernel == "cudnn" and (not one_call or "doc_lens" in mask.params):
        return "n/a: not hand-written here (documents need cuDNN's ragged layout; others several graphs)"
    if kernel == "nsa" and mask.name != "topk_sparse":
        return "n/a: the nsa plugin runs topk_sparse only"
    if kernel == "cudnn-bsa" and (mask.name != "block_sparse_uniform" or mask.params["block"] not in (64, 128)
                                  or mask.seqlen % mask.params["block"]):
        return ("n/a: hand-written here for block_sparse_uniform with block=64 or 128 (--mask-param block=...) and S "
                "a multiple of the block")
    if kernel == "sage" and mask.name not in ("full", "causal", "full_document", "causal_document"):
        return "n/a: SageAttention takes full, causal and documents"
    if kernel == "cudnn-flex" and mask.name not in ("full", "causal", "full_document", "causal_document",
                                                    "sliding_window_causal"):
        return "n/a: endpoints written by hand here for full, causal, documents and the causal window only"
    if kernel in ("te", "ffa") and mask.name not in ("full", "causal", "full_document", "causal_document"):
        return f"n/a: {kernel} written by hand here for full, causal and documents only"
    if kernel not in ("fa2", "fa3", "fa4", "sdpa", "cudnn", "nsa", "sage", "cudnn-flex", "cudnn-bsa", "te", "ffa"):
        return f"n/a: no hand-written call for kernel {kernel!r}"
    return None


def make_direct(kernel: str, mask, q, k, v, problem: Problem | None = None) -> Direct | str:
    """The hand-written call, or why there is none (`direct_refusal`, or fa2's GQA check on this torch)."""
    deterministic = bool(problem and problem.deterministic)
    fp8 = problem.dtype if problem is not None and problem.fp8 else None
    refusal = direct_refusal(kernel, mask, deterministic, bool(fp8))
    if refusal:
        return refusal
    if kernel == "flex":
        return flex_direct(mask, q, k, v)
    if kernel == "flex-fa4":
        return flex_direct(mask, q, k, v, {"BACKEND": "FLASH"})
    if kernel in ("fa3", "fa4"):
        return flash_direct(kernel, mask, q, k, v, deterministic, fp8)
    if kernel == "fa2":
        if fa2_library() == "flash_attn":
            return flash_direct("fa2", mask, q, k, v, deterministic)
        return fa2_direct(mask, q, k, v)
    if kernel == "sdpa":
        return sdpa_direct(mask, q, k, v)
    if kernel == "nsa":
        return nsa_direct(mask, q, k, v)
    if kernel == "cudnn-bsa":
        return cudnn_bsa_direct(mask, q, k, v)
    if kernel == "sage":
        return sage_direct(mask, q, k, v)
    if kernel == "cudnn-flex":
        return cudnn_flex_direct(mask, q, k, v, deterministic)
    if kernel == "te":
        return te_direct(mask, q, k, v)
    if kernel == "ffa":
        return ffa_direct(mask, q, k, v)
    if fp8:
        return cudnn_fp8_direct(mask, q, k, v, fp8, deterministic)
    return cudnn_direct(mask, q, k, v, deterministic)


# ---------------------------------------------------------------- measuring


def calls_per_round(step: dict[str, Callable], device, args) -> int:
    """`--repeat`, raised so that each side of a round runs about `--target-ms` (short calls are noisy)."""
    longest = max(statistics.median(time_ms(fn, device, 0, 2)) for fn in step.values())
    return max(args.repeat, min(args.max_repeat, math.ceil(args.target_ms / max(longest, 1e-3))))


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def measure(kernel: str, mask_name: str, seqlen: int, direction: str, args, warm_only: bool = False) -> dict[str, Any]:
    """One case: plugin and direct (and `--against`), timed alternately; `warm_only`: run each once, no timing."""
    registry = get_registry()
    hq, hkv = parse_heads(args.heads)
    row: dict[str, Any] = {"kernel": kernel, "mask": mask_name, "seqlen": seqlen, "direction": direction,
                           "heads": args.heads, "head_dim": args.head_dim, "head_dim_v": args.head_dim_v,
                           "dtype": args.dtype, "deterministic": args.deterministic}
    if args.deterministic and direction == "fwd":
        return {**row, "status": "n/a", "reason": "the forward is deterministic: --deterministic times backwards"}
    mask_params = parse_params(args.mask_param, "--mask-param")
    if mask_params:
        row["mask_params"] = mask_params
    problem = Problem(kernel=kernel, mask=mask_name, seqlen=seqlen, heads_q=hq, heads_kv=hkv, head_dim=args.head_dim,
                      head_dim_v=args.head_dim_v, dtype=args.dtype, direction=direction, device=args.device,
                      sampler=args.sampler, deterministic=args.deterministic, mask_params=mask_params)
    spec = registry.kernel(kernel)
    reason = unsupported_reason(spec, problem, registry)
    if reason:
        return {**row, "status": "unsupported", "reason": reason}
    row["backend"] = spec.backend()
    mask = build_mask(problem, 0, registry)
    refusal = direct_refusal(kernel, mask, problem.deterministic, problem.fp8)
    if refusal:
        return {**row, "status": "n/a", "reason": refusal}
    q, k, v = make_inputs(problem, 0, requires_grad=direction != "fwd")
    direct = make_direct(kernel, mask, q, k, v, problem)
    if isinstance(direct, str):
        return {**row, "status": "n/a", "reason": direct}
    calls = {"plugin": functools.partial(spec.run, spec.prepare(problem, mask, q, k, v)), "direct": direct}
    other = None
    if args.against and kernel in ("flex", "flex-fa4"):
        other = registry.kernel(args.against)
        reason = unsupported_reason(other, problem.with_(kernel=args.against), registry)
        if reason:
            row["against_reason"] = reason
        else:
            calls["against"] = functools.partial(other.run, other.prepare(problem, mask, q, k, v))
    with torch.no_grad():
        outs = {name: call(q, k, v) for name, call in calls.items()}
    row.update({f"{name}_rel_diff": rel_diff(out, outs["direct"]) for name, out in outs.items() if name != "direct"})
    row["rel_diff"] = row["plugin_rel_diff"]
    del outs
    dout = seeded_dout(problem) if direction != "fwd" else None
    once = spec.backward_once  # each backward of such a library (and of its direct call) gets a fresh forward
    step = {name: make_step(functools.partial(call, q, k, v), (q, k, v), direction, dout, fresh_forward=once)
            for name, call in calls.items()}
    for fn in step.values():
        fn()  # compile / JIT outside the timings
    if warm_only:
        return {**row, "status": "warmed"}
    device = torch.device(args.device)
    repeat = calls_per_round(step, device, args)
    times: dict[str, list[float]] = {name: [] for name in step}
    calls: dict[str, list[float]] = {name: [] for name in step}
    for _ in range(args.rounds):
        for name, t in time_interleaved(step, device, args.warmup, repeat).items():
            times[name].append(statistics.median(t))
            calls[name].extend(t)
    ms = {name: statistics.median(t) for name, t in calls.items()}
    row["calls_per_side"] = len(calls["plugin"])
    flops = attention_flops(mask.area, hq, args.head_dim, 1, direction, args.head_dim_v)
    row.update(status="ok", plugin_ms=ms["plugin"], direct_ms=ms["direct"], ratio=ms["direct"] / ms["plugin"],
               plugin_rounds_ms=times["plugin"], direct_rounds_ms=times["direct"],
               plugin_tflops=flops / (ms["plugin"] * 1e-3) / 1e12, direct_tflops=flops / (ms["direct"] * 1e-3) / 1e12)
    if "against" in ms:  # e.g. flashmask against the direct Flex call: > 1 means flashmask is faster
        row.update(against=args.against, against_ms=ms["against"], against_rounds_ms=times["against"],
                   against_vs_direct=ms["direct"] / ms["against"], against_tflops=flops / (ms["against"] * 1e-3) / 1e12)
    return row


def _warm_worker(cases: list[tuple], args) -> list[str]:
    """Compile every case once in this process: fills inductor's and Triton's caches on disk."""
    import torch._functorch.config as functorch_config

    functorch_config.donated_buffer = False
    done = []
    for case in cases:
        try:
            done.append(f"{case}: {measure(*case, args, warm_only=True)['status']}")
        except Exception as exc:  # noqa: BLE001 - the timed run reports it
            done.append(f"{case}: {type(exc).__name__}: {str(exc)[:200]}")
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return done


def prewarm(cases: list[tuple], args) -> None:
    """Compile the cases in `args.prewarm` parallel processes before timing (compilation is serial per kernel).

    Stops waiting after `args.prewarm_minutes`: whatever is not compiled by then compiles in the timed loop."""
    import multiprocessing as mp
    import os

    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "2")
    shares = [cases[i::args.prewarm] for i in range(args.prewarm)]
    pool = mp.get_context("spawn").Pool(args.prewarm)
    pending = pool.starmap_async(_warm_worker, [(share, args) for share in shares if share])
    try:
        for lines in pending.get(timeout=60 * args.prewarm_minutes):
            for line in lines:
                print("prewarm", line, flush=True)
        pool.close()
    except mp.TimeoutError:
        print(f"prewarm: stopped after {args.prewarm_minutes} min", flush=True)
        pool.terminate()
    pool.join()
    os.environ.pop("TORCHINDUCTOR_COMPILE_THREADS", None)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| kernel | mask | S | dir | plugin ms | direct ms | ratio | plugin TFLOP/s | rel diff |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] == "ok":
            lines.append(f"| {r['kernel']} | {r['mask']} | {r['seqlen'] // 1024}K | {r['direction']} | "
                         f"{r['plugin_ms']:.3f} | {r['direct_ms']:.3f} | {r['ratio']:.3f} | "
                         f"{r['plugin_tflops']:.0f} | {r['rel_diff']:.1e} |")
        else:
            lines.append(f"| {r['kernel']} | {r['mask']} | {r['seqlen'] // 1024}K | {r['direction']} | "
                         f"{r['status']}: {r.get('reason', '')[:90]} | | | | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", default="flex,sdpa,fa2,fa3,fa4,cudnn,flex-fa4")
    parser.add_argument("--masks", default=",".join(STATIC_MASKS))
    parser.add_argument("--seqlens", default="16k,32k")
    parser.add_argument("--directions", default="fwd,bwd")
    parser.add_argument("--heads", default="64:8")
    parser.add_argument("--head-dim", type=int, default=128, help="Q/K head dim (V's too unless --head-dim-v)")
    parser.add_argument("--head-dim-v", type=int, default=None, help="V's head dim, e.g. 128 with --head-dim 192")
    parser.add_argument("--deterministic", action="store_true",
                        help="the backward through each library's deterministic algorithm (fwd cases skipped)")
    parser.add_argument("--dtype", default="bfloat16",
                        help="bfloat16, float16, or fp8 / fp8_e5m2 (fa3's FP8 forward; cudnn's FP8 forward and "
                             "backward)")
    parser.add_argument("--sampler", default="auto")
    parser.add_argument("--mask-param", action="append", default=[], metavar="NAME=VALUE",
                        help="a mask parameter for every case, e.g. block=64 (repeatable)")
    parser.add_argument("--device", default="cuda", help="cuda; cpu only tests this script (flex forward, sdpa)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of interleaved calls (plugin, direct, ...)")
    parser.add_argument("--target-ms", type=float, default=300.0,
                        help="raise --repeat so that each side of a round runs about this long")
    parser.add_argument("--max-repeat", type=int, default=100)
    parser.add_argument("--max-minutes", type=float, default=None, help="start no case after this many minutes")
    parser.add_argument("--against", default=None, help="for flex rows: also time this kernel plugin (e.g. flashmask)")
    parser.add_argument("--prewarm", type=int, default=0, help="compile every case first in this many processes")
    parser.add_argument("--prewarm-minutes", type=float, default=3.0, help="stop waiting for the prewarm after this")
    parser.add_argument("--out", help="folder for rows.jsonl and table.md")
    parser.add_argument("--resume", action="store_true",
                        help="skip the cases that already have an ok, n/a or unsupported row in --out's rows.jsonl")
    parser.add_argument("--table", nargs="+", metavar="ROWS", help="only print the table of these rows.jsonl files")
    args = parser.parse_args()
    if args.table:
        print(table([json.loads(line) for path in args.table for line in Path(path).read_text().splitlines()
                     if line.strip()]))
        return
    if not args.out:
        parser.error("--out is required")
    import torch._functorch.config as functorch_config

    functorch_config.donated_buffer = False  # backward is timed repeatedly on one graph (retain_graph)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cases = [(kernel, mask_name, parse_size(seqlen), direction) for kernel in args.kernels.split(",")
             for seqlen in args.seqlens.split(",") for mask_name in args.masks.split(",")
             for direction in args.directions.split(",")]
    if args.resume and (out / "rows.jsonl").exists():
        done = {(r["kernel"], r["mask"], r["seqlen"], r["direction"])
                for r in map(json.loads, (out / "rows.jsonl").read_text().splitlines())
                if r["status"] in ("ok", "n/a", "unsupported")}
        cases = [case for case in cases if case not in done]
    start, rows = time.time(), []
    if args.prewarm > 1:
        prewarm(cases, args)
        print(f"prewarm: {time.time() - start:.0f} s", flush=True)
    with open(out / "rows.jsonl", "a") as f:
        for case in cases:
            if args.max_minutes is not None and time.time() - start > 60 * args.max_minutes:
                break
            t0 = time.time()
            try:
                row = measure(*case, args)
            except Exception as exc:  # noqa: BLE001 - one failed case is a row, the run goes on
                row = dict(zip(("kernel", "mask", "seqlen", "direction"), case, strict=False), status="error",
                           reason=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300])
                traceback.print_exc()
            if args.device == "cuda":
                torch.cuda.empty_cache()
            row["wall_s"] = round(time.time() - t0, 2)
            rows.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps({k: row.get(k) for k in ("kernel", "mask", "seqlen", "direction", "status", "ratio",
                                                       "plugin_tflops", "against_vs_direct", "wall_s")}), flush=True)
    print(table(rows))
    written = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines() if line.strip()]
    (out / "table.md").write_text(table(written) + "\n")


if __name__ == "__main__":
    main()
