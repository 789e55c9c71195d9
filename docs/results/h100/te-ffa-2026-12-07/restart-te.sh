pkill -f "scripts/device/te-job.sh"; pkill -f "kernel te "; sleep 1
setsid nohup bash scripts/device/te-job.sh >> /tmp/o/te-job.out 2>&1 < /dev/null &
sleep ${1:-60}; cat /tmp/o/te/steps.txt; tail -1 /tmp/o/ffa-warm.log; ls /tmp/magi/.cache/magi_attention/90/cached_ops/
