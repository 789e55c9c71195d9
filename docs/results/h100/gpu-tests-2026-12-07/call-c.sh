#!/usr/bin/env bash
# device call C (same machine as A and B): the rest of the GPU half of the suite (plugins-a,
# plugins-fa4, tests-a, tests-b) on the bench's compile caches, then fa4 and flex-fa4 (and the other
# frontier steps that need the carried wheels) against direct calls.
set -uo pipefail
CALL=c; . devrun/common.sh
. /tmp/env.sh
LIM=${LIM_C:-300} GPU_TEST_GROUPS="plugins-a plugins-fa4 plugins-dsl tests-a tests-b" GPU_TEST_WORKERS=${WORKERS_C:-3} bash scripts/gpu_tests_parallel.sh "$O/gpu-tests" > "$O/gpu-tests.txt" 2>&1
el "gpu groups done"; cat "$O/gpu-tests.txt"
FRONTIER_DEADLINE=$(( T0 + ${CALL_LIMIT:-570} )) bash scripts/h200_frontier.sh "$O/frontier" ${FRONTIER_C:-sinks cudnn-flex cudnn-bsa energy} > "$O/frontier.txt" 2>&1
el "frontier done"; cat "$O/frontier.txt"
