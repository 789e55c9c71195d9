"""SageAttention 1.0.6 (its Triton release): Q and K quantized to INT8 per block (K smoothed first:
its mean over the sequence subtracted), P·V in FP16, a forward pass only.

Called as its users call it: `sageattn(q, k, v, tensor_layout="NHD", is_causal=...)` for full and
causal, `sageattn_varlen(...)` with the documents' cu_seqlens for full_document and causal_document.
With its default `smooth_k=True` the library subtracts K's mean from K in place; attention does not
change (every key of a row moves by the same score), and longca checks each timed call's output
against the float32 reference on the inputs as they are then. A quantized kernel: its rows say so
(`quantized`) and are judged by the 8-bit tolerance, and the report puts their error beside their time.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import numpy as np

from longca.plugin import KernelSpec, gpu_reason, hookimpl, installed_version

MASKS = ("full", "causal", "full_document", "causal_document")
HEAD_DIMS = (64, 96, 128)  # sageattn's assertion; its varlen kernels take 64 and 128 only
VARLEN_HEAD_DIMS = (64, 128)
QUANTIZED = "INT8 Q·K per block (K smoothed), FP16 P·V"
INSTALL = "pip install sageattention==1.0.6 (Triton kernels, nothing to build; or longca-plugin-sage[lib])"


def library_reason() -> str | None:
    """Why SageAttention cannot be imported here, found without importing it, or None."""
    if importlib.util.find_spec("sageattention") is None:
        return f"SageAttention is not installed: {INSTALL}"
    if importlib.util.find_spec("triton") is None:
        return "SageAttention is installed but triton is not (a CUDA build of torch brings it)"
    return None


def available() -> str | None:
    return library_reason() or gpu_reason()


def supports(problem) -> str | None:
    if problem.mask.endswith("_document") and problem.head_dim not in VARLEN_HEAD_DIMS:
        return (f"head_dim {problem.head_dim} with documents: sageattn_varlen takes head dims "
                f"{', '.join(map(str, VARLEN_HEAD_DIMS))}")
    return None


@dataclass(frozen=True)
class Prepared:
    causal: bool
    cu_seqlens: Any = None  # int32 (documents x batch + 1,) on the device, for sageattn_varlen
    max_seqlen: int = 0


def document_offsets(doc_lens, batch: int) -> np.ndarray:
    """cu_seqlens of the documents of every sequence of the batch, packed one after the other."""
    lens = np.tile(np.asarray(doc_lens, dtype=np.int64), batch)
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def prepare(problem, mask, q, k, v) -> Prepared:
    causal = mask.name in ("causal", "causal_document")
    if not mask.name.endswith("_document"):
        return Prepared(causal)
    import torch

    cu = document_offsets(mask.params["doc_lens"], q.shape[0])
    return Prepared(causal, torch.from_numpy(cu).to(q.device), int(np.max(mask.params["doc_lens"])))


def run(prepared: Prepared, q, k, v):
    from sageattention import sageattn, sageattn_varlen

    if prepared.cu_seqlens is None:
        return sageattn(q, k, v, tensor_layout="NHD", is_causal=prepared.causal)
    batch, seqlen = q.shape[:2]
    packed = [x.reshape(batch * seqlen, *x.shape[2:]) for x in (q, k, v)]  # views: K is smoothed in place
    out = sageattn_varlen(*packed, prepared.cu_seqlens, prepared.cu_seqlens, prepared.max_seqlen,
                          prepared.max_seqlen, is_causal=prepared.causal)
    return out.view(batch, seqlen, q.shape[2], v.shape[-1])


def version() -> str:
    return installed_version("sageattention") or "unknown version"


SPEC = KernelSpec(
    name="sage",
    family="dense",
    description=f"SageAttention 1.0.6 (Triton): {QUANTIZED}; forward only",
    masks=MASKS,
    prepare=prepare,
    run=run,
    dtypes=("bfloat16", "float16"),
    head_dims=HEAD_DIMS,
    devices=("cuda",),
    backward=False,
    min_compute_capability=(8, 0),
    available=available,
    supports=supports,
    backend=lambda: f"sageattention {version()} (sageattn / sageattn_varlen)",
    quantized=QUANTIZED,
    compiles=True,  # Triton kernels, compiled per shape on first use: `longca bench` warms them first
    url="https://github.com/thu-ml/SageAttention",
)


@hookimpl
def longca_kernels():
    return [SPEC]


@hookimpl
def longca_env_info(info):
    if (found := installed_version("sageattention")):
        info["sageattention"] = found
