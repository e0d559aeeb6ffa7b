#!/bin/bash
# park_cycles.sh: N park/unpark cycles of one simworker holding SIZE through
# simcuda-checkpoint (src/gpu/cuda.c over libcuda-sim.so), on a simulated GPU set of its own;
# prints the median/max copy time, lock time and overhead (total minus copy) per direction.
#
#   bench/checkpoint/park_cycles.sh [N=20] [SIZE=24GiB] [BW=20GB/s]     (SIMGPU_TIMESCALE, default 0.01)
# Run from the repository root after `make`. Figures: docs/gpu.md ("Measured").
set -euo pipefail
N=${1:-20}; SIZE=${2:-24GiB}; BW=${3:-20GB/s}
BUILD=${VRAMD_BUILD:-build}
export SIMGPU=parkbench.$$ SIMGPU_TIMESCALE=${SIMGPU_TIMESCALE:-0.01}
LOG=$(mktemp); OUT=$(mktemp)
"$BUILD/bin/simgpu" create "$SIMGPU" --memory 80GiB --pcie-bandwidth "$BW"
"$BUILD/bin/simworker" --port 0 --resident "$SIZE" --load-time 1s > "$LOG" 2>&1 &
WPID=$!
trap 'kill $WPID 2>/dev/null; wait $WPID 2>/dev/null; "$BUILD/bin/simgpu" rm "$SIMGPU"; rm -f "$LOG" "$OUT"' EXIT
for _ in $(seq 100); do grep -q model_loaded "$LOG" && break; sleep 0.1; done
grep -q model_loaded "$LOG" || { echo "simworker did not load:"; cat "$LOG"; exit 1; }
for _ in $(seq "$N"); do
  "$BUILD/bin/simcuda-checkpoint" --toggle --pid $WPID --timeout 10000 --json
  "$BUILD/bin/simcuda-checkpoint" --toggle --pid $WPID --json
done > "$OUT"
/usr/bin/python3 - "$OUT" <<'PY'
import json, statistics as st, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for op in ("park", "unpark"):
    r = [x for x in rows if x["op"] == op]
    bad = [x for x in r if x["status"] != "ok"]
    if bad:
        sys.exit(f"{op} failed: {bad[0]}")
    copy = [x["copy_ms"] for x in r]
    lock = [x["lock_ms"] for x in r]
    over = [x["total_ms"] - x["copy_ms"] for x in r]
    print(f"{op:6} n={len(r)} copy median {st.median(copy):.2f} ms, lock median {st.median(lock):.2f} "
          f"max {max(lock):.2f} ms, overhead (total - copy) median {st.median(over):.2f} max {max(over):.2f} ms")
PY
