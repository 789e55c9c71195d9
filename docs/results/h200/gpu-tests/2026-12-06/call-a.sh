#!/usr/bin/env bash
# device call A: carries the cutlass-dsl-libs-cu13 library (xz) and pydantic + sageattention wheels;
# installs longca (every distribution, editable) and runs what needs no flash-attn-4 or cuDNN frontend:
# the GPU-suite groups plugins-flex and plugins-b, then the frontier's light steps.
set -uo pipefail
CALL=a; . devrun/common.sh
mkdir -p /tmp/carry/so /tmp/carry/py && cp .whl/A/so/* /tmp/carry/so/ && cp .whl/A/py/* /tmp/carry/py/
nvidia-smi > "$O/nvidia-smi.txt" 2>&1; nproc >> "$O/nvidia-smi.txt"
LONGCA_PLUGINS_TO_INSTALL=all bash scripts/h200_setup.sh /tmp/siteA /tmp/carry/py > "$O/setup.log" 2>&1
export PYTHONPATH=/tmp/siteA
el "setup done"
git rev-parse HEAD > "$O/tree.txt" 2>/dev/null; git status --short >> "$O/tree.txt" 2>/dev/null
LIM=${LIM_A:-240} GPU_TEST_GROUPS="plugins-flex plugins-b" GPU_TEST_WORKERS=6 bash scripts/gpu_tests_parallel.sh "$O/gpu-tests" > "$O/gpu-tests.txt" 2>&1
el "gpu groups done"; cat "$O/gpu-tests.txt"
if grep -lq "Different tests were collected\|INTERNALERROR" "$O"/gpu-tests/pytest-*.log; then  # xdist could not run them
  mkdir -p "$O/xdist-failed" && mv "$O"/gpu-tests/* "$O/xdist-failed/"
  LIM=240 GPU_TEST_GROUPS="plugins-flex plugins-b" bash scripts/gpu_tests_parallel.sh "$O/gpu-tests" > "$O/gpu-tests.txt" 2>&1
  el "gpu groups again without xdist"; cat "$O/gpu-tests.txt"
fi
FRONTIER_DEADLINE=$(( T0 + ${CALL_LIMIT:-420} )) bash scripts/h200_frontier.sh "$O/frontier" sinks-light sage direct-light > "$O/frontier.txt" 2>&1
el "frontier light done"; cat "$O/frontier.txt"
