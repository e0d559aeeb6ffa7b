# Self-test for mk/lint_ledger.py: builds small synthetic trees in a temporary folder and
# checks that a clean tree passes (reads, ledger_entry_init, writes inside src/sched/ and
# the ledger's own file, names in comments and strings) and that a ledger write and a
# mutable ledger pointer outside src/sched/ are each caught.
#
#   /usr/bin/python3 mk/test_lint_ledger.py [-v]
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LINT = os.path.join(HERE, "lint_ledger.py")

CLEAN = {
    "src/sched/sched_book.c": "void f(void) { ledger_release(&s.ledger, &e); ledger_t *l = &s.ledger; }\n",
    "src/policy/ledger.c": "void ledger_release(ledger_t *l, ledger_entry_t *e) { (void)l; }\n",
    "src/workers/instance.c": (
        "/* ledger_release(sched_ledger(), &inst->mem) was here */\n"
        "void g(void) { const ledger_t *l = sched_ledger(); ledger_entry_init(&inst->mem);\n"
        "  log(\"ledger_force(x)\"); if (ledger_fits(l, 0, 1, m)) sched_book_release(inst); }\n"),
}


class LintLedger(unittest.TestCase):
    def run_on(self, files):
        with tempfile.TemporaryDirectory() as root:
            for f, text in files.items():
                os.makedirs(os.path.join(root, os.path.dirname(f)), exist_ok=True)
                open(os.path.join(root, f), "w").write(text)
            p = subprocess.run([sys.executable, LINT, "--root", root], capture_output=True, text=True)
            return p.returncode, p.stdout + p.stderr

    def test_clean_tree_passes(self):
        rc, out = self.run_on(CLEAN)
        self.assertEqual(rc, 0, out)

    def test_write_outside_sched_fails(self):
        files = dict(CLEAN)
        files["src/path/dispatch.c"] = "void h(void)\n{\n    ledger_release (sched_ledger(), &r->mem);\n}\n"
        rc, out = self.run_on(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("src/path/dispatch.c:3: WRITE ledger_release()", out)

    def test_mutable_pointer_fails(self):
        files = dict(CLEAN)
        files["src/workers/park.c"] = "void h(void) { ledger_t *l = (ledger_t *)sched_ledger(); }\n"
        rc, out = self.run_on(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("src/workers/park.c:1: MUTABLE", out)

    def test_no_src_is_an_error(self):
        with tempfile.TemporaryDirectory() as root:
            p = subprocess.run([sys.executable, LINT, "--root", root], capture_output=True, text=True)
            self.assertEqual(p.returncode, 2)


if __name__ == "__main__":
    unittest.main()
