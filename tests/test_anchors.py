"""Published single-GPU numbers ship with the core, each with its source, and the report sets
longca's best measured cell of each anchor's shape beside them (nearest length said so)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from longca.errors import LongcaError
from longca.results import ResultsWriter
from longca_cli.anchors import Anchor, beside, load_anchors
from longca_cli.main import app

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
DOC = Anchor(kernel="FA3", mask="causal_document", direction="fwd", tflops=500.0, head_dim=128, dtype="bfloat16",
             gpu="H100", source="a page", seqlen=32768, heads="64:8")


def _row(**changes) -> dict:
    row = {"kernel": "fa3", "mask": "causal_document", "seqlen": 32768, "heads_q": 64, "heads_kv": 8, "head_dim": 128,
           "dtype": "bfloat16", "direction": "fwd", "device": "cuda", "status": "ok", "tflops": 400.0,
           "gpu": "NVIDIA H200"}
    return {**row, **changes}


def test_the_shipped_anchors_carry_their_sources_and_are_package_data():
    anchors = load_anchors()
    assert {(a.mask, a.direction, a.tflops) for a in anchors} >= {
        ("causal", "fwd", 695), ("causal_document", "fwd", 583), ("causal_document", "bwd", 425),
        ("full", "fwd", 700), ("full", "bwd", 600)}
    assert all(a.source and a.gpu and a.head_dim == 128 and a.dtype == "bfloat16" for a in anchors)
    data = tomllib.loads((ROOT / "longca_cli" / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "data/published_anchors.json" in data["longca_cli"]


def test_exact_length_wins_and_the_best_kernel_is_taken():
    rows = [_row(), _row(kernel="flex", tflops=450.0), _row(seqlen=16384, tflops=490.0)]
    (entry,) = beside(rows, [DOC])
    assert entry["match"] == "exact" and entry["row"]["kernel"] == "flex" and entry["ratio"] == pytest.approx(0.9)


def test_the_nearest_length_stands_in_and_says_so():
    rows = [_row(seqlen=8192, tflops=300.0), _row(seqlen=16384, tflops=350.0), _row(seqlen=65536, tflops=100.0)]
    (entry,) = beside(rows, [DOC])
    assert entry["match"] == "nearest" and entry["row"]["seqlen"] == 65536  # 16K and 64K tie on log2: the longer
    (entry,) = beside(rows[:2], [DOC])
    assert entry["match"] == "nearest" and entry["row"]["seqlen"] == 16384
    unspecified = Anchor(**{**DOC.__dict__, "seqlen": None})
    (entry,) = beside(rows, [unspecified])
    assert entry["match"] == "any" and entry["row"]["tflops"] == 350.0


@pytest.mark.parametrize("other", [dict(heads_q=32), dict(device="cpu"), dict(strategy="ulysses", world_size=2),
                                   dict(simulated=True), dict(status="error"), dict(direction="bwd"),
                                   dict(dtype="float16"), dict(head_dim=64), dict(mask_params={"window": 512})])
def test_rows_of_another_shape_or_kind_never_match(other):
    (entry,) = beside([_row(**other)], [DOC])
    assert entry["row"] is None and entry["ratio"] is None


def test_a_broken_anchor_file_is_one_line(tmp_path):
    bad = tmp_path / "anchors.json"
    bad.write_text('{"anchors": [{"kernel": "x"}]}')
    with pytest.raises(LongcaError, match="published anchors"):
        load_anchors(bad)


def test_the_report_shows_the_section_for_gpu_rows_only(tmp_path):
    gpu = tmp_path / "gpu"
    writer = ResultsWriter(gpu / "results.jsonl")
    writer.append(_row(mask="full", tflops=630.0, case_id="a"))
    done = CliRunner().invoke(app, ["report", str(gpu), "--no-plots"])
    assert done.exit_code == 0, done.output
    text = (gpu / "report.md").read_text()
    section = text.split("## Published anchors")[1]
    assert "| FlashAttention-3 (H100) | full | fwd | 32k, heads 64:8, head_dim 128, bfloat16 | 700 | fa3, 32k, " \
           "heads 64:8, NVIDIA H200 | 630.0 | 0.90 |" in section
    assert "| causal | fwd |" in section and "no matching row" in section
    cpu = tmp_path / "cpu"
    ResultsWriter(cpu / "results.jsonl").append(_row(device="cpu", case_id="b"))
    assert CliRunner().invoke(app, ["report", str(cpu), "--no-plots"]).exit_code == 0
    assert "Published anchors" not in (cpu / "report.md").read_text()
