"""cuDNN's interval endpoints for every static mask, read back on a CPU: exactly the mask."""
from __future__ import annotations

import numpy as np
import pytest

from longca.plugin import STATIC_MASKS, Problem, get_registry, problem_mask
from longca_plugin_cudnn_flex import hooks


def visible(funcs: np.ndarray, seqlen: int) -> np.ndarray:
    """The dense mask that endpoints [0, F0) U [F1, F2) U ... describe (cuDNN's reading of mask_func)."""
    keys = np.arange(seqlen)[None, :]
    f = funcs[0].astype(np.int64)  # (nfunc, rows)
    seen = keys < f[0][:, None]
    for a, b in zip(f[1::2], f[2::2], strict=True):
        seen |= (keys >= a[:, None]) & (keys < b[:, None])
    return seen


@pytest.mark.parametrize("name", STATIC_MASKS)
def test_endpoints_are_the_mask_and_nondecreasing(name):
    problem = Problem(kernel="cudnn-flex", mask=name, seqlen=1024, seed=3,
                      mask_params={"window": 100} if "window" in name else {})
    mask = problem_mask(problem)
    funcs = hooks.mask_func(mask.slices, mask.seqlen, batch=2)
    assert funcs.dtype == np.int32 and funcs.shape[:2][0] == 1 and funcs.shape[1] % 2 == 1
    assert funcs.shape[2] == 2 * 1024 and np.array_equal(funcs[..., :1024], funcs[..., 1024:])  # per sample
    assert np.all(np.diff(funcs[0], axis=0) >= 0) and funcs.min() >= 0 and funcs.max() <= 1024
    assert np.array_equal(visible(funcs[..., :1024], 1024), mask.dense())


def test_it_claims_every_static_mask_and_says_how_to_install_it():
    spec = get_registry().kernel("cudnn-flex")
    assert set(get_registry().claimed_masks(spec.masks)) >= set(STATIC_MASKS) and spec.deterministic is True
    reason = spec.available()
    assert reason is None or "nvidia-cudnn-frontend" in reason or "CUDA GPU" in reason or "CuTe DSL" in reason
