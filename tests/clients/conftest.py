"""conftest: the `sched` fixture for tests that drive vramd with real third-party clients,
taken from tests/scheduling/conftest.py (helpers in tests/scheduling/schedkit.py: simulated
GPUs, simworker models, vramd).

sched: a schedkit.Harness for one test. The test ends with sched.finish() (ledger back to
resident reservations only, no OOM, clean exit, no sanitizer report, no worker left); at
teardown everything it started is killed and every GPU set it made is removed. A failing
test's report gets the tail of each of its daemons' logs.

Run: /usr/bin/python3 -m pytest tests/clients                        (after `make`)
     VRAMD_BUILD=build-san /usr/bin/python3 -m pytest tests/clients  (after `make SAN=1`)
"""
from scheduling.conftest import pytest_runtest_makereport, sched  # noqa: F401
