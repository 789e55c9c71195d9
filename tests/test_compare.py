"""`longca compare` on two synthetic result folders: a kernel 10 % slower with little noise is
`slower` and fails the gate (exit 1); one 1 % different under heavy noise is `same within noise`."""
import json

import numpy as np
from typer.testing import CliRunner

from longca_cli.main import app


def _row(kernel, mask, times, peak):
    times = [float(t) for t in times]
    ms = float(np.median(times))
    flops = 5e11  # 500 TFLOP/s at 1 ms: under the H200 datasheet, so no row is suspect
    return {"kernel": kernel, "strategy": None, "world_size": 1, "mask": mask, "mask_params": {}, "sampler": "auto",
            "seed": 0, "batch": 1, "seqlen": 8192, "heads_q": 8, "heads_kv": 8, "head_dim": 64, "dtype": "bfloat16",
            "direction": "fwd", "device": "cuda", "status": "ok", "flops": flops, "ms_median": ms,
            "ms_p20": float(np.percentile(times, 20)), "ms_p80": float(np.percentile(times, 80)),
            "tflops": flops / (ms * 1e-3) / 1e12, "iter_times_ms": times, "case_id": f"{kernel}-{mask}",
            "matmul_peak_tflops": peak}


def _folder(path, rows, peak):
    path.mkdir()
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "run.json").write_text(json.dumps({"matmul_peak_tflops": peak, "gpu": "NVIDIA H200", "torch": "2.11"}))
    return path


def synthetic(tmp_path, control=700.0):
    rng = np.random.default_rng(1)
    quiet = lambda ms: ms * (1 + 0.002 * rng.standard_normal(30))  # noqa: E731 - 0.2 % noise
    noisy = lambda ms: ms * (1 + 0.15 * rng.standard_normal(30))  # noqa: E731 - 15 % noise
    base = _folder(tmp_path / "base", [_row("fast", "causal", quiet(1.0), 700.0),
                                       _row("noisy", "causal", noisy(1.0), 700.0),
                                       _row("steady", "full", quiet(2.0), 700.0)], 700.0)
    new = _folder(tmp_path / "new", [_row("fast", "causal", quiet(1.1), control),   # 10 % slower
                                     _row("noisy", "causal", noisy(1.01), control),  # 1 % slower, in the noise
                                     _row("steady", "full", quiet(2.0), control)], control)
    return base, new


def test_compare_labels_and_gate(tmp_path):
    base, new = synthetic(tmp_path)
    out = tmp_path / "cmp.json"
    result = CliRunner().invoke(app, ["compare", str(base), str(new), "--format", "json", "--output", str(out)])
    assert result.exit_code == 1, result.output
    data = json.loads(out.read_text())
    by = {c["kernel"]: c for c in data["cases"]}
    assert by["fast"]["label"] == "slower" and by["fast"]["gate"]
    assert 0.88 < by["fast"]["ci_low"] <= by["fast"]["ratio"] <= by["fast"]["ci_high"] < 0.93
    assert by["noisy"]["label"] == "same within noise" and not by["noisy"]["gate"]
    assert by["noisy"]["ci_low"] < 1 < by["noisy"]["ci_high"]
    assert by["steady"]["label"] == "same within noise" and not by["steady"]["gate"]
    assert "bootstrap" in by["fast"]["method"]
    assert data["failed"] == 1 and data["control"]["ratio"] == 1.0
    assert abs(data["geomean_by_kernel"]["fast"]["geomean"] - 1 / 1.1) < 0.01


def test_compare_passes_without_the_slow_kernel_and_shows_a_machine_change(tmp_path):
    base, new = synthetic(tmp_path, control=600.0)
    rows = [json.loads(line) for line in (new / "results.jsonl").read_text().splitlines()]
    (new / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["kernel"] != "fast"))
    result = CliRunner().invoke(app, ["compare", str(base), str(new)])
    assert result.exit_code == 0, result.output
    assert "**Result: pass**" in result.stdout and "The machine changed" in result.stdout
    assert "| noisy | causal | 8k | fwd |" in result.stdout
    html = CliRunner().invoke(app, ["compare", str(base), str(new), "-f", "html", "--output", str(tmp_path / "c.html")])
    assert html.exit_code == 0 and "<table id=\"rows\">" in (tmp_path / "c.html").read_text()


def test_compare_old_rows_fall_back_to_p20_p80_and_bad_input_is_one_line(tmp_path):
    base, new = synthetic(tmp_path)
    for folder in (base, new):
        rows = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
        (folder / "results.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "iter_times_ms"})
                                                      + "\n" for r in rows))
    result = CliRunner().invoke(app, ["compare", str(base), str(new), "-f", "json"])
    by = {c["kernel"]: c for c in json.loads(result.stdout)["cases"]}
    assert "p20-p80" in by["fast"]["method"] and by["fast"]["label"] == "slower"
    assert by["noisy"]["label"] == "same within noise"
    bad = CliRunner().invoke(app, ["compare", str(base), str(new), "--threshold", "abc"])
    assert bad.exit_code == 2 and "--threshold" in bad.output
    missing = CliRunner().invoke(app, ["compare", str(base), str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no results at" in missing.output


def test_a_case_that_breaks_fails_the_gate_and_one_that_starts_running_does_not(tmp_path):
    base, new = synthetic(tmp_path)
    rows = [json.loads(line) for line in (new / "results.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["kernel"] != "fast"]
    rows[0].update(status="error", reason="RuntimeError: boom", tflops=None, ms_median=None, iter_times_ms=None)
    (new / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(app, ["compare", str(new), str(base), "-f", "json"])  # NEW = base: error -> ok
    by = {c["kernel"]: c for c in json.loads(result.stdout)["cases"]}
    assert by["noisy"]["label"] == "now runs" and result.exit_code == 0
    result = CliRunner().invoke(app, ["compare", str(base), str(new), "-f", "json"])
    by = {c["kernel"]: c for c in json.loads(result.stdout)["cases"]}
    assert by["noisy"]["label"] == "broken" and by["noisy"]["gate"] and result.exit_code == 1
