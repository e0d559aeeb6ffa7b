"""conftest: fixtures for vramd's end-to-end tests (helpers in tests/lib/vramdkit).

The tests drive the real vramd binary ($VRAMD_BUILD/bin/vramd, default build/, relative to
the repository root) over real sockets, with tests/e2e/testworker.py as the model server.

vramd: vramdkit.factory's fixture, a factory that starts daemons for one test
(vramd.start(models={...}) -> a running vramdkit.Vramd, raw-socket HTTP); at teardown it
stops them and fails the test when vramd does not exit 0 on SIGTERM, when its log holds a
sanitizer report or a log_format_error field, or when a testworker it started outlives it.
A failing test's report gets each daemon's log tail (vramdkit.report).

Run: /usr/bin/python3 -m pytest tests/e2e            (after `make build/bin/vramd`)
     VRAMD_BUILD=build-san /usr/bin/python3 -m pytest tests/e2e   (after `make SAN=1`)
"""
import sys
from pathlib import Path

_LIB = str(Path(__file__).resolve().parents[1] / "lib")  # tests/lib: the vramdkit package
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from vramdkit.factory import vramd  # noqa: E402,F401  (fixture)
from vramdkit.report import pytest_runtest_makereport  # noqa: E402,F401  (hook)
