"""cudnn without a GPU: listed unavailable; its planner claims exactly the masks without windows."""
from __future__ import annotations

import pytest
import torch
from longca.inventory import kernel_rows
from longca.masks.catalog import STATIC_MASKS
from longca.plugins import get_registry
from longca.problem import Problem

from longca_plugin_cudnn.hooks import MASKS, WINDOW_MASKS
from longca.flashplan.kernel import plan_reason
from longca.flashplan.plan import full_or_square_causal


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only listing")
def test_listed_unavailable():
    rows = {r["name"]: r for r in kernel_rows(get_registry())}
    assert rows["cudnn"]["available"] is False and "CUDA GPU" in rows["cudnn"]["reason"]


@pytest.mark.parametrize("mask", STATIC_MASKS)
def test_claimed_masks_plan_with_full_and_causal_calls_only(mask):
    seqlen = 4096 if mask == "block_causal_document" else 2048
    reason = plan_reason(Problem(kernel="cudnn", mask=mask, seqlen=seqlen), full_or_square_causal)
    if mask in WINDOW_MASKS:
        assert reason and "diagonal band" in reason
        assert mask not in MASKS
    else:
        assert reason is None and mask in MASKS


def test_backward_only_for_full_and_causal():
    from longca_plugin_cudnn.hooks import BACKWARD_REASON, supports

    assert supports(Problem(kernel="cudnn", mask="causal", seqlen=1024, direction="bwd")) is None
    assert supports(Problem(kernel="cudnn", mask="causal_document", seqlen=1024, direction="bwd")) == BACKWARD_REASON
    assert supports(Problem(kernel="cudnn", mask="causal_document", seqlen=1024, direction="fwd")) is None
    assert get_registry().kernel("cudnn").backward_lse is None
