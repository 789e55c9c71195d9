"""longca kernel plugin `cudnn`: cuDNN fused attention through torch."""
