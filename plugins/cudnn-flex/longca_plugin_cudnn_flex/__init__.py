"""longca kernel plugin `cudnn-flex`: cuDNN frontend's interval-mask attention (cudnn.flex_attention)."""
