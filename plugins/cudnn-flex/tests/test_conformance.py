from longca_testing import conformance_tests

test_conformance = conformance_tests("cudnn-flex")  # one test per case; CUDA cases skip without a GPU
