"""longca kernel plugin `fa3`: FlashAttention-3 (flash_attn_interface, Hopper)."""
