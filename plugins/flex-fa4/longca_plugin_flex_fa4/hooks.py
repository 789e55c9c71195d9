"""FlexAttention lowered to FlashAttention-4: `flex_attention(..., kernel_options={"BACKEND": "FLASH"})`.

The same user code as the `flex` plugin (natural mask_mod, `create_block_mask`, compiled
`flex_attention`, `enable_gqa`), with the FLASH backend, which torch >= 2.9 lowers to
flash-attn-4's CuTe DSL kernels on Hopper and Blackwell (the mask_mod is compiled into the FA4
kernel). What refuses a case, and where:

- `available()`: torch's own check (`ensure_flash_available` in
  `torch._inductor.kernel.flex.flex_flash_attention`), whose message says what is missing
  (flash-attn-4 not importable), plus a CUDA GPU of compute capability 9.x or 10.x;
- `supports()`: flash-attn-4's own head-dim validation for this GPU (its message); the dtypes
  it takes (bf16, fp16) are the declared ones;
- anything else torch refuses while compiling (`BACKEND='FLASH' but flash attention cannot be
  used: ...`, `NotImplementedError` from the CuTe template) becomes the case's error row with
  torch's own message.
"""
from __future__ import annotations

import os

from longca.plugin import hookimpl, installed_version

# flash-attn-4's own on-disk cache of the kernels it JIT-compiles (FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED,
# read when flash_attn.cute is imported): what one process compiled, the next loads (the prewarm of
# `longca bench` compiles the cases in parallel first); the kernels are the same. A user's setting wins.
os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "1")
from longca_plugin_flex.kernel import FlexKernel

KERNEL_OPTIONS = {"BACKEND": "FLASH"}
KERNEL = FlexKernel(KERNEL_OPTIONS)
CAPABILITIES = (9, 10)  # Hopper, Blackwell: the architectures flash-attn-4's CuTe kernels are written for


def torch_reason() -> str | None:
    """Why this torch cannot lower flex_attention to FLASH, in torch's own words, or None."""
    import torch

    try:
        from torch._inductor.kernel.flex import flex_flash_attention as ffa
    except ImportError:
        return f"torch {torch.__version__} has no FLASH backend for flex_attention (needs >= 2.9)"
    try:
        if ffa.ensure_flash_available():
            return None
        message = getattr(ffa, "_flash_attention_unavailable_message", None)  # torch >= 2.12 words it
        if message is not None:
            return message()  # torch's reason, verbatim
        return (f"torch {torch.__version__}'s FLASH backend for flex_attention is unavailable: "
                f"flash-attn-4 (flash_attn.cute) is not importable (pip install 'longca-plugin-flex-fa4[cu13]')")
    except Exception as exc:  # noqa: BLE001 - a broken flash-attn-4 install must not stop listing
        return f"flash-attn-4 failed to import: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def available() -> str | None:
    import torch

    if torch.version.cuda is None:
        return f"needs a CUDA GPU; torch {torch.__version__} is a CPU-only build"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU; none is visible"
    major = torch.cuda.get_device_capability()[0]
    if major not in CAPABILITIES:
        return f"flash-attn-4's kernels run on compute capability 9.x and 10.x; this GPU is {major}.x"
    return torch_reason()


SINKS_BACKWARD = ("learnable sinks go through flex_attention's lse, and torch's FLASH backend has no gradient "
                  "through the lse (dLSE): forward only")


def supports(problem) -> str | None:
    """flash-attn-4's own head-dim check for this GPU (its assertion message), where it can be asked."""
    if problem.sinks and problem.direction != "fwd":
        return SINKS_BACKWARD
    if problem.device_type != "cuda" or available() is not None:
        return None  # the capability checks say why first
    try:
        from flash_attn.cute.interface import _validate_head_dims
    except ImportError:
        return None
    import torch

    major = torch.cuda.get_device_capability(problem.device)[0]
    alignment = 16 // torch.empty((), dtype=getattr(torch, problem.dtype)).element_size()
    try:
        _validate_head_dims(problem.head_dim, problem.dv, major, alignment)
    except AssertionError as exc:
        return f"flash-attn-4: {exc}"
    return _sm90_backward_reason(problem, major)


def _sm90_backward_reason(problem, major: int) -> str | None:
    """Measured on an H200 (flash-attn-4 4.0.0b36): its SM90 backward at head dim 192 tiles keys by 96 and
    rejects the 128-wide block mask this plugin builds ("Block sparsity expects sparse_block_size[1]=96")."""
    if major == 9 and problem.head_dim == 192 and problem.direction != "fwd":
        return ("flash-attn-4's SM90 backward at head dim 192 tiles keys by 96 and rejects a block mask of "
                "128-token blocks (\"Block sparsity expects sparse_block_size[1]=96\"); the forward runs")
    return None


def version() -> str:
    return installed_version("flash-attn-4", "fa4") or "unknown version"


def backend() -> str:
    import torch

    return (f"torch {torch.__version__} flex_attention, BACKEND=FLASH (flash-attn-4 {version()}), "
            f"create_block_mask over each mask's natural mask_mod")


SPEC = KERNEL.spec(
    "flex-fa4",
    "FlexAttention on FlashAttention-4 (kernel_options BACKEND=FLASH): natural mask_mod, create_block_mask",
    dtypes=("bfloat16", "float16"), devices=("cuda",), min_compute_capability=(9, 0), available=available,
    supports=supports, backend=backend, compiles=True, sinks=True,  # forward only: `supports`
    # what flash-attn-4 takes on SM90 and SM100 alike (its _validate_head_dims; `supports` asks it for this GPU)
    head_dims=(64, 96, 128, 192, 256, (192, 128)),
    deterministic=("torch's FLASH backend has a deterministic block-sparse backward (create_block_mask("
                   "compute_dq_write_order=True)); this plugin does not build its masks that way yet"),
    url="https://pytorch.org/blog/flexattention-flash-attention-4/")


@hookimpl
def longca_kernels():
    return [SPEC]


@hookimpl
def longca_env_info(info):
    info["flex-fa4"] = "available" if available() is None else f"unavailable: {available()}"
