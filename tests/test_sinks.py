"""Learnable attention sinks (issue 40): one logit per query head that every row's softmax also runs
over. The reference computes them (forward and the sinks' gradient), a kernel declares them
(`KernelSpec.sinks`) or gets an `unsupported` row, the check judges dsinks too, and rows say `sinks`."""
from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from longca import reference
from longca.capability import inner_unsupported
from longca.errors import LongcaError
from longca.problem import Problem, build_mask, make_inputs, make_sinks
from longca.results import case_id
from longca_runner.measure import RunOptions, run_problem

pytestmark = pytest.mark.numerics


def _problem(mask: str = "causal_document", **kw) -> Problem:
    base = dict(kernel="torch", mask=mask, seqlen=256, heads_q=4, heads_kv=2, head_dim=16, dtype="float32",
                direction="bwd", sampler="uniform", seed=3, sinks=True)
    return Problem(**{**base, **kw})


def _naive(q, k, v, dense, sinks):
    """Softmax over the masked scores and one more column holding each head's sink, which is then dropped."""
    rep = q.shape[2] // k.shape[2]
    qh = q.transpose(1, 2)
    kh, vh = (x.repeat_interleave(rep, 2).transpose(1, 2) for x in (k, v))
    scores = (qh @ kh.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~dense, -math.inf)
    scores = torch.cat([scores, sinks[None, :, None, None].expand(*scores.shape[:-1], 1)], -1)
    return (torch.softmax(scores, -1)[..., :-1] @ vh).transpose(1, 2)


@pytest.mark.parametrize("mask", ["causal", "causal_document", "sliding_window"])
def test_the_reference_with_sinks_is_the_softmax_over_one_more_column(mask):
    problem = _problem(mask)
    m = build_mask(problem)
    q, k, v = (t.double().requires_grad_() for t in make_inputs(problem))
    sinks = (make_sinks(problem) * 2).double().requires_grad_()
    out = reference.attention(q, k, v, m, sinks=sinks)
    want = _naive(q, k, v, torch.from_numpy(m.dense()), sinks)
    dout = torch.randn_like(out)
    got, expected = (torch.autograd.grad(x, (q, k, v, sinks), dout) for x in (out, want))
    assert float((out - want).detach().abs().max()) < 1e-5
    for g, w in zip(got, expected, strict=True):
        assert float((g - w).abs().max()) < 1e-5 * max(1.0, float(w.abs().max()))
    assert float(got[3].abs().sum()) > 0  # the sinks do get a gradient


def test_a_row_with_no_keys_gives_zero_and_lse_equal_to_its_sink():
    out, lse = torch.zeros(1, 3, 2, 4), torch.tensor([[[-math.inf, 0.0, 1.0], [-math.inf, 2.0, 0.5]]])
    sinks = torch.tensor([0.25, -1.0])
    scaled, lse_s = reference.with_sinks(out + 1.0, lse, sinks)
    assert torch.equal(scaled[0, 0], torch.zeros(2, 4)) and torch.equal(lse_s[0, :, 0], sinks)
    assert torch.allclose(scaled[0, 1, 0], torch.full((4,), 1 / (1 + math.exp(0.25))))


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_a_kernel_with_sinks_is_measured_and_checked_with_dsinks(direction):
    row = run_problem(_problem(direction=direction), RunOptions(check=True, warmup=1, repeat=3, samples=1))
    assert row.status == "ok" and row.sinks is True and row.checked == "full"
    assert set(row.rel_err_detail) == ({"out"} if direction == "fwd" else {"out", "dq", "dk", "dv", "dsinks"})
    assert max(row.rel_err_detail.values()) < 1e-5


def test_a_kernel_without_sinks_gives_an_unsupported_row_and_cp_refuses_them():
    row = run_problem(_problem(kernel="sdpa"), RunOptions(check=True, warmup=0, repeat=1, samples=1))
    assert row.status == "unsupported" and "learnable sinks are not supported" in row.reason
    cp = _problem(kernel="reference", strategy="ulysses", world_size=2)
    assert "take no sinks" in inner_unsupported(cp)


def test_sinks_are_a_flag_and_leave_old_case_ids_alone():
    with pytest.raises(LongcaError, match="sinks must be true or false"):
        _problem(sinks="yes")
    plain = _problem(sinks=False)
    assert "sinks" not in plain.key() and case_id(plain) != case_id(_problem())


def test_a_sweep_axis_and_the_run_flag(tmp_path):
    from longca_cli.main import app
    from longca_runner.sweep import load_spec, problems

    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\nkernels = ["torch", "sdpa"]\nmasks = ["causal"]\nseqlens = [128]\nheads = ["2:1"]\n'
                    'head_dims = [16]\ndtypes = ["float32"]\ndirections = ["fwd"]\ndevice = "cpu"\n'
                    'sinks = [false, true]\n')
    cases = list(problems(load_spec(spec)))
    assert [(p.kernel, p.sinks) for p in cases] == [("torch", False), ("sdpa", False), ("torch", True),
                                                    ("sdpa", True)]
    done = CliRunner().invoke(app, ["run", "--kernel", "torch", "--mask", "causal", "--seqlen", "128", "--heads",
                                    "2:1", "--head-dim", "16", "--dtype", "float32", "--device", "cpu", "--sinks",
                                    "--check", "-f", "json"])
    assert done.exit_code == 0, done.output
    row = json.loads(done.output.strip().splitlines()[-1])
    assert row["sinks"] is True and row["status"] == "ok" and row["checked"] == "full"


def test_flex_takes_sinks_through_its_lse_and_flex_fa4_forward_only():
    row = run_problem(_problem(kernel="flex", direction="fwd"), RunOptions(check=True, warmup=0, repeat=2, samples=1))
    assert row.status == "ok" and row.rel_err_detail["out"] < 1e-5
    from longca_plugin_flex_fa4.hooks import SINKS_BACKWARD, supports

    assert supports(_problem(kernel="flex-fa4", dtype="bfloat16", device="cuda")) == SINKS_BACKWARD
