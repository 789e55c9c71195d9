"""longca kernel plugin `fa2`: FlashAttention-2, and the slice planner shared by fa3, fa4 and cudnn."""
