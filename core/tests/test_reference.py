"""The reference kernel against an independent float64 computation, output, lse and gradients."""
import math

import numpy as np
import pytest
import torch

from longca import reference
from longca.masks.catalog import BLOCK_SPARSE_MASKS, STATIC_MASKS, TOKEN_SPARSE_MASKS
from longca.problem import Problem, build_mask
from longca_testing.compare import assert_close

pytestmark = pytest.mark.numerics  # float results: CI runs these again under another ATEN_CPU_CAPABILITY


def float64_attention(q, k, v, dense):
    """dense: (groups, Sq, Sk) bool. Returns out (B,S,H,D) and lse (B,H,S)."""
    heads, rep = q.shape[2], q.shape[2] // k.shape[2]
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(rep, 1)
    vh = v.transpose(1, 2).repeat_interleave(rep, 1)
    m = torch.from_numpy(dense).repeat_interleave(heads // dense.shape[0], 0)
    s = (qh @ kh.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~m, -math.inf)
    lse = torch.logsumexp(s, -1)
    return (torch.softmax(s, -1) @ vh).transpose(1, 2), lse


SPARSE_PARAMS = {"block_sparse_uniform": {"block": 32}, "block_sparse_variable": {"block": 32},
                 "topk_sparse": {"block": 32, "topk": 4}}


@pytest.mark.parametrize("name", STATIC_MASKS + BLOCK_SPARSE_MASKS + TOKEN_SPARSE_MASKS)
def test_reference_matches_float64(name, monkeypatch):
    seqlen = 1024 if name == "block_causal_document" else 300
    monkeypatch.setattr(reference, "CHUNK_ELEMENTS", 2 * 4 * seqlen * 70)  # force several row chunks
    problem = Problem(kernel="reference", mask=name, seqlen=seqlen, heads_q=4, heads_kv=2, head_dim=16,
                      sampler="uniform", sampler_params={"min_len": 5, "max_len": 120},
                      mask_params=SPARSE_PARAMS.get(name, {}))
    mask = build_mask(problem)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, seqlen, h, 16, dtype=torch.float64, requires_grad=True) for h in (4, 2, 2))
    dense = mask.dense()
    dense = dense if dense.ndim == 3 else dense[None]
    want, want_lse = float64_attention(q, k, v, dense)
    dout = torch.randn_like(want)
    want_grads = torch.autograd.grad(want, (q, k, v), dout)
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    out, lse = reference.forward_lse(qf, kf, vf, mask)
    # float32 sums of up to 1024 terms against float64: a few hundred eps of the largest value at most
    assert_close(out, want, 1e-5, "out")
    assert_close(lse, want_lse, 1e-5, "lse")
    got_grads = torch.autograd.grad(reference.attention(qf, kf, vf, mask), (qf, kf, vf), dout.float())
    for name, g, w in zip("qkv", got_grads, want_grads, strict=True):
        assert_close(g, w, 1e-4, f"d{name}")  # the backward chains three such sums


def test_rows_that_see_nothing_give_zero_and_minus_inf():
    slices = np.array([[2, 4, 0, 4, 0]])  # rows 0 and 1 see nothing
    q, k, v = (torch.randn(1, 4, 2, 8) for _ in range(3))
    out, lse = reference.forward_lse(q, k, v, slices)
    assert (out[:, :2] == 0).all() and torch.isinf(lse[:, :, :2]).all()
    assert torch.isfinite(out).all()
