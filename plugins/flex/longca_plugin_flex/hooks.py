"""FlexAttention (Triton backend): `torch.compile`d `flex_attention`, as its users run it.

Every static mask runs natively in one call: the BlockMask comes from `create_block_mask` over
the mask's natural `mask_mod` (what a Flex user writes: `q_idx >= kv_idx`, document ids, ...,
registered with the mask), so empty blocks are skipped, full blocks run unmasked and the
mask_mod is evaluated only inside partial blocks (`kernel.py`). GQA through `enable_gqa`. On
CUDA the call is compiled; on a CPU it runs eager (the unfused reference path: S² memory,
forward only, since torch's FlexAttention has no CPU backward), which is enough to check
correctness at small sizes. `LONGCA_FLEX_COMPILE=0/1` forces either.
"""
from __future__ import annotations

from longca.plugin import hookimpl

from .kernel import FlexKernel

KERNEL = FlexKernel()


def supports(problem) -> str | None:
    if problem.device_type == "cpu" and problem.direction != "fwd":
        return "FlexAttention has no backward on CPU (torch raises NotImplementedError); forward only"
    if problem.head_dim < 16:
        return f"head_dim {problem.head_dim}: FlexAttention needs at least 16"
    return None


def available() -> str | None:
    import torch

    try:
        import torch.nn.attention.flex_attention as fa
    except ImportError:
        return f"torch {torch.__version__} has no torch.nn.attention.flex_attention (needs >= 2.5)"
    if not hasattr(fa.BlockMask, "from_kv_blocks"):
        return f"torch {torch.__version__} lacks BlockMask.from_kv_blocks"
    return None


def backend() -> str:
    import torch

    return (f"torch {torch.__version__} flex_attention, Triton backend (compiled on CUDA, eager on CPU), "
            f"create_block_mask over each mask's natural mask_mod")


SPEC = KERNEL.spec(
    "flex", "FlexAttention (Triton): compiled flex_attention, create_block_mask over each mask's natural mask_mod",
    devices=("cpu", "cuda"), available=available, supports=supports, backend=backend, compiles=True,
    sinks=True,  # through the call's lse (`FlexKernel.run`), as torchtitan's gpt-oss does
    # any (Q/K, V) pair: flex_attention checks only that Q and K share a head dim (V has its own, Ev)
    head_dims=None,
    deterministic=("flex_attention's Triton backward has no deterministic option per call; longca does not "
                   "switch on the process-wide torch.use_deterministic_algorithms"),
    url="https://pytorch.org/docs/stable/nn.attention.flex_attention.html")


@hookimpl
def longca_kernels():
    return [SPEC]
