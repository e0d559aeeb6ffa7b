"""tests/scheduling is a package so that its conftest.py and helpers (schedkit.py) are imported as
scheduling.conftest / scheduling.schedkit and never under a plain name that another test directory's
conftest.py could also take (pytest runs several directories in one session)."""
