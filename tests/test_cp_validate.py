"""docs/scripts/cp_validate.py --quick on CPU: the protocol's tables written from the checkout's anchors,
in-sample and out-of-sample apart, trend signs counted."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "scripts" / "cp_validate.py"


def test_quick_validation_writes_its_tables(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--output", str(tmp_path)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "validation.json").read_text())
    own, pub = summary["own"], summary["published"]["h100"]
    assert own["rows"] > 0 and own["in_sample_rows"] <= own["rows"]
    assert pub["causal_document_cells"] > 0 and pub["trend_series"] > 0
    assert pub["setting"]["sampler"] == "magi-packs"  # the source's own packs (issue 39)
    assert set(pub["halves"]) == {"development", "held_out"}
    assert sum(h["cells"] for h in pub["halves"].values()) == pub["causal_document_cells"]
    for name in ("validation-own.md", "validation-published-h100.md", "validation-summary.md",
                 "validation-published-h100-baselines.md"):
        assert (tmp_path / name).read_text().startswith("# Validation")
    # the published-baselines variant is printed beside the plain model, and only slows the baselines down, but
    # for Ring All-Gather's backward, where it prices the source's two calls' launch grid instead of longca's one
    # call's (fewer empty blocks where longca's call holds both query pieces of every document)
    plain, variant = summary["published"]["h100"], summary["published"]["h100 (baseline variant)"]
    assert variant["causal_document_cells"] == plain["causal_document_cells"]
    assert all(v["simulated"][1] <= p["simulated"][1] + 1e-9 for p, v in zip(plain["trends"], variant["trends"],
                                                                               strict=True)
               if (p["strategy"], p["direction"]) != ("ring-allgather", "bwd"))
    # issue 39's model change, before and after, on the claimed sets only (B200 excluded)
    assert "empty-blocks:begin" in proc.stdout and "| published b200" not in proc.stdout.split(
        "empty-blocks:begin")[1].split("empty-blocks:end")[0]
    assert all(b["quantile_abs_err_pct"] >= b["median_abs_err_pct"] and "b200" not in b["source"]
               for b in summary["bands"])
    assert "baseline-variant:begin" in proc.stdout
    # every measured row of Ulysses' inner call at the published shapes priced, over its own draws
    rows = [json.loads(line) for line in (SCRIPT.parents[1] / "results/h200/ulysses-shapes/results.jsonl")
            .read_text().splitlines() if line.strip()]
    shapes = summary["kernel_shapes"]
    assert len(shapes) == sum(r["status"] == "ok" for r in rows) > 0
    assert all(c["world"] * int(c["heads"].split(":")[0]) == 64 and c["simulated"] > 0 for c in shapes)
    assert "kernel-shapes:begin" in proc.stdout
    # the residual of each plain-model causal_document cell: the published figure's time at the same FLOPs
    # (range cells at their midpoint), positive exactly where the model is too fast
    residual = summary["residual"]["h100"]
    assert residual["cells"] and "residual:begin" in proc.stdout
    assert "h100 (baseline variant)" not in summary["residual"]
    for c in residual["cells"]:
        flops = c["simulated_ms"] * c["simulated_tflops"]
        assert abs(c["implied_ms"] * c["published_tflops"] - flops) < 1e-9 * flops
        # the parts are means over the draws, as the time is (a mean is linear): they make up the simulated time
        assert abs(c["simulated_ms"] - c["compute_ms"] - c["exposed_ms"]) < 1e-6 * c["simulated_ms"]
        assert (c["residual_ms"] > 0) == (c["simulated_tflops"] > c["published_tflops"])
    assert residual["per_compute"]["cells"] == len(residual["cells"])


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cp_validate", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_doc_check_fails_on_a_stale_block_or_an_unprinted_figure():
    v = _script()
    blocks = {(v.BEGIN, v.END): f"{v.BEGIN}\n| h100 | 46.9 % | 10 of 10 |\n{v.END}"}
    good = f"# page\n\n## 3. Validation\n\nThe median is 46.9 %.\n\n{blocks[(v.BEGIN, v.END)]}\n\n## Changelog\n\n- x\n"
    assert v.check_doc(good, blocks) == (good, [])
    stale = good.replace("| h100 | 46.9 %", "| h100 | 41.2 %")
    new, problems = v.check_doc(stale, blocks)
    assert new == good and not problems  # the caller compares new with the text: a stale block differs
    for planted in ("The median is 41.2 %.", "Right in 0 of 10 series.", "before: 46.95 %", "It follows 0.72x of it."):
        _, problems = v.check_doc(good.replace("The median is 46.9 %.", planted), blocks)
        assert problems and "not a figure this script prints" in problems[0], planted
    _, problems = v.check_doc(good.replace("- x", "- before: 7.7 %"), blocks)
    assert problems  # the changelog is checked too
    assert v.check_doc(good.replace(v.END, ""), blocks)[1] == [f"no generated block ({v.BEGIN} ... {v.END})"]
