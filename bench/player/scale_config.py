#!/usr/bin/python3
"""scale_config: a scenario's vramd.yaml with its simulated-world durations scaled for a run
under SIMGPU_TIMESCALE.

simworker and simgpu run simulated time (SIMGPU_TIMESCALE=0.01: 100x faster) and the player
scales arrivals and client deadlines the same way; vramd itself runs in real time. For a
scaled run to mean what the scenario means, the durations in vramd's config that describe
the simulated world (deadlines, keep-alives, hang timeouts, health intervals) must shrink by
the same factor, while those that bound real work (process start and stop, network
timeouts) keep a floor so that a loaded machine does not trip them.

The rewrite is textual, line by line, so comments and layout survive: every `KEY: DURATION`
(block or flow style) whose key is listed below is replaced; nothing else changes (a
worker's `cmd:` flags are simulated durations that simworker scales itself).

Usage: scale_config.py vramd.yaml [--timescale X] > scaled.yaml   (default $SIMGPU_TIMESCALE)
"""
import argparse
import math
import os
import re
import sys

# key -> floor in seconds after scaling (None: scaled without floor); keys not here are kept.
SCALED_KEYS = {
    "deadline": None,
    "keep_alive": None,
    "results_ttl": None,
    "hang_timeout": 1.0,
    "interval": 0.1,         # health.interval
    "timeout": 1.0,          # health.timeout, hook timeouts
    "startup_timeout": 10.0,
    "stop_timeout": 2.0,
    "drain_timeout": 5.0,
}
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
PAIR = re.compile(r"(?P<key>\b[a-z_]+)(?P<sep>\s*:\s*)(?P<q>[\"']?)(?P<num>[0-9]+(?:\.[0-9]+)?)(?P<unit>ms|s|m|h)?(?P=q)(?=\s*(?:[,}#]|$))")


def fmt(seconds):
    ms = max(1, int(round(seconds * 1000)))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def scale_line(line, timescale):
    if line.lstrip().startswith("#"):
        return line
    code, hash_, comment = line.partition(" #")

    def repl(m):
        key = m.group("key")
        if key not in SCALED_KEYS:
            return m.group(0)
        unit = m.group("unit")
        seconds = float(m.group("num")) * UNITS[unit or "s"]
        if seconds == 0:  # keep_alive: 0 means "unload after each request"
            return m.group(0)
        scaled = seconds * timescale
        floor = SCALED_KEYS[key]
        if floor is not None:
            scaled = max(scaled, min(seconds, floor))
        return f"{key}{m.group('sep')}{fmt(scaled)}"

    return PAIR.sub(repl, code) + hash_ + comment


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--timescale", type=float)
    args = ap.parse_args(argv)
    ts = args.timescale
    if ts is None:
        try:
            ts = float(os.environ.get("SIMGPU_TIMESCALE") or 1.0)
        except ValueError:
            ts = 1.0
    if not (ts > 0 and math.isfinite(ts)):
        print("scale_config: the time scale must be > 0", file=sys.stderr)
        return 2
    with open(args.config) as f:
        lines = f.read().split("\n")
    sys.stdout.write(f"# scaled by bench/player/scale_config.py for SIMGPU_TIMESCALE={ts:g}\n")
    sys.stdout.write("\n".join(scale_line(line, ts) for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
