"""Result rows (one JSON object per line in results.jsonl) and the run.json environment record."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Optional

from . import __version__
from .problem import Problem

SCHEMA_VERSION = 1
STATUSES = ("ok", "unsupported", "oom", "error", "incorrect")
FIELDS = (
    "schema_version", "kernel", "strategy", "world_size", "mask", "mask_params", "sampler", "seed",
    "batch", "seqlen", "heads_q", "heads_kv", "head_dim", "dtype", "direction", "device", "status",
    "reason", "area", "flops", "ms_median", "ms_p20", "ms_p80", "tflops", "peak_mem_bytes",
    "prepare_ms", "rel_err",
)
EXTRA_FIELDS = ("backend", "samples", "rel_err_detail", "ms_max_rank", "strategy_options", "case_id",
                "matmul_peak_tflops")


UNAVAILABLE = "unavailable: "  # reason prefix of rows whose kernel could not run at all in that process


def is_unavailable(row: dict[str, Any]) -> bool:
    return row.get("status") == "unsupported" and str(row.get("reason") or "").startswith(UNAVAILABLE)


def case_id(problem: Problem) -> str:
    return hashlib.sha1(problem.key().encode()).hexdigest()[:16]


def new_row(problem: Problem) -> dict[str, Any]:
    """A row with the problem's fields filled and every measurement empty."""
    row: dict[str, Any] = {name: None for name in FIELDS + EXTRA_FIELDS}
    row.update(
        schema_version=SCHEMA_VERSION, kernel=problem.kernel, strategy=problem.strategy,
        world_size=problem.world_size, mask=problem.mask, mask_params=dict(problem.mask_params),
        sampler=problem.sampler, seed=problem.seed, batch=problem.batch, seqlen=problem.seqlen,
        heads_q=problem.heads_q, heads_kv=problem.heads_kv, head_dim=problem.head_dim,
        dtype=problem.dtype, direction=problem.direction, device=problem.device, case_id=case_id(problem),
        strategy_options=dict(problem.strategy_options) if problem.strategy else None,
    )
    return row


class ResultsWriter:
    """Appends rows to results.jsonl as each case finishes, so an interruption loses at most one."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def done_ids(self) -> set[str]:
        """Cases --resume skips: every row but those whose kernel was unavailable in that process
        (its library may be installed since; the new row is appended and wins in reports)."""
        if not self.path.exists():
            return set()
        return {row.get("case_id") for row in read_rows(self.path) if not is_unavailable(row)}

    def append(self, row: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(row, default=_default) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def read_rows(path: Path | str) -> list[dict[str, Any]]:
    """Rows of a results.jsonl; a torn last line (an interrupted write) is skipped."""
    rows = []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def _git_commit() -> Optional[str]:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(registry=None) -> dict[str, Any]:
    """GPU, driver, CUDA, torch, every plugin's distribution and version, git commit."""
    import torch

    from .plugins import env_info, get_registry

    registry = registry or get_registry()
    env: dict[str, Any] = {
        "longca": __version__, "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(), "platform": platform.platform(), "python": sys.version.split()[0],
        "torch": torch.__version__, "cuda": torch.version.cuda, "git_commit": _git_commit(),
        "argv": sys.argv,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, gpu_count=torch.cuda.device_count(),
                   compute_capability=f"{props.major}.{props.minor}", gpu_memory_bytes=props.total_memory,
                   cudnn=torch.backends.cudnn.version(), driver=_driver_version())
    env["plugins"] = [{"name": p.name, "distribution": p.distribution, "version": p.version,
                       "errors": p.errors} for p in registry.plugins]
    env["plugin_env"] = env_info(registry)
    return env


def _driver_version() -> Optional[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def write_run_json(directory: Path, extra: Optional[dict[str, Any]] = None, registry=None) -> dict[str, Any]:
    env = environment(registry)
    env.update(extra or {})
    path = Path(directory) / "run.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(env, indent=2, default=_default) + "\n")
    return env


def ok_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "ok"]
