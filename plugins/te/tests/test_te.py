import numpy as np
import pytest

from longca import plugin
from longca_cp import plugin as cp
from longca_plugin_te.layout import bshd_rank_tokens, padded_cu_seqlens, thd_rank_tokens
from longca_plugin_te.masks import TE_MASKS, window_of
from longca_plugin_te.options import refusal, resolve


def _problem(**kw):
    return plugin.Problem(**{**dict(kernel="te", strategy="te-cp", mask="causal", seqlen=4096, heads_q=8, heads_kv=8,
                                    head_dim=128, dtype="bfloat16", world_size=4, device="cuda"), **kw})


def test_registered_and_unavailable_here_with_the_reason():
    registry = plugin.get_registry()
    assert set(registry.kernel("te").masks) == set(TE_MASKS)
    assert registry.strategy("te-cp").inner_kernels == ("te",)
    reason = registry.kernel("te").available()
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        assert reason.startswith("transformer_engine is not installed")


def test_options():
    assert resolve(_problem(), {}) == {"cp_comm_type": "p2p", "a2a_degree": 2}
    with pytest.raises(plugin.LongcaError, match="cp_comm_type='ring' is not one of p2p, a2a, a2a\\+p2p, all_gather"):
        resolve(_problem(), {"cp_comm_type": "ring"})
    with pytest.raises(plugin.LongcaError, match="has no option layout"):
        resolve(_problem(), {"layout": "zigzag"})


@pytest.mark.parametrize(("kw", "options", "want"), [
    ({}, {}, None),
    ({"mask": "share_question"}, {}, "no attn_mask_type / window / thd form"),
    ({"mask": "causal_document"}, {"cp_comm_type": "a2a"}, "thd (document) format with p2p only"),
    ({"mask": "sliding_window_causal"}, {}, "sliding window with a2a or all_gather only"),
    ({"mask": "sliding_window_causal"}, {"cp_comm_type": "all_gather"}, None),
    ({"heads_q": 6, "heads_kv": 6}, {"cp_comm_type": "a2a"}, "6:6 heads do not divide over the 4 ranks"),
    ({"heads_kv": 1}, {"cp_comm_type": "a2a+p2p"}, "8:1 heads do not divide over the 2 ranks"),
    ({}, {"cp_comm_type": "a2a+p2p", "a2a_degree": 3}, "a2a_degree=3 does not divide the 4 ranks"),
    ({"seqlen": 4100}, {}, "not a multiple of 2 x 4 ranks"),
    ({"device": "cpu"}, {}, "TransformerEngine runs on CUDA GPUs only"),
])
def test_refusals(kw, options, want):
    got = refusal(_problem(**kw), resolve(_problem(**kw), options))
    assert got is None if want is None else want in got


def test_windows_are_the_masks_own():
    for name, want in (("sliding_window", (37, 37)), ("sliding_window_causal", (37, 0)), ("causal", (-1, 0)),
                       ("full", (-1, -1)), ("causal_document", (-1, 0))):
        mask = plugin.problem_mask(_problem(mask=name, seqlen=512, device="cpu", mask_params={"window": 37}
                                            if "window" in name else {}), 0)
        assert window_of(mask) == want


def test_thd_layout_is_tes_documented_example():
    """TE's attn_forward_func_with_cp docstring: seq_lens [8, 4], cp_size 2: GPU0 holds positions
    0 1 6 7 of sequence 0 and 0 3 of sequence 1; GPU1 holds 2 3 4 5 and 1 2."""
    bounds = [0, 8, 12]
    assert thd_rank_tokens(bounds, 2, 0).tolist() == [0, 1, 6, 7, 8, 11]
    assert thd_rank_tokens(bounds, 2, 1).tolist() == [2, 3, 4, 5, 9, 10]


def test_thd_layout_pads_documents_and_holds_every_token_once():
    bounds = np.array([0, 5, 6, 40, 41, 64])
    for world in (1, 2, 4):
        cu, cu_padded = padded_cu_seqlens(bounds, world)
        assert (np.diff(cu_padded) % (2 * world) == 0).all() and (np.diff(cu_padded) >= np.diff(cu)).all()
        parts = [thd_rank_tokens(bounds, world, r) for r in range(world)]
        assert len({len(p) for p in parts}) == 1 and len(parts[0]) * world == cu_padded[-1]
        real = np.concatenate([p[p >= 0] for p in parts])
        assert sorted(real.tolist()) == list(range(64))


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_bshd_order_is_longcas_zigzag(world):
    layout = cp.zigzag_layout(64 * world, world)
    for r in range(world):
        assert bshd_rank_tokens(64 * world, world, r).tolist() == \
            [i for a, b in layout.runs[r] for i in range(a, b)]


def test_backward_runs_once_per_forward():
    """TE's backward runs once per forward (seen on an H100): the kernel declares it, so each timed backward gets
    a fresh forward; te-cp, whose ranks repeat backwards of one forward, refuses `bwd` with the reason."""
    registry = plugin.get_registry()
    kernel, strategy = registry.kernel("te"), registry.strategy("te-cp")
    assert kernel.backward_once is True
    assert kernel.supports(_problem(direction="bwd")) is None
    reason = strategy.supports(_problem(direction="bwd"), resolve(_problem(), {}))
    assert "runs once per forward" in reason and "measure fwdbwd" in reason
    assert strategy.supports(_problem(direction="fwdbwd", device="cuda"), resolve(_problem(), {})) in (
        None, f"unavailable: {kernel.available()}")
