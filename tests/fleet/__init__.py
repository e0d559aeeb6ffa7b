"""tests/fleet is a package so that its conftest.py and helpers (fleetkit.py) are imported as
fleet.conftest / fleet.fleetkit and never under a plain name another test directory could take."""
