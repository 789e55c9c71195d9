"""The kernel cost model's features and its rule for keeping the diagonal term."""
from __future__ import annotations

import json

import numpy as np
import pytest

from longca.masks import slices as sl
from longca_sim.costmodel import FEATURES, NAMES, _choose_form, load_fits, slice_features


def test_diagonal_row_blocks_count_only_slices_that_cross_a_diagonal():
    slices = np.array([[0, 300, 0, 300, sl.CAUSAL], [300, 556, 300, 556, sl.FULL],
                       [556, 812, 556, 812, sl.BI_CAUSAL]])
    rows, padded, diagonal = slice_features(slices)
    assert rows.tolist() == [3, 2, 2]
    assert diagonal.tolist() == [3, 0, 4]  # a bi-causal slice crosses two diagonals
    assert padded[1] == 2 * 2 * 128 * 128  # a full slice: whole tiles


def _rows(diagonal_ms: float, n: int = 30) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = np.column_stack([np.ones(n), rng.uniform(1e3, 1e5, n), rng.uniform(1e8, 1e11, n), rng.uniform(0, 1e3, n),
                         rng.uniform(0, 1e5, n)])
    t = x @ np.array([0.02, 4e-5, 1.4e-9, 1e-4, diagonal_ms]) * rng.uniform(0.98, 1.02, n)
    return x, t


def _pad(x: np.ndarray) -> np.ndarray:
    return np.column_stack([x, np.zeros((len(x), len(FEATURES) - x.shape[1]))])


def test_the_diagonal_term_is_kept_only_where_it_predicts_left_out_rows_better():
    x, t = _rows(diagonal_ms=4e-5)
    x = _pad(x)  # no token term, no shortfall below any floor
    kept, chosen = _choose_form(x, t, np.zeros(len(t), bool))
    assert kept[NAMES.index("diagonal_ms")] > 0 and chosen["diagonal"]
    x, t = _rows(diagonal_ms=0.0)
    x = _pad(x)
    dropped, chosen = _choose_form(x, t, np.zeros(len(t), bool))
    assert dropped[NAMES.index("diagonal_ms")] == 0.0 and not chosen["diagonal"]
    tile = [c for c in chosen["candidates"] if c["floor"] == "tile"]
    with_d, without = (c["score"] for c in sorted(tile, key=lambda c: c["diagonal"], reverse=True))
    assert with_d >= without


def test_the_form_is_the_one_with_the_lowest_held_out_error_on_one_gpu_rows():
    """Short-segment rows whose per-call floor differs from the dense rows' (as measured) are fitted jointly;
    rows that only add per-segment cost keep the dense coefficients; either way the chosen form's held-out
    score is the lowest of the candidates (the rule sees nothing but the rows it is given)."""
    rng = np.random.default_rng(1)
    x, t = _rows(diagonal_ms=0.0, n=40)
    x = _pad(np.column_stack([x, rng.uniform(1e3, 1e5, 40)]))
    short = np.arange(40) >= 20
    x[short, 2] /= 1e3  # short calls: little area
    coef = np.array([0.02, 4e-5, 1.4e-9, 1e-4, 0.0, 0.0])
    for extra, expected in ((np.array([0, 0, 0, 2e-3, 0, 1e-6]), "dense + short terms"),
                            (np.array([0.2, 0, 0, 0, 0, 0]), "joint")):
        t = (x[:, :6] @ coef + short * (x[:, :6] @ extra)) * rng.uniform(0.99, 1.01, 40)
        _, chosen = _choose_form(x, t, short)
        assert chosen["segment_model"] == expected and chosen["floor"] == "tile"  # no shortfall: the simplest
        assert chosen["heldout_err_pct"]["score"] == min(c["score"] for c in chosen["candidates"])


def test_a_fit_file_without_the_diagonal_term_still_loads(tmp_path):
    fits, _ = load_fits()
    doc = json.loads(json.dumps({"kernels": {k: {d: f.__dict__ for d, f in by.items()} for k, by in fits.items()}}))
    for by in doc["kernels"].values():
        for f in by.values():
            f.pop("diagonal_ms"), f.pop("selection"), f.pop("floor")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    old, _ = load_fits(path)
    assert old["fa2"]["fwd"].diagonal_ms == 0.0
    assert old["fa2"]["fwd"].price(np.ones((1, len(FEATURES)))).shape == (1,)
    assert old["fa2"]["fwd"].floor == "tile"  # a fit file from before the floors prices as it did
    assert fits["fa2"]["fwd"].diagonal_ms == pytest.approx(fits["fa2"]["fwd"].coef[NAMES.index("diagonal_ms")])


def test_inside_checks_segment_lengths_and_counts():
    """A call counts as measured only when its segments' lengths and count lie in the fitted rows' ranges."""
    from dataclasses import replace

    from longca_cp.calls import pair_table
    from longca_sim.costmodel import call_shapes, table_features
    from longca_sim.segments import segment_slices

    fit = replace(load_fits()[0]["fa2"]["fwd"], work_range=(1.0, 1e15), segment_len_range=(8.0, 1024.0),
                  segment_count_range=(1.0, 256.0))
    for seg_len, count, expected in ((32, 16, True), (4, 16, False), (32, 1024, False)):
        table = pair_table(segment_slices(seg_len, count, "causal"), [(0, seg_len * count)], [(0, seg_len * count)])
        assert fit.inside(table_features(table, 64), call_shapes(table))[0] == expected
    assert fit.inside(table_features(table, 64))[0]  # without shapes: the work alone


def test_b200_preset_and_declared_speed_name_their_sources():
    from longca_sim.costmodel import DECLARED_SPEEDS, declared_fit
    from longca_sim.topology import preset

    topo = preset("b200")
    assert {"gpus_per_node", "nvlink", "infiniband", "latency", "hbm", "memory"} <= set(topo.sources)
    assert (topo.gpus_per_node, topo.memory_gb) == (8, 180)
    fit = load_fits()[0]["fa3"]["bwd"]
    fast = declared_fit(fit, "b200")
    assert fast.tile_ms == pytest.approx(fit.tile_ms / DECLARED_SPEEDS["b200"]["bwd"])
    assert (fast.launch_ms, fast.segment_ms) == (fit.launch_ms, fit.segment_ms)  # the per-call floor as measured
    assert "PR #2280" in DECLARED_SPEEDS["b200"]["source"]


def test_a_row_floor_prices_a_short_row_block_by_its_rows_and_leaves_long_ones_alone():
    """Floor "rows 4": a row block of 128 valid rows costs at least 4 tiles of work, one of 8 rows a quarter
    tile; a long causal slice is above the floor; "tile" is the whole-tile floor of `slice_features`."""
    from longca_sim.costmodel import FLOORS, _slice_work

    slices = np.array([[0, 128, 0, 128, sl.CAUSAL], [128, 136, 128, 136, sl.FULL], [136, 2184, 136, 2184, sl.CAUSAL]])
    nq, base, _, floors = _slice_work(slices)
    rows4 = floors[:, FLOORS.index("rows 4")]
    assert base[0] + rows4[0] == 4 * 128 * 128
    assert base[1] + rows4[1] == 4 * 8 * 128
    assert rows4[2] == 0.0
    assert (base + floors[:, 0]).tolist() == slice_features(slices)[1].tolist()


def test_empty_blocks_count_the_backward_grid_past_each_segment():
    from longca_cp.calls import pair_table
    from longca_sim.costmodel import empty_blocks, grid_empty_blocks

    # two segments in one call, 128 and 1,024 keys: the grid launches 8 key blocks for each, 1 + 8 of them work
    slices = sl.as_array([(0, 64, 0, 128, sl.FULL), (64, 128, 128, 1152, sl.FULL)])
    table = pair_table(slices, [(0, 128)], [(0, 1152)])
    assert empty_blocks(table, 4).tolist() == [4 * (2 * 8 - 9)]
    # one segment, or segments of one key length: no empty block
    assert empty_blocks(pair_table(slices[:1], [(0, 64)], [(0, 128)]), 4).tolist() == [0]
    # a caller that keeps zero-length segments in the batch launches blocks for them too
    assert grid_empty_blocks(np.array([64, 0, 64]), np.array([1024, 0, 128]), 2) == 2 * (3 * 8 - 9)


def test_the_empty_block_coefficient_is_fitted_on_the_residuals_alone():
    from longca_sim.costmodel import _fit_empty

    rng = np.random.default_rng(1)
    pred = rng.uniform(1.0, 5.0, 20)
    empty = np.where(np.arange(20) < 12, rng.uniform(1e4, 1e6, 20), 0.0)
    t = pred + 4e-6 * empty
    coef, info = _fit_empty(empty, t, pred)
    assert coef == pytest.approx(4e-6) and info["rows"] == 12
    assert info["median_err_pct_after"] == pytest.approx(0.0, abs=1e-9)
    assert info["median_err_pct_before"] > 1.0
    # never negative, and nothing to fit without empty blocks
    assert _fit_empty(empty, pred - 4e-6 * empty, pred)[0] == 0.0
    assert _fit_empty(np.zeros(20), t, pred) == (0.0, {"rows": 0})


def test_the_shipped_fit_prices_empty_blocks_only_for_kernels_whose_backward_launches_them():
    from longca_sim.costmodel import EMPTY_GRID_KERNELS

    fits, _ = load_fits()
    for kernel, by in fits.items():
        for direction, fit in by.items():
            if direction == "bwd" and kernel in EMPTY_GRID_KERNELS:
                assert fit.empty_block_ms > 0 and fit.selection["empty_blocks"]["rows"] > 0
            else:
                assert fit.empty_block_ms == 0.0
