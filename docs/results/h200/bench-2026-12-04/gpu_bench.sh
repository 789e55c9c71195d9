#!/usr/bin/env bash
# device call: carried wheels -> /tmp/site, every distribution editable, then `longca bench` from cold
# compile caches (inductor, triton, flash-attn-4's), its wall time measured around the whole command
set -uo pipefail
mkdir -p /tmp/carry && cp -n .whl/3/* /tmp/carry/ 2>/dev/null
t0=$(date +%s)
LONGCA_PLUGINS_TO_INSTALL=all bash scripts/h200_setup.sh /tmp/site /tmp/carry > $OUT/setup.log 2>&1
eval "$(tail -1 $OUT/setup.log)"; export PYTHONPATH
echo "setup $(( $(date +%s) - t0 )) s" >> $OUT/setup.log
python3 -c "import cutlass.cute, flash_attn.cute; print('fa4 imports')" >> $OUT/setup.log 2>&1
export TORCHINDUCTOR_CACHE_DIR=/tmp/cold/inductor TRITON_CACHE_DIR=/tmp/cold/triton FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/cold/fa4
s=$(date +%s)
timeout ${LIM:-560} python3 -m longca_cli bench --output $OUT/bench > $OUT/bench.log 2>&1
echo "exit $? wall $(( $(date +%s) - s )) s" >> $OUT/bench.log
tail -5 $OUT/bench.log; grep -c . $OUT/bench/results.jsonl
