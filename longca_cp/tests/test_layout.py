"""CP building blocks without processes: layouts, cropped calls, lse merging, the double-ring schedule."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from longca import reference
from longca.errors import UnsupportedError
from longca.masks import slices as sl
from longca.masks.catalog import STATIC_MASKS
from longca.merge import OutputAccumulator, merge_
from longca.problem import Problem, build_mask
from longca_cp.calls import pair_calls, pair_table
from longca_cp.hybrid import default_head_degree, heads_unsupported, hybrid_unsupported, kv_repeat
from longca_cp.layout import Layout, contiguous, doc_zigzag, document_bounds, make_layout, merge_runs, subdivide, zigzag
from longca_testing.compare import FLOAT32_EPS, assert_close

pytestmark = pytest.mark.numerics  # float results: CI runs these again under another ATEN_CPU_CAPABILITY


def _global_index(layout: Layout, rank: int) -> np.ndarray:
    return np.concatenate([np.arange(a, b) for a, b in layout.runs[rank]])


def test_zigzag_holds_chunks_r_and_2w_minus_1_minus_r():
    lay = zigzag(32, 4)
    assert lay.runs[0] == ((0, 4), (28, 32))
    assert lay.runs[3] == ((12, 20),)  # chunks 3 and 4 touch: one run
    assert zigzag(8, 1).runs == (((0, 8),),)
    assert lay.local_len == 8 and not lay.rank_major and contiguous(32, 4).rank_major


def test_layouts_refuse_lengths_they_cannot_split():
    with pytest.raises(UnsupportedError, match="multiple of 2 x 4"):
        zigzag(36, 4)
    with pytest.raises(UnsupportedError):
        contiguous(10, 4)


def test_subdivide_splits_each_ring_rank_in_order():
    lay = subdivide(zigzag(32, 2), 4)  # ring rank 0 holds [0, 8) and [24, 32)
    assert lay.world_size == 8
    assert [lay.runs[u] for u in range(4)] == [((0, 4),), ((4, 8),), ((24, 28),), ((28, 32),)]
    assert np.array_equal(np.concatenate([_global_index(lay, u) for u in range(4)]), _global_index(zigzag(32, 2), 0))


@pytest.mark.parametrize("make", [lambda: zigzag(48, 3), lambda: contiguous(48, 4),
                                  lambda: subdivide(zigzag(48, 2), 3)])
def test_take_and_assemble_are_inverse(make):
    lay = make()
    x = torch.arange(2 * 48 * 3).reshape(2, 48, 3)
    parts = lay.split(x)
    for r, part in enumerate(parts):
        assert torch.equal(part, x[:, torch.from_numpy(_global_index(lay, r))])
    assert torch.equal(lay.assemble(parts), x)


def test_merge_runs():
    assert merge_runs([(0, 4), (4, 8), (8, 8), (10, 12)]) == ((0, 8), (10, 12))


@pytest.mark.parametrize("mask_name", STATIC_MASKS)
def test_calls_reassemble_the_mask_between_any_two_ranks(mask_name):
    """Every (query rank, key rank) pair's calls cover exactly the global mask, documents cut or not."""
    seqlen = 2048 if mask_name == "block_causal_document" else 200
    problem = Problem(kernel="reference", mask=mask_name, seqlen=seqlen, sampler="uniform", seed=3,
                      mask_params={"window": 20} if "window" in mask_name else {})
    mask = build_mask(problem)
    dense = mask.dense()
    layouts = (zigzag(seqlen, 4), contiguous(seqlen, 2), subdivide(zigzag(seqlen, 2), 2),
               make_layout("doc_zigzag", seqlen, 4, mask.slices))
    for lay, merged in [(lay, False) for lay in layouts] + [(layouts[-1], True)]:
        for i in range(lay.world_size):
            for j in range(lay.world_size):
                rows, cols = _global_index(lay, i), _global_index(lay, j)
                got = np.zeros((len(rows), len(cols)), dtype=bool)
                calls = pair_table(mask.slices, lay.runs[i], lay.runs[j], merged).calls()
                assert not merged or len(calls) <= 1  # one varlen call per pair of buffers
                for c in calls:
                    block = sl.dense(c.slices, (0, c.q1 - c.q0), (0, c.k1 - c.k0))
                    assert not (got[c.q0:c.q1, c.k0:c.k1] & block).any(), "calls overlap"
                    got[c.q0:c.q1, c.k0:c.k1] |= block
                assert np.array_equal(got, dense[np.ix_(rows, cols)]), (mask_name, lay, i, j)


def test_document_bounds_are_the_independent_blocks():
    docs = np.cumsum([0, 10, 3, 20, 31])
    causal_docs = np.array([(a, b, a, b, sl.CAUSAL) for a, b in zip(docs[:-1], docs[1:], strict=True)])
    assert document_bounds(causal_docs, 64).tolist() == docs.tolist()
    assert document_bounds(np.array([(0, 64, 0, 64, sl.CAUSAL)]), 64).tolist() == [0, 64]
    # a block that sees an earlier one (share_question-like) joins it
    joined = np.concatenate([causal_docs, [(13, 33, 0, 10, sl.FULL)]])
    assert document_bounds(joined, 64).tolist() == [0, 33, 64]


def test_doc_zigzag_cuts_every_document_in_2r_pieces():
    bounds = np.cumsum([0, 10, 3, 20, 31])
    lay = doc_zigzag(64, 2, bounds)  # 2R = 4 pieces: documents of 10, 3, 20, 31 -> pieces of 2, 0, 5, 7
    assert lay.local_len == 32
    held = [set(_global_index(lay, r).tolist()) for r in range(2)]
    for a, n in ((0, 2), (13, 5), (33, 7)):  # rank 0: pieces 0 and 3, rank 1: pieces 1 and 2
        assert set(range(a, a + n)) | set(range(a + 3 * n, a + 4 * n)) <= held[0]
        assert set(range(a + n, a + 3 * n)) <= held[1]
    # one document is the sequence-level zigzag; the leftovers (here 2, 3, 0 and 3 tokens) are shared out
    assert doc_zigzag(64, 4, [0, 64]).runs == zigzag(64, 4).runs
    assert doc_zigzag(64, 4, bounds).local_len == 16
    with pytest.raises(UnsupportedError):
        doc_zigzag(36, 4, [0, 36])


def test_documents_do_cross_zigzag_chunks_in_the_tests():
    mask = build_mask(Problem(kernel="reference", mask="causal_document", seqlen=256, sampler="uniform"))
    edges = set(range(0, 257, 256 // 8))
    bounds = set(np.cumsum(mask.params["doc_lens"]).tolist())
    assert len(mask.params["doc_lens"]) > 4 and bounds - edges


def test_merge_of_key_halves_equals_whole_attention():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 40, 4, 8, generator=gen) for _ in range(3))
    mask = build_mask(Problem(kernel="reference", mask="causal_document", seqlen=40, sampler="uniform"))
    whole, lse_whole = reference.forward_lse(q, k, v, mask.slices)
    acc = OutputAccumulator(q)
    for ka, kb in ((0, 17), (17, 40)):
        for c in pair_calls(mask.slices, [(0, 40)], [(ka, kb)]):
            out, lse = reference.forward_lse(q[:, c.q0:c.q1], k[:, ka + c.k0:ka + c.k1], v[:, ka + c.k0:ka + c.k1],
                                             c.slices)
            acc.add(c.q0, c.q1, out, lse)
    out, lse = acc.result(torch.float32)
    # two sums of <= 40 terms, in another order, then a merge of a few roundings: well within 100 eps
    assert_close(out, whole, 100 * FLOAT32_EPS, "out")
    assert_close(lse, lse_whole, 100 * FLOAT32_EPS, "lse")


def test_merge_keeps_empty_rows_empty():
    out = torch.zeros(1, 3, 1, 2)
    lse = torch.full((1, 1, 3), -float("inf"))
    merge_(out, lse, torch.ones(1, 3, 1, 2), torch.tensor([[[-float("inf"), 0.0, 1.0]]]))
    assert torch.isinf(lse[0, 0, 0]) and torch.equal(out[0, 0], torch.zeros(1, 2))
    assert torch.equal(out[0, 1:], torch.ones(2, 1, 2)) and not torch.isnan(out).any()


@pytest.mark.parametrize("size,windows", [(1, 1), (4, 1), (4, 2), (8, 2), (8, 4), (6, 3)])
def test_double_ring_visits_every_source_once(size, windows):
    from longca_cp.schedule import RingSchedule

    problem = Problem(kernel="reference", mask="causal", seqlen=16 * size, world_size=size)
    schedule = RingSchedule(problem, build_mask(problem).slices, 1, windows, "zigzag")
    for position in range(size):
        seen = [schedule.source(position, o, t) for o in range(windows) for t in range(schedule.window)]
        assert sorted(seen) == list(range(size)) and seen[0] == position
        steps = schedule.step_of(position, np.array(seen))
        assert list(steps) == list(range(size))  # step_of inverts source


def _problem(**kw):
    base = dict(kernel="reference", mask="causal", seqlen=256, heads_q=8, heads_kv=8, world_size=4)
    return Problem(**{**base, **kw})


def test_head_parallel_refusals_and_gqa_repeat():
    assert heads_unsupported(6, 6, 4) == "6 query heads do not divide over 4 head-parallel ranks"
    assert kv_repeat(8, 2, 4) == 2 and kv_repeat(8, 8, 4) == 1 and kv_repeat(8, 1, 8) == 8
    assert heads_unsupported(8, 2, 8) is None and heads_unsupported(12, 4, 6) is None  # KV heads x3


def test_grid_refusals():
    assert "does not divide the world size" in hybrid_unsupported(_problem(), 3, 1, "zigzag")
    assert "windows do not divide" in hybrid_unsupported(_problem(), 1, 3, "zigzag")
    assert "multiple of 8" in hybrid_unsupported(_problem(seqlen=260), 1, 1, "zigzag")
    assert hybrid_unsupported(_problem(seqlen=260), 1, 1, "contiguous") is None
    assert hybrid_unsupported(_problem(world_size=8), 2, 2, "zigzag") is None


def test_default_head_degree(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert default_head_degree(_problem(world_size=8), 4) == 4
    assert default_head_degree(_problem(world_size=8, heads_q=6, heads_kv=6), 4) == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert default_head_degree(_problem(world_size=8), 4) == 2
