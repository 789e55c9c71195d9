"""The published-baselines pricing variant (`longca_sim.baselines`): its byte counts, and that it touches
only the pricing it is set on."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from longca.problem import Problem, build_mask
from longca_cp.accounting import schedule_of
from longca_sim.baselines import BWD_KEYS, BWD_ROWS, FWD_KEYS, FWD_ROWS, PublishedBaselines, te_repeat_units
from longca_sim.simulate import Pricing, default_pricing, simulate_schedule_all
from longca_sim.topology import preset


def _problem(strategy: str, world: int = 8, mask: str = "causal") -> Problem:
    return Problem(kernel="fa3", mask=mask, seqlen=1024 * world, heads_q=64, heads_kv=8, head_dim=128,
                   strategy=strategy, world_size=world, device="cuda", direction="fwdbwd", seed=0)


def _both(problem: Problem, options: dict, backend: str = "fa3") -> tuple[dict, dict, Pricing]:
    plain = default_pricing("fa3", preset("h100-sxm"))
    variant = dataclasses.replace(plain, baseline=PublishedBaselines(backend))
    sched = schedule_of(problem, build_mask(problem, 0), options)
    a, b = simulate_schedule_all(sched, 1.0, [plain, variant])
    return a, b, plain


def test_fa3_copies_are_the_unpad_and_pad_bytes_of_each_call():
    # Ulysses at 8 GPUs: one call a rank over the whole sequence on 8 query heads and 1 KV head
    problem = _problem("ulysses")
    plain, variant, pricing = _both(problem, {})
    hbm = pricing.topology.hbm_gbs * 1e6
    q = problem.seqlen * 8 * 128 * 2
    k = problem.seqlen * 1 * 128 * 2
    assert variant["fwd"]["ms_max"] - plain["fwd"]["ms_max"] == pytest.approx((FWD_ROWS * q + FWD_KEYS * k) / hbm)
    assert variant["bwd"]["ms_max"] - plain["bwd"]["ms_max"] == pytest.approx((BWD_ROWS * q + BWD_KEYS * k) / hbm)
    assert (FWD_ROWS, FWD_KEYS, BWD_ROWS, BWD_KEYS) == (5, 4, 9, 10)


def test_te_ulysses_makes_no_copies_and_te_rings_repeat_kv_in_the_backward():
    plain, variant, _ = _both(_problem("ulysses"), {}, "te")
    assert variant["fwd"]["ms_max"] == plain["fwd"]["ms_max"] and variant["bwd"]["ms_max"] == plain["bwd"]["ms_max"]
    plain, variant, _ = _both(_problem("ring-p2p"), {"layout": "doc_zigzag"}, "te")
    assert variant["fwd"]["ms_max"] == plain["fwd"]["ms_max"] and variant["bwd"]["ms_max"] > plain["bwd"]["ms_max"]
    assert te_repeat_units(8) == (18, 14, 18)


def test_ring_allgather_variant_prices_full_length_dkv_and_a_bf16_reduce_scatter():
    problem = _problem("ring-allgather", mask="causal_document")
    baseline = PublishedBaselines("fa3")
    sched = schedule_of(problem, build_mask(problem, 0), {"layout": "doc_zigzag"})
    ops = sched.comm(0)
    scatter = [op for op in ops if op.kind == "reduce_scatter"]
    assert [op.nbytes // 2 for op in scatter] == [op.nbytes for op in baseline.gather_comm(problem, ops)
                                                  if op.kind == "reduce_scatter"]
    fwd, bwd = baseline.gather_ms(problem, 1.0)
    assert bwd > fwd > 0
    plain, variant, _ = _both(problem, {"layout": "doc_zigzag"})
    assert variant["bwd"]["ms_max"] > plain["bwd"]["ms_max"] and variant["fwd"]["ms_max"] > plain["fwd"]["ms_max"]


def test_key_block_pricing_changes_nothing_when_queries_and_keys_are_the_same_blocks():
    # one square full slice: as many row blocks as key blocks, so per key block = per row block
    from longca.masks import slices as sl
    from longca_cp.calls import pair_table

    fit = default_pricing("fa3", preset("h100-sxm")).bwd
    table = pair_table(sl.as_array([(0, 1024, 0, 1024, sl.FULL)]), [(0, 1024)], [(0, 1024)])
    # one document on a ring of one: the source's two calls have one segment each, so no empty block either
    delta = PublishedBaselines().gather_backward_kernel_ms(table, np.zeros(len(table), dtype=np.int64),
                                                           np.array([0]), 64, fit, np.array([1024]), 1)
    assert delta == pytest.approx([fit.launch_ms])  # only the second call's launch


def test_source_gather_segments_follow_the_source_cu_seqlens():
    from longca_sim.baselines import source_gather_segments

    # W = 2: documents padded to a multiple of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2
    lengths = np.array([10, 3, 1])  # pieces of 3, 1 and 1 tokens
    (q0, k0), (q3, k3) = source_gather_segments(lengths, 2, 0)
    assert q0.tolist() == [3, 1, 1] and k0.tolist() == [3, 1, 1]
    assert q3.tolist() == [1, 0, 0] and k3.tolist() == [10, 0, 0]  # empty documents stay at length zero
    (q1, k1), (q2, k2) = source_gather_segments(lengths, 2, 1)
    assert q1.tolist() == [3, 1, 0] and k1.tolist() == [6, 2, 0]
    assert q2.tolist() == [3, 1, 0] and k2.tolist() == [9, 3, 0]


def test_the_source_gather_grid_replaces_longca_own_in_the_variant():
    # many short documents and one long one: the source's call per half launches the long one's key blocks for
    # every document; the variant prices that many empty blocks more than longca's own call of the same rank
    from dataclasses import replace

    from longca.masks import slices as sl
    from longca_cp.calls import pair_table

    fit = replace(default_pricing("fa3", preset("h100-sxm")).bwd, empty_block_ms=1.0)
    lengths = np.array([4096] + [128] * 32)
    table = pair_table(sl.as_array([(0, 64, 0, 128, sl.FULL)]), [(0, 64)], [(0, 128)])
    none = replace(fit, empty_block_ms=0.0)
    base = PublishedBaselines()
    args = (table, np.zeros(1, dtype=np.int64), np.array([0]), 1)
    extra = base.gather_backward_kernel_ms(*args, fit, lengths, 2) - base.gather_backward_kernel_ms(*args, none,
                                                                                                   lengths, 2)
    # rank 0 of 2: chunk 0 keys (1024 and 32 tokens: 8 blocks and 1), chunk 3 keys (4096 and 128: 32 and 1)
    assert extra == pytest.approx([(33 * 8 - (8 + 32)) + (33 * 32 - (32 + 32))])


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend"):
        PublishedBaselines("flash")
