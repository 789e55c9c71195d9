import numpy as np
import pytest

from longca import plugin
from longca_plugin_ffa.ranges import dense_from_ranges, ffa_ranges


def _mask(name: str, seqlen: int, seed: int):
    params = {"window": 37} if "window" in plugin.get_registry().mask(name).params else {}
    problem = plugin.Problem(kernel="reference", mask=name, seqlen=seqlen, heads_q=2, heads_kv=2, head_dim=16,
                             dtype="float32", sampler="uniform", sampler_params={"min_len": 1, "max_len": seqlen // 3},
                             seed=seed, mask_params=params)
    return plugin.problem_mask(problem, 0)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(set(plugin.STATIC_MASKS)))
def test_ranges_are_exactly_the_mask(name, seed):
    """FFA's reading of the converted ranges (its documented semantics) is the mask's dense form."""
    multiple = plugin.get_registry().mask(name).seqlen_multiple
    seqlen = multiple if multiple > 1 else 384 - 8 * seed
    mask = _mask(name, seqlen, seed)
    q_ranges, k_ranges, types = ffa_ranges(mask.slices)
    assert q_ranges.dtype == k_ranges.dtype == types.dtype == np.int32
    assert q_ranges.shape == k_ranges.shape == (len(types), 2)
    want = plugin.dense(mask.slices, (0, seqlen), (0, seqlen))
    assert np.array_equal(dense_from_ranges(q_ranges, k_ranges, types, seqlen, seqlen), want)


def test_every_range_type_is_read_as_ffa_reads_it():
    # 4 x 6 rectangles: causal is bottom-right aligned (2 extra keys per row), inverse causal top-left
    slices = [(0, 4, 0, 6, 1), (4, 8, 0, 6, 2), (8, 12, 0, 6, 3), (12, 16, 0, 6, 0)]
    got = dense_from_ranges(*ffa_ranges(slices), 16, 6)
    assert got[0].tolist() == [1, 1, 1, 0, 0, 0] and got[3].tolist() == [1] * 6
    assert got[4].tolist() == [1] * 6 and got[7].tolist() == [0, 0, 0, 1, 1, 1]
    assert got[8].tolist() == [1, 1, 1, 0, 0, 0] and got[11].tolist() == [0, 0, 0, 1, 1, 1]
    assert got[12:].all()
    with pytest.raises(ValueError, match="overlap"):
        dense_from_ranges(*ffa_ranges([(0, 2, 0, 2, 0), (1, 2, 1, 2, 0)]), 2, 2)


def test_registered_and_refused_here_with_the_reason():
    spec = plugin.get_registry().kernel("ffa")
    assert set(plugin.STATIC_MASKS) <= set(plugin.get_registry().claimed_masks(spec.masks))
    reason = spec.available()
    pytest.importorskip("torch")
    try:
        import magi_attention  # noqa: F401
    except ImportError:
        assert reason is not None and reason.startswith("magi_attention is not installed")
        assert "no wheel" in reason
