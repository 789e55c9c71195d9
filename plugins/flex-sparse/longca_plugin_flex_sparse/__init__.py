"""longca kernel plugin `flex-sparse`: FlexAttention with a BlockMask made from the block map."""
