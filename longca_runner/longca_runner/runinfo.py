"""Each run's environment, appended to runs.jsonl in the output folder (never overwritten)."""
from __future__ import annotations

import json
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from longca import __version__

RUNS_FILE = "runs.jsonl"


def _default(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(registry=None) -> dict[str, Any]:
    """GPU, driver, CUDA, torch, every plugin's distribution and version, git commit."""
    import torch

    from longca.plugins import env_info, get_registry

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


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def record_run(directory: Path, extra: dict[str, Any] | None = None, registry=None) -> dict[str, Any]:
    """Append this run's environment (and `extra`) as one line of DIRECTORY/runs.jsonl; its number is `run`."""
    env = environment(registry)
    env.update(extra or {})
    path = Path(directory) / RUNS_FILE
    env["run"] = 1 + len([r for r in _lines(path) if not r.get("end")])
    with path.open("a") as f:
        f.write(json.dumps(env, default=_default) + "\n")
    return env


def record_run_end(directory: Path, run: int, fields: dict[str, Any]) -> None:
    """Append what is known only when run `run` ends (`wall_s`, `phases_s`) as a line `{"end": true, ...}`:
    runs.jsonl stays append-only, and `read_runs` folds it into that run's record."""
    with (Path(directory) / RUNS_FILE).open("a") as f:
        f.write(json.dumps({"end": True, "run": run, **fields}, default=_default) + "\n")


def _lines(path: Path) -> list[dict[str, Any]]:
    """runs.jsonl's readable JSON objects (a torn or foreign line is passed over)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def read_runs(directory: Path) -> list[dict[str, Any]]:
    """Every run recorded in DIRECTORY: runs.jsonl lines, or the run.json of folders written before it."""
    runs: list[dict[str, Any]] = []
    legacy = Path(directory) / "run.json"
    try:
        if legacy.exists():
            runs.append(json.loads(legacy.read_text()))
        lines = _lines(Path(directory) / RUNS_FILE)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return [r for r in runs if isinstance(r, dict)]
    runs += [r for r in lines if not r.get("end")]
    for end in (r for r in lines if r.get("end")):  # a run's end line: its wall time and phases
        for run in runs:
            if isinstance(run, dict) and run.get("run") == end.get("run"):
                run.update({k: v for k, v in end.items() if k not in ("end", "run")})
    return [r for r in runs if isinstance(r, dict)]
