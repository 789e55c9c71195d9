#!/usr/bin/env bash
# device call B (same machine as A): carries the rest of the wheels, installs them beside A's, then the
# cold-cache `longca bench` (every installable dense plugin) under the time left in the call.
set -uo pipefail
CALL=b; . devrun/common.sh
cp .whl/B/* /tmp/carry/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/carry/*.whl > "$O/setup.log" 2>&1
tar xJf /tmp/carry/libs_cu13_rest.tar.xz -C /tmp/site
xz -dc /tmp/carry/so/cutlass_ir.so.xz > "/tmp/site/$(cut -d' ' -f2 /tmp/carry/so/place.txt)"
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/siteA
export TORCHINDUCTOR_CACHE_DIR=/tmp/cold/inductor TRITON_CACHE_DIR=/tmp/cold/triton FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/cold/fa4
echo "export PYTHONPATH=$PYTHONPATH TORCHINDUCTOR_CACHE_DIR=$TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR=$TRITON_CACHE_DIR FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=$FLASH_ATTENTION_CUTE_DSL_CACHE_DIR" > /tmp/env.sh
el "setup done"
python3 -c "import flash_attn.cute, cudnn, sageattention; print('fa4, cudnn frontend', cudnn.backend_version(), 'sage ok')" >> "$O/setup.log" 2>&1
git rev-parse HEAD > "$O/tree.txt" 2>/dev/null
left=$(( ${CALL_LIMIT:-585} - ($(date +%s) - T0) ))
el "bench starts, limit $left s"
s=$(date +%s)
timeout "$left" python3 -m longca_cli bench --output "$O/bench" > "$O/bench.log" 2>&1
echo "exit $? wall $(( $(date +%s) - s )) s (limit $left)" >> "$O/bench.log"
el "bench done"
tail -5 "$O/bench.log"; grep '"end"' "$O/bench/runs.jsonl" | tail -1 | head -c 4000
