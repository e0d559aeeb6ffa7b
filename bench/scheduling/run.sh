#!/bin/sh
# scheduling benchmark (issue 4): seed000, seed004 and mixed-80gb through three setups (direct
# with --lock, global-lock, vramd), against the lower bound on makespan; plus the cost of one
# scheduling decision with 100 models on 8 GPUs (build/bench/decision_cost).
# Usage: bench/scheduling/run.sh [--quick] [--reps R] [--scenarios a,b] [--variants open,burst]
#        [--timescale 0.02] [--burst-timescale 0.05] [--duration 10m] [--cold] [--no-decision-cost]
# Builds what it runs first when the tree builds; the binaries are copied before the runs, so a
# rebuild meanwhile does not change them. Method: bench/scheduling/README.md; results: bench/results/.
set -eu
cd "$(dirname "$0")/../.."
make -s build/bin/vramd build/bin/simworker build/bin/simgpu build/lib/libnvidia-ml-sim.so build/lib/libcuda-sim.so build/lib/libvramd-cuda.so \
  build/bench/decision_cost >/dev/null 2>&1 || echo "scheduling: make failed; using what is there" >&2
exec /usr/bin/python3 bench/scheduling/run.py "$@"
