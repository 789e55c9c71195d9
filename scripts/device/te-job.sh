#!/usr/bin/env bash
# TransformerEngine's measurements (kernel te, strategy te-cp at world size 1), started in the background by
# call 5 of scripts/device/te-ffa.sh once TE is installed in /tmp/siteTE; one job at a time holds the GPU
# (job.sh). Writes /tmp/o/te (steps.txt, rows/, logs) and
# /tmp/o/te/done; run again, it skips the steps an earlier run finished.
JOB=te KERNEL=te; . "$(dirname "$0")/job.sh"
export PYTHONPATH=/tmp/siteTE:/tmp/siteA
cp_row() {  # cp_row NAME SECONDS dist-run-options...: te-cp on one rank, checked against the reference
  local name=$1 limit=$2; shift 2
  step "$name" "$limit" python3 -m longca_cli dist-run --strategy te-cp --inner te --nproc 1 --heads 64:8 \
    --head-dim 128 --dtype bfloat16 --check -f json --output "$J/cp" "$@"
}
# TE's backward runs once per forward: its bwd rows time each backward after a fresh untimed forward
# (KernelSpec.backward_once; first measured on 2026-12-07 as fwdbwd only, one forward and its backward a step)
for d in fwd bwd fwdbwd; do rows "causal_document-16k-$d" 300 --mask causal_document --seqlen 16k --direction "$d"; done
for d in fwd bwd fwdbwd; do rows "causal-16k-$d" 300 --mask causal --seqlen 16k --direction "$d"; done
cp_row te-cp-p2p-causal-16k 300 --mask causal --seqlen 16k
step plugin-vs-direct 300 python3 benchmarks/plugin_vs_direct.py --kernels te \
  --masks causal,causal_document,full_document --seqlens 16k --directions fwd,bwd --out "$J/pvd"
step conformance 400 python3 -m pytest -q -rfEs -p no:cacheprovider plugins/te
for m in full full_document sliding_window_causal; do
  for d in fwd fwdbwd; do rows "$m-16k-$d" 300 --mask "$m" --seqlen 16k --direction "$d"; done
done
cp_row te-cp-a2a-causal-16k 300 --mask causal --seqlen 16k --option cp_comm_type=a2a
cp_row te-cp-all_gather-causal-16k 300 --mask causal --seqlen 16k --option cp_comm_type=all_gather
touch "$J/done"
