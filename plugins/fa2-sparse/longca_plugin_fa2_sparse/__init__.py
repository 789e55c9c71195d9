"""longca kernel plugin `fa2-sparse`: MIT Han Lab's Block-Sparse-Attention (block_sparse_attn_func)."""
