#!/usr/bin/env bash
# Device call B (the machine of call A, still warm): carries .whl/A/so (libs-cu13's MLIR library, xz;
# 50 MB: move docs/results out of the checkout for this call), places it, then a cold-cache `longca bench`
# with every installable dense plugin, bounded by the time left in the call.
#   run: CALL_LIMIT=560 bash scripts/device/b.sh   carry: [".whl/A/so"]
set -uo pipefail
CALL=b; . scripts/device/common.sh
mkdir -p /tmp/carry/so && cp .whl/A/so/* /tmp/carry/so/
xz -dc /tmp/carry/so/cutlass_ir.so.xz > "/tmp/siteA/$(cut -d' ' -f2 /tmp/carry/so/place.txt)"
export PYTHONPATH=/tmp/siteA:/tmp/siteA/nvidia_cutlass_dsl/dsl_packages
export TORCHINDUCTOR_CACHE_DIR=/tmp/cold/inductor TRITON_CACHE_DIR=/tmp/cold/triton FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/cold/fa4
echo "export PYTHONPATH=$PYTHONPATH TORCHINDUCTOR_CACHE_DIR=$TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR=$TRITON_CACHE_DIR FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=$FLASH_ATTENTION_CUTE_DSL_CACHE_DIR" > /tmp/env.sh
el "setup done"
python3 -c "import flash_attn.cute, cudnn, sageattention; print('fa4, cudnn frontend', cudnn.backend_version(), 'sage ok')" > "$O/setup.log" 2>&1
left=$(( ${CALL_LIMIT:-585} - ($(date +%s) - T0) ))
el "bench starts, limit $left s"
s=$(date +%s)
timeout "$left" python3 -m longca_cli bench --output "$O/bench" > "$O/bench.log" 2>&1
echo "exit $? wall $(( $(date +%s) - s )) s (limit $left)" >> "$O/bench.log"
el "bench done"
tail -5 "$O/bench.log"; grep '"end"' "$O/bench/runs.jsonl" | tail -1 | head -c 4000
