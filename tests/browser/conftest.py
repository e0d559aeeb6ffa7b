"""conftest: fixtures for the browser tests of vramd's live status page (GET /).

sched: the shared kit's harness and fixture (tests/lib/vramdkit/harness.py): simulated GPU
sets, vramd with simworker models, `simgpu alloc` holders; everything killed
and removed at teardown, and a failing test's report gets the tail of each daemon's log.
"""
import sys
from pathlib import Path

_LIB = str(Path(__file__).resolve().parents[1] / "lib")  # tests/lib: the vramdkit package
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from vramdkit.harness import sched  # noqa: E402,F401  (fixture)
from vramdkit.report import pytest_runtest_makereport  # noqa: E402,F401  (hook)
