"""longca's conformance suite for ffa. On a CPU the CUDA cases skip visibly (FFA is Hopper CUDA). Head dim
128: each head dim (and dtype) is one more FFA kernel compiled at first use, and 128 is the one the rows use."""
from longca_testing import conformance_tests

test_conformance = conformance_tests("ffa", head_dim=128)  # one test per case; CUDA cases skip without a GPU
