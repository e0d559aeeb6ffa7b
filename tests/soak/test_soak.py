"""The soak (tests/soak/soak.py) in a short version for `make test`: 3 s measuring capacity,
then 20 s at twice that rate (open loop, five tenants, one greedy); every answer 2xx, 429 or
503, admitted latency bounded and not growing, RSS flat (not in the ASan build), vramd's
own descriptors and memory budget back to their start, and a clean SIGTERM exit. The long
mode is by hand: /usr/bin/python3 tests/soak/soak.py --minutes 10 (figures in
docs/reliability.md, case 34)."""
from . import soak


def test_soak_short(sched):
    summary = soak.run(sched, 20, seed=3, calibrate_s=3)
    assert summary["n_problems"] == 0
    codes = summary["refusals"]
    assert any(k.startswith("503") for k in codes) and any(k.startswith("429") for k in codes), codes
