"""Without a CUDA GPU, run Triton in its CPU interpreter for this plugin's tests.

Triton fixes its mode when it is first imported, for the whole process, so the variable is set
here, at collection, before any test imports triton; with a GPU it is left alone.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
