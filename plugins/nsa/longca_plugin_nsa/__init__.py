"""longca kernel plugin `nsa`: NSA's selected attention (fla-core's parallel_nsa) on topk_sparse."""
