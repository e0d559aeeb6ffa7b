"""tests/jobs is a package so that its conftest.py is imported as jobs.conftest, never under a
plain name that another test directory's conftest.py could also take (pytest runs several
directories in one session). The shared helpers come from tests/lib/vramdkit."""
