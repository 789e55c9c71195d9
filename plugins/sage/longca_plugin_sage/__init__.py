"""longca kernel plugin `sage`: SageAttention 1.0.6, an INT8-quantized attention forward in Triton."""
