#!/usr/bin/env bash
# Device calls that measure TransformerEngine (kernel te, strategy te-cp) and MagiAttention's FFA (kernel ffa)
# on one GPU machine without network, in five calls (six with a last one that only collects) on one warm
# machine. TE's core wheel (transformer-engine-cu13, 276.5 MB) travels as five byte pieces, one a call, each
# copied out of the checkout (a carried folder is gone in the next call): `WITH_TE=1 bash
# scripts/h200_wheels.sh .whl`. The libraries themselves are installed by the user's own commands, which
# the plugins' READMEs give (TE: its sdist built against this torch; FFA: MagiAttention from source, kernels
# compiled at first use), kept with the carried files as .whl/X/install.sh (not part of the project).
# .whl/X, made by hand: transformer_engine_torch-2.20.2.tar.gz (the package index's sdist), MagiAttention v1.1.1's
# magi_attention/, setup.py, pyproject.toml, README.md with CUTLASS's include/ and tools/util/include at the
# submodule's commit as magi-v1.1.1.txz, and the wheels of versioningit, nvdlfw-inspect and debugpy (MagiAttention
# imports it, undeclared). Measured with these calls: ../../docs/results/h100/te-ffa-2026-12-07/.
#   call 1:     carry [".whl/A/py", ".whl/X", ".whl/TE/1"]   STEP=1 bash scripts/device/te-ffa.sh
#               longca, pydantic; MagiAttention; starts scripts/device/ffa-job.sh in the background
#   call 2..4:  carry [".whl/TE/N"]                           STEP=N bash scripts/device/te-ffa.sh
#   call 5:     carry [".whl/TE/5"]                           STEP=5 bash scripts/device/te-ffa.sh
#               joins and installs TE; starts scripts/device/te-job.sh (it waits for the FFA job)
#   call 6:     no carry                                      STEP=6 WAIT_S=400 bash scripts/device/te-ffa.sh
# Every call waits up to WAIT_S seconds (default 0) for the running jobs, then packs /tmp/o (each job's
# steps.txt, rows, logs) into $OUT/teN.tgz. A job that did not outlive its call is started again (it skips
# the steps it finished).
set -uo pipefail
step=${STEP:?STEP=1..6}
CALL=te$step; . scripts/device/common.sh
C=/tmp/carry; mkdir -p "$C/TE" "$C/py" "$C/X"
[ -d ".whl/TE/$step" ] && cp .whl/TE/"$step"/* "$C/TE/"
ls -la "$C/TE" > "$O/carried-te.txt"
export PYTHONPATH=/tmp/siteA
if [ "$step" = 1 ]; then
  cp .whl/A/py/* "$C/py/" && cp .whl/X/* "$C/X/"
  nvidia-smi > "$O/nvidia-smi.txt" 2>&1; nproc >> "$O/nvidia-smi.txt"
  LONGCA_PLUGINS_TO_INSTALL="ffa te" bash scripts/h200_setup.sh /tmp/siteA "$C/py" "$C/X" > "$O/setup.log" 2>&1
  el "longca set up"
  bash "$C/X/install.sh" ffa "$O" && el "ffa installed"
fi
if [ "$step" = 5 ]; then
  bash "$C/X/install.sh" te "$O" && el "te installed"
fi
job_running() { pgrep -f "scripts/device/$1-job.sh" > /dev/null; }
for j in ffa te; do  # a job runs in its own session, so that it may outlive this call
  if [ -f "/tmp/o/installed-$j" ] && [ ! -f "/tmp/o/$j/done" ] && ! job_running "$j"; then
    setsid nohup bash "scripts/device/$j-job.sh" >> "/tmp/o/$j-job.out" 2>&1 < /dev/null &
    el "started the $j job"
  fi
done
end=$(( $(date +%s) + ${WAIT_S:-0} ))
while [ "$(date +%s)" -lt "$end" ] && { job_running ffa || job_running te; }; do sleep 5; done
for j in ffa te; do
  state=$( [ -f "/tmp/o/$j/done" ] && echo done || { job_running "$j" && echo running || echo "not running"; })
  el "$j job: $state"; cat "/tmp/o/$j/steps.txt" 2>/dev/null
done
rm -rf "$O/jobs" && mkdir -p "$O/jobs" && cp -r /tmp/o/ffa /tmp/o/te /tmp/o/*-job.out "$O/jobs/" 2>/dev/null
true
