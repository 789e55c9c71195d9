from longca_testing import conformance_tests

test_conformance = conformance_tests("sage")  # one test per case; CUDA cases skip without a GPU
