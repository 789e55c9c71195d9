"""Video Sparse Attention's ThunderKittens block-sparse kernel for Hopper (sm_90a).

From fastvideo-kernel (>= 0.3.0) or the vsa package, whichever has a compiled extension that
loads with the installed torch. 64-token tiles, bf16, head_dim 64 or 128, MHA, batch 1,
forward and backward. See README.md for building it offline.
"""
from __future__ import annotations

from typing import Any

from longca.plugin import hookimpl

from . import kernel, library

KIND = "tk"


def supports(problem: Any) -> str | None:
    reason = kernel.layout_reason(problem)
    if reason:
        return reason
    if problem.batch != 1:
        return f"batch {problem.batch}: the ThunderKittens kernel checks batch == 1"
    if problem.device_type == "cuda":
        import torch

        cc = torch.cuda.get_device_capability(problem.device)
        if cc != (9, 0):
            return f"the kernel is compiled for sm_90a only (H100/H200); this GPU is sm_{cc[0]}{cc[1]}"
    return None


@hookimpl
def longca_kernels():
    return [kernel.kernel_spec(
        KIND, "vsa",
        "Video Sparse Attention, ThunderKittens kernel for sm90 (fastvideo-kernel or vsa): "
        "64-token tiles, variable blocks as partly filled tiles",
        supports, min_compute_capability=(9, 0))]


@hookimpl
def longca_env_info(info):
    library.env_info(info)
