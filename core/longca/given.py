"""A problem from the text a person types (`8k`, `64:8`, `window=512`): what the command line's
run, dist-run, show-mask and recommend share, kept out of the CLI so it holds no logic."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import LongcaError
from .problem import Problem
from .sizes import parse_heads, parse_size


def parse_params(items: Sequence[str] | None, what: str) -> dict[str, Any]:
    """`key=value` pairs; values that look like numbers become numbers."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise LongcaError(f"malformed {what} {item!r}; expected NAME=VALUE, e.g. window=512")
        for cast in (int, float):
            try:
                out[key.strip()] = cast(value)
                break
            except ValueError:
                continue
        else:
            out[key.strip()] = value
    return out


def default_device() -> str:
    """cuda where torch sees a GPU, else cpu."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def problem_from(kernel: str, mask: str, seqlen: str, heads: str, head_dim: int = 128, batch: int = 1,
                 dtype: str = "bfloat16", direction: str = "fwd", device: str | None = None,
                 sampler: str = "auto", seed: int = 0, mask_param: Sequence[str] | None = None,
                 sampler_param: Sequence[str] | None = None, **more: Any) -> Problem:
    """The problem the options say; sizes, heads and NAME=VALUE parameters parsed, the device
    defaulted (`default_device`). `more`: further Problem fields (strategy, world_size)."""
    hq, hkv = parse_heads(heads)
    return Problem(kernel=kernel, mask=mask, seqlen=parse_size(seqlen), heads_q=hq, heads_kv=hkv,
                   head_dim=head_dim, batch=batch, dtype=dtype, direction=direction,
                   device=device or default_device(), sampler=sampler, seed=seed,
                   mask_params=parse_params(mask_param, "--mask-param"),
                   sampler_params=parse_params(sampler_param, "--sampler-param"), **more)
