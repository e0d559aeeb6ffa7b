# Self-test for mk/lint_design.py: builds small synthetic trees in a temporary folder and
# checks that a clean tree passes and that a missing row, a row for a file that does not
# exist, a file listed twice, a row under the wrong folder, a folder without its row and a
# doc without a Modules section are each caught.
#
#   /usr/bin/python3 mk/test_lint_design.py [-v]
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LINT = os.path.join(HERE, "lint_design.py")

TABLE = textwrap.dedent("""
    # design

    ## The house

    `net/conn.c` is named here in prose, which is not a row.

    ## Modules (one purpose each)

    | layer | file | job |
    |---|---|---|
    | **1** | **`net/`** | transport |
    | | `net/conn.c` | client connections (see `common/gone.c`, prose in a job cell) |
    | | `net/conn_state.c` | the state machine |
    | **0** | **`common/`** | pure helpers |
    | | `common/buf.c` | buffers |

    ## A request's life

    | step | file |
    |---|---|
    | x | `common/other.c` |
""").lstrip("\n")

FILES = ["src/net/conn.c", "src/net/conn_state.c", "src/common/buf.c", "src/common/buf.h"]


class LintDesign(unittest.TestCase):
    def run_on(self, doc, files=FILES):
        with tempfile.TemporaryDirectory() as root:
            for f in files:
                os.makedirs(os.path.join(root, os.path.dirname(f)), exist_ok=True)
                open(os.path.join(root, f), "w").write("/* x */\n")
            os.makedirs(os.path.join(root, "docs"))
            open(os.path.join(root, "docs", "design.md"), "w").write(doc)
            p = subprocess.run([sys.executable, LINT, "--root", root],
                               capture_output=True, text=True, timeout=60)
            return p.returncode, p.stdout + p.stderr

    def test_clean_tree_passes(self):
        rc, out = self.run_on(TABLE)
        self.assertEqual(rc, 0, out)
        self.assertIn("all 3 src/*.c files", out)

    def test_missing_row_fails(self):
        rc, out = self.run_on(TABLE.replace("| | `net/conn_state.c` | the state machine |\n", ""))
        self.assertEqual(rc, 1, out)
        self.assertIn("MISSING: src/net/conn_state.c", out)

    def test_row_for_absent_file_fails(self):
        rc, out = self.run_on(TABLE, [f for f in FILES if f != "src/common/buf.c"])
        self.assertEqual(rc, 1, out)
        self.assertIn("NO SUCH FILE: src/common/buf.c", out)

    def test_new_file_without_row_fails(self):
        rc, out = self.run_on(TABLE, FILES + ["src/net/conn_new.c"])
        self.assertEqual(rc, 1, out)
        self.assertIn("MISSING: src/net/conn_new.c", out)

    def test_twice_fails(self):
        doc = TABLE.replace("| | `common/buf.c` | buffers |",
                            "| | `common/buf.c` | buffers |\n| | `common/buf.c` | again |")
        rc, out = self.run_on(doc)
        self.assertEqual(rc, 1, out)
        self.assertIn("TWICE: src/common/buf.c", out)

    def test_wrong_folder_fails(self):
        doc = TABLE.replace("| | `net/conn_state.c` | the state machine |\n", "").replace(
            "| | `common/buf.c` | buffers |", "| | `common/buf.c` | buffers |\n| | `net/conn_state.c` | x |")
        rc, out = self.run_on(doc)
        self.assertEqual(rc, 1, out)
        self.assertIn("WRONG FOLDER: src/net/conn_state.c", out)

    def test_folder_without_row_fails(self):
        doc = TABLE + ""
        rc, out = self.run_on(doc, FILES + ["src/gpu/nvml.c"])
        self.assertEqual(rc, 1, out)
        self.assertIn("NO FOLDER ROW: src/gpu/", out)

    def test_no_modules_section_is_an_error(self):
        rc, out = self.run_on("# design\n\n## Other\n")
        self.assertEqual(rc, 2, out)


if __name__ == "__main__":
    unittest.main()
