"""FlashInfer's block-sparse attention: plan in prepare, run in the timed call, forward only.

`block_sparse_uniform` goes to `flashinfer.sparse.BlockSparseAttentionWrapper` (any block
size, whole blocks: S a multiple of the block) with the KV groups folded into one BSR matrix
(see `layout`); `block_sparse_variable` to `VariableBlockSparseAttentionWrapper`, which takes
per-KV-head block maps and block sizes. Both plan one sequence (batch 1). FlashInfer compiles
its kernels with nvcc on the first plan of a configuration (cached on disk afterwards), so the
first prepare_ms of a process can include minutes of JIT compilation.
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
from dataclasses import dataclass
from typing import Any

from longca.plugin import BLOCK_SPARSE_MASKS, KernelSpec, hookimpl, installed_version

from . import layout

WORKSPACE_BYTES = 128 * 1024 * 1024  # FlashInfer's recommended float workspace


def _version() -> str:
    return installed_version("flashinfer-python") or ""


@functools.cache
def available() -> str | None:
    import torch

    if importlib.util.find_spec("flashinfer") is None:
        return "flashinfer-python is not installed (pip install 'longca-plugin-flashinfer[flashinfer]')"
    if not torch.cuda.is_available():
        return (f"flashinfer-python {_version()} is installed, but no CUDA GPU is visible "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'})")
    try:
        from flashinfer import sparse  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - flashinfer's import fails in many ways (JIT, CUDA); each is the reason
        text = str(exc).strip().splitlines()
        return f"flashinfer does not import ({type(exc).__name__}: {text[0] if text else ''})"
    return None


def _param(problem: Any, name: str, default: Any, cast: type) -> Any:
    try:
        return cast(problem.mask_params.get(name, default))
    except (TypeError, ValueError):
        return None


def supports(problem: Any) -> str | None:
    if problem.batch != 1:
        return f"batch {problem.batch}: the sparse wrappers plan a single sequence (batch 1)"
    block = _param(problem, "block", 128, int)
    if problem.mask == "block_sparse_uniform":
        if block and problem.seqlen % block:
            return (f"seqlen {problem.seqlen} is not a multiple of block {block}: BlockSparseAttentionWrapper "
                    f"takes whole {block}-token key blocks (N divisible by C)")
        return None
    try:
        from flashinfer import sparse
    except Exception:  # noqa: BLE001 - available() reports why it does not import
        sparse = None
    if sparse is not None and not hasattr(sparse, "VariableBlockSparseAttentionWrapper"):
        return f"flashinfer-python {_version()} has no VariableBlockSparseAttentionWrapper"
    density = _param(problem, "density", 0.5, float)
    groups = problem.heads_kv
    if block and density and layout.variable_tokens_estimate(groups, problem.seqlen, block, density) > layout.INT32_MAX:
        return ("VariableBlockSparseAttentionWrapper lists every kept key token of every (KV head, row block) "
                "with int32 indices; this problem needs more than 2^31 of them")
    return None


@dataclass
class Prepared:
    wrapper: Any
    variable: bool
    groups: int
    seqlen: int


def _plan_kwargs(method: Any, dtype: Any) -> dict:
    """Data types for plan; o_data_type only where the installed version takes it (default fp16)."""
    params = inspect.signature(method).parameters
    kwargs = {"q_data_type": dtype, "kv_data_type": dtype}
    if "o_data_type" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs["o_data_type"] = dtype
    return kwargs


def prepare(problem, mask, q, k, v) -> Prepared:
    import torch
    from flashinfer import sparse

    lay = mask.layout
    _, seqlen, heads_q, head_dim = q.shape
    heads_kv = k.shape[2]
    keep = lay.keep
    if keep.shape[0] != heads_kv:  # the core draws one map per query head for MHA, per KV head for GQA
        raise ValueError(f"mask has {keep.shape[0]} groups, expected one per KV head ({heads_kv})")
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=q.device)
    keep_t = torch.from_numpy(keep).to(q.device)
    if mask.name == "block_sparse_variable":
        sizes = torch.from_numpy(lay.q_bounds[1:] - lay.q_bounds[:-1])
        if layout.variable_tokens(keep, sizes.numpy()) > layout.INT32_MAX:
            raise ValueError("more than 2^31 kept key tokens: VariableBlockSparseAttentionWrapper's int32 "
                             "indices would overflow")
        sizes = sizes.to(torch.int32).repeat(heads_kv, 1).to(q.device)
        wrapper = sparse.VariableBlockSparseAttentionWrapper(workspace)
        wrapper.plan(keep_t, sizes, sizes, heads_q, heads_kv, head_dim, **_plan_kwargs(wrapper.plan, q.dtype))
        return Prepared(wrapper, True, heads_kv, seqlen)
    block = int(lay.q_bounds[1])
    indptr, indices = layout.bsr(keep_t)
    total = heads_kv * seqlen
    wrapper = sparse.BlockSparseAttentionWrapper(workspace)
    wrapper.plan(indptr, indices, total, total, block, block, heads_q // heads_kv, 1, head_dim,
                 **_plan_kwargs(wrapper.plan, q.dtype))
    return Prepared(wrapper, False, heads_kv, seqlen)


def run(prepared: Prepared, q, k, v):
    if prepared.variable:  # (H, S, D) views; the wrapper folds the KV heads itself
        out = prepared.wrapper.run(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1))
        return out.transpose(0, 1)[None]
    groups = prepared.groups
    out = prepared.wrapper.run(layout.fold_q(q, groups), layout.fold_kv(k), layout.fold_kv(v))
    return layout.unfold_out(out, groups, prepared.seqlen)


@hookimpl
def longca_kernels():
    return [KernelSpec(
        name="flashinfer",
        family="sparse",
        description="flashinfer.sparse: BlockSparseAttentionWrapper (uniform blocks, KV groups folded into one "
                    "BSR plan) and VariableBlockSparseAttentionWrapper (variable blocks); forward only",
        masks=BLOCK_SPARSE_MASKS,
        prepare=prepare,
        run=run,
        dtypes=("bfloat16", "float16"),
        head_dims=(64, 128, 256),
        gqa=True,
        backward=False,
        devices=("cuda",),
        min_compute_capability=(8, 0),
        available=available,
        supports=supports,
        backend=lambda: f"flashinfer-python {_version()}".strip(),
        url="https://github.com/flashinfer-ai/flashinfer",
    )]


@hookimpl
def longca_env_info(info):
    found = _version()
    if found:
        info["flashinfer-python"] = found
