"""tests/ops is a package so that its conftest.py is imported as ops.conftest and never takes
the plain name "conftest", which tests/e2e's modules import from (pytest runs both directories
in one session)."""
