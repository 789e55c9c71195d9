#!/usr/bin/env bash
# device call A: carries the pydantic + sageattention wheels (.whl/A/py) and the flash-attn-4 / cutlass-dsl /
# cuDNN-frontend wheels (.whl/B, without libs-cu13's 193 MB MLIR library, which call B carries); installs them
# and longca (every distribution, editable) into /tmp/siteA, then runs the GPU-suite groups that need no
# flash-attn-4 or cuDNN frontend: plugins-flex and plugins-b.
set -uo pipefail
CALL=a; . devrun/common.sh
mkdir -p /tmp/carry/py /tmp/carry/B && cp .whl/A/py/* /tmp/carry/py/ && cp .whl/B/* /tmp/carry/B/
nvidia-smi > "$O/nvidia-smi.txt" 2>&1; nproc >> "$O/nvidia-smi.txt"
LONGCA_PLUGINS_TO_INSTALL=all bash scripts/h200_setup.sh /tmp/siteA /tmp/carry/py /tmp/carry/B > "$O/setup.log" 2>&1
export PYTHONPATH=/tmp/siteA
el "setup done"
cp devrun/head.txt "$O/tree.txt"
LIM=${LIM_A:-240} GPU_TEST_GROUPS="plugins-flex plugins-b" GPU_TEST_WORKERS=$(python3 -c "import xdist" 2>/dev/null && echo 7 || echo 1) bash scripts/gpu_tests_parallel.sh "$O/gpu-tests" > "$O/gpu-tests.txt" 2>&1
el "gpu groups done"; cat "$O/gpu-tests.txt"
