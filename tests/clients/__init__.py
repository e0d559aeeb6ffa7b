"""tests/clients is a package so that its conftest.py is imported as clients.conftest and never
takes the plain name "conftest", which tests/e2e's conftest.py takes (pytest runs every test
directory in one session)."""
