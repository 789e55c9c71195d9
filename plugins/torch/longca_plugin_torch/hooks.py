"""Naive attention: S = QK^T materialised in the input dtype, masked softmax, then PV.

The paper's "torch" baseline. It needs batch*heads*S^2 elements of memory, so long sequences
end as `oom` rows, which is the point of the baseline.
"""
from __future__ import annotations

import math

from longca.plugin import ANY_BLOCK_SPARSE, ANY_STATIC, KernelSpec, hookimpl, quadratic_memory


def prepare(problem, mask, q, k, v):
    """The dense boolean mask on the device: (1 or groups, S, S)."""
    import torch

    dense = torch.from_numpy(mask.dense()).to(q.device)
    return dense if dense.dim() == 3 else dense[None]


def run(dense_mask, q, k, v, sinks=None):
    """`sinks` (Hq,): one more score column per row holding the head's logit, dropped after the softmax
    (the sink takes probability and adds no value), as naive gpt-oss code writes it."""
    import torch

    heads, rep = q.shape[2], q.shape[2] // k.shape[2]
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
    if rep > 1:
        kh, vh = kh.repeat_interleave(rep, dim=1), vh.repeat_interleave(rep, dim=1)
    groups = dense_mask.shape[0]
    mask = dense_mask if groups == 1 else dense_mask.repeat_interleave(heads // groups, dim=0)
    scores = (qh @ kh.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    scores = scores.masked_fill(~mask, float("-inf")).float()
    if sinks is not None:
        column = sinks.float()[None, :, None, None].expand(*scores.shape[:-1], 1)
        scores = torch.cat([scores, column], dim=-1)
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    probs = (probs[..., :-1] if sinks is not None else probs).to(q.dtype)
    return (probs @ vh).transpose(1, 2)


@hookimpl
def longca_kernels():
    return [KernelSpec(
        name="torch",
        family="dense",
        description="naive PyTorch: QK^T, masked softmax, PV (S^2 memory)",
        masks=(ANY_STATIC, ANY_BLOCK_SPARSE),  # any mask: it expands the mask densely
        prepare=prepare,
        run=run,
        backend=lambda: "torch.matmul",
        head_dims=None,  # any (Q/K, V) pair: two matmuls
        deterministic=("naive torch has no deterministic option of its own; longca does not switch on the "
                       "process-wide torch.use_deterministic_algorithms"),
        memory=quadratic_memory,  # scores, mask and probabilities: S x S per head
        sinks=True,
    )]


@hookimpl
def longca_env_info(info):
    import torch

    info["torch"] = torch.__version__
