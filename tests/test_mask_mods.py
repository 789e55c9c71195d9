"""Each static mask's natural FlexAttention mask_mod equals the mask, pair by pair, on several draws."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from longca.masks.catalog import STATIC_MASKS
from longca.masks.mask_mods import natural_mask_mod
from longca.plugins import get_registry
from longca.problem import Problem, build_mask


def _mask(name: str, sample: int):
    seqlen = 4096 if name == "block_causal_document" else 384
    problem = Problem(kernel="reference", mask=name, seqlen=seqlen, heads_q=2, heads_kv=2, head_dim=16,
                      dtype="float32", device="cpu", sampler="uniform",
                      sampler_params={"min_len": 16, "max_len": 160} if seqlen == 384 else {},
                      mask_params={"window": 50} if "window" in name else {})
    return build_mask(problem, sample)


@pytest.mark.parametrize("name", STATIC_MASKS)
def test_natural_mask_mod_is_the_mask(name):
    assert get_registry().mask(name).flex_mask_mod is not None
    for sample in range(3):
        mask = _mask(name, sample)
        mask_mod = natural_mask_mod(mask, "cpu")
        q = torch.arange(mask.seqlen)[:, None]
        kv = torch.arange(mask.seqlen)[None, :]
        got = mask_mod(0, 0, q, kv).expand(mask.seqlen, mask.seqlen).numpy()
        assert np.array_equal(got, mask.dense()), (name, sample, mask.params)


def test_masks_without_a_builder_fall_back():
    mask = _mask("causal", 0)
    mask.name = "not_registered"
    assert natural_mask_mod(mask, "cpu") is None
