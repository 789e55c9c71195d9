"""cudnn-bsa's claims on a CPU: registered, listed with the reason it cannot run here, and every refusal
supports() makes, each with its reason."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from longca.plugin import BLOCK_SPARSE_MASKS, Problem, get_registry
from longca_plugin_cudnn_bsa import hooks
from longca_testing import RunOptions, run_problem


def problem(**kw):
    fields = dict(kernel="cudnn-bsa", mask="block_sparse_uniform", seqlen=1024, heads_q=4, heads_kv=4, head_dim=128,
                  dtype="bfloat16", direction="fwd", device="cuda", mask_params={"block": 64})
    return Problem(**{**fields, **kw})


def test_registered_with_its_claims():
    registry = get_registry()
    spec = registry.kernel("cudnn-bsa")
    assert registry.entries["kernels"]["cudnn-bsa"].plugin.distribution == "longca-plugin-cudnn-bsa"
    assert spec.family == "sparse" and spec.devices == ("cuda",) and spec.min_compute_capability == (9, 0)
    assert registry.claimed_masks(spec.masks) == list(BLOCK_SPARSE_MASKS)  # not topk_sparse: causal inside tiles
    assert spec.dtypes == ("bfloat16", "float16") and spec.gqa and spec.backward and spec.compiles
    assert spec.takes_head_dims(96) and spec.takes_head_dims(128, 64) and not spec.takes_head_dims(256)
    assert isinstance(spec.deterministic, str) and spec.sinks is False
    assert "cudnn.block_sparse_attention" in spec.backend()


def test_listed_as_unavailable_with_the_reason_here():
    """`longca list-kernels` lists it (in a fresh process: listing imports no GPU library) with the reason."""
    if hooks.library_reason() is None and torch.cuda.is_available():
        pytest.skip("the library and a GPU are here: nothing to refuse")
    listing = subprocess.run([sys.executable, "-m", "longca_cli", "list-kernels", "--format", "json"],
                             capture_output=True, text=True, check=True)
    row = next(r for r in json.loads(listing.stdout) if r["name"] == "cudnn-bsa")
    assert row["available"] is False and row["needs"] == "cuda sm90+"
    assert row["reason"] == hooks.available() and ("nvidia-cudnn-frontend" in row["reason"]
                                                   or "CUDA GPU" in row["reason"])
    result = run_problem(problem(device="cpu"), RunOptions(check=True))
    assert result["status"] == "unsupported" and result["reason"].startswith("unavailable: ")


def test_available_names_what_is_missing(tmp_path, monkeypatch):
    """Frontend missing; frontend without the CuTe DSL; without cuda.bindings; everything there: no GPU here."""
    site = tmp_path / "site"
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(hooks, "_locations", lambda name: [str(site / name)] if (site / name).is_dir() else [])
    found = set()
    monkeypatch.setattr(hooks.importlib.util, "find_spec", lambda name: object() if name in found else None)
    assert "nvidia-cudnn-frontend 1.32" in hooks.library_reason()
    (site / "cudnn").mkdir(parents=True)
    reason = hooks.library_reason()
    assert "has none" in reason and "pip install 'nvidia-cudnn-frontend[cutedsl]==1.32.0'" in reason
    (site / "cudnn" / "block_sparse_attention").mkdir()
    (site / "cudnn" / "block_sparse_attention" / "api.py").write_text("")
    assert "CuTe DSL" in hooks.library_reason() and "nvidia-cutlass-dsl" in hooks.library_reason()
    found.add("cutlass")
    assert "cuda.bindings" in hooks.library_reason()
    (site / "cuda" / "bindings").mkdir(parents=True)
    assert hooks.library_reason() is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "CUDA GPU" in hooks.available()


@pytest.mark.parametrize("changes,words", [
    ({"mask_params": {"block": 32}}, "multiple of 64"),
    ({"mask_params": {"block": 96}}, "multiple of 64"),
    ({"mask": "block_sparse_variable", "mask_params": {"block": 100}}, "multiple of 64"),
    ({"mask_params": {}}, None),  # the catalog's default block, 128
    ({"mask_params": {"block": 256}}, None),
    ({"heads_kv": 1}, None),  # GQA forward
    ({"dtype": "float16", "head_dim": 64}, None),
    ({"direction": "bwd"}, None),
    ({"direction": "bwd", "mask": "block_sparse_variable"}, None),
    ({"direction": "fwdbwd", "dtype": "float16"}, "bfloat16 only"),
    ({"direction": "bwd", "heads_kv": 2}, "MHA only"),
    ({"direction": "bwd", "head_dim": 64}, "head_dim 128"),
    ({"direction": "bwd", "head_dim_v": 64}, "head_dim 128"),
])
def test_supports(changes, words, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # no architecture to ask here
    reason = hooks.supports(problem(**changes))
    assert reason is None if words is None else words in reason


@pytest.mark.parametrize("capability,refused", [((9, 0), False), ((10, 0), True), ((12, 0), True)])
def test_architectures_other_than_sm90_are_refused(capability, refused, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    reason = hooks.supports(problem())
    assert (reason is not None) == refused
    if refused:
        assert f"sm_{capability[0]}{capability[1]}" in reason and "SM90" in reason
