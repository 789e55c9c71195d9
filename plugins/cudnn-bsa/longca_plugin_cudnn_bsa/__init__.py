"""longca kernel plugin `cudnn-bsa`: cuDNN frontend's block-sparse attention (cudnn.block_sparse_attention), SM90."""
