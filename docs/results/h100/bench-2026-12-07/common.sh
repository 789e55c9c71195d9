# sourced by the device-call scripts of this folder: a timeline and the packing of /tmp/o/NAME into $OUT
T0=$(date +%s)
O=/tmp/o/${CALL:?}; mkdir -p "$O"
el() { echo "$(( $(date +%s) - T0 )) s: $*" | tee -a "$O/timeline.txt"; }
pack() { tar czf "$OUT/$CALL.tgz" -C /tmp/o "$CALL"; cp "$O/timeline.txt" "$OUT/$CALL-timeline.txt"; }
trap pack EXIT
export PYTHONUNBUFFERED=1
