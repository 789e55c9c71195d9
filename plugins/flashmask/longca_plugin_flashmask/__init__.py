"""longca kernel plugin `flashmask`: FlashMask column-bound attention in Triton."""
