"""tests/faults is a package so that its conftest.py and helpers (faultkit.py) are imported as
faults.conftest / faults.faultkit, never under a plain name that another test directory's
conftest.py could also take (pytest runs several directories in one session). The shared
helpers come from tests/lib/vramdkit."""
