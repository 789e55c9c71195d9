"""PyTorch SDPA with its default backend dispatch, as a user would call it.

`full` passes no mask, `causal` passes `is_causal=True`, every other mask an explicit boolean
(S x S, or per head for block-sparse masks) `attn_mask`, which steers dispatch to the
memory-efficient or math backend. GQA through `enable_gqa`.
"""
from __future__ import annotations

from longca.plugin import ANY_BLOCK_SPARSE, ANY_STATIC, KernelSpec, hookimpl, linear_memory, quadratic_memory


def prepare(problem, mask, q, k, v):
    """(attn_mask or None, is_causal)."""
    import torch

    if mask.name == "full":
        return None, False
    if mask.name == "causal":
        return None, True
    dense = torch.from_numpy(mask.dense()).to(q.device)
    if dense.dim() == 3:  # block-sparse: one mask per head or per KV group
        dense = dense.repeat_interleave(q.shape[2] // dense.shape[0], dim=0)
    return dense, False


def run(prepared, q, k, v):
    import torch.nn.functional as F

    attn_mask, is_causal = prepared
    gqa = q.shape[2] != k.shape[2]
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         attn_mask=attn_mask, is_causal=is_causal, enable_gqa=gqa)
    return out.transpose(1, 2)


def memory(problem):
    """O(S) for causal and full (is_causal, no mask); else an S x S boolean mask per head, and on the CPU
    (math backend) the float32 scores and probabilities too."""
    if problem.mask in ("causal", "full"):
        return linear_memory(problem)
    masks = problem.batch * problem.heads_q * problem.seqlen ** 2
    return (quadratic_memory(problem) if problem.device_type == "cpu" else linear_memory(problem)) + masks


def available():
    import torch

    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        return f"torch {torch.__version__} has no scaled_dot_product_attention"
    return None


@hookimpl
def longca_kernels():
    return [KernelSpec(
        name="sdpa",
        family="dense",
        description="torch SDPA, default dispatch: is_causal for causal, a boolean attn_mask otherwise",
        masks=(ANY_STATIC, ANY_BLOCK_SPARSE),  # any mask: it expands the mask densely
        prepare=prepare,
        run=run,
        available=available,
        backend=lambda: "torch.nn.functional.scaled_dot_product_attention",
        memory=memory,
        head_dims=None,  # any (Q/K, V) pair: SDPA takes V of its own head dim (Ev), its math backend anything
        deterministic=("torch SDPA has no deterministic option per call; longca does not switch on the "
                       "process-wide torch.use_deterministic_algorithms"),
    )]
