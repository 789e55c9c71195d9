"""longca's conformance suite for te (TransformerEngine's DotProductAttention). On a CPU the CUDA cases skip
visibly; head dim 128, the rows' head dim (TE's fused backends take 64 and 128 alike)."""
from longca_testing import conformance_tests

test_conformance = conformance_tests("te", head_dim=128)  # one test per case; CUDA cases skip without a GPU
