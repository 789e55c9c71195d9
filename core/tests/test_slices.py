"""The slice geometry: normalisation, cropping, area, against brute force on random bands."""
import numpy as np
import pytest

from longca.masks import slices as sl


def brute_band(s, q0, q1, k0, k1, dlo, dhi):
    q, k = np.arange(s)[:, None], np.arange(s)[None, :]
    return (q >= q0) & (q < q1) & (k >= k0) & (k < k1) & (k - q >= dlo) & (k - q <= dhi)


@pytest.mark.parametrize("seed", range(40))
def test_band_to_slices_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    s = 60
    q0, q1 = sorted(rng.integers(0, s + 1, 2))
    k0, k1 = sorted(rng.integers(0, s + 1, 2))
    dlo, dhi = sorted(rng.integers(-s, s, 2))
    if rng.random() < 0.3:
        dlo = -(1 << 62)
    if rng.random() < 0.3:
        dhi = 1 << 62
    pieces = sl.band_to_slices(q0, q1, k0, k1, dlo, dhi)
    want = brute_band(s, q0, q1, k0, k1, dlo, dhi)
    assert np.array_equal(sl.dense(pieces, (0, s), (0, s)), want)
    assert sl.area(pieces) == want.sum()
    for piece in pieces:  # normalised: no empty rows
        assert sl.dense([piece], (0, s), (0, s))[piece[0]:piece[1]].any(axis=1).all()


@pytest.mark.parametrize("seed", range(20))
def test_crop_matches_dense_window(seed):
    rng = np.random.default_rng(seed)
    s = 80
    slices = [(0, 20, 0, 20, sl.CAUSAL), (20, 50, 0, 20, sl.FULL), (20, 50, 20, 50, sl.CAUSAL),
              (50, 80, 30, 80, sl.BI_CAUSAL), (50, 70, 0, 10, sl.INV_CAUSAL)]
    full = sl.dense(slices, (0, s), (0, s))
    qa, qb = sorted(rng.integers(0, s + 1, 2))
    ka, kb = sorted(rng.integers(0, s + 1, 2))
    part = sl.crop(slices, (qa, qb), (ka, kb), relative=True)
    got = sl.dense(part, (0, qb - qa), (0, kb - ka)) if qb > qa and kb > ka else np.zeros((qb - qa, kb - ka), bool)
    assert np.array_equal(got, full[qa:qb, ka:kb])


def test_typed_slice_semantics():
    # CAUSAL aligned bottom-right, INV_CAUSAL top-left, on a 2x4 rectangle
    causal = sl.dense([(0, 2, 0, 4, sl.CAUSAL)], (0, 2), (0, 4))
    assert causal.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    inv = sl.dense([(0, 2, 0, 4, sl.INV_CAUSAL)], (0, 2), (0, 4))
    assert inv.tolist() == [[1, 1, 1, 1], [0, 1, 1, 1]]
    bi = sl.dense([(0, 2, 0, 4, sl.BI_CAUSAL)], (0, 2), (0, 4))
    assert bi.tolist() == [[1, 1, 1, 0], [0, 1, 1, 1]]


def test_flashmask_refuses_three_intervals():
    slices = [(0, 2, 0, 1, sl.FULL), (4, 6, 0, 1, sl.FULL), (8, 10, 0, 1, sl.FULL)]
    with pytest.raises(ValueError, match="two"):
        sl.flashmask_bounds(slices, 12, 1)
