"""The committed H200 and two-GPU result folders render to the same report.md and report.csv as
the goldens in tests/fixtures/report-golden/: a restructuring may not change what a report says.

A change that means to alter the report regenerates the goldens (the command is in the failure
message) and shows the diff in its commit."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from longca_cli.main import app

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "fixtures" / "report-golden"
SOURCES = {  # golden folder -> the committed result folder it was rendered from
    "h200-bench-default": "h200/bench-default", "h200-cp-ws1": "h200/cp-ws1", "h200x2-cp": "h200x2/cp",
    "h200x2-simulated": "h200x2/simulated", "h200-dense-sweep-32k": "h200/dense-sweep/32k",
    "h200-sparse-sweep-32k": "h200/sparse-sweep/32k", "h200-flex-fa4": "h200/flex-fa4",
}


def test_every_golden_has_its_source():
    assert sorted(SOURCES) == sorted(p.name for p in GOLDEN.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_report_renders_as_the_golden(name, tmp_path):
    folder = ROOT / "docs" / "results" / SOURCES[name]
    assert (folder / "results.jsonl").is_file(), folder
    result = CliRunner().invoke(app, ["report", str(folder), "--output", str(tmp_path), "--no-plots"])
    assert result.exit_code == 0, result.output
    for file in ("report.md", "report.csv"):
        want = (GOLDEN / name / file).read_text()
        got = (tmp_path / file).read_text()
        assert got == want, (f"{file} of {folder} changed; if meant, regenerate: longca report {folder} "
                             f"--output {GOLDEN / name} --no-plots")
