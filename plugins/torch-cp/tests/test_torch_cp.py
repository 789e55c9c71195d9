import pytest

import longca_testing as testing
from longca import plugin
from longca_cp import plugin as cp

# conformance on gloo ranks at world sizes 1 and 2: inner flex (torch's FlexAttention CP) runs forward on CPU
# (torch has no flex backward on CPU), every static mask against the reference; inner sdpa is refused on CPU
# (numerics: float results; slow: spawns gloo ranks)
test_conformance_flex = pytest.mark.slow(pytest.mark.numerics(
    testing.strategy_conformance_tests("torch-cp", world_sizes=(1, 2), inner="flex")))
test_conformance_sdpa = pytest.mark.slow(pytest.mark.numerics(
    testing.strategy_conformance_tests("torch-cp", world_sizes=(1,), inner="sdpa")))


def _problem(**kw):
    return plugin.Problem(**{**dict(kernel="flex", strategy="torch-cp", mask="causal", seqlen=1024, heads_q=8,
                                    heads_kv=2, head_dim=16, dtype="float32", world_size=4, device="cpu"), **kw})


def _spec():
    return plugin.get_registry().strategy("torch-cp")


def test_registered_with_every_static_mask_and_torch_inner_kernels():
    spec = _spec()
    assert set(plugin.STATIC_MASKS) <= set(plugin.get_registry().claimed_masks(spec.masks))
    assert spec.inner_kernels == ("sdpa", "flex")
    assert spec.option_variants(8, 8, 8) == [{}]


def test_defaults():
    spec = _spec()
    assert spec.resolve_options(_problem(), {}) == {"load_balance": "head-tail", "rotate": "allgather"}
    # torch's SDPA ring refuses load balancing without is_causal: the full mask defaults to none
    assert spec.resolve_options(_problem(kernel="sdpa", mask="full"), {})["load_balance"] == "none"
    assert spec.resolve_options(_problem(kernel="sdpa", mask="causal"), {})["load_balance"] == "head-tail"


def test_bad_options_are_one_line_errors():
    spec = _spec()
    with pytest.raises(plugin.LongcaError, match="has no option layout; it takes: load_balance, rotate"):
        spec.resolve_options(_problem(), {"layout": "zigzag"})
    with pytest.raises(plugin.LongcaError, match="load_balance='zigzag' is not one of head-tail, none"):
        spec.resolve_options(_problem(), {"load_balance": "zigzag"})


def test_exact_refusals():
    spec = _spec()
    ok = {"load_balance": "head-tail", "rotate": "allgather"}
    cpu_sdpa = spec.supports(_problem(kernel="sdpa"), ok)
    assert cpu_sdpa.startswith("torch's context_parallel shards only the CUDA SDPA kernels")
    assert "_scaled_dot_product_flash_attention_for_cpu" in cpu_sdpa
    gpu = dict(device="cuda")
    doc = _problem(kernel="sdpa", mask="causal_document", **gpu)
    assert "is_causal only (full or causal)" in spec.supports(doc, ok)
    assert "requires is_causal=True" in spec.supports(_problem(kernel="sdpa", mask="full", **gpu), ok)
    assert spec.supports(_problem(kernel="sdpa", mask="full", **gpu), {**ok, "load_balance": "none"}) is None
    assert spec.supports(_problem(kernel="sdpa", **gpu), {**ok, "rotate": "alltoall"}) is None
    assert spec.supports(_problem(), {**ok, "rotate": "alltoall"}) == \
        "rotate=alltoall: torch's FlexAttention CP only all-gathers K/V"
    assert "length 1280 is not a multiple of 4 ranks x 128" in spec.supports(_problem(seqlen=1280), ok)
    assert spec.supports(_problem(seqlen=1536, world_size=3), ok) is None


def test_other_inner_kernels_are_refused_by_the_runtime():
    assert cp.inner_unsupported(_problem(kernel="flex", direction="fwd")) is None
    assert cp.inner_unsupported(_problem(kernel="sdpa", device="cpu")) is None  # the strategy refuses it
    assert cp.inner_unsupported(_problem(kernel="reference")) == (
        "strategy torch-cp computes with its own library's attention: its inner kernel is sdpa or flex, not reference")


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_torch_head_tail_order_is_longcas_zigzag(world):
    """The plan's layout (longca's accounting and checks) is the order torch's load balancer cuts."""
    import torch
    from torch.distributed.tensor.experimental._context_parallel import _HeadTailLoadBalancer

    seqlen = 2 * world * 6
    order = _HeadTailLoadBalancer(seqlen, world, "cpu")._generate_indices()[0].tolist()
    layout = cp.zigzag_layout(seqlen, world)
    assert order == [i for runs in layout.runs for a, b in runs for i in range(a, b)]
    x = torch.arange(seqlen).view(1, seqlen, 1, 1)
    per_rank = seqlen // world
    assert all(torch.equal(layout.take(x, r).flatten(), torch.tensor(order[r * per_rank:(r + 1) * per_rank]))
               for r in range(world))
