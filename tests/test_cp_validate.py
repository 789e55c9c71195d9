"""docs/scripts/cp_validate.py --quick on CPU: the protocol's tables written from the checkout's anchors,
in-sample and out-of-sample apart, trend signs counted."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "scripts" / "cp_validate.py"


def test_quick_validation_writes_its_tables(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--output", str(tmp_path)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "validation.json").read_text())
    own, pub = summary["own"], summary["published"]["h100"]
    assert own["rows"] > 0 and own["in_sample_rows"] <= own["rows"]
    assert pub["causal_document_cells"] > 0 and pub["trend_series"] > 0
    assert pub["setting"]["sampler"] == "magi"
    for name in ("validation-own.md", "validation-published-h100.md", "validation-summary.md"):
        assert (tmp_path / name).read_text().startswith("# Validation")
