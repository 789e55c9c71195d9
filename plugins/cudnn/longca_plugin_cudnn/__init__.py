"""longca kernel plugin `cudnn`: cuDNN fused attention, through cudnn-frontend graphs or through torch."""
