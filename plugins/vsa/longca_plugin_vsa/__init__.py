"""longca kernel plugin `vsa`: Video Sparse Attention's ThunderKittens block-sparse kernel (sm90)."""
