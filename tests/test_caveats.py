"""A row that carries a caveat is marked in every report cell, the legend explains the mark and the
header lists the caveat; the sweep's worker records a kernel's caveat on the rows it ran."""
from __future__ import annotations

from dataclasses import replace

from longca import plugin, reference
from longca.plugins import PluginInfo, get_registry
from longca.problem import Problem
from longca_cli import analysis
from longca_cli.report import CAVEAT, markdown
from longca_runner.measure import RunOptions
from longca_runner.supervisor import measure_case

from .test_report import row, write


def test_report_marks_caveat_cells(tmp_path):
    note = "rebuilds its cuDNN graph on every call"
    write(tmp_path / "r", [row("cudnn", mask="causal_document", tflops=20.0, caveat=note),
                           row("cudnn", tflops=500.0), row("fa3", mask="causal_document", tflops=400.0)])
    text = markdown(analysis.load(tmp_path / "r"))
    assert f"| causal_document | 8k | 20.0{CAVEAT} | 400.0 | fa3 |" in text
    assert "| causal | 8k | 500.0 |" in text  # no caveat, no mark
    assert f"**Caveats** (cells marked `{CAVEAT}`): cudnn (1 rows): {note}" in text
    assert f"`{CAVEAT}` = the row carries a caveat" in text


def test_worker_records_the_kernels_caveat():
    registry = get_registry()
    spec = plugin.KernelSpec(name="caveated", family="dense", description="the reference, with a caveat",
                             masks=("causal",), prepare=lambda problem, mask, q, k, v: mask,
                             run=lambda mask, q, k, v: reference.attention(q, k, v, mask), dtypes=("float32",),
                             devices=("cpu",), backward=False, caveat=lambda p: f"slow path at {p.seqlen}")
    registry._add("kernels", spec, PluginInfo("caveated", "longca-plugin-caveated", "0", "tests"))
    problem = Problem(kernel="caveated", mask="causal", seqlen=128, heads_q=2, heads_kv=1, head_dim=16,
                      dtype="float32", direction="fwd", device="cpu")
    phases: list[str] = []
    got = measure_case(problem, RunOptions(warmup=0, repeat=1, samples=1), phases.append, registry)
    assert got.status == "ok" and got.caveat == "slow path at 128" and "timing" in phases
    assert got.gpu_state_before is None  # a CPU: no GPU state
    plain = replace(spec, name="plain", caveat=None)
    assert plain.caveat is None
