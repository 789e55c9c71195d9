"""The typed result row: committed results still load, rows round-trip, unreadable lines are named."""
import json
import math
from pathlib import Path

from longca.problem import Problem
from longca.results import SCHEMA_VERSION, ResultRow, ResultsWriter, new_row, parse_lines, read_results

ROOT = Path(__file__).resolve().parents[1]


def test_every_committed_results_file_loads_with_defaults_for_new_fields():
    files = sorted(ROOT.glob("docs/**/results.jsonl"))
    assert len(files) >= 19
    rows = []
    for path in files:
        read = read_results(path)
        assert read.bad_lines == [] and read.rows, path
        rows += read.rows
    for path in sorted(ROOT.glob("docs/**/*.jsonl")):  # every line any longca wrote as a row, in any file
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        rows += [ResultRow.model_validate(d) for d in lines if "schema_version" in d]
    assert len(rows) > 4000
    simulated = [r for r in rows if r.get("simulated")]  # docs/results/h200x2/simulated: written by longca simulate
    assert all(r.schema_version >= 2 and r.balance and r.case_id.startswith("sim-") for r in simulated)
    measured = [r for r in rows if not r.get("simulated")]
    for row in (r for r in measured if r.schema_version == 1):  # written before the fields existed: defaults
        assert row.checked == "no" and row.iter_times_ms is None
        assert row.sampler_params == {} and row.balance is None and row.status in (
            "ok", "unsupported", "oom", "error", "incorrect")
    newer = [r for r in measured if r.schema_version >= 2]  # the H200 runs of 2026-12-01 (session 2)
    assert newer and all(r.checked in ("no", "spot", "full") and r.iter_times_ms for r in newer if r.status == "ok")


def test_rows_in_mixed_test_logs_load_and_the_other_records_are_named():
    read = read_results(ROOT / "docs/results/h200/gpu-tests/session5/rows.jsonl")
    assert read.rows and all(r.kernel for r in read.rows)
    assert all("not a result row" in why for _, why in read.bad_lines)


def test_a_row_round_trips_with_unknown_fields_kept_and_nan_as_null(tmp_path):
    problem = Problem(kernel="sdpa", mask="causal", seqlen=256, heads_q=2, heads_kv=1, head_dim=16, dtype="float32")
    row = new_row(problem, status="incorrect", reason="relative error nan > tolerance 0.001", rel_err=math.nan,
                  iter_times_ms=[1.0, 2.5], backend="torch SDPA math", balance={"max_over_mean": 1.25})
    row.wall_s = 3.0  # a field the schema does not know: kept
    writer = ResultsWriter(tmp_path / "results.jsonl")
    writer.append(row)
    line = (tmp_path / "results.jsonl").read_text()
    assert "NaN" not in line and json.loads(line)["rel_err"] is None
    back = read_results(tmp_path / "results.jsonl").rows[0]
    assert back.schema_version == SCHEMA_VERSION and back.iter_times_ms == [1.0, 2.5] and back["wall_s"] == 3.0
    assert back.get("status") == "incorrect" and back.case_id == row.case_id and back.sampler_params == {}
    assert {**back}["backend"] == "torch SDPA math"


def test_unreadable_lines_are_named_with_their_numbers():
    good = json.dumps({"kernel": "a", "mask": "causal", "seqlen": 8, "heads_q": 1, "heads_kv": 1, "head_dim": 8,
                       "dtype": "float32", "direction": "fwd", "status": "ok"})
    data = "\n".join([good, "[1, 2]", '{"kernel": "a"', '{"name": "x"}', good.replace('"ok"', '"great"')])
    read = parse_lines(data.encode() + b"\n\xff\xfe\n")
    assert len(read.rows) == 1
    whys = dict(read.bad_lines)
    assert set(whys) == {2, 3, 4, 5, 6}
    assert "not an object" in whys[2] and "not JSON" in whys[3] and "field 'kernel'" in whys[4]
    assert "field 'status'" in whys[5] and "UTF-8" in whys[6]
    assert isinstance(read.rows[0], ResultRow)
