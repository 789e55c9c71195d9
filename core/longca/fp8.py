"""FP8 inputs as kernels make them: per-tensor scaling of the seeded bfloat16 inputs (docs/fp8.md).

An FP8 problem's inputs are the bfloat16 problem's (`Problem.input_dtype`); a kernel that runs FP8
quantizes them in `prepare` (untimed) with `quantize_fp8` and returns its output in bfloat16 (or
higher), which the checks compare with the float32 reference on the bfloat16 inputs, at the FP8
tolerance (`longca_runner.measure.TOLERANCE`).
"""
from __future__ import annotations

from typing import Any

FP8_TORCH = {"float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}


def fp8_dtype(dtype: Any):
    """The torch FP8 dtype of a name (`float8_e4m3fn`, `float8_e5m2`) or of a torch dtype."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in FP8_TORCH:
        raise ValueError(f"{dtype!r} is not an FP8 dtype; use one of {', '.join(FP8_TORCH)}")
    return getattr(torch, FP8_TORCH[dtype])


def quantize_fp8(x, dtype: Any):
    """(x in FP8, descale): per-tensor scaling by amax / the format's largest finite value, so that
    `x_fp8.float() * descale` approximates x. descale is a float32 tensor of one element on x's device
    (what cuDNN's descale_* and FlashAttention-3's q/k/v_descale take). An all-zero x gets descale 1."""
    import torch

    target = fp8_dtype(dtype)
    amax = x.detach().abs().amax().float()
    largest = torch.finfo(target).max
    descale = torch.where(amax > 0, amax / largest, torch.ones_like(amax)).reshape(1)
    x_fp8 = (x.detach().float() / descale).clamp(-largest, largest).to(target)
    return x_fp8, descale


def dequantize_fp8(x_fp8, descale, dtype: Any = None):
    """`x_fp8 * descale` in float32 (or `dtype`)."""
    import torch

    out = x_fp8.float() * descale.float()
    return out if dtype is None else out.to(dtype if isinstance(dtype, torch.dtype) else getattr(torch, dtype))
