# Sourced by scripts/device/ffa-job.sh and te-job.sh: JOB names the job (its files go to /tmp/o/JOB, KERNEL
# is the kernel its rows run). One GPU: a job holds /tmp/o/gpu.lock from start to end, so two jobs never time
# each other's kernels (the second waits for the first).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
J=/tmp/o/${JOB:?}; mkdir -p "$J"
export PYTHONUNBUFFERED=1
exec 9> /tmp/o/gpu.lock
flock 9
step() {  # step NAME SECONDS command...: skipped when an earlier run of the job finished it (exit 0)
  local name=$1 limit=$2; shift 2
  grep -q "^$name: exit 0 " "$J/steps.txt" 2>/dev/null && return
  local start=$(date +%s)
  timeout -k 10 "$limit" "$@" > "$J/$name.log" 2>&1
  echo "$name: exit $? after $(( $(date +%s) - start )) s" >> "$J/steps.txt"
}
rows() {  # rows NAME SECONDS run-options...: checked rows of KERNEL as JSON under $J/rows
  local name=$1 limit=$2; shift 2
  step "$name" "$limit" python3 -m longca_cli run --kernel "${KERNEL:?}" --heads 64:8 --head-dim 128 \
    --dtype bfloat16 --check -f json --output "$J/rows" "$@"
}
