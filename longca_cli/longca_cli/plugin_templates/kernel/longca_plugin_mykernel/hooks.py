"""The hooks longca calls: what this plugin registers. Keep imports light here (no torch, no
kernel library): `longca list-kernels` imports this module on machines without a GPU."""
from __future__ import annotations

from longca import plugin

from . import kernel


@plugin.hookimpl
def longca_kernels():
    return [plugin.KernelSpec(
        name="mykernel",
        family="dense",
        description="tiled attention with an online softmax in plain PyTorch; skips masked tiles",
        masks=(plugin.ANY_STATIC,),  # every static mask, third-party ones too; block-sparse ones are refused
        prepare=kernel.prepare,
        run=kernel.run,
        dtypes=("bfloat16", "float16", "float32"),
        head_dims=None,  # any
        gqa=True,
        backward=True,  # run() is differentiable (kernel._attend_backward)
        devices=("cpu", "cuda"),
        available=kernel.available,
        supports=kernel.supports,
        forward_lse=kernel.forward_lse,
        backward_lse=kernel.backward_lse,
        backend=lambda: "longca_plugin_mykernel.kernel (torch)",
    )]


@plugin.hookimpl
def longca_env_info(info):
    import torch

    info["mykernel_torch"] = torch.__version__
