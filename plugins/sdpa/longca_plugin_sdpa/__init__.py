"""longca kernel plugin `sdpa`: torch.nn.functional.scaled_dot_product_attention."""
