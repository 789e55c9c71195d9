"""longca kernel plugin `fa4`: flash-attn-4 (flash_attn.cute)."""
