"""longca's conformance suite. On a CPU the CUDA cases skip visibly (the kernel needs an SM90 GPU). The
backward is MHA only, so the default GQA sizes (4:2 heads) run the forward cases and their backward cases
are refused (skipped); the MHA run below gives the backward cases on a GPU."""
from longca_testing import conformance_tests

test_conformance = conformance_tests("cudnn-bsa")  # one test per case; CUDA cases skip without a GPU
test_conformance_mha = conformance_tests("cudnn-bsa", heads=(4, 4), devices=("cuda",))
