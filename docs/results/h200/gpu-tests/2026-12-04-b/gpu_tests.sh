#!/usr/bin/env bash
# device call (the machine already set up by gpu_bench.sh): the GPU half of the suite in six
# concurrent pytest processes, each writing its own log (-v: a line per test as it finishes)
set -uo pipefail
eval "$(tail -1 $OUT/../setup-line 2>/dev/null || echo 'export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages')"
export PYTHONPATH PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
M="longca_gpu or gpu"
LIM=${LIM:-540}
run() { name=$1; shift; ( s=$(date +%s); timeout $LIM python3 -m pytest -v -rfE --tb=short -p no:cacheprovider -m "$M" "$@" > $OUT/pytest-$name.log 2>&1; echo "exit $? after $(( $(date +%s) - s )) s" >> $OUT/pytest-$name.log ) & }
run plugins-a plugins/cudnn plugins/fa2 plugins/fa2-sparse plugins/fa3 plugins/ffa plugins/flashinfer
run plugins-fa4 plugins/fa4 plugins/flex-fa4
run plugins-flex plugins/flex plugins/flashmask plugins/flex-sparse
run plugins-b plugins/loongtrain plugins/nsa plugins/ring-allgather plugins/ring-p2p plugins/sdpa plugins/te plugins/torch-cp plugins/torch plugins/ulysses plugins/usp plugins/vsa plugins/vsa-triton
run tests-a $(ls tests/test_*.py | awk 'NR%2==0')
run tests-b $(ls tests/test_*.py | awk 'NR%2==1') core/tests longca_cp longca_sim longca_flashplan longca_runner longca_testing
wait
for f in $OUT/pytest-*.log; do echo "== $f"; grep -E "passed|failed|exit " $f | tail -2; done
