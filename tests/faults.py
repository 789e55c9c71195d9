"""Installing the fault suite's throwaway plugins (tests/fixtures/fault_plugins) for one test."""
from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "fault_plugins"


def install(root: Path, entry_points: dict[str, str]) -> list[str]:
    """A dist-info under `root` registering `entry_points` (name -> module); the sys.path entries to add."""
    dist = root / "longca_faults-0.1.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: longca-faults\nVersion: 0.1\n")
    lines = "".join(f"{name} = {module}\n" for name, module in entry_points.items())
    (dist / "entry_points.txt").write_text("[longca]\n" + lines)
    return [str(root), str(FIXTURES)]


KERNELS = {"faults-kernels": "longca_faults.kernels"}
HANGS = {"faults-hangs": "longca_faults.hangs"}
STRATEGIES = {"faults-cp": "longca_faults.strategies"}
