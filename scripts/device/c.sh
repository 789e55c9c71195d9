#!/usr/bin/env bash
# Device call C (the machine of calls A and B): the rest of the GPU half of the suite on the bench's
# compile caches, then the frontier rows (scripts/h200_frontier.sh) until CALL_LIMIT.
#   run: LIM_C=320 CALL_LIMIT=545 bash scripts/device/c.sh     carry: nothing
set -uo pipefail
CALL=c; . scripts/device/common.sh
. /tmp/env.sh
LIM=${LIM_C:-300} GPU_TEST_GROUPS="plugins-a plugins-fa4 plugins-dsl tests-a tests-b" GPU_TEST_WORKERS=${WORKERS_C:-3} bash scripts/gpu_tests_parallel.sh "$O/gpu-tests" > "$O/gpu-tests.txt" 2>&1
el "gpu groups done"; cat "$O/gpu-tests.txt"
FRONTIER_DEADLINE=$(( T0 + ${CALL_LIMIT:-570} )) bash scripts/h200_frontier.sh "$O/frontier" ${FRONTIER_C:-sinks cudnn-flex cudnn-bsa energy} > "$O/frontier.txt" 2>&1
el "frontier done"; cat "$O/frontier.txt"
