"""The hooks longca calls: what this plugin registers. Keep imports light here (no torch, no
kernel library): `longca list-kernels` imports this module on machines without a GPU."""
from __future__ import annotations

from longca import hookimpl
from longca.masks.catalog import STATIC_MASKS
from longca.specs import KernelSpec

from . import kernel


@hookimpl
def longca_kernels():
    return [KernelSpec(
        name="mykernel",
        family="dense",
        description="tiled attention with an online softmax in plain PyTorch; skips masked tiles",
        masks=STATIC_MASKS,  # the 12 static masks; block-sparse masks are refused with a reason
        prepare=kernel.prepare,
        run=kernel.run,
        dtypes=("bfloat16", "float16", "float32"),
        head_dims=None,  # any
        gqa=True,
        backward=True,  # through autograd on run()'s output
        devices=("cpu", "cuda"),
        available=kernel.available,
        supports=kernel.supports,
        forward_lse=kernel.forward_lse,
        backward_lse=kernel.backward_lse,
        backend=lambda: "longca_plugin_mykernel.kernel (torch)",
    )]


@hookimpl
def longca_env_info(info):
    import torch

    info["mykernel_torch"] = torch.__version__
