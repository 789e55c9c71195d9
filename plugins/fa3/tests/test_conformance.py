"""longca's conformance suite for the fa3 kernel: one test per case (CUDA cases marked `gpu`;
without a GPU they skip with the kernel's reason)."""
from longca_testing import conformance_tests

test_conformance = conformance_tests("fa3")
