"""`python3 -m sglang.launch_server ...`: runs tests/standins/sglang_standin.py with the same flags."""
import os
import runpy
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.argv[0] = os.path.join(_HERE, "..", "..", "sglang_standin.py")
runpy.run_path(sys.argv[0], run_name="__main__")
