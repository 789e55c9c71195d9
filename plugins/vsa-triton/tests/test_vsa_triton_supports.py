import pytest

from longca.plugin import Problem
from longca_plugin_vsa import library
from longca_plugin_vsa_triton import hooks


def problem(mask="block_sparse_variable", seqlen=256, direction="bwd", block=64):
    return Problem(kernel="vsa-triton", mask=mask, seqlen=seqlen, heads_q=2, heads_kv=2, head_dim=64,
                   direction=direction, device="cuda", mask_params={"block": block})


@pytest.fixture
def old_vsa(monkeypatch):
    """Pretend the vsa 0.0.x package is the backend found."""
    backend = library.Backend("vsa 0.0.4", "triton", lambda *a: None, None, exact_variable_backward=False)
    monkeypatch.setattr(library, "find", lambda kind: (backend, None))


def test_vsa_package_backward_needs_full_tiles(old_vsa):
    assert "wrong block's size" in hooks.supports(problem())
    assert "wrong block's size" in hooks.supports(problem("block_sparse_uniform", seqlen=200))
    assert hooks.supports(problem("block_sparse_uniform", seqlen=256)) is None
    assert hooks.supports(problem(direction="fwd")) is None


def test_block_must_be_64():
    assert "block must be 64" in hooks.supports(problem(block=128))
