"""tests/metrics is a package so that its conftest.py is imported as metrics.conftest, never
under a plain name another test directory's conftest.py could also take. The scheduling
helpers (simulated GPUs, simworker models, vramd) are reused from scheduling.schedkit."""
