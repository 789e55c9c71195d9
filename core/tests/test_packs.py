"""The `magi-packs` sampler: MagiAttention's CP-benchmark packs, rebuilt from its histogram."""
import numpy as np
import pytest

from longca.errors import LongcaError
from longca.packs import MIN_CHUNK, pack_at, sample_magi_packs, source_packs, source_pieces
from longca.plugins import get_registry
from longca.problem import Problem, build_mask
from longca.samplers import load_magi


def _packed_in_order(pieces: list[int], total: int) -> list[list[int]]:
    """Packing as the source describes it, one piece at a time: a piece that does not fit is split and its
    remainder opens the next pack; only whole packs are made."""
    packs, current, left = [], [], total
    queue = list(pieces)
    while queue and len(packs) < sum(pieces) // total:
        piece = queue.pop(0)
        if piece <= left:
            current.append(piece)
            left -= piece
        else:
            current.append(left)
            queue.insert(0, piece - left)
            left = 0
        if left == 0:
            packs.append(current)
            current, left = [], total
    return packs


def test_pack_at_is_packing_in_order():
    rng = np.random.default_rng(7)
    total = 100
    pieces = [int(x) for x in rng.integers(1, 26, size=400)]  # at most a quarter of a pack, as the source's
    ends = np.cumsum(pieces, dtype=np.int64)
    expected = _packed_in_order(pieces, total)
    assert len(expected) == sum(pieces) // total
    for k, pack in enumerate(expected):
        assert pack_at(ends, k, total).tolist() == pack


def test_pieces_are_the_histogram_cut_at_a_quarter():
    total = 65536
    lengths, counts = load_magi()
    pieces = source_pieces(total, 0.25)
    chunk = total // 4
    assert pieces.max() == chunk
    assert int(pieces.astype(np.int64).sum()) == int((lengths * counts).sum())
    assert len(pieces) == int(((lengths // chunk) * counts).sum() + counts[lengths % chunk > 0].sum())


def test_pack_order_is_the_sources_shuffle_of_its_list():
    """The packs come out in the order the source's second shuffle (of a Python list of packs, on the same rng
    after its shuffle of the pieces) gives them."""
    total = 1 << 20
    rng = np.random.default_rng(42)
    pieces = source_pieces(total, 0.25)
    rng.shuffle(pieces)
    ends = np.cumsum(pieces, dtype=np.int64)
    packs = [pack_at(ends, k, total) for k in range(int(ends[-1]) // total)]
    rng.shuffle(packs)
    got = source_packs(total, 0.25, 42, 4)
    for mine, theirs in zip(got, packs[:4], strict=True):
        assert np.array_equal(mine, theirs)


def test_draw_i_is_pack_i():
    reg = get_registry()
    problem = Problem(kernel="reference", mask="causal_document", seqlen=65536, sampler="magi-packs")
    packs = source_packs(65536, 0.25, 42, 32)
    for i in range(3):
        m = build_mask(problem, i, reg)
        assert float(m.area) == float((packs[i] * (packs[i] + 1) // 2).sum())
    shifted = problem.with_(sampler_params={"first": 1})
    assert build_mask(shifted, 0, reg).area == build_mask(problem, 1, reg).area
    assert build_mask(problem, 0, reg).area != build_mask(problem, 1, reg).area
    sampler = reg.sampler("magi-packs")
    assert sampler.sample(65536, np.random.default_rng(0), draw=2).tolist() == packs[2].tolist()
    assert sampler.sample(65536, np.random.default_rng(9), draw=2).tolist() == packs[2].tolist()  # rng unused


def test_short_lengths_draw_from_magi_and_bad_ratios_are_refused_in_one_line():
    from longca.samplers import sample_magi

    problem = Problem(kernel="reference", mask="causal_document", seqlen=MIN_CHUNK * 2, sampler="magi-packs")
    sampler = get_registry().sampler("magi-packs")
    for total in (1, 1000, MIN_CHUNK * 2):
        assert sampler.sample(total, np.random.default_rng(5)).tolist() == \
            sample_magi(total, np.random.default_rng(5)).tolist()
    with pytest.raises(LongcaError, match="below 1024 tokens a chunk"):
        sample_magi_packs(MIN_CHUNK * 2, np.random.default_rng(0))
    with pytest.raises(LongcaError, match="chunk_ratio"):
        build_mask(problem.with_(seqlen=65536, sampler_params={"chunk_ratio": 2}), 0)
