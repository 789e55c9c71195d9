"""On a CPU the refusals and spec cases run and the CUDA cases skip visibly; all run on a GPU.

2048 tokens in blocks of 64 are 32 blocks, so topk_sparse's 16 leave the later rows sparse;
32:2 is 16 query heads per KV head, the fewest fla's parallel_nsa takes.
"""
from longca_testing import conformance_tests

test_conformance = conformance_tests("nsa", seqlen=2048, heads=(32, 2))
