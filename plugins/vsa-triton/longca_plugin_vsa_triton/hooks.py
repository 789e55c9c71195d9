"""The Triton implementation of Video Sparse Attention's block-sparse attention, on any CUDA GPU.

From fastvideo-kernel (>= 0.3.0: importable even when its compiled extension is not) or the vsa
package (whose __init__ imports its CUDA extension first on sm90). 64-token tiles, bf16 (the
kernel casts probabilities to bf16), MHA, forward and backward. Tiles, block map and indices
come from longca-plugin-vsa.
"""
from __future__ import annotations

from typing import Any

from longca.plugin import hookimpl
from longca_plugin_vsa import kernel, library
from longca_plugin_vsa.tiles import TILE, block_param

KIND = "triton"


def supports(problem: Any) -> str | None:
    reason = kernel.layout_reason(problem)
    if reason:
        return reason
    backend, _ = library.find(KIND)
    if backend is not None and not backend.exact_variable_backward and problem.direction != "fwd":
        partial = problem.mask == "block_sparse_variable" or problem.seqlen % (block_param(problem) or TILE)
        if partial:
            return (f"{backend.package}: its Triton backward masks keys by the wrong block's size when tiles "
                    f"are partly filled (fixed in fastvideo-kernel 0.2.6); use fastvideo-kernel >= 0.3.0")
    return None


@hookimpl
def longca_kernels():
    return [kernel.kernel_spec(
        KIND, "vsa-triton",
        "Video Sparse Attention, Triton kernel (fastvideo-kernel or vsa): 64-token tiles, "
        "variable blocks as partly filled tiles, any CUDA GPU",
        supports, min_compute_capability=(8, 0))]
