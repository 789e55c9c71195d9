"""Mask patterns: the slice representation, the 14 patterns and topk_sparse, and building a mask for a problem."""
