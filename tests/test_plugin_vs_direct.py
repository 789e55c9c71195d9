"""benchmarks/plugin_vs_direct.py: its hand-written Flex mask_mods are the masks (so the direct call
computes what the plugin computes), and a CPU run writes a row per case with both timings."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from longca.masks.catalog import STATIC_MASKS
from longca.problem import Problem, build_mask

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "plugin_vs_direct.py"


def _module():
    spec = importlib.util.spec_from_file_location("plugin_vs_direct", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", STATIC_MASKS)
def test_hand_written_mask_mod_is_the_mask(name):
    pvd = _module()
    seqlen = 4096 if name == "block_causal_document" else 320
    problem = Problem(kernel="flex", mask=name, seqlen=seqlen, heads_q=2, heads_kv=2, head_dim=16, dtype="float32",
                      sampler="uniform", sampler_params={"min_len": 16, "max_len": 128} if seqlen == 320 else {},
                      mask_params={"window": 40} if "window" in name else {})
    for sample in range(2):
        mask = build_mask(problem, sample)
        q, kv = torch.arange(seqlen)[:, None], torch.arange(seqlen)[None, :]
        got = pvd.user_mask_mod(mask, "cpu")(0, 0, q, kv).expand(seqlen, seqlen).numpy()
        assert np.array_equal(got, mask.dense()), (name, sample)


def test_cpu_run_writes_rows_with_both_timings(tmp_path, monkeypatch):
    pvd = _module()
    monkeypatch.setattr(sys, "argv", ["plugin_vs_direct", "--device", "cpu", "--kernels", "flex,sdpa", "--masks",
                                      "causal,share_question", "--seqlens", "256", "--directions", "fwd",
                                      "--heads", "4:2", "--head-dim", "32", "--dtype", "float32", "--sampler",
                                      "uniform", "--warmup", "0", "--repeat", "1", "--rounds", "1",
                                      "--out", str(tmp_path)])
    pvd.main()
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    by = {(r["kernel"], r["mask"]): r for r in rows}
    assert by[("flex", "causal")]["status"] == "ok" and by[("flex", "share_question")]["status"] == "ok"
    for m in ("causal", "share_question"):
        assert by[("flex", m)]["rel_diff"] < 1e-6 and by[("flex", m)]["direct_ms"] > 0
    assert by[("sdpa", "causal")]["status"] == "ok"
    assert by[("sdpa", "share_question")]["status"] == "n/a" and "boolean" in by[("sdpa", "share_question")]["reason"]
    assert (tmp_path / "table.md").read_text().startswith("| kernel |")
    monkeypatch.setattr(sys, "argv", sys.argv + ["--resume"])
    pvd.main()  # every case has its row: nothing is run again, the table still shows them all
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == len(rows)
    assert len((tmp_path / "table.md").read_text().splitlines()) == 2 + len(rows)


@pytest.mark.filterwarnings("ignore:Triton is not supported:UserWarning")  # fla imported on a CPU machine
@pytest.mark.parametrize("name", ["full", "causal", "full_document", "causal_document"])
def test_hand_written_ffa_ranges_are_the_mask(name):
    """The direct FFA call's ranges, read by FFA's documented semantics, are the mask; other masks are n/a."""
    from longca.masks.slices import dense
    from longca_plugin_ffa.ranges import dense_from_ranges

    pvd = _module()
    problem = Problem(kernel="ffa", mask=name, seqlen=320, heads_q=2, heads_kv=2, head_dim=16, dtype="float32",
                      sampler="uniform", sampler_params={"min_len": 1, "max_len": 100}, seed=3)
    mask = build_mask(problem, 0)
    ranges, kinds = pvd.ffa_user_ranges(mask)
    assert np.array_equal(dense_from_ranges(ranges, ranges, kinds, 320, 320), dense(mask.slices, (0, 320), (0, 320)))
    assert pvd.direct_refusal("ffa", mask) is None and pvd.direct_refusal("te", mask) is None


def test_te_and_ffa_direct_calls_refuse_other_masks_and_determinism():
    pvd = _module()
    problem = Problem(kernel="te", mask="sliding_window_causal", seqlen=320, heads_q=2, heads_kv=2, head_dim=16,
                      dtype="float32", mask_params={"window": 32})
    mask = build_mask(problem, 0)
    assert "full, causal and documents only" in pvd.direct_refusal("te", mask)
    assert "full, causal and documents only" in pvd.direct_refusal("ffa", mask)
    causal = build_mask(problem.with_(mask="causal", mask_params={}), 0)
    assert "takes no deterministic flag" in pvd.direct_refusal("te", causal, deterministic=True)


def test_nsa_direct_selection_is_the_mask(monkeypatch):
    """The hand-written NSA call's block_indices, through fla's plain-torch NSA selection in place of its
    Triton kernel (no GPU here), compute longca's reference on the topk_sparse mask."""
    pytest.importorskip("fla", reason="fla-core (longca-plugin-nsa's dependency) is not installed")
    import fla.ops.nsa as nsa
    from fla.ops.nsa.naive import naive_nsa_selection

    from longca.reference import forward_lse

    seen = {}

    def cpu_nsa(q, k, v, block_indices, block_counts, block_size):
        seen.update(width=block_indices.shape[-1], counts=block_counts)
        return naive_nsa_selection(q, k, v, block_indices, block_size=block_size)

    monkeypatch.setattr(nsa, "parallel_nsa", cpu_nsa)
    pvd = _module()
    problem = Problem(kernel="nsa", mask="topk_sparse", seqlen=300, heads_q=16, heads_kv=2, head_dim=16,
                      mask_params={"block": 16, "topk": 5})
    mask = build_mask(problem)
    assert pvd.direct_refusal("nsa", mask) is None and "topk_sparse only" in pvd.direct_refusal(
        "nsa", build_mask(problem.with_(mask="causal", mask_params={})))
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 300, h, 16, generator=gen) for h in (16, 2, 2))
    got = pvd.make_direct("nsa", mask, q, k, v)(q, k, v)
    want, _ = forward_lse(q, k, v, mask)
    assert seen == {"width": 8, "counts": 8}
    assert float((got - want).norm() / want.norm()) < 1e-5


def test_cpu_run_with_v_of_its_own_head_dim_and_deterministic_rows(tmp_path, monkeypatch):
    """--head-dim-v reaches both sides (flex and sdpa take V of its own head dim); --deterministic skips
    forwards and says n/a where the hand-written call has no deterministic flag."""
    pvd = _module()
    base = ["plugin_vs_direct", "--device", "cpu", "--kernels", "flex,sdpa", "--masks", "causal", "--seqlens", "128",
            "--heads", "4:2", "--head-dim", "32", "--head-dim-v", "16", "--dtype", "float32", "--warmup", "0",
            "--repeat", "1", "--rounds", "1"]
    monkeypatch.setattr(sys, "argv", [*base, "--directions", "fwd", "--out", str(tmp_path / "dv")])
    pvd.main()
    rows = {r["kernel"]: r for r in map(json.loads, (tmp_path / "dv" / "rows.jsonl").read_text().splitlines())}
    assert rows["flex"]["status"] == rows["sdpa"]["status"] == "ok"
    assert rows["flex"]["head_dim_v"] == 16 and rows["flex"]["rel_diff"] < 1e-6 and rows["sdpa"]["rel_diff"] < 1e-5
    monkeypatch.setattr(sys, "argv", [*base, "--directions", "fwd,bwd", "--deterministic", "--out",
                                      str(tmp_path / "det")])
    pvd.main()
    rows = [json.loads(line) for line in (tmp_path / "det" / "rows.jsonl").read_text().splitlines()]
    assert {r["direction"]: r["status"] for r in rows if r["kernel"] == "flex"} == {"fwd": "n/a", "bwd": "unsupported"}
    assert all(r["deterministic"] for r in rows)
