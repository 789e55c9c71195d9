#!/usr/bin/env bash
# MagiAttention FFA's measurements, started in the background by call 1 of scripts/device/te-ffa.sh once
# MagiAttention is installed in /tmp/siteA: FFA compiles each kernel (head dim, dtype, direction) at first
# use, which takes minutes, so the job runs on while the next calls carry TransformerEngine's pieces.
# One job at a time holds the GPU (job.sh).
# Writes /tmp/o/ffa (steps.txt: each step's exit code and seconds; rows/; logs) and /tmp/o/ffa/done.
# Run again (in the foreground), it skips the steps an earlier run finished.
JOB=ffa KERNEL=ffa; . "$(dirname "$0")/job.sh"
export PYTHONPATH=/tmp/siteA MAGI_ATTENTION_WORKSPACE_BASE=/tmp/magi
# the first forward compiles FFA's forward kernel (bf16, head dim 128), the first backward its backward
# kernel: minutes each (longca's default case timeout, about 2 min, would stop them), so these get 25 min
rows causal_document-16k-fwd 1500 --mask causal_document --seqlen 16k --direction fwd --timeout 1500
rows causal_document-16k-fwdbwd 1500 --mask causal_document --seqlen 16k --direction fwdbwd --timeout 1500
rows causal_document-16k-bwd 300 --mask causal_document --seqlen 16k --direction bwd
ls -laR /tmp/magi/.cache/magi_attention > "$J/jit-cache.txt" 2>&1
for d in fwd fwdbwd; do rows "causal-16k-$d" 300 --mask causal --seqlen 16k --direction "$d"; done
step plugin-vs-direct 300 python3 benchmarks/plugin_vs_direct.py --kernels ffa \
  --masks causal,causal_document,full_document --seqlens 16k --directions fwd --out "$J/pvd"
for d in fwd fwdbwd; do rows "share_question-16k-$d" 300 --mask share_question --seqlen 16k --direction "$d"; done
step conformance 600 python3 -m pytest -q -rfEs -p no:cacheprovider plugins/ffa
for m in full full_document sliding_window_causal; do
  for d in fwd fwdbwd; do rows "$m-16k-$d" 300 --mask "$m" --seqlen 16k --direction "$d"; done
done
touch "$J/done"
