"""tests/metrics is a package so that its conftest.py is imported as metrics.conftest, never
under a plain name another test directory's conftest.py could also take. The shared helpers
(simulated GPUs, simworker models, vramd) come from tests/lib/vramdkit."""
