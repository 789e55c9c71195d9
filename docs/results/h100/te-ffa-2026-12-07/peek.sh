sleep ${1:-30}; echo "== te"; cat /tmp/o/te/steps.txt; echo "== ffa"; cat /tmp/o/ffa/steps.txt 2>/dev/null | tail -5; tail -1 /tmp/o/ffa-warm.log
pgrep -f "scripts/device/te-job.sh" > /dev/null && echo "te job running"; pgrep -f "scripts/device/ffa-job.sh" > /dev/null && echo "ffa job running"
pgrep -f ffa_warm.py > /dev/null && echo "ffa warm running"
if [ -n "${START_FFA:-}" ] && ! pgrep -f "scripts/device/ffa-job.sh" > /dev/null; then
  rm -f /tmp/o/ffa/steps.txt.old; [ -f /tmp/o/ffa/steps.txt ] && mv /tmp/o/ffa/steps.txt /tmp/o/ffa/steps-first-try.txt
  setsid nohup bash scripts/device/ffa-job.sh >> /tmp/o/ffa-job.out 2>&1 < /dev/null & echo "started ffa job"
fi
