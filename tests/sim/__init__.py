"""tests/sim is a package so that its conftest.py is imported as sim.conftest and never takes
the plain name "conftest", which tests/e2e's conftest.py takes (pytest runs both directories
in one session)."""
