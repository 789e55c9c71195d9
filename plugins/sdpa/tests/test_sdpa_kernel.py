from longca.plugin import conformance_tests

test_conformance = conformance_tests("sdpa")  # one test per case; CUDA cases skip without a GPU
