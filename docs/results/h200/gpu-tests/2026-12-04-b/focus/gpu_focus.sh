#!/usr/bin/env bash
# device call: setup, then the GPU tests that failed on the H200 today (flex, flex-fa4 lse and cp_merge,
# test_gpu_dense's flex conformance), concurrently, each logged
set -uo pipefail
mkdir -p /tmp/carry && cp -n .whl/3/* /tmp/carry/ 2>/dev/null
t0=$(date +%s)
LONGCA_PLUGINS_TO_INSTALL="flex flex-fa4 flashmask" bash scripts/h200_setup.sh /tmp/site /tmp/carry > $OUT/setup.log 2>&1
echo "setup $(( $(date +%s) - t0 )) s" >> $OUT/setup.log
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
M="longca_gpu or gpu"; LIM=${LIM:-300}
run() { name=$1; shift; ( s=$(date +%s); timeout $LIM python3 -m pytest -v -rfE --tb=short -p no:cacheprovider -m "$M" "$@" > $OUT/pytest-$name.log 2>&1; echo "exit $? after $(( $(date +%s) - s )) s" >> $OUT/pytest-$name.log ) & }
run flex-fa4 plugins/flex-fa4 -k "lse or cp_merge"
run flex plugins/flex -k "lse or cp_merge"
run dense-flex tests/test_gpu_dense.py -k "flex"
run flashmask plugins/flashmask -k "lse or cp_merge"
wait
for f in $OUT/pytest-*.log; do echo "== $f"; grep -E "passed|failed|exit " $f | tail -2; done
