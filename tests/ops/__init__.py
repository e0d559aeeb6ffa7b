"""tests/ops is a package so that its conftest.py is imported as ops.conftest, never under a
plain name that another test directory's conftest.py could also take (pytest runs several
directories in one session)."""
