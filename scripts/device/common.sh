# Sourced by the device-call scripts of this folder: CALL names the call; its files go to /tmp/o/CALL,
# a timeline to /tmp/o/CALL/timeline.txt, and on exit (a time limit included: trap) they are packed
# into $OUT/CALL.tgz, because at most a few files come back from $OUT.
T0=$(date +%s)
O=/tmp/o/${CALL:?}; mkdir -p "$O"
el() { echo "$(( $(date +%s) - T0 )) s: $*" | tee -a "$O/timeline.txt"; }
pack() { tar czf "$OUT/$CALL.tgz" -C /tmp/o "$CALL"; [ -f "$O/timeline.txt" ] && cp "$O/timeline.txt" "$OUT/$CALL-timeline.txt"; }
trap pack EXIT
export PYTHONUNBUFFERED=1
git rev-parse HEAD > "$O/tree.txt" 2>/dev/null; git status --short >> "$O/tree.txt" 2>/dev/null
