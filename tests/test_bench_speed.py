"""What makes `longca bench` take the time of its work (issue 35): timed calls chosen by the spread
of the times (`until_precise`), one float32 reference per case shared by its kernels, a prewarm
that is bounded per case and names what it could not finish, and a run's wall time and phases in
runs.jsonl and the report's header."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from longca.problem import Problem
from longca_cli.render import progress_line
from longca_runner import timing
from longca_runner.measure import RunOptions, run_problem
from longca_runner.measure import checks as checks_module
from longca_runner.measure.phases import PhaseClock
from longca_runner.runinfo import read_runs, record_run_end
from longca_runner.sweep import load_spec, run_sweep

ROOT = Path(__file__).resolve().parents[1]


def _torch_sdpa_spec(tmp_path: Path, seqlens: list[int], direction: str) -> Path:
    """A checked CPU sweep of torch and sdpa on causal, 2:1 heads of dim 16, one mask draw."""
    path = tmp_path / "s.toml"
    path.write_text(f"""[sweep]
kernels = ["torch", "sdpa"]
masks = ["causal"]
seqlens = {seqlens}
heads = ["2:1"]
head_dims = [16]
dtypes = ["float32"]
directions = ["{direction}"]
device = "cpu"
samples = 1
check = true
measure_peak = false
""")
    return path


def _timer(values):
    """A timer that hands out `values` in order (n per call), counting the calls asked for."""
    it, asked = iter(values), []

    def timer(n: int) -> list[float]:
        asked.append(n)
        return [next(it) for _ in range(n)]

    return timer, asked


def test_steady_times_stop_at_the_minimum_and_noisy_ones_go_on():
    steady, asked = _timer([10.0] * 200)
    assert len(timing.until_precise(steady, None)) == timing.MIN_REPEAT and asked == [timing.MIN_REPEAT]
    # +-20 % noise: the median's interval never gets within +-1 % before the cap on calls
    noisy, _ = _timer([10.0 * (1 + 0.2 * ((i * 7919) % 11 - 5) / 5) for i in range(200)])
    assert len(timing.until_precise(noisy, None)) == timing.MAX_REPEAT


def test_slow_calls_stop_at_the_time_budget_and_a_given_repeat_is_kept():
    slow, _ = _timer([timing.MAX_TIMED_S * 1e3 / 4 * (1 + 0.1 * (i % 3)) for i in range(200)])
    assert len(timing.until_precise(slow, None)) == timing.MIN_REPEAT  # 5 calls are already over 2 s
    fixed, asked = _timer([10.0 * (1 + 0.2 * (i % 5)) for i in range(200)])
    assert len(timing.until_precise(fixed, 7)) == 7 and asked == [7]


def test_the_median_interval_is_the_range_for_five_and_narrows_with_more():
    assert timing.median_interval([5.0, 1.0, 3.0, 2.0, 4.0]) == (1.0, 5.0)
    low, high = timing.median_interval([float(i) for i in range(100)])
    assert 35 <= low < 50 < high <= 65
    assert timing.precise_enough([100.0, 100.5, 99.6, 100.2, 99.9])
    assert not timing.precise_enough([100.0, 103.0, 97.0, 100.2, 99.9])


def test_cp_groups_time_a_fixed_count():
    assert RunOptions().repeat is None and RunOptions().fixed().repeat == 20
    assert RunOptions(repeat=3).fixed().repeat == 3


def _case(kernel: str, direction: str = "bwd", **kw) -> Problem:
    return Problem(kernel=kernel, mask="causal", seqlen=256, heads_q=2, heads_kv=1, head_dim=16, dtype="float32",
                   direction=direction, **kw)


def test_the_kernels_of_one_case_share_one_reference():
    shared = checks_module.shared
    options = RunOptions(warmup=0, repeat=1, check=True)
    before = shared.computed
    rows = [run_problem(_case(k), options) for k in ("torch", "sdpa", "reference")]
    assert [r.status for r in rows] == ["ok"] * 3 and shared.computed == before + 1
    assert all(r.rel_err < 1e-5 for r in rows)
    run_problem(_case("torch", seed=1), options)  # another case: its own reference
    run_problem(_case("torch", direction="fwd", seed=1), options)  # another direction: its own too
    assert shared.computed == before + 3


def test_a_reference_is_not_reused_for_other_input_values():
    shared = checks_module.SharedReference()
    q = torch.ones(3)
    made = []
    assert shared.get("k", (q,), lambda: made.append(1) or "a") == "a"
    assert shared.get("k", (q,), lambda: made.append(1) or "b") == "a" and made == [1]
    q += 1  # a kernel that wrote into its input: the reference is made again on what it left
    assert shared.get("k", (q,), lambda: made.append(1) or "c") == "c" and made == [1, 1]


@pytest.mark.slow  # waits out a hanging case's bound
def test_prewarm_bounds_each_case_and_names_what_it_could_not_finish(tmp_path, monkeypatch):
    from longca.plugins import get_registry
    from longca_runner import prewarm

    from . import faults

    for entry in faults.install(tmp_path / "site", faults.KERNELS):
        monkeypatch.syspath_prepend(entry)
    get_registry(reload=True)
    try:
        lines: list[str] = []
        cases = [Problem(kernel=k, mask="causal", seqlen=128, heads_q=2, heads_kv=2, head_dim=16, dtype="float32")
                 for k in ("fault-hang-run", "torch")]
        assert prewarm.warm(cases, workers=2, say=lines.append, case_seconds=4) is False
        text = "\n".join(lines)
        assert "torch causal 128 fwd: ok" in text
        assert "not finished: fault-hang-run causal 128 fwd: timeout in phase first call" in text
        assert "prewarm: 1 of 2 cases" in lines[-1] and "fault-hang-run causal 128 fwd" in lines[-1]
    finally:
        monkeypatch.undo()
        get_registry(reload=True)


def test_a_run_records_its_wall_time_and_phases_and_the_report_shows_them(tmp_path):
    from longca_cli.report import write_report

    spec_path = _torch_sdpa_spec(tmp_path, seqlens=[256], direction="bwd")
    out = tmp_path / "out"
    run_sweep(load_spec(spec_path), out)
    (run,) = read_runs(out)
    phases = run["phases_s"]
    assert set(phases) == {"compile", "reference", "check", "timed", "other"} and run["cases_run"] == 2
    assert phases["timed"] > 0 and sum(phases.values()) == pytest.approx(
        run["wall_s"], abs=0.5)
    kernels = run["kernels_s"]  # which kernel's cases cost what: the H200 bench's question
    assert set(kernels) == {"torch", "sdpa"} and all(k["cases"] == 1 for k in kernels.values())
    assert all(0 < k["timed"] <= k["wall"] for k in kernels.values())
    assert sum(k["wall"] for k in kernels.values()) <= run["wall_s"] + 0.2
    named = run["phase_names_s"]  # what the kinds are made of, by the names the cases gave their phases
    assert {"inputs", "timing", "reference"} <= set(named) and list(named.values()) == sorted(named.values())[::-1]
    assert sum(named.values()) <= run["wall_s"] + 0.2
    written = write_report([out / "results.jsonl"], tmp_path / "rep")
    assert "**Time** of out: " in written["markdown"] and "(2 cases measured): compile " in written["markdown"]
    assert "By kernel, slowest first: " in written["markdown"] and " over 1 case (timed " in written["markdown"]


def test_an_end_line_joins_its_run_and_is_not_counted_as_one(tmp_path):
    from longca_runner.runinfo import record_run

    assert record_run(tmp_path)["run"] == 1
    record_run_end(tmp_path, 1, {"wall_s": 3.0})
    assert record_run(tmp_path)["run"] == 2
    runs = read_runs(tmp_path)
    assert [r["run"] for r in runs] == [1, 2] and runs[0]["wall_s"] == 3.0 and "wall_s" not in runs[1]
    assert all(not r.get("end") for r in runs)


def test_the_clock_counts_phases_by_kind_and_the_rest_as_other():
    now = [0.0]
    clock = PhaseClock()
    clock._now = lambda: now[0]  # noqa: SLF001 - a test clock
    clock.started = clock._since = 0.0  # noqa: SLF001
    for phase, t in (("start", 1.0), ("first call", 2.0), ("timing", 5.0), ("reference", 6.0), (None, 7.0)):
        now[0] = t
        clock.enter(phase)
    clock.add("compile", 10.0)
    now[0] = 20.0
    assert clock.summary() == {"compile": 13.0, "reference": 1.0, "check": 0.0, "timed": 1.0, "other": 5.0}


def test_progress_lines_say_how_far_and_how_long_is_left():
    assert progress_line(120, 576, 130.0, 120, "fa2 causal 8192 bwd: ok") == \
        "[120/576] 20 %, 2 min 10 s, about 8 min 14 s left: fa2 causal 8192 bwd: ok"
    assert progress_line(576, 576, 400.0, 500, "x: ok").startswith("[576/576] 100 %, 6 min 40 s: ")


def test_make_bench_calls_the_python_it_is_given():
    dry = subprocess.run(["make", "-n", "bench", "PYTHON=/opt/py/bin/python3"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert "/opt/py/bin/python3 -m longca_cli bench --resume" in dry
    assert "longca bench" not in dry.replace("longca_cli bench", "")


def test_bench_writes_its_log_file_even_when_nothing_warns(tmp_path):
    from longca_runner import warnlog

    warnlog.start(tmp_path / "r" / "longca.log", "longca bench: test")
    assert json.dumps((tmp_path / "r" / "longca.log").read_text()).count("longca bench: test") == 1


def test_a_bench_ended_by_sigterm_records_where_its_minutes_went(tmp_path):
    """`timeout 545 longca bench` on the H200 (2026-12-04) left no end line, so no phases: SIGTERM now
    ends the run like Ctrl-C, its rows kept and runs.jsonl's end line written; exit 143."""
    import signal
    import sys
    import time

    out = tmp_path / "bench"
    process = subprocess.Popen([sys.executable, "-m", "longca_cli", "bench", "--output", str(out)], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while not ((out / "results.jsonl").exists() and (out / "results.jsonl").read_text().strip()):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    assert "terminated (SIGTERM); rows written so far are kept" in err and "Traceback" not in err
    ends = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines() if '"end"' in line]
    assert len(ends) == 1 and ends[0]["cases_run"] >= 1 and set(ends[0]["phases_s"]) >= {"timed", "check"}


def test_the_sweep_measures_each_group_in_the_worker_that_warmed_it(tmp_path):
    """`longca bench` keeps the prewarm's workers (`WarmPool`): a group (every kernel of one problem)
    is measured where its compiling kernels were compiled, so no process loads them again, and its
    reference is made once; a group no worker warmed runs in the sweep's own worker."""
    from longca_runner import prewarm
    from longca_runner.sweep import problems

    spec_path = _torch_sdpa_spec(tmp_path, seqlens=[128, 256, 384], direction="fwd")
    spec = load_spec(spec_path)
    cases = list(problems(spec))
    warmed = [p for p in cases if p.kernel == "torch" and p.seqlen != 384]
    assert [len(g) for g in prewarm.groups_of(cases)] == [2, 2, 2]
    assert [g[0].seqlen for g in prewarm.longest_first(prewarm.groups_of(cases))] == [384, 256, 128]
    assert prewarm.group_key(cases[0]) == prewarm.group_key(cases[0].with_(direction="bwd", kernel="x"))
    with prewarm.WarmPool() as pool:
        assert prewarm.warm(warmed, workers=2, say=lambda line: None, pool=pool)
        assert len(pool.by_group) == 2 and 1 <= len(pool.supervisors) <= 2
        assert pool.for_case(cases[1]) is pool.for_case(cases[0]) and pool.for_case(cases[-1]) is None
        used: list[tuple[str, int]] = []
        for supervisor in pool.supervisors:
            supervisor.run = (lambda problem, *a, _run=supervisor.run, **k:
                              used.append((problem.kernel, problem.seqlen)) or _run(problem, *a, **k))
        rows = run_sweep(spec, tmp_path / "out", pool=pool)
        assert [r.status for r in rows] == ["ok"] * 6
        assert sorted(used) == [("sdpa", 128), ("sdpa", 256), ("torch", 128), ("torch", 256)]
        assert all(s._process is not None and s._process.is_alive() for s in pool.supervisors)  # kept for repeats
        kept = list(pool.supervisors)
    assert not pool.supervisors and all(s._process is None for s in kept)  # the bench ends them
