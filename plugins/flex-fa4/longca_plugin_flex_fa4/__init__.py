"""longca kernel plugin `flex-fa4`: FlexAttention on its FlashAttention-4 backend."""
