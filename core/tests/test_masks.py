"""Every static mask against its written definition, built independently from the drawn parameters."""
import numpy as np
import pytest

from longca.masks import slices as sl
from longca.masks.catalog import STATIC_MASKS
from longca.problem import Problem, build_mask


def doc_ids(lens):
    return np.repeat(np.arange(len(lens)), lens)


def definition(name: str, s: int, p: dict) -> np.ndarray:
    """The design's table, written with broadcasting over q (rows) and k (columns)."""
    q, k = np.arange(s)[:, None], np.arange(s)[None, :]
    w = p.get("window")
    if "doc_lens" in p:
        lens = np.asarray(p["doc_lens"])
        d = doc_ids(lens)
        dq, dk = d[:, None], d[None, :]
        same = dq == dk
        start = np.concatenate([[0], np.cumsum(lens)[:-1]])[d][:, None]
    if name == "full":
        return np.ones((s, s), bool)
    if name == "causal":
        return k <= q
    if name == "full_document":
        return same
    if name == "causal_document":
        return same & (k <= q)
    if name == "sliding_window":
        return np.abs(q - k) <= w
    if name == "sliding_window_causal":
        return (q - k >= 0) & (q - k <= w)
    if name == "share_question":
        return (same & (k <= q)) | ((dq > 0) & (dk == 0))
    if name == "causal_blockwise":
        return (same & (k <= q)) | ((dq == len(lens) - 1) & (k <= q))
    if name == "prefix_lm_causal":
        return ((q < p["prefix"]) & (k < p["prefix"])) | (k <= q)
    if name == "prefix_lm_document":
        end = start + p["prefix"]
        return same & (((q < end) & (k < end)) | (k <= q))
    if name == "global_sliding_window":
        g = p["global_tokens"]
        return (k < g) | (q < g) | (np.abs(q - k) <= w)
    if name == "block_causal_document":
        return same & (k // 1024 <= q // 1024)
    raise KeyError(name)


CASES = [(m, s, seed) for m in STATIC_MASKS for s, seed in ((1000, 0), (2048, 1), (3072, 2))
         if m != "block_causal_document" or s % 1024 == 0]


@pytest.mark.parametrize("name,seqlen,seed", CASES)
def test_static_mask_matches_definition(name, seqlen, seed):
    params = {"window": 37} if name in ("sliding_window", "sliding_window_causal", "global_sliding_window") else {}
    problem = Problem(kernel="reference", mask=name, seqlen=seqlen, seed=seed, sampler="uniform",
                      sampler_params={"min_len": 1, "max_len": 700}, mask_params=params)
    mask = build_mask(problem)
    want = definition(name, seqlen, mask.params)
    got = mask.dense()
    assert np.array_equal(got, want)
    assert mask.area == want.sum()
    if name.endswith("document") or name in ("share_question", "causal_blockwise"):
        assert sum(mask.params["doc_lens"]) == seqlen


@pytest.mark.parametrize("name", STATIC_MASKS)
def test_flashmask_bounds_reconstruct_mask(name):
    mask = build_mask(Problem(kernel="reference", mask=name, seqlen=2048, seed=3,
                              mask_params={"window": 100} if "window" in name else {}))
    b = mask.flashmask_bounds()
    q = np.arange(2048)[:, None]
    masked = ((q >= b["UTS"]) & (q < b["UTE"])) | ((q >= b["LTS"]) & (q < b["LTE"]))
    assert np.array_equal(~masked, mask.dense())


@pytest.mark.parametrize("name", STATIC_MASKS)
def test_masked_row_intervals_reconstruct_crops_padded_past_the_mask(name):
    """Any number of masked intervals a key: a crop padded with rows and keys no slice covers (as a kernel
    of 128-row blocks pads a CP piece) is exactly the crop, the padding masked."""
    mask = build_mask(Problem(kernel="reference", mask=name, seqlen=2048, seed=5,
                              mask_params={"window": 100} if "window" in name else {}))
    crop = mask.crop((301, 1700), (97, 1500))
    lq, lk = 1700 - 301 + 99, 1500 - 97 + 37  # padded past the crop's 1399 x 1403
    cols, starts, ends = sl.masked_row_intervals(crop, lq, lk)
    q = np.arange(lq)
    allowed = np.ones((lq, lk), dtype=bool)
    for c, a, b in zip(cols, starts, ends, strict=True):
        allowed[(q >= a) & (q < b), c] = False
    want = np.zeros((lq, lk), dtype=bool)
    want[:1399, :1403] = mask.dense()[301:1700, 97:1500]
    assert np.array_equal(allowed, want)


@pytest.mark.parametrize("name", STATIC_MASKS)
def test_visible_key_intervals_are_the_mask_row_by_row(name):
    """Each query row's visible keys as merged half-open intervals, sorted: exactly the dense mask."""
    mask = build_mask(Problem(kernel="reference", mask=name, seqlen=2048, seed=5,
                              mask_params={"window": 100} if "window" in name else {}))
    rows, starts, ends = sl.visible_key_intervals(mask.slices)
    rebuilt = np.zeros((2048, 2048), dtype=bool)
    for r, a, b in zip(rows, starts, ends, strict=True):
        rebuilt[r, a:b] = True
    assert np.array_equal(rebuilt, mask.dense())
    same_row = rows[1:] == rows[:-1]
    assert np.all(np.diff(rows) >= 0) and np.all(starts[1:][same_row] > ends[:-1][same_row])  # sorted, merged


@pytest.mark.parametrize("name", STATIC_MASKS)
@pytest.mark.parametrize("block", [(64, 64), (128, 64), (100, 300)])
def test_block_map_is_safe_and_tight(name, block):
    mask = build_mask(Problem(kernel="reference", mask=name, seqlen=2048, seed=4,
                              mask_params={"window": 150} if "window" in name else {}))
    bq, bk = block
    bmap = mask.block_map(bq, bk)
    tile_any, tile_all = tiles(mask.dense(), bq, bk)
    assert np.array_equal(bmap == sl.EMPTY, ~tile_any)
    assert np.array_equal(bmap == sl.FULL_BLOCK, tile_all)  # exact, unions of slices included


def tiles(dense, bq, bk):
    """Per (bq x bk) tile of a dense mask: any pair unmasked, every pair unmasked (edges clipped)."""
    s = dense.shape[0]
    nq, nk = -(-s // bq), -(-s // bk)
    pad_false = np.zeros((nq * bq, nk * bk), bool)
    pad_false[:s, :s] = dense
    pad_true = np.ones_like(pad_false)
    pad_true[:s, :s] = dense
    shape = (nq, bq, nk, bk)
    return pad_false.reshape(shape).any(axis=(1, 3)), pad_true.reshape(shape).all(axis=(1, 3))


def test_overrides_and_seed_determinism():
    a = build_mask(Problem(kernel="reference", mask="prefix_lm_causal", seqlen=4096, seed=7))
    b = build_mask(Problem(kernel="reference", mask="prefix_lm_causal", seqlen=4096, seed=7))
    c = build_mask(Problem(kernel="reference", mask="prefix_lm_causal", seqlen=4096, seed=7, mask_params={"p": 100}))
    assert a.params == b.params and 1 <= a.params["prefix"] <= 4096
    assert c.params["prefix"] == 100
    g = build_mask(Problem(kernel="reference", mask="global_sliding_window", seqlen=8192, seed=1))
    assert 1 <= g.params["global_tokens"] <= 1024
    d = build_mask(Problem(kernel="reference", mask="prefix_lm_document", seqlen=8192, seed=1))
    assert 1 <= d.params["prefix"] <= d.params["doc_lens"][0]


def test_document_samples_differ_but_repeat():
    p = Problem(kernel="reference", mask="causal_document", seqlen=8192, seed=0)
    s0, s1 = build_mask(p, 0), build_mask(p, 1)
    assert list(s0.params["doc_lens"]) != list(s1.params["doc_lens"])
    assert list(build_mask(p, 1).params["doc_lens"]) == list(s1.params["doc_lens"])


@pytest.mark.parametrize("name", ["block_sparse_uniform", "block_sparse_variable"])
@pytest.mark.parametrize("heads", [(4, 4), (8, 2)])
def test_block_sparse_masks(name, heads):
    mask = build_mask(Problem(kernel="reference", mask=name, seqlen=1000, heads_q=heads[0], heads_kv=heads[1],
                              mask_params={"block": 64, "density": 0.3}))
    layout = mask.layout
    assert layout.groups == (heads[0] if heads[0] == heads[1] else heads[1])
    nb = len(layout.q_bounds) - 1
    assert layout.q_bounds[-1] == 1000
    kept = max(1, round(0.3 * nb))
    assert (layout.keep.sum(axis=2) == kept).all()
    sizes = np.diff(layout.q_bounds)
    if name == "block_sparse_uniform":
        assert (sizes[:-1] == 64).all()
    else:
        assert ((sizes >= 32) & (sizes <= 64))[:-1].all()
    dense = mask.dense()
    assert dense.shape == (layout.groups, 1000, 1000)
    assert mask.area == pytest.approx(dense.sum(axis=(1, 2)).mean())
    again = build_mask(Problem(kernel="reference", mask=name, seqlen=1000, heads_q=heads[0], heads_kv=heads[1],
                               mask_params={"block": 64, "density": 0.3}))
    assert np.array_equal(again.layout.keep, layout.keep)


def _topk(seqlen=1000, heads=(8, 2), seed=0, **params):
    return build_mask(Problem(kernel="reference", mask="topk_sparse", seqlen=seqlen, heads_q=heads[0],
                              heads_kv=heads[1], seed=seed, mask_params={"block": 64, "topk": 4, **params}))


@pytest.mark.parametrize("heads", [(4, 4), (8, 2)])
def test_topk_sparse_selects_k_blocks_with_the_diagonal_causally(heads):
    mask = _topk(heads=heads)
    layout = mask.layout
    assert layout.causal and layout.groups == (heads[0] if heads[0] == heads[1] else heads[1])
    nb = len(layout.q_bounds) - 1
    assert nb == 16 and np.array_equal(layout.q_bounds, layout.k_bounds)
    counts = layout.keep.sum(axis=2)
    assert (counts == np.minimum(4, np.arange(1, nb + 1))[None]).all()  # k, or every block a row can see
    assert layout.keep[:, np.arange(nb), np.arange(nb)].all()  # the local block, always
    assert not (layout.keep & np.triu(np.ones((nb, nb), dtype=bool), 1)).any()  # none above the diagonal
    assert not np.array_equal(layout.keep[0], layout.keep[1])  # one selection per group
    dense = mask.dense()
    assert not (dense & ~np.tril(np.ones((1000, 1000), dtype=bool))).any()  # token-level causal
    assert dense[:, 70, 71].sum() == 0 and dense[:, 71, 70].all()  # inside the diagonal block
    assert mask.area == pytest.approx(dense.sum(axis=(1, 2)).mean())
    assert np.array_equal(_topk(heads=heads).layout.keep, layout.keep)
    assert not np.array_equal(_topk(heads=heads, seed=1).layout.keep, layout.keep)


def test_topk_sparse_with_k_at_least_the_blocks_is_causal():
    mask = _topk(seqlen=300, topk=16)
    assert np.array_equal(mask.dense()[0], np.tril(np.ones((300, 300), dtype=bool)))
    assert mask.area == 300 * 301 / 2


def test_causal_layout_validation():
    from longca.masks.mask import BlockSparseLayout
    from longca.masks.validate import layout_problem

    bounds = np.array([0, 4, 8])
    upper = np.array([[[True, True], [False, True]]])
    assert "above the diagonal" in layout_problem(BlockSparseLayout(bounds, bounds, upper, causal=True), 8, 1)
    assert layout_problem(BlockSparseLayout(bounds, bounds, upper), 8, 1) is None  # not causal: any block
    other = np.array([0, 3, 8])
    lower = np.array([[[True, False], [True, True]]])
    assert "one block partition" in layout_problem(BlockSparseLayout(bounds, other, lower, causal=True), 8, 1)
    assert layout_problem(BlockSparseLayout(bounds, bounds, lower, causal=True), 8, 1) is None
