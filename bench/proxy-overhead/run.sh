#!/bin/sh
# proxy-overhead benchmark: direct vs HAProxy 2.6 vs vramd in front of nginx, wrk c=1 and c=64.
# Usage: bench/proxy-overhead/run.sh [--quick] [--rounds N] [--duration S] [--conns 1,64] [--no-vramd]
# Builds build/bin/vramd first when the tree builds (VRAMD_BIN=path overrides the binary).
# See bench/proxy-overhead/run.py for the method; results go to bench/results/.
set -eu
cd "$(dirname "$0")/../.."
if [ -z "${VRAMD_BIN:-}" ]; then
  make -s build/bin/vramd >/dev/null 2>&1 || echo "proxy-overhead: 'make build/bin/vramd' failed; using what is there" >&2
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
exec /usr/bin/python3 bench/proxy-overhead/run.py "$@"
