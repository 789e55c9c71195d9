"""On a CPU the CUDA cases skip visibly (the kernel needs a GPU); all run on one."""
from longca_testing import conformance_tests

test_conformance = conformance_tests("flashinfer")  # one test per case; CUDA cases skip without a GPU
