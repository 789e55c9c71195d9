"""The closed form of doc_zigzag rings (`ringcalls`) against the exact call tables it stands for."""
from __future__ import annotations

import numpy as np
import pytest

from longca.problem import Problem, build_mask
from longca_cp.calls import buffers_table, key_buffers
from longca_cp.layout import make_layout
from longca_sim.ringcalls import doc_zigzag_split, from_table, ring_passes

FIELDS = ("buf", "source", "q0", "q1", "k0", "k1", "area", "unit", "shapes")


def _exact(mask_slices, runs, positions):
    table, buf, source = buffers_table(mask_slices, [runs[p] for p in positions], runs, key_buffers(runs), True)
    return from_table(table, buf, source)


def _check(mask_slices, seqlen: int, ring: int, budget: int) -> bool:
    """Every pass of the closed form equals the exact table of its positions, field for field; returns whether
    the closed form applied."""
    runs = make_layout("doc_zigzag", seqlen, ring, mask_slices).runs
    seen = []
    for positions, calls in ring_passes(mask_slices, "doc_zigzag", seqlen, runs, budget):
        want = _exact(mask_slices, runs, positions)
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(calls, name), getattr(want, name), err_msg=name)
        # the query-run groups: the same calls together, in the same order
        np.testing.assert_array_equal(np.unique(calls.qi, return_inverse=True)[1],
                                      np.unique(want.qi, return_inverse=True)[1])
        seen += positions.tolist()
    assert seen == list(range(ring))
    return doc_zigzag_split(mask_slices, seqlen, runs) is not None


@pytest.mark.parametrize("sampler", ["magi", "prolong512k"])
@pytest.mark.parametrize("ring", [2, 8, 64])
def test_closed_form_is_the_exact_tables(sampler, ring):
    applied = []
    for seqlen in (32768, 131072):
        for sample in range(3):
            problem = Problem(kernel="reference", mask="causal_document", seqlen=seqlen, sampler=sampler, seed=7)
            mask = build_mask(problem, sample)
            applied.append(_check(mask.static_slices(), seqlen, ring, budget=1 << 12))
    assert any(applied)


def _docs(lengths) -> np.ndarray:
    edges = np.concatenate([[0], np.cumsum(lengths)])
    return np.array([(a, b, a, b, 1) for a, b in zip(edges[:-1], edges[1:], strict=True)], dtype=np.int64)


@pytest.mark.parametrize("lengths, ring, applies", [
    ([64] * 16, 4, True),  # every document whole pieces, no leftovers
    ([3, 61, 17, 500, 7, 400, 36], 8, True),  # short documents and leftovers, the leftover zigzag across them
    ([1003, 29], 4, True),  # the first document's pieces run on into its leftovers on rank 0 (exact tables)
    ([1003, 5], 4, False),  # ... and the other is shorter than 2R
    ([15, 15, 2], 8, False),  # only documents shorter than 2R: no closed form
    ([15, 17], 8, False),  # the long one runs on into its leftover token on rank 0
    ([31, 1, 32], 2, True),
])
def test_closed_form_on_chosen_documents(lengths, ring, applies):
    assert _check(_docs(lengths), int(sum(lengths)), ring, budget=1 << 8) == applies


def test_other_masks_use_the_exact_tables():
    mask = _docs([64, 64])
    mask[1, 4] = 0  # a full document
    assert doc_zigzag_split(mask, 128, make_layout("doc_zigzag", 128, 2, mask).runs) is None
