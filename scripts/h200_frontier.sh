#!/usr/bin/env bash
# The issue-40 rows and the checks that have not run on a GPU yet, on a machine already set up by
# scripts/h200_setup.sh (PYTHONPATH exported): learnable sinks (fa4, fa2, cudnn, flex, torch),
# SageAttention, cuDNN's interval-mask attention (cudnn-flex) and block-sparse attention (cudnn-bsa), energy,
# fa4 and flex-fa4 against direct calls, cudnn's timing-integrity check. Each step is bounded and
# logged under OUT; a step that fails does not stop the next.
#
# usage: bash scripts/h200_frontier.sh OUT [PART ...]
#   PART: cudnn, sinks, sage, cudnn-flex, cudnn-bsa, energy, direct (default: all). `sinks-light` and `direct-light`
#   are the steps that need no flash-attn-4 or cuDNN frontend (flex and torch sinks; sage against its
#   direct call), for a machine where those wheels are not carried yet. Steps run in this file's order.
#   FRONTIER_DEADLINE (epoch seconds): no step starts with less than 30 s left, none runs past it.
set -uo pipefail
out=${1:?usage: scripts/h200_frontier.sh OUT [PART ...]}
shift
parts=" ${*:-cudnn sinks sage cudnn-flex cudnn-bsa energy direct} "
want() { [[ "$parts" == *" $1 "* ]]; }
for part in $parts; do
  case $part in cudnn|sinks|sinks-light|sage|cudnn-flex|cudnn-bsa|energy|direct|direct-light) ;;
    *) echo "unknown part '$part': give cudnn, sinks, sinks-light, sage, cudnn-flex, cudnn-bsa, energy, direct or direct-light" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
step() {  # step NAME SECONDS command...: bounded by SECONDS and by FRONTIER_DEADLINE (epoch s) if set
  local name=$1 limit=$2; shift 2
  if [ -n "${FRONTIER_DEADLINE:-}" ]; then
    local left=$(( FRONTIER_DEADLINE - $(date +%s) ))
    if [ "$left" -lt 30 ]; then echo "$name: not run, out of time" | tee -a "$out/steps.txt"; return; fi
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  local start=$(date +%s)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name: exit $? after $(( $(date +%s) - start )) s" | tee -a "$out/steps.txt"
}
rows() {  # rows NAME SECONDS run-options...: one checked row as JSON, appended to OUT/rows.jsonl
  local name=$1 limit=$2; shift 2
  step "$name" "$limit" python3 -m longca_cli run --heads 64:8 --check -f json --output "$out/rows" "$@"
}
if want cudnn; then
  step cudnn-integrity 150 python3 -m pytest -q -rfEs -p no:cacheprovider -m "longca_gpu or gpu" plugins/cudnn
fi
if want direct; then
  step plugin-vs-direct 240 python3 benchmarks/plugin_vs_direct.py --kernels fa4,flex-fa4 \
    --masks full,causal,causal_document --seqlens 8k --directions fwd,bwd --out "$out/pvd"
  step plugin-vs-direct-cudnn-flex 180 python3 benchmarks/plugin_vs_direct.py --kernels cudnn-flex \
    --masks causal,causal_document,sliding_window_causal --seqlens 8k --directions fwd,bwd --out "$out/pvd-cudnn-flex"
fi
if want sinks || want sinks-light; then
  rows sinks-flex-causal-bwd 120 --kernel flex --mask causal --seqlen 8k --direction bwd --sinks
  rows sinks-torch-causal-bwd 90 --kernel torch --mask causal --seqlen 4k --direction bwd --sinks
fi
if want sinks; then
  rows sinks-fa4-causal-fwd 90 --kernel fa4 --mask causal --seqlen 8k --direction fwd --sinks
  rows sinks-fa4-causal-bwd 90 --kernel fa4 --mask causal --seqlen 8k --direction bwd --sinks
  rows sinks-fa4-documents-bwd 90 --kernel fa4 --mask causal_document --seqlen 8k --direction bwd --sinks
  rows sinks-flex-fa4-causal-fwd 120 --kernel flex-fa4 --mask causal --seqlen 8k --direction fwd --sinks
  rows sinks-cudnn-causal-bwd 90 --kernel cudnn --mask causal --seqlen 8k --direction bwd --sinks
  rows sinks-fa2-causal-bwd 90 --kernel fa2 --mask causal --seqlen 8k --direction bwd --sinks
  rows nosinks-fa4-causal-bwd 90 --kernel fa4 --mask causal --seqlen 8k --direction bwd
fi
if want sage; then
  for mask in full causal causal_document; do
    rows "sage-$mask-fwd" 90 --kernel sage --mask "$mask" --seqlen 8k --direction fwd
  done
fi
if want cudnn-flex; then
  for mask in causal_document share_question; do
    for direction in fwd bwd; do
      rows "cudnn-flex-$mask-$direction" 120 --kernel cudnn-flex --mask "$mask" --seqlen 8k --direction "$direction"
    done
  done
fi
if want cudnn-bsa; then  # the paper's sparse setting (MHA 32 heads, 16K, density 0.5): its backward is MHA only
  for block in 64 128; do
    for direction in fwd bwd; do
      step "cudnn-bsa-uniform-$block-$direction" 120 python3 -m longca_cli run --kernel cudnn-bsa --heads 32:32 --check \
        -f json --output "$out/rows" --mask block_sparse_uniform --mask-param "block=$block" --seqlen 16k --direction "$direction"
    done
  done
  step plugin-vs-direct-cudnn-bsa 180 python3 benchmarks/plugin_vs_direct.py --kernels cudnn-bsa \
    --masks block_sparse_uniform --heads 32:32 --mask-param block=128 --seqlens 16k --directions fwd,bwd --out "$out/pvd-cudnn-bsa"
fi
if want energy; then
  rows energy-fa4-causal-fwd 60 --kernel fa4 --mask causal --seqlen 8k --direction fwd --energy
fi
if want direct || want direct-light; then
  step plugin-vs-direct-sage 120 python3 benchmarks/plugin_vs_direct.py --kernels sage \
    --masks full,causal,causal_document --seqlens 8k --directions fwd --out "$out/pvd-sage"
fi
cat "$out/steps.txt" 2>/dev/null
