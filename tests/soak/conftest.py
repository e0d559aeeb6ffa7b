"""conftest: tests/lib on sys.path and the failure-report hook for the soak run."""
import sys
from pathlib import Path

_LIB = str(Path(__file__).resolve().parents[1] / "lib")  # tests/lib: the vramdkit package
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from vramdkit.harness import sched  # noqa: E402,F401  (fixture)
from vramdkit.report import pytest_runtest_makereport  # noqa: E402,F401  (hook)
