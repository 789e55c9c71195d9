#!/usr/bin/env bash
# Device call A of a session (one GPU, no network): carries .whl/A/py (pydantic, sageattention) and
# .whl/B (flash-attn-4, cutlass-dsl without libs-cu13's MLIR library, cuDNN frontend), made here by
# `bash scripts/h200_wheels.sh .whl`; installs them and every distribution of the repository (editable)
# into /tmp/siteA, then runs the GPU-suite groups that need no flash-attn-4 or cuDNN frontend.
#   run: LIM_A=230 bash scripts/device/a.sh        carry: [".whl/A/py", ".whl/B"]
set -uo pipefail
CALL=a; . scripts/device/common.sh
mkdir -p /tmp/carry/py /tmp/carry/B && cp .whl/A/py/* /tmp/carry/py/ && cp .whl/B/* /tmp/carry/B/
nvidia-smi > "$O/nvidia-smi.txt" 2>&1; nproc >> "$O/nvidia-smi.txt"
LONGCA_PLUGINS_TO_INSTALL=all bash scripts/h200_setup.sh /tmp/siteA /tmp/carry/py /tmp/carry/B > "$O/setup.log" 2>&1
export PYTHONPATH=/tmp/siteA
el "setup done"
workers=$(python3 -c "import xdist" 2>/dev/null && echo 7 || echo 1)
LIM=${LIM_A:-240} GPU_TEST_GROUPS="plugins-flex plugins-b" GPU_TEST_WORKERS=$workers bash scripts/gpu_tests_parallel.sh "$O/gpu-tests" > "$O/gpu-tests.txt" 2>&1
el "gpu groups done"; cat "$O/gpu-tests.txt"
