"""Quantized kernels (issue 40): judged by the 8-bit tolerance where the kernel says it quantizes,
and reported with their error beside their time, forward and backward side by side."""
from __future__ import annotations

from longca.problem import Problem
from longca.specs import KernelSpec
from longca_cli.report import quantized_markdown
from longca_runner.measure import TOLERANCE, tolerance_for
from longca_runner.measure.options import QUANTIZED_TOLERANCE


def _spec(quantized: str = "") -> KernelSpec:
    return KernelSpec(name="k", family="dense", description="", masks=("causal",), prepare=lambda *a: None,
                      run=lambda *a: None, quantized=quantized)


def test_a_quantized_kernel_is_held_to_the_8_bit_tolerance():
    problem = Problem(kernel="k", mask="causal", seqlen=256)
    assert tolerance_for(problem) == tolerance_for(problem, _spec()) == TOLERANCE["bfloat16"]
    assert tolerance_for(problem, _spec("INT8 Q·K")) == QUANTIZED_TOLERANCE == TOLERANCE["float8_e4m3fn"]
    fp8 = problem.with_(dtype="fp8_e5m2")  # the looser of the two
    assert tolerance_for(fp8, _spec("INT8 Q·K")) == TOLERANCE["float8_e5m2"]


def _row(kernel, direction, status="ok", ms=None, err=None, dtype="bfloat16", quantized=None, **kw):
    return dict(kernel=kernel, mask="causal", mask_params={}, seqlen=8192, heads_q=64, heads_kv=8, head_dim=128,
                dtype=dtype, direction=direction, status=status, ms_median=ms, rel_err=err, quantized=quantized,
                device="cuda", **kw)


def test_the_report_puts_error_beside_time_and_never_leaves_out_the_backward():
    rows = [_row("sage", "fwd", ms=1.5, err=0.021, quantized="INT8 Q·K"),
            _row("sage", "bwd", status="unsupported", quantized="INT8 Q·K"),
            _row("fa3", "fwd", ms=1.2, err=0.05, dtype="float8_e4m3fn"),
            _row("fa2", "fwd", ms=2.0, err=0.002), _row("fa4", "fwd", ms=1.8, err=0.002),
            _row("fa4", "bwd", ms=5.0, err=0.003)]
    text = quantized_markdown(rows)
    lines = {line.split("|")[1].strip(): line for line in text.splitlines()
             if line.startswith("| ") and "ms" not in line}
    assert "| sage | INT8 Q·K | causal | 8k | 1.5 | 0.021 | unsupported |" in lines["sage"]
    assert "1.8 (fa4)" in lines["sage"] and "5 (fa4)" in lines["sage"]  # the fastest 16-bit rows of the case
    assert "| fa3 | float8_e4m3fn | causal | 8k | 1.2 | 0.05 | not run |" in lines["fa3"]
    assert quantized_markdown([_row("fa2", "fwd", ms=2.0)]) == ""
