#!/usr/bin/env bash
# Issue 41: every CP strategy on the 8-GPU machine (device kind nvidia-h200-x8), in device calls of at most
# 10 minutes each, rows resumable across calls; and the same commands on a CPU (gloo, tiny sizes).
#
# usage:
#   scripts/h200x8_cp.sh gpu STEP     on the x8 machine, from the repository root, STEP 1-4 in order
#                                     (docs/results/h200x8/README.md: what each call carries and runs)
#   scripts/h200x8_cp.sh cpu OUTDIR   here or in CI: contrib/specs/h200x8/cpu-tiny.toml on gloo, then the
#                                     post-processing (cp_validate --held-out, longca report) on its rows
#
# Step 1 (carry .wheels1): setup, `longca comm-bench` on 8 ranks, torch-cp/te-cp at 8K.
# Step 2 (carry .wheels2): flash-attn-4 completed; fa4 then flex-fa4 inside every strategy at 8K.
# Step 3: what 8K left (--resume), then 16K.   Step 4: 32K, then torch-cp/te-cp at 16K and 32K.
# A step whose inner kernels do not import (a fresh machine: fa4 needs both carried folders on one
# machine) skips their parts with one line and runs the torch parts instead. Every part resumes from
# /tmp/h200x8/PART (a warm machine) or else from docs/results/h200x8/PART (rows committed in between).
# Env: LIMIT_S (seconds this step may take, default 560), WHEELS1 / WHEELS2 (default .wheels1 / .wheels2).
set -uo pipefail
mode=${1:?usage: scripts/h200x8_cp.sh gpu STEP | cpu OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
specs=contrib/specs/h200x8
cd "$root"

say() { echo "[h200x8 $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }
run() { say "\$ $*"; "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }

if [ "$mode" = cpu ]; then
  out=${2:?usage: scripts/h200x8_cp.sh cpu OUTDIR}
  mkdir -p "$out"; LOG=$out/step.log; : > "$LOG"
  t0=$(date +%s)
  py=${PYTHON:-python3}  # the interpreter longca is installed in (the tests pass theirs): no activated venv needed
  run "$py" -m longca_cli sweep $specs/cpu-tiny.toml --output "$out/cpu-tiny" --resume || exit $?
  run "$py" docs/scripts/cp_validate.py --held-out "$out/cpu-tiny" --fit-kernel fa2 --output "$out" || exit $?
  run "$py" -m longca_cli report "$out/cpu-tiny" --output "$out" --no-plots || exit $?
  say "cpu dry run: $(( $(date +%s) - t0 )) s"
  exit 0
fi
[ "$mode" = gpu ] || { echo "h200x8_cp.sh: mode is gpu or cpu, not '$mode'" >&2; exit 2; }
step=${2:?usage: scripts/h200x8_cp.sh gpu STEP (1-4)}
case $step in 1|2|3|4) ;; *) echo "h200x8_cp.sh: STEP is 1, 2, 3 or 4, not '$step'" >&2; exit 2;; esac
: "${OUT:?h200x8_cp.sh gpu: run it through the device tool (OUT is its return folder)}"
LOG=$OUT/step.log
start=$(date +%s)
limit=${LIMIT_S:-560}
work=/tmp/h200x8
mkdir -p $work
left() { echo $(( limit - ($(date +%s) - start) )); }

# NVLink multicast stays off (KINDS.md: a program using it can take the host's GPUs out of service)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=$work/cache/inductor TRITON_CACHE_DIR=$work/cache/triton \
  FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=$work/cache/fa4
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
say "step $step: $gpus GPUs, tree $(git rev-parse --short HEAD 2>/dev/null || echo '?'), limit ${limit} s"
[ "$gpus" -ge 8 ] || { say "needs 8 GPUs (nvidia-h200-x8), found $gpus"; exit 3; }

# setup: each carried folder once per machine (.wheels1 into /tmp/parts, .wheels2 into /tmp/site, as
# docs/results/h200/gpu-tests did: a second --upgrade install into one target replaces nvidia_cutlass_dsl/)
export LONGCA_PLUGINS_TO_INSTALL="fa4 flex flex-fa4 sdpa te ulysses ring-p2p ring-allgather usp loongtrain torch-cp"
for pair in "${WHEELS1:-.wheels1}:/tmp/parts" "${WHEELS2:-.wheels2}:/tmp/site"; do
  dir=${pair%%:*}; target=${pair#*:}
  [ -d "$dir" ] && [ ! -e "$target/.h200x8-done" ] || continue
  run bash scripts/h200_setup.sh "$target" "$dir" > /dev/null && touch "$target/.h200x8-done"
done
[ -d /tmp/site/nvidia_cutlass_dsl ] && [ -d /tmp/parts/nvidia_cutlass_dsl ] && cp -rn /tmp/parts/nvidia_cutlass_dsl /tmp/site/
[ -e /tmp/parts/.h200x8-done ] || [ -e /tmp/site/.h200x8-done ] || {
  # nothing carried on this machine yet: longca itself, editable (pydantic must then be in the image)
  run bash scripts/h200_setup.sh /tmp/site > /dev/null; }
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/parts:/tmp/parts/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
say "setup done at $(( $(date +%s) - start )) s"
python3 -c "import longca_cli, longca_runner.cp" 2>&1 | tee -a "$LOG" || { say "longca does not import"; exit 3; }
fa4=yes
python3 -c "import cutlass.cute, flash_attn.cute" >> "$LOG" 2>&1 || fa4=no
say "flash-attn-4 imports: $fa4"

# part NAME [KERNELS] [fa4]: contrib/specs/h200x8/NAME.toml (only KERNELS of it, if given) into $work/NAME,
# resumed, bounded by the seconds left; with fa4, skipped where flash-attn-4 does not import
part() {
  local name=$1 kernels=${2:-} need=${3:-}
  if [ "$need" = fa4 ] && [ $fa4 = no ]; then say "skip $name${kernels:+ ($kernels)}: flash-attn-4 not installed"; return; fi
  local s; s=$(left)
  if [ "$s" -lt 90 ]; then say "skip $name${kernels:+ ($kernels)}: $s s left"; return; fi
  mkdir -p $work/$name
  if [ ! -s $work/$name/results.jsonl ] && [ -s docs/results/h200x8/$name/results.jsonl ]; then
    cp docs/results/h200x8/$name/results.jsonl $work/$name/  # rows of an earlier machine: --resume skips them
  fi
  # --max-minutes starts no batch of 8 CP cases after it; `timeout` (SIGTERM: the run's end line is written)
  # bounds the batch in flight; rows are fsynced one by one, so a cut loses at most the case running
  run timeout $(( s - 20 )) python3 -m longca_cli sweep $specs/$name.toml --output $work/$name --resume \
    --max-minutes "$(python3 -c "print(max(0.5, ($s - 150) / 60))")" ${kernels:+--kernels $kernels}
  say "$name${kernels:+ ($kernels)}: exit $?, $(grep -c . $work/$name/results.jsonl 2>/dev/null || echo 0) rows"
  mkdir -p "$OUT/$name"
  for f in results.jsonl runs.jsonl longca.log; do [ -e $work/$name/$f ] && cp $work/$name/$f "$OUT/$name/"; done
}

case $step in
  1)
    run timeout 120 python3 -m longca_cli comm-bench --nproc 8 --backend nccl --device cuda \
      --output "$OUT/comm-calibration.json" --format table
    say "comm-bench: exit $?"
    part cp-torch-8k ;;
  2)
    part cp-8k fa4 fa4
    part cp-8k flex-fa4 fa4
    [ $fa4 = no ] && part cp-torch-8k ;;
  3)
    part cp-8k "" fa4
    part cp-16k fa4 fa4
    part cp-16k flex-fa4 fa4
    [ $fa4 = no ] && part cp-torch-long ;;
  4)
    part cp-32k fa4 fa4
    part cp-32k flex-fa4 fa4
    part cp-torch-long ;;
esac
say "step $step done at $(( $(date +%s) - start )) s"
