"""The command line end to end (typer's CliRunner): listings, run, sweep, report, show-mask, errors."""
import json
import textwrap

import pytest
from typer.testing import CliRunner

from longca_cli.main import app
from longca_runner.runinfo import read_runs

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


PAPER_MASKS = {"full", "causal", "full_document", "causal_document", "sliding_window", "sliding_window_causal",
               "share_question", "causal_blockwise", "prefix_lm_causal", "prefix_lm_document", "global_sliding_window",
               "block_causal_document", "block_sparse_uniform", "block_sparse_variable"}


def test_list_masks_json_has_the_14_builtin_masks():
    """The paper's 14 masks and topk_sparse, each from the built-in plugin; installed mask plugins may add more."""
    result = invoke("list-masks", "--format", "json")
    assert result.exit_code == 0
    masks = {m["name"]: m["kind"] for m in json.loads(result.stdout) if m["distribution"] == "longca-core"}
    assert set(masks) == PAPER_MASKS | {"topk_sparse"}
    assert masks.pop("topk_sparse") == "block_sparse"
    assert sum(k == "regular" for k in masks.values()) == 6
    assert sum(k == "heterogeneous" for k in masks.values()) == 6
    assert masks["block_sparse_uniform"] == masks["block_sparse_variable"] == "block_sparse"


def test_list_samplers():
    names = {s["name"] for s in json.loads(invoke("list-samplers", "-f", "json").stdout)}
    assert {"pile", "prolong64k", "prolong512k", "uniform", "fixed", "auto"} <= names


def test_list_kernels_fields():
    rows = {k["name"]: k for k in json.loads(invoke("list-kernels", "--format", "json").stdout)}
    for name in ("reference", "torch", "sdpa"):
        row = rows[name]
        assert row["family"] == "dense" and row["available"] is True and row["backward"] is True
        assert row["distribution"].startswith("longca-") and row["version"]
        assert "causal_document" in row["masks"]
    assert rows["sdpa"]["distribution"] == "longca-plugin-sdpa"


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_run_sdpa_check(direction):
    result = invoke("run", "--kernel", "sdpa", "--mask", "causal_document", "--seqlen", "2k", "--heads", "4:2",
                    "--head-dim", "64", "--dtype", "float32", "--device", "cpu", "--check", "--format", "json",
                    "--direction", direction, "--repeat", "2", "--warmup", "0", "--samples", "2")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert row["status"] == "ok" and row["rel_err"] < 1e-4
    flops = 4 * row["area"] * 4 * 64 * (2.5 if direction == "bwd" else 1)
    assert row["area"] > 0 and row["flops"] == pytest.approx(flops)
    if direction == "bwd":
        assert set(row["rel_err_detail"]) == {"out", "dq", "dk", "dv"}


BAD_INPUTS = [
    (["run", "--kernel", "fa9", "--device", "cpu"], "unknown kernel 'fa9'; known: "),
    (["run", "--kernel", "sdpa", "--mask", "diagonal", "--device", "cpu"], "unknown mask 'diagonal'; known: "),
    (["run", "--kernel", "sdpa", "--mask", "causal_document", "--sampler", "wiki", "--device", "cpu"],
     "unknown sampler 'wiki'"),
    (["run", "--kernel", "sdpa", "--seqlen", "8q", "--device", "cpu"], "malformed size '8q'"),
    (["run", "--kernel", "sdpa", "--heads", "5:2", "--device", "cpu"], "multiple of key/value heads"),
    (["run", "--kernel", "sdpa", "--mask", "block_causal_document", "--seqlen", "1000", "--device", "cpu"],
     "multiple of 1024"),
    (["run", "--kernel", "sdpa", "--mask", "causal", "--mask-param", "window=3", "--device", "cpu"],
     "has no parameter 'window'"),
    (["run", "--kernel", "sdpa", "--dtype", "int8", "--device", "cpu"], "unknown dtype"),
    (["show-mask", "nope"], "unknown mask 'nope'"),
]


@pytest.mark.parametrize("args,message", BAD_INPUTS)
def test_bad_input_is_one_line_without_traceback(args, message):
    result = invoke(*args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_cuda_without_gpu_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    result = invoke("run", "--kernel", "sdpa", "--seqlen", "1k", "--device", "cuda")
    assert result.exit_code == 2 and "no CUDA GPU is visible" in result.output


def spec_file(tmp_path, body):
    path = tmp_path / "spec.toml"
    path.write_text(textwrap.dedent(body))
    return path


def test_spec_with_wrong_field_names_it(tmp_path):
    path = spec_file(tmp_path, """
        [sweep]
        kernels = ["sdpa"]
        seqlens = ["1k"]
        kernal = "typo"
    """)
    result = invoke("sweep", path)
    assert result.exit_code == 2 and "field 'sweep.kernal'" in result.output and "Traceback" not in result.output
    path = spec_file(tmp_path, """
        [sweep]
        kernels = ["sdpa"]
        seqlens = ["1x"]
    """)
    result = invoke("sweep", path)
    assert result.exit_code == 2 and "sweep.seqlens" in result.output


SMALL_SPEC = """
    [sweep]
    name = "t"
    kernels = ["reference", "sdpa", "torch"]
    masks = ["causal", "full_document"]
    seqlens = ["256", "512"]
    heads = ["2:1"]
    head_dims = [16]
    dtypes = ["float32"]
    directions = ["fwd", "bwd"]
    device = "cpu"
    samples = 2
    warmup = 0
    repeat = 2
    check = true
"""


def test_sweep_resume_and_report(tmp_path):
    path = spec_file(tmp_path, SMALL_SPEC)
    out = tmp_path / "out"
    result = invoke("sweep", path, "--output", out)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 2 * 2 * 2 and all(r["status"] == "ok" for r in rows)
    (first,) = read_runs(out)
    assert first["plugins"] and first["wall_s"] > 0  # its end line (wall time, phases) folded in
    again = invoke("sweep", path, "--output", out)
    assert again.exit_code == 2 and "--resume" in again.output
    (out / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:5]) + "\n")
    resumed = invoke("sweep", path, "--output", out, "--resume")
    assert resumed.exit_code == 0
    assert len((out / "results.jsonl").read_text().splitlines()) == len(rows)
    runs = read_runs(out)
    assert [r["run"] for r in runs] == [1, 2]  # each run's environment kept
    report = invoke("report", out)
    assert report.exit_code == 0 and "| causal | 512 |" in report.stdout
    assert (out / "report.csv").exists() and list(out.glob("tflops_*.png"))


def test_resume_runs_again_cases_whose_kernel_was_unavailable(tmp_path):
    """A row saying the kernel's library was missing is not a result: --resume runs the case again."""
    path = spec_file(tmp_path, SMALL_SPEC)
    out = tmp_path / "out"
    assert invoke("sweep", path, "--kernels", "sdpa", "--output", out).exit_code == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    rows[0].update(status="unsupported", reason="unavailable: somelib is not installed", tflops=None)
    rows[1].update(status="unsupported", reason="mask causal is not supported (supported: full)", tflops=None)
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert invoke("sweep", path, "--kernels", "sdpa", "--output", out, "--resume").exit_code == 0
    again = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(again) == len(rows) + 1
    assert again[-1]["case_id"] == rows[0]["case_id"] and again[-1]["status"] == "ok"
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = invoke("report", out, "--no-plots")
    assert report.exit_code == 0 and "| n/a |" in report.stdout and "| unsup |" in report.stdout


def test_show_mask_png_and_json(tmp_path):
    png = tmp_path / "m.png"
    assert invoke("show-mask", "share_question", "--seqlen", "2k", "--output", png).exit_code == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    result = invoke("show-mask", "prefix_lm_document", "--seqlen", "8k", "--format", "json")
    data = json.loads(result.stdout)
    assert sum(data["params"]["doc_lens"]) == 8192 and "prefix" in data["params"]
    assert data["slices"][0][4] in ("full", "causal")
    g = json.loads(invoke("show-mask", "global_sliding_window", "-f", "json").stdout)
    assert "global_tokens" in g["params"] and g["params"]["window"] == 1024


def test_doctor_and_plugins():
    assert invoke("doctor").exit_code == 0
    plugins = json.loads(invoke("plugins", "--format", "json").stdout)
    names = {p["distribution"] for p in plugins}
    assert {"longca-core", "longca-plugin-sdpa", "longca-plugin-torch"} <= names


def test_report_merges_runs_with_their_own_peaks_sorted_and_by_mask_params(tmp_path):
    """Each fastest cell is divided by the peak of its own run; lengths ascend; block/density rows stay apart."""
    def row(kernel, mask, seqlen, tflops, **params):
        return {"kernel": kernel, "mask": mask, "mask_params": params, "seqlen": seqlen, "heads_q": 4,
                "heads_kv": 4, "head_dim": 64, "dtype": "bfloat16", "direction": "fwd", "status": "ok",
                "tflops": tflops, "case_id": f"{kernel}-{mask}-{seqlen}-{sorted(params.items())}"}

    runs = {"long": (500.0, [row("a", "causal", 32768, 400.0)]),
            "short": (800.0, [row("a", "causal", 1024, 400.0), row("b", "causal", 1024, 200.0),
                              {**row("a", "causal", 2048, 400.0), "matmul_peak_tflops": 400.0},  # resumed run's own
                              row("a", "block_sparse_uniform", 1024, 100.0, block=64, density=0.2),
                              row("a", "block_sparse_uniform", 1024, 300.0, block=128, density=0.2)])}
    for name, (peak, rows) in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (tmp_path / name / "run.json").write_text(json.dumps({"matmul_peak_tflops": peak}))
    result = invoke("report", tmp_path / "long", tmp_path / "short", "--output", tmp_path / "rep", "--no-plots")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "(500-800 TFLOP/s here; one shape only" in text
    assert text.index("| causal | 1k |") < text.index("| causal | 32k |")
    assert "| causal | 1k | 400.0 | 200.0 | a | 50% |" in text and "| causal | 2k | 400.0 |  | a | 100% |" in text
    assert "| causal | 32k | 400.0 |  | a | 80% |" in text
    assert "| block_sparse_uniform block=64 density=0.2 | 1k | 100.0 |" in text
    assert "| block_sparse_uniform block=128 density=0.2 | 1k | 300.0 |" in text


def test_report_memory_tables_name_the_lightest_kernel(tmp_path):
    """--memory adds peak-GiB tables (lightest kernel per case); rows without memory (CPU) add none."""
    def row(kernel, status="ok", mem=None, reason=None):
        return {"kernel": kernel, "mask": "block_sparse_uniform", "mask_params": {"block": 64}, "seqlen": 65536,
                "heads_q": 32, "heads_kv": 32, "head_dim": 128, "dtype": "bfloat16", "direction": "bwd",
                "status": status, "reason": reason, "tflops": 100.0 if status == "ok" else None,
                "peak_mem_bytes": mem, "case_id": kernel}

    rows = [row("flex-sparse", mem=5 * 2**30), row("vsa", mem=8.5 * 2**30),
            row("flashinfer", "unsupported", reason="backward is not supported")]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = invoke("report", tmp_path, "--no-plots", "--memory")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "report.md").read_text()
    assert "## Peak memory, GiB" in text
    assert "| block_sparse_uniform block=64 | 64k | unsup | 5.00 | 8.50 | flex-sparse |" in text
    assert "Peak memory" not in invoke("report", tmp_path, "--no-plots").stdout
    (tmp_path / "results.jsonl").write_text(json.dumps(row("torch")) + "\n")
    assert "Peak memory" not in invoke("report", tmp_path, "--no-plots", "--memory").stdout


def test_sweep_max_minutes_stops_starting_cases_and_resume_finishes(tmp_path):
    path = spec_file(tmp_path, SMALL_SPEC)
    out = tmp_path / "out"
    stopped = invoke("sweep", path, "--output", out, "--max-minutes", "0")
    assert stopped.exit_code == 0, stopped.output
    assert "24 of 24 cases not run yet" in stopped.output and "--resume" in stopped.output
    assert invoke("sweep", path, "--output", out, "--resume").exit_code == 0
    assert len((out / "results.jsonl").read_text().splitlines()) == 24


def test_sweep_kernels_runs_a_subset_of_the_spec(tmp_path):
    path = spec_file(tmp_path, SMALL_SPEC)
    listed = invoke("sweep", path, "--kernels", "sdpa", "--dry-run")
    assert listed.exit_code == 0 and "8 cases" in listed.output
    assert {line.split()[0] for line in listed.stdout.splitlines()} == {"sdpa"}
    wrong = invoke("sweep", path, "--kernels", "sdpa,fa9")
    assert wrong.exit_code == 2 and "reference, sdpa, torch" in wrong.output and "Traceback" not in wrong.output
    out = tmp_path / "out"
    stopped = invoke("sweep", path, "--kernels", "torch", "--output", out, "--max-minutes", "0")
    assert "--resume --kernels torch" in stopped.output


def test_run_sweep_checks_the_time_before_each_case(tmp_path, monkeypatch):
    """With a clock that advances 1 s per look and 1.5 s allowed, exactly one case runs."""
    import itertools

    from longca_runner import sweep

    clock = itertools.count()
    monkeypatch.setattr(sweep.runner.time, "monotonic", lambda: next(clock))
    spec = sweep.load_spec(spec_file(tmp_path, SMALL_SPEC))
    rows = sweep.run_sweep(spec, tmp_path / "out", max_seconds=1.5)
    assert len(rows) == 1
