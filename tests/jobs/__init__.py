"""tests/jobs is a package so that its conftest.py is imported as jobs.conftest, never under a
plain name that another test directory's conftest.py could also take (pytest runs several
directories in one session). The e2e helpers are reused through their package path
(e2e.conftest)."""
