"""cuDNN frontend's block-sparse attention (`cudnn.block_sparse_attention`, frontend 1.32) on Hopper (SM90).

A CuTe DSL kernel, non-causal, on square 64- or 128-token tiles: each query tile attends the key
tiles listed for it (see `metadata`). prepare builds the lists (untimed); the timed call is
`block_sparse_attention_forward`, with `block_sparse_attention_backward` for autograd (`kernel`).
What the library allows on SM90 (`cudnn/block_sparse_attention/api.py`): forward in bf16 and
fp16, Q/K and V head dims each 64, 96 or 128, GQA; backward in bf16, MHA, head dim 128. Other
architectures have other rules there (SM100's default 128-token tiles and per-KV-head metadata
with pack_gqa, SM120's head dim 128 only), which this plugin does not map: refused, not guessed.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any

from longca.plugin import BLOCK_SPARSE_MASKS, KernelSpec, gpu_reason, hookimpl, installed_version

from . import metadata

INSTALL = ("pip install 'nvidia-cudnn-frontend[cutedsl]==1.32.0' (its block-sparse attention is CuTe DSL: "
           "nvidia-cutlass-dsl and cuda-python), or longca-plugin-cudnn-bsa[lib]")
SQUARE = (64, 96, 128)  # SM90 forward: QK and V dimensions 64, 96 or 128, each (api.py)
PAIRS: tuple[tuple[int, int], ...] = tuple((d, dv) for d in SQUARE for dv in SQUARE if d != dv)
HEAD_DIMS: tuple[int | tuple[int, int], ...] = (*SQUARE, *PAIRS)
BACKWARD_HEAD_DIM = 128  # SM90 backward: head_dim 128 only, equal QK and V


def _locations(name: str) -> list[str]:
    """Where the top-level package `name` lives, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    return list(spec.submodule_search_locations or [])


def library_reason() -> str | None:
    """Why cudnn.block_sparse_attention cannot be imported here, found without importing anything, or None."""
    cudnn = _locations("cudnn")
    if not any(os.path.exists(os.path.join(loc, "block_sparse_attention", "api.py")) for loc in cudnn):
        have = f" (nvidia-cudnn-frontend {installed_version('nvidia-cudnn-frontend')} has none)" if cudnn else ""
        return (f"cuDNN frontend's block-sparse attention (cudnn.block_sparse_attention, nvidia-cudnn-frontend 1.32) "
                f"is not installed{have}: {INSTALL}")
    if importlib.util.find_spec("cutlass") is None:
        return ("cudnn.block_sparse_attention needs the CuTe DSL (package `cutlass` from nvidia-cutlass-dsl), "
                "not importable: pip install nvidia-cutlass-dsl")
    if not any(os.path.isdir(os.path.join(loc, "bindings")) for loc in _locations("cuda")):
        return ("cudnn.block_sparse_attention needs cuda-python's `cuda.bindings` (it imports cuda.bindings.driver), "
                "not importable: pip install cuda-python")
    return None


def available() -> str | None:
    return library_reason() or gpu_reason()


def supports(problem: Any) -> str | None:
    """What the declared fields cannot say: the mask's block, the backward's limits, the architecture."""
    if problem.mask in BLOCK_SPARSE_MASKS:
        reason = metadata.block_reason(problem.mask_params.get("block", 128))  # the catalog's default block
        if reason:
            return reason
    if problem.direction != "fwd":
        if problem.dtype != "bfloat16":
            return (f"cuDNN's block-sparse backward is bfloat16 only (block_sparse_attention_backward); "
                    f"not {problem.dtype}")
        if problem.heads_q != problem.heads_kv:
            return "cuDNN's block-sparse backward is MHA only (heads_q == heads_kv): GQA runs forward only"
        if problem.head_dim != BACKWARD_HEAD_DIM or problem.dv != BACKWARD_HEAD_DIM:
            return (f"cuDNN's SM90 block-sparse backward needs head_dim {BACKWARD_HEAD_DIM} (Q/K and V); "
                    f"not {problem.head_dims_label}")
    if problem.device_type == "cuda":
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(problem.device)
            if major != 9:
                return (f"sm_{major}{minor}: this plugin maps cuDNN's SM90 (Hopper) block-sparse rules only; the "
                        f"frontend's SM100-SM120 paths have other limits (128-token tiles by default, per-KV-head "
                        f"metadata with pack_gqa, head dim 128 only on SM120) and are neither wired nor tested here")
    return None


def prepare(problem, mask, q, k, v):
    from . import kernel

    return kernel.prepare(problem, mask, q, k, v)


def run(prepared, q, k, v):
    from . import kernel

    return kernel.run(prepared, q, k, v)


def backend() -> str:
    frontend = installed_version("nvidia-cudnn-frontend") or "unknown version"
    dsl = installed_version("nvidia-cutlass-dsl")
    return (f"nvidia-cudnn-frontend {frontend} cudnn.block_sparse_attention (block_sparse_attention_forward, "
            f"_backward; SM90 64/128-token tiles)" + (f", nvidia-cutlass-dsl {dsl}" if dsl else ""))


SPEC = KernelSpec(
    name="cudnn-bsa",
    family="sparse",
    description="cuDNN frontend's block-sparse attention (cudnn.block_sparse_attention, CuTe DSL) on SM90: "
                "64- or 128-token tiles, variable blocks padded into tiles; GQA forward, MHA backward",
    masks=BLOCK_SPARSE_MASKS,  # not topk_sparse: the kernel is non-causal inside a tile
    prepare=prepare,
    run=run,
    dtypes=("bfloat16", "float16"),
    head_dims=HEAD_DIMS,
    gqa=True,
    backward=True,
    devices=("cuda",),
    min_compute_capability=(9, 0),
    available=available,
    supports=supports,
    backend=backend,
    compiles=True,  # CuTe DSL kernels, compiled per configuration on first use
    url="https://github.com/NVIDIA/cudnn-frontend",
    deterministic="block_sparse_attention_backward takes no deterministic flag",
)


@hookimpl
def longca_kernels():
    return [SPEC]


@hookimpl
def longca_env_info(info):
    for dist in ("nvidia-cudnn-frontend", "nvidia-cutlass-dsl"):
        if (found := installed_version(dist)):
            info[dist] = found
