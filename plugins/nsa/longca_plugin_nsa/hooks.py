"""NSA's selected attention from fla-core (`fla.ops.nsa.parallel_nsa`), forward and backward, on topk_sparse.

Only the selected branch: `parallel_nsa(q, k, v, block_indices=, block_counts=, block_size=)`
with no gates (g_cmp, g_slc, g_swa None) and no window returns the selected attention itself,
fed with the mask's blocks instead of blocks chosen by the compressed branch. That call also
mean-pools k and v (what the compressed branch would attend; unused here): one read of k and v,
part of the time as it is for fla's users. Triton kernels, compiled (and autotuned) per shape on
first use.
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
from dataclasses import dataclass
from typing import Any

from longca.plugin import TOKEN_SPARSE_MASKS, KernelSpec, hookimpl, installed_version

from . import selection

BLOCKS = (16, 32, 64)  # powers of two (Triton tiles), at least 16 (tl.dot); fla tests 16 and 32, 64 is NSA's
INSTALL = "pip install 'fla-core>=0.6,<0.7' einops"


def _version() -> str:
    return installed_version("fla-core") or installed_version("flash-linear-attention") or ""


@functools.cache
def available() -> str | None:
    import torch

    if importlib.util.find_spec("fla") is None:
        return f"fla-core is not installed ({INSTALL})"
    if not torch.cuda.is_available():
        return (f"fla-core {_version()} is installed, but no CUDA GPU is visible: its NSA kernels are Triton on "
                f"CUDA (torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'})")
    try:
        from fla.ops.nsa import parallel_nsa
    except Exception as exc:  # noqa: BLE001 - fla's import fails in many ways (triton, CUDA); each is the reason
        text = str(exc).strip().splitlines()
        return f"fla.ops.nsa does not import ({type(exc).__name__}: {text[0] if text else ''})"
    missing = {"block_indices", "block_counts", "block_size"} - set(inspect.signature(parallel_nsa).parameters)
    if missing:
        return f"fla-core {_version()}: parallel_nsa takes no {', '.join(sorted(missing))} (written for 0.6)"
    return None


def supports(problem: Any) -> str | None:
    group, rest = divmod(problem.heads_q, problem.heads_kv)
    if rest or group < 16 or group & (group - 1):
        return (f"heads {problem.heads_q}:{problem.heads_kv}: fla's parallel_nsa needs a power-of-two number of "
                f"query heads per KV head, at least 16 (the query heads of one KV head are one Triton tile); "
                f"NSA's own shape is 64:4")
    try:
        block = int(problem.mask_params.get("block", 64))
    except (TypeError, ValueError):
        return None  # the mask reports the bad parameter
    if block not in BLOCKS:
        return (f"block {block}: fla's NSA kernels take blocks of {', '.join(map(str, BLOCKS))} tokens "
                f"(a power of two, at least 16)")
    return None


@dataclass
class Prepared:
    picked: selection.Selection


def prepare(problem, mask, q, k, v) -> Prepared:
    return Prepared(selection.from_layout(mask.block_layout(), q.shape[0], q.device))


def run(prepared: Prepared, q, k, v):
    from fla.ops.nsa import parallel_nsa

    picked = prepared.picked
    return parallel_nsa(q, k, v, block_indices=picked.indices, block_counts=picked.counts, block_size=picked.block)


@hookimpl
def longca_kernels():
    return [KernelSpec(
        name="nsa",
        family="sparse",
        description="NSA's selected attention (fla-core parallel_nsa, Triton) on topk_sparse: per token and KV head "
                    "the mask's blocks; blocks of 16/32/64, >= 16 query heads per KV head",
        masks=TOKEN_SPARSE_MASKS,
        prepare=prepare,
        run=run,
        dtypes=("bfloat16", "float16"),
        head_dims=(64, 128),
        gqa=True,
        backward=True,
        devices=("cuda",),
        min_compute_capability=(8, 0),
        available=available,
        supports=supports,
        backend=lambda: f"fla-core {_version()} parallel_nsa".strip(),
        compiles=True,
        url="https://github.com/fla-org/flash-linear-attention",
    )]


@hookimpl
def longca_env_info(info):
    found = _version()
    if found:
        info["fla-core"] = found
