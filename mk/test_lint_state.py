# Self-test for mk/lint_state.py: builds small synthetic trees in a temporary folder and
# checks that a clean tree passes, that what is not state (const tables, extern
# declarations, prototypes, typedefs, struct definitions, a function's locals) is ignored,
# and that an unlisted variable, a misnamed one (`G`), a function's unlisted static, a
# pointer to const data, a row for a variable that is gone and a doc without the section
# are each caught.
#
#   /usr/bin/python3 mk/test_lint_state.py [-v]
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LINT = os.path.join(HERE, "lint_state.py")


def D(text):
    return textwrap.dedent(text).lstrip("\n")


SRC = D("""
    /* a module: "static int not_a_var;" in a comment is not code */
    #include <stdio.h>
    #define TABLE_MAX 4 /* static int not_either; */

    typedef struct thing { int a; } thing_t;
    struct other { int b; };
    enum { A_ONE, A_TWO };
    extern int g_elsewhere;
    int thing_count(const thing_t *t);
    static void helper(int x);

    static const char *const names[] = {"a", "b", NULL};
    static const thing_t defaults = {1};
    const int table_max = TABLE_MAX;
    thing_t *const fixed_ptr = NULL;
    static const char usage[] = "usage: static int no;";

    static struct {
        int n;
        char name[16];
    } mod_state;
    static int g_count = 0, g_max;
    void (*g_hook)(int);
    static const char *g_source = "fallback";

    static void helper(int x)
    {
        static const char *const words[] = {"x", "y"};
        int local = x;
        static unsigned g_calls;
        g_calls++;
        (void)words;
        (void)local;
    }

    int thing_count(const thing_t *t)
    {
        struct { int z; } scratch = {0};
        return t->a + scratch.z + g_count + g_max + mod_state.n;
    }
""")

DOC = D("""
    # design

    ## Modules

    | variable | file | job |
    |---|---|---|
    | `g_nothing` | `src/lib/mod.c` | not in the census: another section |

    ## Module state

    | variable | file | what |
    |---|---|---|
    | `mod_state` | `src/lib/mod.c` | the module's struct |
    | `g_count`, `g_max` | `src/lib/mod.c` | counts |
    | `g_hook`, `g_source` | `src/lib/mod.c` | a hook; where the figure came from |
    | `g_calls` | `src/lib/mod.c` | `helper`'s static |
    | `g_lock` | `shim/lib.c` | the shim's lock |

    ## After
""")

SHIM = "#include <pthread.h>\nstatic pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;\n"


class LintState(unittest.TestCase):
    def run_on(self, src=SRC, doc=DOC, extra=None):
        with tempfile.TemporaryDirectory() as root:
            files = {"src/lib/mod.c": src, "shim/lib.c": SHIM, "docs/design.md": doc,
                     "sim/sim.c": "static int untracked;\n"}
            files.update(extra or {})
            for path, text in files.items():
                os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                    f.write(text)
            p = subprocess.run([sys.executable, LINT, "--root", root],
                               capture_output=True, text=True, timeout=60)
            return p.returncode, p.stdout + p.stderr

    def test_clean_tree_passes(self):
        rc, out = self.run_on()
        self.assertEqual(rc, 0, out)
        self.assertIn("names all 7 variables of 2 files", out)

    def test_planted_variable_fails(self):
        rc, out = self.run_on(SRC + "static size_t g_planted;\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("UNLISTED: g_planted (file-scope)", out)

    def test_non_static_planted_variable_fails(self):
        rc, out = self.run_on(SRC + "unsigned long g_exported = 3;\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("UNLISTED: g_exported", out)

    def test_capital_g_is_misnamed(self):
        src = SRC + "static struct { int a; } G;\n"
        doc = DOC.replace("| `g_lock` |", "| `G` | `src/lib/mod.c` | x |\n| `g_lock` |")
        rc, out = self.run_on(src, doc)
        self.assertEqual(rc, 1, out)
        self.assertIn("MISNAMED: G", out)
        self.assertNotIn("UNLISTED", out)

    def test_other_module_state_name_is_misnamed(self):
        src = SRC + "static int other_state;\n"
        doc = DOC.replace("| `g_lock` |", "| `other_state` | `src/lib/mod.c` | x |\n| `g_lock` |")
        rc, out = self.run_on(src, doc)
        self.assertEqual(rc, 1, out)
        self.assertIn("MISNAMED: other_state", out)

    def test_folder_state_name_is_allowed(self):
        src = SRC + "int lib_state;\n"
        doc = DOC.replace("| `g_lock` |", "| `lib_state` | `src/lib/mod.c` | x |\n| `g_lock` |")
        rc, out = self.run_on(src, doc)
        self.assertEqual(rc, 0, out)

    def test_function_static_fails_unlisted(self):
        src = SRC.replace("static unsigned g_calls;", "static unsigned g_calls;\n    static char buf[8];")
        rc, out = self.run_on(src)
        self.assertEqual(rc, 1, out)
        self.assertIn("MISNAMED: buf (a function's static)", out)
        self.assertIn("UNLISTED: buf (a function's static)", out)

    def test_function_static_table_of_mutable_pointers_counts(self):
        src = SRC.replace("static const char *const words[]", "static const char *words[]")
        rc, out = self.run_on(src)
        self.assertEqual(rc, 1, out)
        self.assertIn("UNLISTED: words", out)

    def test_thread_local_counts(self):
        rc, out = self.run_on(SRC + "static _Thread_local int g_tls;\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("UNLISTED: g_tls", out)

    def test_shim_is_covered_and_sim_is_not(self):
        rc, out = self.run_on(extra={"shim/lib.c": SHIM + "static int g_new_in_shim;\n"})
        self.assertEqual(rc, 1, out)
        self.assertIn("shim/lib.c:3: UNLISTED: g_new_in_shim", out)
        self.assertNotIn("untracked", out)

    def test_row_for_a_gone_variable_fails(self):
        rc, out = self.run_on(SRC.replace("static int g_count = 0, g_max;", "static int g_count = 0;")
                              .replace("g_count + g_max", "g_count"))
        self.assertEqual(rc, 1, out)
        self.assertIn("NOT FOUND: src/lib/mod.c defines no mutable variable g_max", out)

    def test_twice_fails(self):
        doc = DOC.replace("| `g_lock` |", "| `g_max` | `src/lib/mod.c` | again |\n| `g_lock` |")
        rc, out = self.run_on(doc=doc)
        self.assertEqual(rc, 1, out)
        self.assertIn("TWICE: g_max", out)

    def test_no_section_is_an_error(self):
        rc, out = self.run_on(doc="# design\n\n## Modules\n")
        self.assertEqual(rc, 2, out)


if __name__ == "__main__":
    unittest.main()
