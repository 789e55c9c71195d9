"""The report describes itself (runs, protocol, peak, sampler, check), shows each cell's spread and
state (unsupported, oom, n/a, unchecked, simulated), keeps two backends of a kernel in two columns,
never rounds a scaling efficiency to 0; the analysis works from Python without the CLI."""
import json
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from longca_cli import analysis
from longca_cli.main import app

ROOT = Path(__file__).resolve().parents[1]
RUN = {"longca": "0.1.0", "time": "2026-11-29T10:00:00+00:00", "host": "box", "gpu": "NVIDIA H200", "gpu_count": 1,
       "driver": "580.1", "torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91900, "git_commit": "abcdef1234567",
       "matmul_peak_tflops": 700.0,
       "spec": {"warmup": 3, "repeat": 10, "samples": 2, "check": False, "device": "cuda", "sampler": "auto",
                "sampler_params": {}, "seed": 0}}


def row(kernel, mask="causal", seqlen=8192, tflops=100.0, status="ok", **extra):
    base = {"kernel": kernel, "strategy": None, "world_size": 1, "mask": mask, "mask_params": {}, "sampler": "auto",
            "seed": 0, "batch": 1, "seqlen": seqlen, "heads_q": 64, "heads_kv": 8, "head_dim": 128,
            "dtype": "bfloat16", "direction": "fwd", "device": "cuda", "status": status,
            "tflops": tflops if status == "ok" else None, "ms_median": 1.0 if status == "ok" else None,
            "ms_p20": 0.99 if status == "ok" else None, "ms_p80": 1.01 if status == "ok" else None,
            "backend": f"{kernel} lib", "checked": "full"}
    base.update(extra)
    base.setdefault("case_id", "-".join(str(base[k]) for k in ("kernel", "strategy", "world_size", "mask", "seqlen"))
                    + ("-sim" if base.get("simulated") else ""))
    return base


def write(folder, rows, run=RUN):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "run.json").write_text(json.dumps(run))
    return folder


ROWS = [
    row("fa3", tflops=600.0, ms_p20=1.0, ms_p80=1.3),  # spread 1.3: shown as ±15%
    row("sdpa", tflops=300.0, checked="no"),
    row("torch", status="oom", backend=None, reason="OutOfMemoryError"),
    row("fa4", status="unsupported", backend=None, reason="unavailable: flash_attn.cute is not installed"),
    row("flex", status="unsupported", backend=None, reason="mask causal is not supported"),
    row("cudnn", tflops=500.0, backend="cuDNN 91900 via cudnn-frontend 1.32"),
    row("cudnn", seqlen=16384, tflops=200.0, backend="cuDNN 91900 via torch 2.11", case_id="cudnn-torch"),
    # CP: fa2 alone at the per-GPU length, ulysses at world size 2, measured and simulated
    row("fa2", seqlen=4096, tflops=350.0),
    row("fa2", strategy="ulysses", world_size=2, tflops=1.2),
    row("fa2", strategy="ulysses", world_size=2, tflops=300.0, simulated=True),
]


def test_report_header_cells_and_columns(tmp_path):
    write(tmp_path / "run1", ROWS)
    result = CliRunner().invoke(app, ["report", str(tmp_path / "run1"), "--output", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "**TFLOP/s, higher is better**" in text
    assert "| run1 | 2026-11-29T10:00:00+00:00 | NVIDIA H200 | 580.1 | 2.11.0+cu130 | 13.0 | 9.19.0 |" in text
    assert "abcdef1234" in text and "**of matmul peak**" in text and "(700-700 TFLOP/s here" in text
    assert "| run1 | 3 | 10 | 2 | False | 256 MiB zeroed before each timed call | auto |" in text
    fwd = text[text.index("### fwd, heads 64:8, head_dim 128, bfloat16\n"):]
    header = next(line for line in fwd.splitlines() if line.startswith("| mask"))
    assert header == ("| mask | seqlen | cudnn [cudnn-frontend] | cudnn [torch] | fa2 | fa3 | fa4 | flex | sdpa "
                      "| torch | fastest | of matmul peak | of datasheet |")
    assert "| causal | 8k | 500.0 |  |  | 600.0 ±15% | n/a | unsup | 300.0† | oom | fa3 | 86% | 61% |" in fwd
    assert "| causal | 16k |  | 200.0 |" in fwd
    # CP: measured and simulated side by side; a tiny efficiency keeps its digits
    assert "| ulysses/fa2 | causal | 4k | 350.0 | 0.0034 (1.2) |" in text
    assert "| ulysses/fa2 (sim) | causal | 4k | 350.0 | ~0.86 (300.0) |" in text
    assert "0.00 " not in text
    assert "1 ok cells checked" not in text and "**Check**:" in text and "(marked †)" in text
    plots = sorted(p.name for p in (tmp_path / "rep").glob("*.png"))
    assert plots == ["cp_tflops_64x8_d128_bfloat16.png", "tflops_64x8_d128_bfloat16.png"]
    csv_header = (tmp_path / "rep" / "report.csv").read_text().splitlines()[0].split(",")
    assert {"ms_p20", "ms_p80", "spread", "checked", "source", "column"} <= set(csv_header)


def test_old_rows_without_new_fields_and_the_last_row_wins(tmp_path):
    old = {k: v for k, v in row("fa2", tflops=100.0).items() if k not in ("checked", "backend", "sampler")}
    write(tmp_path / "a", [old], {"matmul_peak_tflops": 500.0})
    write(tmp_path / "b", [{**old, "tflops": 200.0}], {})
    results = analysis.load(tmp_path / "a", tmp_path / "b")
    assert len(results.rows) == 1 and results.replaced == 1
    (only,) = results.rows
    assert only["tflops"] == 200.0 and only["source"] == "b" and analysis.is_unchecked(only)
    assert [c["column"] for c in analysis.fastest(results.rows)] == ["fa2"]


def _example_code() -> str:
    doc = (ROOT / "docs" / "reading-results.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    assert blocks, "docs/reading-results.md has a python example"
    return blocks[0]


def test_doc_example_runs_without_the_command(tmp_path):
    """The doc's Python example (longca_cli.analysis), run with the command, typer and matplotlib unimportable."""
    write(tmp_path / "results" / "default", ROWS)
    block = "import sys\nfor name in ('longca_cli.main', 'typer', 'matplotlib'):\n    sys.modules[name] = None\n"
    out = subprocess.run([sys.executable, "-c", block + _example_code()], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "fa3" in out.stdout and "ulysses/fa2" in out.stdout


def test_simulated_fwdbwd_rows_sit_next_to_measured_fwd_and_bwd(tmp_path):
    """`longca simulate` writes fwdbwd rows with per-phase figures; the report shows their fwd and
    bwd next to the measured cells, and a simulated row never replaces the measured one."""
    measured = [row("fa2", seqlen=4096, tflops=350.0), row("fa2", strategy="ulysses", world_size=2, tflops=300.0)]
    sim = {**row("fa2", strategy="ulysses", world_size=2, tflops=310.0, simulated=True, direction="fwdbwd",
                 case_id="sim-x"), "sim": {"fwd": {"tflops": 320.0, "ms_mean": 2.0}, "bwd": {"tflops": 305.0}}}
    write(tmp_path / "cp", measured)
    write(tmp_path / "sim", [sim])
    results = analysis.load(tmp_path / "cp", tmp_path / "sim")
    fwd = {(r["column"], r["direction"]): r["tflops"] for r in results.rows if r.get("strategy")}
    assert fwd == {("ulysses/fa2", "fwd"): 300.0, ("ulysses/fa2 (sim)", "fwd"): 320.0,
                   ("ulysses/fa2 (sim)", "bwd"): 305.0, ("ulysses/fa2 (sim)", "fwdbwd"): 310.0}
    effs = sorted((p["row"]["column"], round(p["efficiency"], 3)) for p in analysis.scaling_efficiency(results.rows))
    assert effs == [("ulysses/fa2", 0.857), ("ulysses/fa2 (sim)", 0.914)]
