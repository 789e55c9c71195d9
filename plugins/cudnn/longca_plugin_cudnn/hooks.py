"""cuDNN fused attention (the cuDNN "flash" SDPA kernels): two paths, fixed when the plugin loads.

- **cuDNN frontend** (`frontend.py`, `graphs.py`), when nvidia-cudnn-frontend (module `cudnn`) is
  installed: every call of the core planner's plan is one cuDNN SDPA graph, built once in
  `prepare` and only executed in the timed call; documents in cuDNN's ragged layout, windows as
  cuDNN's diagonal band. All static masks, forward and backward, and the lse primitives; learnable
  sinks fused into cuDNN's graphs (sink_token) where the plan is one call, else through the lse.
- **torch** (this file), otherwise or with LONGCA_CUDNN_BACKEND=torch: full and causal through SDPA
  with `sdpa_kernel(SDPBackend.CUDNN_ATTENTION)`; everything else through the planner with cuDNN's
  explicit-lse ops as torch exposes them: `aten._scaled_dot_product_cudnn_attention` (+ `_backward`)
  for one rectangle, `aten._cudnn_attention_forward/_backward` with cumulative sequence lengths
  for documents. These take `is_causal` only (top-left), so the planner gives them full rectangles
  and causal squares: sliding windows are refused. The backward runs only through SDPA (full,
  causal); see BACKWARD_REASON. torch rebuilds its varlen cuDNN graph on every call
  (https://github.com/pytorch/pytorch/pull/191576), which makes the document forward slow: so
  without the frontend, document and multi-call masks are refused (`unavailable: ...`, rerun by
  `--resume` once it is installed) unless LONGCA_CUDNN_BACKEND=torch asks for the torch path, whose
  rows then carry the rebuild as their `caveat`.
"""
from __future__ import annotations

from typing import Any

from longca.plugin import UNAVAILABLE, KernelSpec, hookimpl, installed_version
from longca_flashplan.plugin import (
    FA_MASKS,
    CallArgs,
    ExecCall,
    full_or_square_causal,
    gpu_reason,
    head_dim_reason,
    lse_primitives,
    make_prepare_run,
    plan_reason,
)

from . import fp8, frontend

WINDOW_MASKS = ("sliding_window", "sliding_window_causal", "global_sliding_window")
BACKWARD_MASKS = ("full", "causal")
# on every row of the torch path (its `backend`), so a slow document row says why
REBUILD_NOTE = ("document and multi-call masks go through aten._cudnn_attention_forward, which rebuilds its cuDNN "
                "graph on every call (pytorch/pytorch#191576): those rows time a graph build per call; install "
                "nvidia-cudnn-frontend for the frontend path, which builds each graph once")
SINGLE_CALL_MASKS = ("full", "causal")  # one SDPA call on the torch path; every other mask is varlen or several calls
FALLBACK_REASON = (f"{UNAVAILABLE}nvidia-cudnn-frontend is not installed: without it this mask runs through torch's "
                   "aten._cudnn_attention ops, which rebuild their cuDNN graph on every call (pytorch/pytorch#191576), "
                   "so the row would time graph builds (1.6-27.8 TFLOP/s on an H200's document masks); install "
                   "nvidia-cudnn-frontend, or set LONGCA_CUDNN_BACKEND=torch to time the torch path anyway (its rows "
                   "then carry that caveat)")
BACKWARD_REASON = ("cuDNN backward runs only through SDPA (full, causal): torch's explicit-lse cuDNN backward ops "
                   "(aten._cudnn_attention_backward with cu_seqlens, _scaled_dot_product_cudnn_attention_backward "
                   "with an external lse) gave wrong gradients on torch 2.11 / cuDNN 9.19 (H200, 2026-11-29)")


def _expand(x, heads: int):
    """KV heads repeated to `heads` (dim -2), for cuDNN builds without native GQA."""
    rep = heads // x.shape[-2]
    return x if rep == 1 else x.repeat_interleave(rep, dim=-2)


class CuDNN:
    """cuDNN's explicit-lse attention ops as exposed by torch."""

    name = "cudnn"
    window_ok = staticmethod(full_or_square_causal)

    expand_gqa = False  # learned on the first GQA call of the process: cuDNN wants equal head counts

    def _run(self, fn, q, k, v):
        if q.shape[-2] != k.shape[-2] and not self.expand_gqa:
            try:
                return fn(q, k, v)
            except RuntimeError:
                CuDNN.expand_gqa = True  # this torch/cuDNN wants equal head counts
        if q.shape[-2] != k.shape[-2]:
            return fn(q, _expand(k, q.shape[-2]), _expand(v, q.shape[-2]))
        return fn(q, k, v)

    def fwd(self, q, k, v, args: CallArgs):
        import torch

        def dense(q_, k_, v_):
            res = torch.ops.aten._scaled_dot_product_cudnn_attention(
                q_.transpose(1, 2), k_.transpose(1, 2), v_.transpose(1, 2), None, True, 0.0, args.causal, False,
                scale=args.scale)
            return res[0].transpose(1, 2), res[1].reshape(q.shape[0], q.shape[2], q.shape[1])

        def ragged(q_, k_, v_):
            res = torch.ops.aten._cudnn_attention_forward(
                q_, k_, v_, None, args.cu_q, args.cu_k, args.max_q, args.max_k, True, 0.0, args.causal, False,
                scale=args.scale)
            lse = res[1]
            total, heads = q.shape[0], q.shape[1]
            if lse.numel() == total * heads and lse.shape[:2] == (total, heads):
                lse = lse.reshape(total, heads).t()
            elif lse.numel() == total * heads and lse.shape[0] == heads:
                lse = lse.reshape(heads, total)
            else:
                raise RuntimeError(f"unexpected cuDNN varlen lse shape {tuple(lse.shape)} "
                                   f"for {total} rows, {heads} heads")
            return res[0], lse

        return self._run(ragged if args.varlen else dense, q, k, v)

    def bwd(self, dout, q, k, v, out, lse, args: CallArgs):
        raise NotImplementedError(BACKWARD_REASON)


def _sdpa_cudnn(q, k, v, call: ExecCall):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kwargs: dict[str, Any] = {"enable_gqa": True} if q.shape[-2] != k.shape[-2] else {}
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=call.args.causal, scale=call.args.scale, **kwargs)
    return out.transpose(1, 2)


def public_for(adapter, call: ExecCall, q, k):
    return _sdpa_cudnn if not call.args.varlen and call.args.unwindowed else None


def available() -> str | None:
    reason = gpu_reason()
    if reason:
        return reason
    import torch

    if not torch.backends.cudnn.is_available():
        return "torch was built without cuDNN"
    return None


TORCH_DETERMINISTIC = ("the torch path (SDPA's cuDNN backend) takes no deterministic flag; the cuDNN frontend "
                       "path has one (sdpa_backward use_deterministic_algorithm): install nvidia-cudnn-frontend")
# the frontend path's graphs take V of Q/K's head dim, multiples of 8 up to frontend.MAX_HEAD_DIM; the torch
# path multiples of 8 up to 256 (head_dim_reason below)
FRONTEND_HEAD_DIMS = tuple(range(8, frontend.MAX_HEAD_DIM + 1, 8))
TORCH_HEAD_DIMS = tuple(range(8, 257, 8))


def torch_supports(problem) -> str | None:
    """What the torch path refuses: windows (no band in torch's ops), backward beyond full/causal."""
    if problem.deterministic:
        return TORCH_DETERMINISTIC
    if problem.direction != "fwd" and problem.mask not in BACKWARD_MASKS:
        return BACKWARD_REASON
    if problem.mask in WINDOW_MASKS:
        return f"mask {problem.mask}: sliding windows need the cuDNN frontend path (torch's cuDNN ops take no band)"
    if problem.mask not in SINGLE_CALL_MASKS and not frontend.torch_forced():
        return FALLBACK_REASON
    return head_dim_reason(problem, 8, 256)


def torch_caveat(problem) -> str | None:
    """What a torch-path row of a document or multi-call mask must say beside its number."""
    return None if problem.mask in SINGLE_CALL_MASKS else REBUILD_NOTE


def frontend_supports(problem) -> str | None:
    """What the frontend path refuses: a process where it cannot run, head dims, masks with no band."""
    reason = frontend.frontend_reason()
    if reason:
        return reason
    if problem.dv != problem.head_dim:
        return ("the cuDNN frontend path's bfloat16/float16 graphs take V of Q/K's head dim "
                f"({problem.head_dims_label}); its FP8 graphs take 192/128")
    if problem.head_dim % 8 or problem.head_dim > frontend.MAX_HEAD_DIM:
        return f"head_dim {problem.head_dim}: the cuDNN frontend path runs multiples of 8 up to {frontend.MAX_HEAD_DIM}"
    return None


def supports(problem) -> str | None:
    if problem.sinks and problem.fp8:
        return SINKS_REFUSED
    if PATH == "frontend" and problem.fp8:
        return frontend.frontend_reason() or fp8.fp8_reason(problem)
    return frontend_supports(problem) if PATH == "frontend" else torch_supports(problem)


def frontend_prepare(problem, mask, q, k, v):
    """The planned graphs, or for an FP8 problem the sdpa_fp8 graphs and the FP8 copies (fp8.py)."""
    return fp8.prepare(problem, mask, q, k, v) if problem.fp8 else frontend.prepare(problem, mask, q, k, v)


def frontend_run(prepared, q, k, v, sinks=None):
    """The FP8 graphs (fp8.py), or the planned graphs; `sinks` fused into them or through the merged lse
    (frontend.run, as prepare decided)."""
    if isinstance(prepared, fp8.Fp8Prepared):
        return fp8.run(prepared, q, k, v)
    return frontend.run(prepared, q, k, v) if sinks is None else frontend.run(prepared, q, k, v, sinks=sinks)


# learnable sinks are cuDNN's fused sink_token where the plan is one call and this cuDNN takes it
# (fused_sinks.py): no caveat, cuDNN's own path. Elsewhere they enter through the calls' merged lse
# (an elementwise pass over the output after the cuDNN calls, as users of a library without sinks
# add them): those rows say so, and why (frontend.unfused_sinks_reason)
SINKS_CAVEAT = "learnable sinks through the lse after the cuDNN calls, not cuDNN's fused sink_token"
SINKS_REFUSED = ("learnable sinks: the frontend path takes them (cuDNN's fused sink_token, or through the lse); "
                 "the torch path and FP8 problems do not")


def frontend_caveat(problem) -> str | None:
    """None but for sinks that went through the lse: then that, and why not fused. Plans the problem's
    mask again (no graph, no cudnn import without a problem with sinks)."""
    if not problem.sinks:
        return None
    reason = frontend.problem_sinks_reason(problem)
    return None if reason is None else f"{SINKS_CAVEAT}: {reason}"


def supports_mask(problem, mask) -> str | None:
    """The mask must plan into calls this path takes: bands through the frontend, else full or square causal."""
    return plan_reason(problem, mask, frontend.band_ok if PATH == "frontend" else full_or_square_causal)


def torch_backend() -> str:
    import torch

    version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return (f"cuDNN {version} via torch {torch.__version__} (SDPA cuDNN backend / aten cuDNN attention ops; "
            f"{REBUILD_NOTE})")


def backend() -> str:
    return frontend.backend_label() if PATH == "frontend" else torch_backend()


def masks_for(path: str) -> tuple[str, ...]:
    """Every static mask on both paths: the torch path refuses windows (supports, supports_mask)."""
    return FA_MASKS


torch_prepare, torch_run = make_prepare_run(CuDNN, public_for)
torch_forward_lse, _ = lse_primitives(CuDNN)
DESCRIPTIONS = {
    "frontend": "cuDNN fused attention via cudnn-frontend graphs built in prepare: ragged layout for documents, "
                "diagonal bands for windows, lse-merged calls for heterogeneous masks",
    "torch": "cuDNN fused attention via torch: SDPA cuDNN backend, ragged varlen ops for documents; "
             "no sliding windows",
}


def make_spec(path: str) -> KernelSpec:
    """The kernel as one path runs it ('frontend' or 'torch')."""
    on_frontend = path == "frontend"
    return KernelSpec(
        name="cudnn",
        family="dense",
        description=DESCRIPTIONS[path],
        masks=masks_for(path),
        prepare=frontend_prepare if on_frontend else torch_prepare,
        run=frontend_run if on_frontend else torch_run,
        # FP8 (e4m3 forward and backward, e5m2 forward) through sdpa_fp8 on full and causal: fp8.py
        dtypes=("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2") if on_frontend else ("bfloat16", "float16"),
        head_dims=(*FRONTEND_HEAD_DIMS, (192, 128)) if on_frontend else TORCH_HEAD_DIMS,
        deterministic=True if on_frontend else TORCH_DETERMINISTIC,
        devices=("cuda",),
        min_compute_capability=(9, 0) if on_frontend else (8, 0),
        available=available,
        supports=supports,
        supports_mask=supports_mask,
        forward_lse=frontend.forward_lse if on_frontend else torch_forward_lse,
        backward_lse=frontend.backward_lse if on_frontend else None,
        backend=backend,
        caveat=frontend_caveat if on_frontend else torch_caveat,
        sinks=True if on_frontend else SINKS_REFUSED,
        url="https://docs.nvidia.com/deeplearning/cudnn/frontend/latest/operations/Attention.html",
    )


PATH = frontend.chosen()  # fixed when the plugin loads: the claims below depend on it
SPEC = make_spec(PATH)


@hookimpl
def longca_kernels():
    return [SPEC]


@hookimpl
def longca_env_info(info):
    import torch

    if torch.backends.cudnn.is_available():
        info["cudnn"] = str(torch.backends.cudnn.version())
    if (found := installed_version("nvidia-cudnn-frontend")):
        info["nvidia-cudnn-frontend"] = found
    info["cudnn_plugin_path"] = PATH
