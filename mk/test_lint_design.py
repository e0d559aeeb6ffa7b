# Self-test for mk/lint_design.py: builds small synthetic trees in a temporary folder and
# checks that a clean tree passes and that a missing row, a row for a file that does not
# exist, a file listed twice, a row under the wrong folder, a folder without its row and a
# doc without a Modules section are each caught; that the event table is checked against
# the core_listen calls (a listener not named, a file named that does not listen, an event
# without a row); and that the folder-arrow listing is built right and a stale one fails.
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
    def run_on(self, doc, files=FILES, texts=None, arrows=False):
        with tempfile.TemporaryDirectory() as root:
            for f in files:
                os.makedirs(os.path.join(root, os.path.dirname(f)), exist_ok=True)
                with open(os.path.join(root, f), "w") as fh:
                    fh.write((texts or {}).get(f, "/* x */\n"))
            for f, text in (texts or {}).items():
                if f not in files:
                    os.makedirs(os.path.join(root, os.path.dirname(f)), exist_ok=True)
                    with open(os.path.join(root, f), "w") as fh:
                        fh.write(text)
            os.makedirs(os.path.join(root, "docs"))
            with open(os.path.join(root, "docs", "design.md"), "w") as fh:
                fh.write(doc)
            p = subprocess.run([sys.executable, LINT, "--root", root] + ([] if arrows else ["--no-arrows"]),
                               capture_output=True, text=True, timeout=120)
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


    # ---- the event table against the core_listen calls ----

    EVENTS = TABLE + textwrap.dedent("""
        ## Events

        | event | subject | emitted by | listeners |
        |---|---|---|---|
        | `CORE_EV_A` | x | y | `net/conn.c` (why) |
        | `CORE_EV_B` | x | y | `net/conn_state.c` (why), `common/buf.c` (why) |
    """)
    CODE = {
        "src/net/conn.c": "void conn_init(core_t *c) { core_listen(c, CORE_EV_A, on_a, NULL); }\n",
        "src/net/conn_state.c": "void s_init(core_t *c)\n{\n    core_listen(c,\n        CORE_EV_B, f, c);\n}\n",
        "src/common/buf.c": "/* core_listen(c, CORE_EV_A, ..) in a comment is not a call */\n"
                            "void b(core_t *c) { core_listen(c, CORE_EV_B, g, NULL); }\n",
    }

    def test_events_clean_passes(self):
        rc, out = self.run_on(self.EVENTS, texts=self.CODE)
        self.assertEqual(rc, 0, out)

    def test_unnamed_listener_fails(self):
        code = dict(self.CODE)
        code["src/common/buf.c"] += "void b2(core_t *c) { core_listen(c, CORE_EV_A, h, NULL); }\n"
        rc, out = self.run_on(self.EVENTS, texts=code)
        self.assertEqual(rc, 1, out)
        self.assertIn("UNNAMED LISTENER: src/common/buf.c calls core_listen(CORE_EV_A)", out)

    def test_row_naming_a_file_that_does_not_listen_fails(self):
        code = dict(self.CODE, **{"src/common/buf.c": "/* none */\n"})
        rc, out = self.run_on(self.EVENTS, texts=code)
        self.assertEqual(rc, 1, out)
        self.assertIn("NOT LISTENING: the row names src/common/buf.c", out)

    def test_event_without_row_fails(self):
        code = dict(self.CODE)
        code["src/net/conn.c"] += "void c2(core_t *c) { core_listen(c, CORE_EV_C, h, NULL); }\n"
        rc, out = self.run_on(self.EVENTS, texts=code)
        self.assertEqual(rc, 1, out)
        self.assertIn("NO EVENT ROW: CORE_EV_C", out)

    # ---- the folder arrows ----

    DOT = textwrap.dedent("""
        digraph src {
          "src/common" [label="src/common\\nrank 0"];
          "src/net" [label="src/net\\nrank 1"];
          "src/top" [label="src/top\\nrank 2"];
          "src/net" -> "src/common" [label="3 uses, 2 inc"];
          "src/top" -> "src/common" [label="1 uses, 1 inc"];
          "src/top" -> "src/net" [label="2 uses, 0 inc"];
        }
    """)

    def test_arrows_listing(self):
        import importlib.util
        spec = importlib.util.spec_from_file_location("lint_design", LINT)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        lines, n = mod.arrows_listing(self.DOT)
        self.assertEqual(n, 3)
        self.assertEqual(lines, ["2  top/       -> net 2/0, common 1/1",
                                 "1  net/       -> common 3/2",
                                 "0  common/    -> (nothing)"])

    def test_stale_arrows_fail(self):
        layers = "src/common 0\nsrc/net 1\n"
        doc = TABLE.replace("## A request's life", textwrap.dedent("""
            The arrows between folders, 5 arrows.

            ```
            1  net/       -> common 9/9
            0  common/    -> (nothing)
            ```

            ## A request's life"""))
        texts = {"mk/layers.txt": layers, "src/common/buf.c": "int buf_size(void) { return 1; }\n",
                 "src/net/conn.c": '#include "common/buf.h"\nint conn_x(void) { return buf_size(); }\n'}
        rc, out = self.run_on(doc, texts=texts, arrows=True)
        self.assertEqual(rc, 1, out)
        self.assertIn("ARROW COUNT: the text says 5 arrows, lint_layers.py --dot draws 1", out)
        self.assertIn("want 1  net/       -> common 1/1", out)


if __name__ == "__main__":
    unittest.main()
