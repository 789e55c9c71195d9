"""Issue #29 items 1-3 on the CPU: head dims (Q/K vs V), deterministic backward, FP8 problems."""
import json
import math

import pytest
import torch
from typer.testing import CliRunner

from longca import reference
from longca.errors import LongcaError
from longca.flops import attention_flops, problem_flops
from longca.fp8 import dequantize_fp8, quantize_fp8
from longca.given import problem_from
from longca.plugins import get_registry
from longca.problem import Problem, build_mask, make_inputs
from longca.results import case_id
from longca.sizes import parse_head_dims
from longca.specs import KernelSpec, head_dims_text
from longca_cli import analysis
from longca_cli.main import app
from longca_runner import peaks
from longca_runner.measure import RunOptions, run_problem, tolerance_for, unsupported_reason
from longca_runner.sweep import load_spec, problems

from .test_report import RUN, row, write

CPU = dict(mask="causal", seqlen=128, heads_q=4, heads_kv=2, head_dim=32, device="cpu")


# ---------------------------------------------------------------- the problem


def test_new_fields_at_their_defaults_leave_the_case_id_unchanged():
    old = Problem(kernel="fa3", mask="causal", seqlen=8192, heads_q=64, heads_kv=8, head_dim=128, device="cuda")
    key = json.loads(old.key())
    assert "head_dim_v" not in key and "deterministic" not in key
    # the id rows of folders written before these fields carry (the key then had exactly these fields)
    assert case_id(old) == case_id(old.with_(head_dim_v=128))  # dv = d is spelled None
    assert case_id(old.with_(head_dim_v=64)) != case_id(old)
    assert case_id(old.with_(direction="bwd", deterministic=True)) != case_id(old.with_(direction="bwd"))


def test_deterministic_forward_and_bad_head_dims_are_input_errors():
    with pytest.raises(LongcaError, match="deterministic applies to the backward"):
        Problem(kernel="reference", direction="fwd", deterministic=True, **CPU)
    with pytest.raises(LongcaError, match="head_dim_v must be a positive integer"):
        Problem(kernel="reference", head_dim_v=0, **CPU)
    with pytest.raises(LongcaError, match="malformed head dims"):
        parse_head_dims("192/128/64")
    assert parse_head_dims("192/128") == parse_head_dims("192:128") == (192, 128)
    assert parse_head_dims(128) == parse_head_dims("128/128") == (128, None)


def test_fp8_dtypes_and_aliases_have_bfloat16_inputs():
    p = Problem(kernel="reference", dtype="fp8", **CPU)
    assert p.dtype == "float8_e4m3fn" and p.fp8 and p.input_dtype == "bfloat16"
    assert Problem(kernel="reference", dtype="fp8_e5m2", **CPU).dtype == "float8_e5m2"
    with pytest.raises(LongcaError, match="float8_e4m3fn"):
        Problem(kernel="reference", dtype="fp4", **CPU)
    bf16 = make_inputs(p.with_(dtype="bfloat16"))
    for a, b in zip(make_inputs(p), bf16, strict=True):  # the same seeded tensors as the bfloat16 problem
        assert a.dtype == torch.bfloat16 and torch.equal(a, b)


def test_inputs_give_v_its_own_head_dim_and_q_k_stay_as_before():
    p = Problem(kernel="reference", **CPU)
    q, k, v = make_inputs(p.with_(head_dim_v=16))
    assert q.shape[-1] == k.shape[-1] == 32 and v.shape == (1, 128, 2, 16)
    q0, k0, _ = make_inputs(p)
    assert torch.equal(q, q0) and torch.equal(k, k0)


def test_flops_count_qk_with_d_and_pv_with_dv():
    assert attention_flops(100.0, 2, 128, 1, "fwd") == 4 * 100 * 2 * 128
    assert attention_flops(100.0, 2, 192, 1, "fwd", 128) == 2 * 100 * 2 * (192 + 128)
    assert attention_flops(100.0, 2, 192, 1, "bwd", 128) == 2.5 * 2 * 100 * 2 * (192 + 128)
    p = Problem(kernel="reference", head_dim_v=16, direction="fwdbwd", **{**CPU, "head_dim": 48})
    assert problem_flops(p, 10.0) == 3.5 * 2 * 10 * 4 * (48 + 16)


def test_reference_with_v_of_another_head_dim_matches_dense_attention():
    p = Problem(kernel="reference", head_dim_v=16, dtype="float32", direction="bwd",
                **{**CPU, "mask": "sliding_window"})
    mask = build_mask(p)
    q, k, v = (x.requires_grad_() for x in make_inputs(p))
    out = reference.attention(q, k, v, mask)
    dense = torch.from_numpy(mask.dense())
    kr, vr = (x.repeat_interleave(2, dim=2) for x in (k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, kr) / math.sqrt(32)
    want = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s.masked_fill(~dense, -math.inf), -1), vr)
    assert out.shape == (1, 128, 4, 16)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), dout)
    exp = torch.autograd.grad(want, (q, k, v), dout)
    for g, e in zip(got, exp, strict=True):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


def test_a_run_with_v_of_its_own_head_dim_and_a_deterministic_backward(tmp_path):
    p = problem_from("reference", "causal", "128", "4:2", 32, direction="fwdbwd", device="cpu", head_dim_v=16,
                     deterministic=True)
    row_ = run_problem(p, RunOptions(warmup=0, repeat=1, samples=1, check=True))
    assert row_.status == "ok", row_.reason
    assert row_.head_dim_v == 16 and row_.deterministic and row_.checked == "full"
    assert row_.flops == problem_flops(p, row_.area)


def test_cli_run_takes_head_dim_v_and_deterministic(tmp_path):
    result = CliRunner().invoke(app, ["run", "--kernel", "reference", "--mask", "causal", "--seqlen", "128",
                                      "--heads", "4:2", "--head-dim", "32", "--head-dim-v", "16", "--direction",
                                      "bwd", "--deterministic", "--device", "cpu", "--repeat", "1", "--warmup", "0",
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{"):])
    out = out[0] if isinstance(out, list) else out
    assert out["status"] == "ok" and out["head_dim_v"] == 16 and out["deterministic"] is True
    bad = CliRunner().invoke(app, ["run", "--kernel", "reference", "--mask", "causal", "--seqlen", "128",
                                   "--deterministic", "--device", "cpu"])
    assert bad.exit_code == 2 and "deterministic applies to the backward" in bad.output


# ---------------------------------------------------------------- kernels' declarations and refusals


def _spec(**fields):
    return KernelSpec(name="k", family="dense", description="", masks=("causal",), prepare=lambda *a: None,
                      run=lambda *a: None, **fields)


def test_head_dim_pairs_and_their_refusals():
    spec = _spec(head_dims=(64, 128, (192, 128)))
    assert spec.head_dim_pairs() == [(64, 64), (128, 128), (192, 128)]
    assert spec.takes_head_dims(192, 128) and spec.takes_head_dims(128) and not spec.takes_head_dims(192)
    assert head_dims_text(spec.head_dims) == "64, 128, 192/128"
    assert head_dims_text(tuple(range(8, 257, 8))) == "multiples of 8 up to 256"
    p = Problem(kernel="k", **{**CPU, "head_dim": 192})
    assert unsupported_reason(spec, p) == "head_dim 192 is not supported (supported: 64, 128, 192/128)"
    assert unsupported_reason(spec, p.with_(head_dim_v=128)) is None
    assert "head dims (Q/K, V) 128/64" in unsupported_reason(spec, p.with_(head_dim=128, head_dim_v=64))


def test_deterministic_refusals_say_why():
    p = Problem(kernel="k", direction="bwd", deterministic=True, **CPU)
    assert unsupported_reason(_spec(), p) == "a deterministic backward is not offered by this kernel"
    assert unsupported_reason(_spec(deterministic="no flag"), p) == "a deterministic backward is not offered: no flag"
    assert unsupported_reason(_spec(deterministic=True), p) is None


@pytest.mark.parametrize("kernel", ["sdpa", "torch", "flex", "flashmask", "flex-fa4"])
def test_kernels_without_a_deterministic_backward_refuse_it_with_their_reason(kernel):
    registry = get_registry()
    if kernel not in registry.entries["kernels"]:
        pytest.skip(f"{kernel} is not installed")
    from dataclasses import replace

    spec = registry.kernel(kernel)
    assert isinstance(spec.deterministic, str) and spec.deterministic
    # availability and devices set aside (no GPU here): the deterministic refusal is what remains
    here = replace(spec, available=lambda: None, devices=("cpu", "cuda"), supports=None)
    p = Problem(kernel=kernel, direction="bwd", deterministic=True, **{**CPU, "head_dim": 64})
    assert unsupported_reason(here, p, registry) == f"a deterministic backward is not offered: {spec.deterministic}"
    assert unsupported_reason(here, p.with_(deterministic=False), registry) is None


@pytest.mark.parametrize("kernel", ["sdpa", "torch", "flex", "reference"])
def test_fp8_is_refused_by_kernels_that_do_not_claim_it(kernel):
    registry = get_registry()
    if kernel not in registry.entries["kernels"]:
        pytest.skip(f"{kernel} is not installed")
    p = Problem(kernel=kernel, dtype="float8_e4m3fn", **CPU)
    row_ = run_problem(p, RunOptions(warmup=0, repeat=1, samples=1))
    assert row_.status == "unsupported" and row_.reason.startswith("dtype float8_e4m3fn is not supported")


def test_flash_family_declarations():
    registry = get_registry()
    for name, pair, det in (("fa3", (192, 128), True), ("fa4", (192, 128), True), ("fa2", (256, 256), True)):
        if name in registry.entries["kernels"]:
            spec = registry.kernel(name)
            assert spec.takes_head_dims(*pair) and spec.deterministic is det
    if "fa2" in registry.entries["kernels"]:
        assert not registry.kernel("fa2").takes_head_dims(192, 128)  # FA2 takes one head dim for Q, K and V
    if "fa3" in registry.entries["kernels"]:
        assert registry.kernel("fa3").dtypes == ("bfloat16", "float16", "float8_e4m3fn")


# ---------------------------------------------------------------- FP8 quantization, tolerance, peaks


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_quantize_fp8_per_tensor(dtype):
    x = torch.randn(2, 64, 4, 32, dtype=torch.bfloat16) * 3
    x8, descale = quantize_fp8(x, dtype)
    assert x8.dtype == getattr(torch, dtype) and descale.shape == (1,) and descale.dtype == torch.float32
    assert float(x8.float().abs().max()) == torch.finfo(x8.dtype).max  # amax maps to the largest value
    back = dequantize_fp8(x8, descale)
    err = float((back - x.float()).norm() / x.float().norm())
    assert err < {"float8_e4m3fn": 0.05, "float8_e5m2": 0.1}[dtype]
    zero8, one = quantize_fp8(torch.zeros(3), dtype)
    assert float(one) == 1.0 and not zero8.float().any()


def test_fp8_tolerance_is_looser_than_bf16_and_tighter_than_nonsense():
    p = Problem(kernel="reference", **CPU)
    assert tolerance_for(p) == 1e-2
    assert tolerance_for(p.with_(dtype="fp8")) == 0.15 and tolerance_for(p.with_(dtype="fp8_e5m2")) == 0.3


def test_fp8_matmul_peak_and_datasheet():
    measured = peaks.measure("cpu", ["float8_e4m3fn"], shapes=(64,), warm_seconds=0.0, repeat=1)
    if measured:  # torch._scaled_mm runs on this CPU build: an FP8 peak of its own
        assert measured["float8_e4m3fn"]["tflops"] > 0 and measured["float8_e4m3fn"]["shape"] == [64] * 3
    ds = peaks.datasheet("NVIDIA H200", "float8_e5m2")
    assert ds is not None and ds.tflops == 1979.0


# ---------------------------------------------------------------- sweep specs and reports


def test_spec_axes_head_dims_dtypes_deterministic(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text('[sweep]\nkernels = ["reference"]\nseqlens = ["1k"]\ndevice = "cpu"\nmasks = ["causal"]\n'
                    'heads = ["4:2"]\nhead_dims = [64, "192/128", "128:128"]\ndtypes = ["bf16", "fp8"]\n'
                    'directions = ["fwd", "bwd"]\ndeterministic = [false, true]\n')
    spec = load_spec(path)
    assert spec.head_dims == [64, "192/128", 128] and spec.dtypes == ["bfloat16", "float8_e4m3fn"]
    cases = list(problems(spec))
    # per dtype and head dims: fwd, bwd, bwd deterministic (no deterministic forward)
    assert len(cases) == 2 * 3 * 3
    assert [(p.direction, p.deterministic) for p in cases[:3]] == [("fwd", False), ("bwd", False), ("bwd", True)]
    assert {(p.head_dim, p.head_dim_v) for p in cases} == {(64, None), (192, 128), (128, None)}
    path.write_text('[sweep]\nkernels = ["reference"]\nseqlens = ["1k"]\ndevice = "cpu"\ndtypes = ["fp4"]\n')
    with pytest.raises(LongcaError, match="field 'sweep.dtypes.*unknown dtype 'fp4'"):
        load_spec(path)


def test_report_puts_deterministic_columns_beside_the_default_and_their_overhead(tmp_path):
    rows = [row("fa3", direction="bwd", ms_median=2.0, tflops=400.0, peak_mem_bytes=2 ** 31,
                bitwise_repeatable=False, repeat_max_abs_diff=0.0039),
            row("fa3", direction="bwd", ms_median=2.5, tflops=320.0, deterministic=True, case_id="fa3-det",
                peak_mem_bytes=3 * 2 ** 30, bitwise_repeatable=True, repeat_max_abs_diff=0.0),
            row("fa4", direction="bwd", ms_median=1.0),
            row("fa3", head_dim=192, head_dim_v=128, case_id="fa3-192")]
    folder = write(tmp_path / "run", rows)
    loaded = analysis.load(folder)
    titles = [t.title for t in analysis.tables(loaded.rows)]
    assert "fwd, heads 64:8, head_dim 192/128, bfloat16" in titles
    bwd = next(t for t in analysis.tables(loaded.rows) if t.direction == "bwd")
    assert bwd.columns == ["fa3", "fa3 (det)", "fa4"]
    over = analysis.deterministic_overhead(loaded.rows)
    assert [(o["kernel"], o["ratio"]) for o in over] == [("fa3", 1.25)]
    result = CliRunner().invoke(app, ["report", str(folder), "--output", str(tmp_path / "out"), "--no-plots"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## Deterministic backward: overhead" in text and "| 1.25 |" in text
    assert "| 2.00 | 3.00 | no (0.0039) / yes |" in text  # the memory cost, and whether each was bitwise repeatable
    assert "## Backward repeatability" in text
    assert "| fa3 | no | 1 | 0 | 0.0039 |" in text and "| fa3 (det) | yes | 1 | 1 |" in text
    header = (tmp_path / "out" / "report.csv").read_text().splitlines()[0]
    assert "head_dim_v" in header and "deterministic" in header


def test_old_rows_keep_their_problem_key_and_report(tmp_path):
    old = row("fa3")
    assert analysis.problem_key(old) == analysis.problem_key({**old, "head_dim_v": None, "deterministic": False})
    assert analysis.problem_key(old) != analysis.problem_key({**old, "deterministic": True})
    folder = write(tmp_path / "old", [old])
    result = CliRunner().invoke(app, ["report", str(folder), "--output", str(tmp_path / "out"), "--no-plots"])
    assert result.exit_code == 0, result.output
    assert "Deterministic" not in (tmp_path / "out" / "report.md").read_text()
    assert "head_dim_v" not in (tmp_path / "out" / "report.csv").read_text().splitlines()[0]
    assert RUN["gpu"] == "NVIDIA H200"


@pytest.mark.parametrize("name", ["head-dims", "deterministic", "fp8"])
def test_contrib_specs_of_issue_29_load(name):
    from pathlib import Path

    spec = load_spec(Path(__file__).resolve().parents[1] / "contrib" / "specs" / f"{name}.toml",
                     installed_kernels_only=True)
    cases = list(problems(spec))
    assert cases and all(p.dtype == "bfloat16" for p in cases) == (name != "fp8")
    if name == "fp8":
        assert {p.dtype for p in cases} == {"bfloat16", "float8_e4m3fn"}
    elif name == "head-dims":
        assert {(p.head_dim, p.head_dim_v) for p in cases} == {(64, None), (96, None), (128, None), (192, 128),
                                                               (256, None)}
    else:
        assert {p.deterministic for p in cases} == {False, True} and {p.direction for p in cases} == {"bwd"}


def test_context_parallel_cases_refuse_what_their_primitives_cannot_say():
    from longca.capability import inner_unsupported

    base = Problem(kernel="reference", strategy="ulysses", world_size=2, direction="bwd", **CPU)
    assert inner_unsupported(base) is None
    assert "no FP8 cases" in inner_unsupported(base.with_(dtype="fp8"))
    assert "deterministic" in inner_unsupported(base.with_(deterministic=True))
    assert "V of its own" in inner_unsupported(base.with_(head_dim_v=16))


def test_conformance_checks_a_deterministic_backward_bit_for_bit():
    """The suite's `deterministic` case passes the reference (the same float32 operations in the same
    order) and fails a kernel that claims a deterministic backward but adds noise to its gradients."""
    from dataclasses import replace

    from longca import reference as ref
    from longca.plugins import PluginInfo, load_registry
    from longca_testing.conformance import Settings, check_deterministic, conformance_cases

    registry = load_registry()
    assert "deterministic-cpu" in [c.id for c in conformance_cases("reference", registry)]
    assert "deterministic-cpu" not in [c.id for c in conformance_cases("sdpa", registry)]
    assert check_deterministic("reference", "cpu", registry, Settings()) == []

    class Noisy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, mask):
            ctx.mask = mask
            ctx.save_for_backward(q, k, v)
            with torch.no_grad():
                return ref.attention(q, k, v, mask)

        @staticmethod
        def backward(ctx, dout):
            q, k, v = (x.detach().requires_grad_() for x in ctx.saved_tensors)
            with torch.enable_grad():
                grads = torch.autograd.grad(ref.attention(q, k, v, ctx.mask), (q, k, v), dout)
            return (*(g + 1e-6 * torch.randn_like(g) for g in grads), None)

    noisy = replace(registry.kernel("reference"), name="noisy", deterministic=True, prepare=lambda p, m, q, k, v: m,
                    run=lambda m, q, k, v: Noisy.apply(q, k, v, m), supports=None)
    registry._add("kernels", noisy, PluginInfo("test", "test-kernels", "0", "tests"))
    with pytest.raises(AssertionError, match="different dq, dk, dv in two calls"):
        check_deterministic("noisy", "cpu", registry, Settings())
