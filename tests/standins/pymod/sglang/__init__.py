"""A stand-in `sglang` package for the preset tests: only `python3 -m sglang.launch_server`,
which runs tests/standins/sglang_standin.py (put tests/standins/pymod on PYTHONPATH)."""
