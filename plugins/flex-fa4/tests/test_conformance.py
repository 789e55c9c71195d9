"""longca's conformance suite for the flex-fa4 kernel: one test per case (CUDA cases marked `gpu`;
without a GPU, or without flash-attn-4, they skip with the kernel's reason)."""
from longca_testing import conformance_tests

test_conformance = conformance_tests("flex-fa4")
