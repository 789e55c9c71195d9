"""benchmarks/prewarm.py: a bad value or a spec that does not load is one line and a non-zero exit."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

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


# longca_runner.prewarm: what `longca bench` warms, and when it skips

import dataclasses  # noqa: E402

from longca import given  # noqa: E402
from longca.results import ResultsWriter, case_id  # noqa: E402
from longca_cli import main as cli  # noqa: E402
from longca_cli import specs  # noqa: E402
from longca_runner import prewarm, repeat  # noqa: E402
from longca_runner.sweep import load_spec  # noqa: E402

COMPILING = ("flex", "flex-fa4", "flashmask")  # their plugins declare KernelSpec(compiles=True)


def _spec(tmp_path, device: str) -> Path:
    path = tmp_path / f"{device}.toml"
    path.write_text(f"""[sweep]
name = "tiny-{device}"
kernels = ["sdpa", "flex", "flex-fa4", "flashmask"]
masks = ["causal"]
seqlens = [256]
heads = ["2:1"]
head_dims = [64]
dtypes = ["{'float32' if device == 'cpu' else 'bfloat16'}"]
directions = ["fwd"]
device = "{device}"
warmup = 0
repeat = 1
samples = 1
check = false
measure_peak = false
""")
    return path


@pytest.fixture
def calls(monkeypatch):
    seen: list[list[str]] = []
    monkeypatch.setattr(prewarm, "warm", lambda todo, *a, **k: seen.append([p.kernel for p in todo]) or True)
    return seen


def test_bench_warms_the_compiling_kernels_on_cuda_only(tmp_path, calls):
    cuda = load_spec(_spec(tmp_path, "cuda"), installed_kernels_only=True)
    assert {k for k in cuda.kernels if k in COMPILING} == set(COMPILING)  # installed with the checkout
    assert prewarm.before_bench(cuda, [tmp_path / "out"]) == 3 and calls == [list(COMPILING)]
    assert prewarm.before_bench(cuda, [tmp_path / "out"], enabled=False) is None  # --no-prewarm
    cpu = load_spec(_spec(tmp_path, "cpu"), installed_kernels_only=True)
    assert prewarm.before_bench(cpu, [tmp_path / "out"]) is None and len(calls) == 1


def test_resume_warms_only_what_some_repeat_still_needs(tmp_path, calls):
    cuda = load_spec(_spec(tmp_path, "cuda"), installed_kernels_only=True)
    flex = next(p for p in prewarm.select(cuda) if p.kernel == "flex")
    one, two = repeat.run_folders(tmp_path / "out", 2)
    for folder in (one, two):
        ResultsWriter(folder / "results.jsonl").append({**dataclasses.asdict(flex), "status": "ok",
                                                        "case_id": case_id(flex)})
    assert prewarm.before_bench(cuda, [one, two], resume=True) == 2 and calls == [["flex-fa4", "flashmask"]]
    (one / "results.jsonl").write_text("")  # run-1 lacks it again: warmed again
    assert prewarm.before_bench(cuda, [one, two], resume=True) == 3


def test_the_bench_command_warms_before_the_sweep_and_skips_as_told(tmp_path, monkeypatch):
    order: list[str] = []
    monkeypatch.setattr(prewarm, "warm", lambda todo, *a, **k: order.append("prewarm") or True)

    def sweep(spec, output, runs, resume, tick, registry, cases=None, clock=None, pool=None):
        order.append("sweep")
        ResultsWriter(output / "results.jsonl").append(
            {"kernel": "sdpa", "mask": "causal", "seqlen": 256, "heads_q": 2, "heads_kv": 1, "head_dim": 64,
             "dtype": "bfloat16", "direction": "fwd", "device": "cuda", "status": "ok", "tflops": 1.0, "case_id": "x"})
        return [output / "results.jsonl"]

    monkeypatch.setattr(repeat, "run_repeats", sweep)
    monkeypatch.setattr(given, "default_device", lambda: "cuda")
    monkeypatch.setattr(specs, "default_spec_path", lambda device: _spec(tmp_path, device))
    runner = CliRunner()
    done = runner.invoke(cli.app, ["bench", "--output", str(tmp_path / "a")])
    assert done.exit_code == 0, done.output
    assert order == ["prewarm", "sweep"] and "prewarm: compiling 3 cases of flex, flex-fa4, flashmask" in done.output
    order.clear()
    done = runner.invoke(cli.app, ["bench", "--output", str(tmp_path / "b"), "--no-prewarm"])
    assert done.exit_code == 0, done.output
    assert order == ["sweep"] and "prewarm" not in done.output
