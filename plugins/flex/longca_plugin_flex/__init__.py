"""longca kernel plugin `flex`: FlexAttention with BlockMasks built from mask slices."""
