"""Parsing of the size notations the CLI and sweep specs accept: `8k`, `8K`, `8192`, `64:8`, `192/128`."""
from __future__ import annotations

import re

from .errors import LongcaError

_SIZE = re.compile(r"^\s*(\d+)\s*([kKmM]?)\s*$")
_UNITS = {"": 1, "k": 1024, "m": 1024 * 1024}


def parse_size(text: str | int) -> int:
    """`8k` -> 8192, `1M` -> 1048576, `4096` -> 4096."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise LongcaError(f"malformed size {text!r}; expected a whole number with an optional k or M suffix, "
                              "e.g. 8k, 8192, 1M")
        value = int(match.group(1)) * _UNITS[match.group(2).lower()]
    if value <= 0:
        raise LongcaError(f"size must be positive, got {text!r}")
    return value


def parse_heads(text: str | int) -> tuple[int, int]:
    """`64:8` -> (64, 8) query and key/value heads; `32` -> (32, 32)."""
    parts = str(text).split(":")
    try:
        if len(parts) == 1:
            hq = hkv = int(parts[0])
        elif len(parts) == 2:
            hq, hkv = int(parts[0]), int(parts[1])
        else:
            raise ValueError
    except ValueError:
        raise LongcaError(f"malformed heads {text!r}; expected HQ or HQ:HKV, e.g. 64:8") from None
    if hq <= 0 or hkv <= 0:
        raise LongcaError(f"heads must be positive, got {text!r}")
    if hq % hkv:
        raise LongcaError(f"heads {text!r}: query heads ({hq}) must be a multiple of key/value heads ({hkv})")
    return hq, hkv


def parse_head_dims(text: str | int) -> tuple[int, int | None]:
    """`128` -> (128, None); `192/128` or `192:128` -> (192, 128): Q/K's head dim and V's (None: the same)."""
    parts = str(text).replace(":", "/").split("/")
    try:
        if len(parts) not in (1, 2) or isinstance(text, bool):
            raise ValueError
        d = int(parts[0])
        dv = int(parts[1]) if len(parts) == 2 else None
    except ValueError:
        raise LongcaError(f"malformed head dims {text!r}; expected D or DQK/DV, e.g. 128 or 192/128") from None
    if d <= 0 or (dv is not None and dv <= 0):
        raise LongcaError(f"head dims must be positive, got {text!r}")
    return d, (None if dv == d else dv)


def format_head_dims(d: int, dv: int | None = None) -> int | str:
    """128, or "192/128" when V's head dim differs."""
    return d if dv is None or dv == d else f"{d}/{dv}"


def format_size(n: int) -> str:
    """8192 -> '8k'; sizes that are not whole kibi-tokens print as plain numbers."""
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)
