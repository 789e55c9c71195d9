"""longca kernel plugin `torch`: naive attention in plain PyTorch ops."""
