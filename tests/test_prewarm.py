"""benchmarks/prewarm.py: a bad value or a spec that does not load is one line and a non-zero exit."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "prewarm.py"
SPEC = ROOT / "longca_cli" / "longca_cli" / "specs" / "cpu-small.toml"


@pytest.mark.parametrize("args, said", [([str(SPEC), "--workers", "0"], "--workers"),
                                        ([str(SPEC), "--skip-done", "nosuch/results.jsonl"], "no such file"),
                                        (["nosuch.toml"], "nosuch.toml")])
def test_a_bad_value_is_one_line_and_a_non_zero_exit(tmp_path, args, said):
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.startswith("prewarm:") and said in done.stderr
    assert not (tmp_path / "nosuch").exists()  # a mistyped --skip-done creates nothing
