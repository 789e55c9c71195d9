"""Whether a launcher started this process: the sweep loop asks before it knows of any CP case, so the
answer lives here and not in longca-cp (a single-GPU sweep runs without it)."""
from __future__ import annotations

import os


def under_torchrun() -> bool:
    """True when this process was started by torchrun (or an equivalent launcher setting RANK/WORLD_SIZE)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ
