"""cudnn without a GPU: listed unavailable; the torch path's claims and refusals; which path runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from longca.plugin import ANY_STATIC, STATIC_MASKS, Problem, get_registry, problem_mask
from longca_flashplan.plugin import full_or_square_causal, plan_reason
from longca_plugin_cudnn import frontend, hooks
from longca_plugin_cudnn.hooks import BACKWARD_REASON, WINDOW_MASKS


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only listing")
def test_listed_unavailable():
    spec = get_registry().kernel("cudnn")  # what list-kernels shows: available() says why not
    reason = spec.available()
    assert reason and "CUDA GPU" in reason


@pytest.mark.parametrize("mask", STATIC_MASKS)
def test_torch_path_refuses_masks_that_need_bands(mask):
    """Both paths claim every static mask; the torch path refuses those that plan into windows."""
    seqlen = 4096 if mask == "block_causal_document" else 2048
    problem = Problem(kernel="cudnn", mask=mask, seqlen=seqlen)
    reason = plan_reason(problem, problem_mask(problem), full_or_square_causal)
    assert hooks.masks_for("torch") == (ANY_STATIC,)
    if mask in WINDOW_MASKS:
        assert reason and "diagonal band" in reason
    else:
        assert reason is None


def test_torch_path_backward_only_for_full_and_causal(monkeypatch):
    monkeypatch.setattr(hooks, "PATH", "torch")
    monkeypatch.setenv(frontend.ENV_BACKEND, "torch")  # asked for: document forwards run (with a caveat)
    assert hooks.supports(Problem(kernel="cudnn", mask="causal", seqlen=1024, direction="bwd")) is None
    documents = Problem(kernel="cudnn", mask="causal_document", seqlen=1024, direction="bwd")
    assert hooks.supports(documents) == BACKWARD_REASON
    assert hooks.supports(documents.with_(direction="fwd")) is None
    assert "need the cuDNN frontend path" in hooks.supports(Problem(kernel="cudnn", mask="sliding_window", seqlen=2048))
    spec = hooks.make_spec("torch")
    assert spec.backward_lse is None and spec.forward_lse is hooks.torch_forward_lse and spec.run is hooks.torch_run


def test_frontend_path_spec():
    spec = hooks.make_spec("frontend")
    assert spec.masks == (ANY_STATIC,) and spec.min_compute_capability == (9, 0)
    assert (spec.prepare, spec.run) == (hooks.frontend_prepare, hooks.frontend_run)  # FP8 problems go to fp8.py
    assert (spec.forward_lse, spec.backward_lse) == (frontend.forward_lse, frontend.backward_lse)
    assert "float8_e4m3fn" in spec.dtypes and spec.deterministic is True
    assert "float8_e4m3fn" not in hooks.make_spec("torch").dtypes and isinstance(hooks.make_spec("torch").deterministic,
                                                                                 str)


def test_frontend_run_sends_each_prepared_kind_to_its_path(monkeypatch):
    seen = []
    monkeypatch.setattr(hooks.fp8, "run", lambda p, q, k, v: seen.append("fp8"))
    monkeypatch.setattr(hooks.frontend, "run", lambda p, q, k, v: seen.append("planned"))
    hooks.frontend_run(hooks.fp8.Fp8Prepared(None, (1, 1, 1, 1, 1, 1)), None, None, None)
    hooks.frontend_run(object(), None, None, None)
    assert seen == ["fp8", "planned"]


def test_path_follows_the_frontend_package_and_the_environment(monkeypatch):
    monkeypatch.setenv(frontend.ENV_BACKEND, "torch")
    assert frontend.chosen() == "torch"
    monkeypatch.setenv(frontend.ENV_BACKEND, "frontend")
    assert frontend.chosen() == "frontend"
    monkeypatch.delenv(frontend.ENV_BACKEND)
    monkeypatch.setattr(frontend, "frontend_installed", lambda: True)
    assert frontend.chosen() == "frontend"
    monkeypatch.setattr(frontend, "frontend_installed", lambda: False)
    assert frontend.chosen() == "torch"
    registered = get_registry().kernel("cudnn")
    assert registered.masks == hooks.masks_for(hooks.PATH)  # this process: the path chosen at load


def test_backend_names_the_path(monkeypatch):
    monkeypatch.setattr(hooks, "PATH", "torch")
    assert "via torch" in hooks.backend()
    monkeypatch.setattr(hooks, "PATH", "frontend")
    monkeypatch.setattr(frontend, "backend_label", lambda: "cuDNN 91900 via cudnn-frontend 1.32.0 (...)")
    assert "cudnn-frontend" in hooks.backend()


LISTING = """
import json, sys
from longca.plugin import get_registry
registry = get_registry()
spec = registry.kernel("cudnn")
spec.available()  # as list-kernels asks it
print(json.dumps({"masks": registry.claimed_masks(spec.masks),
                  "lse": spec.forward_lse is not None and spec.backward_lse is not None,
                  "imported": "cudnn" in sys.modules}))
"""


def test_listing_with_the_frontend_installed_imports_no_cudnn(tmp_path):
    """A `cudnn` module on the path switches the claims to the frontend path without importing it."""
    marker = tmp_path / "imported"
    (tmp_path / "cudnn").mkdir()
    (tmp_path / "cudnn" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = {k: v for k, v in os.environ.items() if k != frontend.ENV_BACKEND}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", LISTING], capture_output=True, text=True, check=True, env=env)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["imported"] is False and not marker.exists()
    assert "sliding_window" in row["masks"] and row["lse"] is True


def test_without_the_frontend_document_and_multi_call_masks_are_refused(monkeypatch):
    """The fallback times a graph rebuild per call: not a default number. Asked for, it runs, marked."""
    monkeypatch.setattr(hooks, "PATH", "torch")
    monkeypatch.delenv(frontend.ENV_BACKEND, raising=False)
    for mask in ("causal_document", "full_document", "share_question", "prefix_lm_causal"):
        reason = hooks.supports(Problem(kernel="cudnn", mask=mask, seqlen=2048))
        assert reason.startswith("unavailable: nvidia-cudnn-frontend is not installed") and "191576" in reason, mask
    assert hooks.supports(Problem(kernel="cudnn", mask="causal", seqlen=2048)) is None
    spec = hooks.make_spec("torch")
    assert spec.caveat(Problem(kernel="cudnn", mask="causal_document", seqlen=2048)) == hooks.REBUILD_NOTE
    assert spec.caveat(Problem(kernel="cudnn", mask="causal", seqlen=2048)) is None
    frontend_spec = hooks.make_spec("frontend")  # no caveat but for learnable sinks through the lse (not fused)
    monkeypatch.setattr(frontend, "backend_version", lambda: 91900)
    assert frontend_spec.caveat(Problem(kernel="cudnn", mask="causal_document", seqlen=2048)) is None
    assert frontend_spec.caveat(Problem(kernel="cudnn", mask="causal", seqlen=2048, sinks=True)) is None  # fused
    multi_call = frontend_spec.caveat(Problem(kernel="cudnn", mask="share_question", seqlen=2048, sinks=True))
    assert multi_call.startswith(hooks.SINKS_CAVEAT)
    monkeypatch.setenv(frontend.ENV_BACKEND, "torch")
    assert hooks.supports(Problem(kernel="cudnn", mask="causal_document", seqlen=2048)) is None


def test_fp8_output_type_follows_the_architecture(monkeypatch):
    """cuDNN declined every bf16-output sdpa_fp8 graph on the H200 (sm90): Hopper gets FP8 outputs (then
    dequantized), Blackwell bfloat16 first."""
    import torch

    from longca_plugin_cudnn import fp8

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert fp8.output_types("cuda:0", torch.float8_e4m3fn) == (torch.float8_e4m3fn,)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    assert fp8.output_types("cuda:0", torch.float8_e4m3fn) == (torch.bfloat16, torch.float16)


def test_fp8_dequantizes_only_fp8_outputs():
    """What `run` returns is bfloat16 either way: an FP8 output times its descale, a 16-bit one cast."""
    import torch

    from longca.plugin import quantize_fp8
    from longca_plugin_cudnn import fp8

    x = torch.randn(4, 8, 2, 16, dtype=torch.bfloat16)
    x8, descale = quantize_fp8(x, "float8_e4m3fn")
    graphs = fp8.Fp8Graphs(None, {}, None, {}, torch.empty(1), None, torch.float8_e4m3fn, torch.float8_e4m3fn)
    graphs.scales["descale_o"] = descale.view(1, 1, 1, 1)
    back = graphs.to_16bit(x8, "o", torch.bfloat16)
    assert back.dtype == torch.bfloat16 and graphs.fp8_output
    rel = ((back.float() - x.float()).norm() / x.float().norm()).item()
    assert 0.001 < rel < 0.06  # FP8 rounding, not a lost scale (which would be off by orders of magnitude)
    plain = fp8.Fp8Graphs(None, {}, None, {}, torch.empty(1), None, torch.float8_e4m3fn, torch.float16)
    assert not plain.fp8_output and plain.to_16bit(x.half(), "o", torch.bfloat16).equal(x.half().bfloat16())


def test_fp8_backward_on_hopper_takes_head_dim_128_only(monkeypatch):
    """cuDNN 9.19 declined the FP8 backward graphs of head dims 64 and 192/128 on the H200."""
    import torch

    from longca.plugin import Problem
    from longca_plugin_cudnn import fp8

    problem = Problem(kernel="cudnn", mask="causal", seqlen=1024, dtype="fp8", device="cuda", direction="bwd",
                      head_dim=64)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert "head dim 128 only" in fp8._hopper_backward_reason(problem)
    assert fp8._hopper_backward_reason(problem.with_(head_dim=128)) is None
    assert fp8._hopper_backward_reason(problem.with_(direction="fwd")) is None
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    assert fp8._hopper_backward_reason(problem) is None
