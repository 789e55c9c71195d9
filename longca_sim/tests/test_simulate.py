"""The simulator: consistent with the kernel fit at one rank, fast at 1,024, topology rules, the CLI."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from longca.plugins import get_registry
from longca.problem import Problem, build_mask
from longca_cli.main import app
from longca_cp.schedule import CommOp
from longca_sim.costmodel import load_fits, pair_table, table_features
from longca_sim.simulate import Grid, default_pricing, resolve_for, simulate, simulate_grid
from longca_sim.topology import preset

BUILT_IN = {"ulysses", "ring-p2p", "ring-allgather", "usp", "loongtrain"}


def _scheduled() -> set[str]:
    """Every installed strategy the simulator can price (it gives a schedule): the built-ins and any other."""
    registry = get_registry()
    return {n for n in registry.names("strategies") if registry.strategy(n).schedule is not None}


class _Done:
    def __init__(self, result):
        self.returncode, self.stdout, self.stderr = result.exit_code, result.stdout, result.stderr


def _problem(strategy, world, mask="causal", per_rank=8192, direction="fwd"):
    return Problem(kernel="fa3", mask=mask, seqlen=per_rank * world, heads_q=64, heads_kv=8, head_dim=128,
                   direction=direction, device="cuda", strategy=strategy, world_size=world)


def test_one_rank_is_the_kernel_alone():
    pricing = default_pricing("fa3", preset("h200-sxm"))
    problem = _problem("ring-p2p", 1)
    row = simulate(problem, resolve_for(problem, {}, 8), pricing)
    mask = build_mask(problem, 0)
    alone = pricing.fwd.price(table_features(pair_table(mask.slices, [(0, 8192)], [(0, 8192)]), 64)).sum()
    assert row["simulated"] and row["status"] == "ok"
    assert row["ms_median"] == pytest.approx(alone)


def test_a_1024_rank_ring_is_simulated_with_exact_balance():
    pricing = default_pricing("fa3", preset("h200-sxm"))
    problem = _problem("ring-p2p", 1024, per_rank=4096)
    row = simulate(problem, resolve_for(problem, {}, 8), pricing)
    assert row["status"] == "ok" and row["balance"]["calls_total"] > 1024 * 1000
    assert row["balance"]["imbalance_pct"] < 0.5  # zigzag on causal
    assert 0 < row["tflops"] < 1000


def test_refusals_and_node_rules():
    pricing = default_pricing("fa3", preset("h200-sxm"))
    rows = simulate_grid(Grid(["ulysses", "usp"], [96], "full", "fa3", 64, 8, seqlen_per_rank=1024, samples=1), pricing)
    assert rows[0]["status"] == "unsupported" and "96" in rows[0]["reason"]
    assert rows[1]["status"] == "ok" and rows[1]["strategy_options"]["ulysses_degree"] <= 8  # stays on a node
    topo = preset("h200-sxm")
    near, far = CommOp("fwd", "p2p", "k,v", 10**8, (0, 1)), CommOp("fwd", "p2p", "k,v", 10**8, (7, 8))
    assert topo.op_ms(far) > 5 * topo.op_ms(near)
    spans = CommOp("fwd", "all_to_all", "q", 10**8, tuple(range(16)))
    assert topo.op_ms(spans) > topo.op_ms(CommOp("fwd", "all_to_all", "q", 10**8, tuple(range(8))))
    faster = topo.override(figures={"inter.p2p.bandwidth_gbs": 400})
    assert faster.op_ms(far) < topo.op_ms(far)


def test_fit_file_has_every_inner_kernel_with_rows():
    fits, doc = load_fits()
    assert {"fa2", "fa3"} <= set(fits) and doc["call_overhead_ms"]["fwd"] > 0
    assert fits["fa3"]["fwd"].median_err_pct < 15


def test_simulate_cli(tmp_path):
    calib = tmp_path / "calib.json"
    calib.write_text(json.dumps({"machine": "test", "intra": {"p2p": {"bandwidth_gbs": 1.0, "latency_us": 5}}}))
    run = lambda *a: _Done(CliRunner().invoke(app, ["simulate", *a]))  # noqa: E731
    out = run("--world-sizes", "8,16", "--mask", "causal", "--seqlen-per-rank", "4k", "--heads", "64:8")
    assert out.returncode == 0, out.stderr
    for name in _scheduled():
        assert name in out.stdout
    slow = run("--strategy", "ring-p2p", "--world-sizes", "8", "--seqlen-per-rank", "4k", "--calibration", str(calib),
               "--format", "json")
    fast = run("--strategy", "ring-p2p", "--world-sizes", "8", "--seqlen-per-rank", "4k", "--format", "json")
    assert json.loads(slow.stdout)[0]["ms_median"] > json.loads(fast.stdout)[0]["ms_median"]
    bad = run("--world-sizes", "2048", "--seqlen-per-rank", "1k")
    assert bad.returncode == 2 and "1,024" in bad.stderr and "Traceback" not in bad.stderr
    bad = run("--world-sizes", "8", "--seqlen-per-rank", "1k", "--aggregate", "mode")
    assert bad.returncode == 2 and "unknown aggregate" in bad.stderr and "Traceback" not in bad.stderr


def test_recommend_ranks_marks_ties_and_refusals():
    out = _Done(CliRunner().invoke(app, ["recommend", "--mask", "causal_document", "--seqlen", "64k", "--gpus", "16",
                                         "--gpus-per-node", "8", "--heads", "64:8", "--samples", "1",
                                         "--format", "json"]))
    assert out.returncode == 0, out.stderr
    lines = json.loads(out.stdout)
    ok = [ln for ln in lines if ln["status"] == "ok"]
    assert [ln["rank"] for ln in ok] == list(range(1, len(ok) + 1))
    assert all(a["step_ms"] <= b["step_ms"] for a, b in zip(ok, ok[1:], strict=False))
    assert {ln["strategy"] for ln in ok} >= BUILT_IN and {ln["strategy"] for ln in lines} >= _scheduled()
    for ln in ok[1:]:
        assert ln["near_tie_with_best"] == (ln["step_ms"] <= ok[0]["step_ms"] * (1 + max(
            ok[0]["model_error_pct"], ln["model_error_pct"]) / 100))
    refused = {ln["kernel"]: ln["reason"] for ln in lines if ln["status"] != "ok"}
    assert "no measured one-GPU rows" in refused["reference"]
    assert all(ln["basis"] == "model" for ln in ok)


@pytest.mark.slow  # spawns 2 gloo ranks
def test_comm_bench_writes_a_calibration_the_simulator_reads(tmp_path):
    calib = tmp_path / "calib.json"
    out = subprocess.run([sys.executable, "-m", "longca_cli.main", "comm-bench", "--nproc", "2", "--backend", "gloo",
                          "--device", "cpu", "--sizes", "64k,256k", "--repeat", "2", "--output", str(calib)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(calib.read_text())
    assert set(doc["intra"]) == {"all_to_all", "all_gather", "reduce_scatter", "p2p"}
    assert all(v["bandwidth_gbs"] > 0 for v in doc["intra"].values()) and len(doc["measurements"]) == 8
    topo = preset("h200-sxm").with_calibration(calib)
    assert topo.intra["p2p"].bandwidth_gbs == pytest.approx(doc["intra"]["p2p"]["bandwidth_gbs"])
    assert topo.inter == preset("h200-sxm").inter and topo.gpus_per_node == 8


def test_what_dist_run_holds_besides_the_strategy():
    from longca_cp.accounting import schedule_of
    from longca_runner.timing import L2_FLUSH_BYTES
    from longca_sim.simulate import harness_memory

    token = 128 * 2  # d128, bf16, per head
    for strategy, options, views in (("ulysses", {}, True), ("ring-p2p", {"layout": "zigzag"}, False)):
        problem = _problem(strategy, 2, direction="bwd")
        sched = schedule_of(problem, build_mask(problem, 0), options)
        held = 16384 * (64 + 16 + 64) * token  # global q, k, v, dout
        if views:  # a contiguous shard is a view of the global tensor, counted in the strategy's own figure
            held -= 8192 * (64 + 16 + 64) * token
        assert harness_memory(sched, "bwd") == held + L2_FLUSH_BYTES


def test_doc_zigzag_balances_documents_in_one_call_a_step():
    pricing = default_pricing("fa3", preset("h100-sxm"))
    rows = {}
    for layout in ("zigzag", "doc_zigzag"):
        problem = _problem("ring-p2p", 8, mask="causal_document").with_(sampler="prolong64k")
        rows[layout] = simulate(problem, {"layout": layout}, pricing)
    assert rows["doc_zigzag"]["balance"]["imbalance_pct"] < 2 < rows["zigzag"]["balance"]["imbalance_pct"]
    assert rows["doc_zigzag"]["balance"]["calls_max"] == 8  # one varlen call for each of the 8 steps


def test_flags_and_waiting_split():
    """Ulysses past the KV-head count replicates KV heads and, past a node, its all-to-all crosses nodes;
    memory above the GPU's is flagged; the critical rank's waiting is split into data and slower ranks."""
    pricing = default_pricing("fa3", preset("h100-sxm"))
    problem = _problem("ulysses", 16, direction="fwdbwd")
    row = simulate(problem, resolve_for(problem, {}, 8), pricing)
    flags = " ".join(row["sim"]["flags"])
    assert "KV heads replicated x2" in flags and "all-to-all across nodes" in flags
    for phase in ("fwd", "bwd"):
        f = row["sim"][phase]
        assert abs(f["wait_data_ms"] + f["wait_ranks_ms"] - f["exposed_ms"]) < 1e-9 + 1e-6 * f["ms_max"]
    problem = _problem("ring-allgather", 8, per_rank=256 * 1024, direction="fwdbwd")
    big = simulate(problem, resolve_for(problem, {}, 8), pricing)
    assert any(fl.startswith("over memory") for fl in big["sim"]["flags"])


def test_schedules_sharing_calls_price_as_alone():
    """Ring schedules of one draw, ring size and layout priced together give what each gives alone."""
    from longca_cp.accounting import schedule_of
    from longca_sim.simulate import default_pricing, resolve_for, simulate_schedule_all, simulate_schedules_all
    from longca_sim.topology import preset

    base = Problem(kernel="fa2", mask="causal_document", seqlen=16 * 2048, heads_q=64, heads_kv=8, head_dim=128,
                   direction="fwdbwd", device="cuda", sampler="magi", world_size=16)
    mask = build_mask(base, 0)
    pricings = [default_pricing(k, preset("h200-sxm")) for k in ("fa2", "fa3")]
    items = []
    for strategy, given in (("loongtrain", {"head_degree": 2, "windows": 2, "layout": "doc_zigzag"}),
                            ("loongtrain", {"head_degree": 2, "windows": 4, "layout": "doc_zigzag"}),
                            ("usp", {"ulysses_degree": 2, "layout": "doc_zigzag"}),
                            ("ring-p2p", {"layout": "zigzag"}), ("ring-allgather", {"layout": "zigzag"})):
        problem = base.with_(strategy=strategy)
        options = resolve_for(problem, given, 8)
        items.append((lambda p=problem, o=options: schedule_of(p.with_(strategy_options=o), mask, o), mask.area))
    together = simulate_schedules_all([(make(), area) for make, area in items], pricings)
    for (make, area), got in zip(items, together, strict=True):
        alone = simulate_schedule_all(make(), area, pricings)
        for a, b in zip(alone, got, strict=True):
            for phase in ("fwd", "bwd"):
                assert b[phase]["ms_max"] == pytest.approx(a[phase]["ms_max"], rel=1e-12)
            assert b["balance"] == a["balance"]


def _position_comm_rank_by_rank(sched, topo):
    """The per-rank loop `simulate._position_comm` replaced: every rank's ops priced one by one."""
    from longca_sim.simulate import _op_ms
    r, h = sched.ring_size, sched.head_degree
    a2a = {phase: np.zeros(r) for phase in ("fwd", "bwd")}
    links = {(phase, ring): np.zeros(r) for phase in ("fwd", "bwd") for ring in ("inner", "outer")}
    for position in range(r):
        for u in range(h):
            ops = sched.comm(position * h + u)
            for phase in ("fwd", "bwd"):
                exposed = _op_ms(ops, topo, phase, "all_to_all")
                a2a[phase][position] = exposed if u == 0 else max(a2a[phase][position], exposed)
                for ring in ("inner", "outer"):
                    mine = [op for op in ops if op.phase == phase and op.ring == ring]
                    if mine:
                        step = topo.op_ms(CommOp(phase, "p2p", "", sum(op.nbytes for op in mine), mine[0].ranks))
                        links[phase, ring][position] = max(links[phase, ring][position], step)
    return a2a, links


@pytest.mark.parametrize("world,head_degree,windows,per_node", [
    (48, 1, 1, 8), (48, 2, 4, 8), (48, 4, 3, 8), (48, 3, 2, 4), (48, 6, 2, 4), (48, 16, 3, 6), (48, 48, 1, 8),
    (64, 8, 2, 8), (64, 2, 8, 3)])
def test_position_comm_prices_one_rank_per_class_exactly(world, head_degree, windows, per_node):

    from longca_cp.schedule import RingSchedule
    from longca_sim.simulate import _position_comm
    from longca_sim.topology import preset
    problem = Problem(kernel="reference", mask="causal", seqlen=world * 64, heads_q=48, heads_kv=48, head_dim=64,
                      strategy="usp", world_size=world)
    sched = RingSchedule(problem, build_mask(problem).slices, head_degree, windows, "zigzag")
    for ring, nxt in sched.next_ranks().items():
        assert [int(x) for x in nxt] == [sched.peers(rank)[ring][0] for rank in range(world)]
    topo = preset("h200-sxm").override(gpus_per_node=per_node)
    got, want = _position_comm(sched, topo), _position_comm_rank_by_rank(sched, topo)
    for part in (0, 1):
        assert got[part].keys() == want[part].keys()
        for key in want[part]:
            assert np.array_equal(got[part][key], want[part][key]), key


def test_mean_aggregate_is_the_mean_of_each_draws_figure():
    """`aggregate="mean"`: each figure the mean over draws of the draw's own (the published protocol); draw i of
    `magi-packs` is pack i, so a one-draw row starting at pack i is that draw alone."""
    from longca.errors import LongcaError

    pricing = default_pricing("fa3", preset("h100-sxm"))
    problem = Problem(kernel="fa3", mask="causal_document", seqlen=8 * 8192, heads_q=64, heads_kv=8, head_dim=128,
                      direction="fwdbwd", device="cuda", sampler="magi-packs", strategy="ulysses", world_size=8)
    options = resolve_for(problem, {}, 8)
    row = simulate(problem, options, pricing, samples=3, aggregate="mean")
    alone = [simulate(problem.with_(sampler_params={"first": i}), options, pricing, samples=1) for i in range(3)]
    for phase in ("fwd", "bwd"):
        for key in ("tflops_slowest", "ms_max"):
            each = [r["sim"][phase][key] for r in alone]
            assert row["sim"][phase][key] == pytest.approx(np.mean(each), rel=1e-12)
            assert row["sim"][phase][key] != pytest.approx(np.median(each), rel=1e-6)
    assert row["sim"]["aggregate"] == "mean" and "aggregate" not in alone[0]["sim"]
    with pytest.raises(LongcaError, match="unknown aggregate"):
        simulate(problem, options, pricing, aggregate="mode")
