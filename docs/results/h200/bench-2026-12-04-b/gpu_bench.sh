#!/usr/bin/env bash
# device call C: .whl/3 -> /tmp/carry, setup of every distribution, one energy row, then the cold bench
set -uo pipefail
T0=$(date +%s)
mkdir -p /tmp/carry && cp -n .whl/3/* /tmp/carry/ 2>/dev/null; ls /tmp/carry | wc -l > $OUT/carry.txt
LONGCA_PLUGINS_TO_INSTALL=all bash scripts/h200_setup.sh /tmp/site /tmp/carry > $OUT/setup.log 2>&1
eval "$(tail -1 $OUT/setup.log)"; export PYTHONPATH
echo "setup $(( $(date +%s) - T0 )) s" >> $OUT/setup.log
export TORCHINDUCTOR_CACHE_DIR=/tmp/cold/inductor TRITON_CACHE_DIR=/tmp/cold/triton FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/cold/fa4
echo "export PYTHONPATH=$PYTHONPATH TORCHINDUCTOR_CACHE_DIR=/tmp/cold/inductor TRITON_CACHE_DIR=/tmp/cold/triton FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/cold/fa4" > /tmp/env.sh
s=$(date +%s)
python3 -m longca_cli run --kernel sdpa --mask causal --seqlen 8k --heads 64:8 --direction bwd --energy -f json > $OUT/energy-sdpa.json 2> $OUT/energy-sdpa.err
echo "energy row $(( $(date +%s) - s )) s" >> $OUT/setup.log
left=$(( 588 - ($(date +%s) - T0) ))
s=$(date +%s)
timeout $left python3 -m longca_cli bench --output $OUT/bench > $OUT/bench.log 2>&1
echo "exit $? wall $(( $(date +%s) - s )) s (limit $left)" >> $OUT/bench.log
tail -4 $OUT/bench.log; tail -1 $OUT/bench/runs.jsonl | head -c 3000
