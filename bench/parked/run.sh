#!/bin/sh
# parked benchmark: memory per queued request and dispatch rate with 8000 vs 256 queued,
# vramd against HAProxy 2.6 (server maxconn 1) in front of a slow test worker.
# Usage: bench/parked/run.sh [--quick] [--rounds R] [--window S] [--big 8000] [--small 256] [--no-vramd]
# Builds build/bin/vramd first when the tree builds (VRAMD_BIN=path overrides the binary),
# and the two C tools into build/bench/. Method: bench/parked/run.py; results: bench/results/.
set -eu
cd "$(dirname "$0")/../.."
if [ -z "${VRAMD_BIN:-}" ]; then
  make -s build/bin/vramd >/dev/null 2>&1 || echo "parked: 'make build/bin/vramd' failed; using what is there" >&2
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
exec /usr/bin/python3 bench/parked/run.py "$@"
