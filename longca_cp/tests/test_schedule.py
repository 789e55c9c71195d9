"""The schedule (calls and transfers per rank) against the real strategies and the exact crops."""
from __future__ import annotations

import numpy as np
import pytest

from longca.masks import slices as sl
from longca.plugins import get_registry
from longca.problem import Problem, build_mask
from longca_cp.accounting import balance, link_bytes, rank_totals, schedule_of
from longca_cp.calls import buffer_passes, buffers_table, key_buffers, pair_calls, sources_table
from longca_cp.layout import contiguous, make_layout, zigzag


def resolve(problem, options):
    """The strategy's options with defaults filled, from its spec (what longca_runner.cp.measure.resolve does)."""
    return get_registry().strategy(problem.strategy).resolved_options(problem, options)


def crop_pairs(mask_slices, q_runs, k_runs):
    """The calls one crop at a time (how `pair_calls` worked before it was vectorised)."""
    out, qo = [], 0
    for qa, qb in q_runs:
        ko = 0
        for ka, kb in k_runs:
            part = sl.crop(mask_slices, (qa, qb), (ka, kb))
            if len(part):
                g = part[:, 0].min(), part[:, 1].max(), part[:, 2].min(), part[:, 3].max()
                rel = part.copy()
                rel[:, 0:2] -= g[0]
                rel[:, 2:4] -= g[2]
                out.append((qo + g[0] - qa, qo + g[1] - qa, ko + g[2] - ka, ko + g[3] - ka, rel.tolist()))
            ko += kb - ka
        qo += qb - qa
    return out


@pytest.mark.parametrize("mask", ["full", "causal", "causal_document", "full_document", "sliding_window",
                                  "share_question", "prefix_lm_document", "global_sliding_window"])
def test_vectorised_calls_are_the_exact_crops(mask):
    for seqlen, world in [(1024, 4), (960, 3)]:
        m = build_mask(Problem(kernel="reference", mask=mask, seqlen=seqlen, sampler="uniform"), 0)
        for layout in (zigzag(seqlen, world), contiguous(seqlen, world)):
            for r in range(world):
                table, owner = sources_table(m.slices, layout.runs[r], layout.runs)
                at_once = [(c.q0, c.q1, c.k0, c.k1, c.slices.tolist()) for c in table.calls()]
                one_by_one = []
                for j in range(world):
                    want = crop_pairs(m.slices, layout.runs[r], layout.runs[j])
                    got = [(c.q0, c.q1, c.k0, c.k1, c.slices.tolist())
                           for c in pair_calls(m.slices, layout.runs[r], layout.runs[j])]
                    assert got == want
                    one_by_one += want
                assert at_once == one_by_one
                assert list(owner) == sorted(owner)
                assert [int(a) for a in table.area] == [sl.area(np.array(c[4]).reshape(-1, 5)) for c in at_once]


@pytest.mark.parametrize("mask", ["causal", "causal_document", "full_document", "sliding_window", "share_question"])
def test_buffers_at_once_are_each_buffer_alone(mask):
    """`buffers_table` (what the simulator prices, a pass of ring positions at a time) lists, buffer after
    buffer, exactly the calls `sources_table` gives each query buffer alone; `buffer_passes` covers them all."""
    seqlen, world = 4096, 8
    m = build_mask(Problem(kernel="reference", mask=mask, seqlen=seqlen, sampler="uniform"), 0)
    for kind in ("zigzag", "contiguous", "doc_zigzag"):
        runs = make_layout(kind, seqlen, world, m.slices).runs
        merged = kind == "doc_zigzag"
        one_each, together = (buffer_passes(m.slices, runs, key_buffers(runs), budget) for budget in (1, 10**9))
        assert [list(p) for p in one_each] == [[b] for b in range(world)] and list(together[0]) == list(range(world))
        for chunk in together:
            table, buf, source = buffers_table(m.slices, [runs[b] for b in chunk], runs, None, merged)
            assert list(buf) == sorted(buf)
            for i, b in enumerate(chunk):
                alone, owner = sources_table(m.slices, runs[b], runs, None, merged)
                mine = buf == i
                for name in ("q0", "q1", "k0", "k1", "area"):
                    assert np.array_equal(getattr(table, name)[mine], getattr(alone, name)), (kind, name)
                assert np.array_equal(source[mine], owner)
                got = [c.slices.tolist() for c in table.calls(mine)]
                assert got == [c.slices.tolist() for c in alone.calls()]


def _problem(strategy, world=4, mask="causal_document"):
    return Problem(kernel="reference", mask=mask, seqlen=128, heads_q=4, heads_kv=2, head_dim=8, dtype="float32",
                   direction="bwd", sampler="uniform", strategy=strategy, world_size=world)


def test_balance_of_a_large_ring_is_exact_and_linear():
    world = 256
    problem = Problem(kernel="reference", mask="causal", seqlen=world * 1024, heads_q=64, heads_kv=8,
                      head_dim=128, strategy="ring-p2p", world_size=world)
    mask = build_mask(problem, 0)
    totals = rank_totals(schedule_of(problem, mask, resolve(problem, {})))
    assert totals.area.sum() == pytest.approx(mask.area)
    assert totals.area.max() / totals.area.mean() - 1 < 1e-3  # zigzag balances causal exactly (up to diagonals)
    b = balance(problem.with_(strategy="ulysses", world_size=64, seqlen=64 * 1024), build_mask(
        problem.with_(seqlen=64 * 1024), 0), {})
    assert b["imbalance_pct"] == pytest.approx(0.0) and b["calls_max"] == 1
    q_bytes = 1024 * 64 * 128 * 2  # KV heads are repeated 8 times for 64 ranks: K and V weigh as much as Q
    assert b["comm_bytes_fwd_max"] == 4 * (q_bytes * 63 // 64)  # all-to-all of q, k, v, out


def test_link_bytes_follow_the_bus_convention():
    from longca_cp.schedule import CommOp

    assert link_bytes(CommOp("fwd", "all_gather", "k", 800, tuple(range(8)))) == 700
    assert link_bytes(CommOp("fwd", "p2p", "k", 800, (0, 1))) == 800
