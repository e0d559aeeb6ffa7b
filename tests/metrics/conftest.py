"""conftest: fixtures for the /metrics tests (issue 6).

metricsd: one vramd on a simulated 8 GiB GPU with one simworker model, "gen", shared by the
tests of a module (starting it costs seconds). The model's worker OOMs on large requests
(a degradation ladder rescues them) and runs for a time the request chooses (`steps`), so a
test can make requests end in each outcome on purpose. After the module's tests the
scheduling end checks run (vramdkit's Harness.finish: ledger clean, clean exit, no sanitizer
report, no worker left); then the daemon, its worker and the GPU set are removed. A failing
test's report gets the tail of the daemon's log (vramdkit.report).
"""
import sys
from pathlib import Path

import pytest

_LIB = str(Path(__file__).resolve().parents[1] / "lib")  # tests/lib: the vramdkit package
if _LIB not in sys.path:
    sys.path.insert(0, _LIB)

from vramdkit import check_binaries, sim_s  # noqa: E402
from vramdkit.harness import Harness  # noqa: E402
from vramdkit.report import pytest_runtest_makereport, track  # noqa: E402,F401  (hook)

# Levels are cumulative; a request {"resolution": 1024} OOMs at levels 0 and 1 (16 and 7.9
# GiB on a card with 6.7 GiB left for requests) and fits at level 2 (4 GiB).
LADDER = [{"set": {"resolution": 720}}, {"set": {"resolution": 512}}]


@pytest.fixture(scope="module")
def metricsd(tmp_path_factory, request):
    check_binaries()
    h = Harness(tmp_path_factory.mktemp("metrics"))
    track(request.node, h.daemons)
    try:
        gpu = h.gpu_set("8GiB")
        worker = ["--resident", "1GiB", "--per-request", "16GiB", "--mem-scale", "resolution:1024:2",
                  "--time-scale", "steps:1:1", "--cache", "release", "--run-time", sim_s(1)]
        model = h.model("gen", worker, "1536MiB", "1GiB", queue_max=1,
                        degrade={"detect": {"status": [500], "body_matches": "out of memory"},
                                 "ladder": LADDER})
        vd = h.start_vramd(gpu, {"gen": model})
        vd.allow_oom.add("gen")
        yield vd
        # the scheduling tests' end checks: ledger back to resident reservations, clean exit
        # on SIGTERM, no sanitizer report, no worker left (an error at teardown if not)
        h.finish()
    finally:
        h.close()
