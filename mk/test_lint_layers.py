# Self-test for mk/lint_layers.py and mk/lint_funclen.py: builds small synthetic trees in a
# temporary folder and checks that a cycle, an upward include, an upward call and a long
# function are each caught, that the things the tools must ignore are ignored, and that a
# clean tree passes. Needs universal-ctags, like the tools.
#
#   /usr/bin/python3 mk/test_lint_layers.py [-v]
import importlib.util
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS = os.path.join(HERE, "lint_layers.py")
FUNCLEN = os.path.join(HERE, "lint_funclen.py")


def body(n):
    """The body of a function n lines long in all, for a one-line signature."""
    return "\n".join(["{"] + ["    x++;"] * (n - 3) + ["}"])


def D(text):
    return textwrap.dedent(text).lstrip("\n")


CLEAN = {
    "mk/layers.txt": D("""
        # comment
        src/common 0
        src/mid 1
        src/top 2
        src/top/low.c 0
        src/mid/deg*.c 0
        src/absent 1
        src/mid/absent.c 3
    """),
    "src/common/util.h": "int util_add(int a, int b);\nextern int util_count;\n",
    "src/common/util.c": D("""
        #include "common/util.h"
        int util_count;
        int util_add(int a, int b) { util_count++; return a + b; }
    """),
    "src/mid/m1.h": "int m1_run(void);\n",
    "src/mid/m1.c": D("""
        #include "common/util.h"
        #include "mid/m1.h"
        #include "mid/degrade.h"
        static int helper(void) { return util_add(1, 2); }
        int m1_run(void) { return helper() + degrade_level(); }
    """),
    "src/mid/degrade.h": "int degrade_level(void);\n",
    "src/mid/degrade.c": D("""
        #include "common/util.h"
        int degrade_level(void) { return util_count; }
    """),
    "src/top/low.c": D("""
        #include "common/util.h"
        int low_thing(void) { int helper = 0; return util_add(helper, 0); }  /* m1.c's is static */
    """),
    "src/top/t.c": D("""
        #include "mid/m1.h"
        #include "top/t.h"
        /* t_main calls top_only(), which is also a static name in m1.c's neighbour */
        struct holder { int (*top_only)(void); };
        int top_only(void);
        int top_only(void) { return 1; }
        int t_main(void) { return m1_run() + top_only() + low_thing(); }
        int low_thing(void);
    """),
    "src/top/t.h": "int t_main(void);\n",
    "src/mid/m2.c": D("""
        #include "mid/m1.h"
        /* mentions t_main() in a comment and "t_main" in a string: not uses */
        static const char *s = "t_main";
        static char c = 't';
        struct holder { int (*t_main)(void); };
        static int top_only(void) { return 0; }   /* its own static: not t.c's */
        int m2_run(struct holder *h) { return h->t_main() + m1_run() + top_only() + (s[0] == c); }
        int m2_len(void)
    """) + body(100) + "\n",
    "sim/x/long.c": "int sim_long(void)\n" + body(90) + "\n",
}


def write_tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def run(script, root, *args):
    p = subprocess.run([sys.executable, script, "--root", root] + list(args),
                       capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


class Tree(unittest.TestCase):
    def tree(self, changes=None, drop=()):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        files = dict(CLEAN)
        files.update(changes or {})
        for k in drop:
            files.pop(k, None)
        write_tree(d.name, files)
        return d.name

    def test_clean_tree_passes(self):
        root = self.tree()
        rc, out = run(LAYERS, root)
        self.assertEqual(rc, 0, out)
        self.assertIn("layers: OK:", out)
        self.assertIn("0 cycle(s)", out)
        rc, out = run(FUNCLEN, root)
        self.assertEqual(rc, 0, out)
        self.assertIn("funclen: WARN src/mid/m2.c:8: m2_len() is 100 lines (over 80)", out)
        self.assertIn("funclen: src: 10 functions, 1 over 80, 0 over 120", out)
        self.assertIn("funclen: WARN sim/x/long.c:1: sim_long() is 90 lines (over 80)", out)
        self.assertIn("funclen: sim: 1 functions, 1 over 80, 0 over 120", out)
        self.assertIn("funclen: shim: absent", out)

    def test_long_function_fails(self):
        root = self.tree({"src/common/big.c": "int big(void)\n" + body(121) + "\n"})
        rc, out = run(FUNCLEN, root)
        self.assertEqual(rc, 1, out)
        self.assertIn("funclen: FAIL src/common/big.c:1: big() is 121 lines (over 120)", out)
        self.assertIn("longest src/common/big.c:1 big() 121 lines", out)
        rc, out = run(FUNCLEN, self.tree({"src/common/big.c": "int big(void)\n" + body(120)}))
        self.assertEqual(rc, 0, out)

    def test_long_function_in_shim_or_sim_fails(self):
        for rel in ("shim/big.c", "sim/worker/big.c"):
            rc, out = run(FUNCLEN, self.tree({rel: "int big(void)\n" + body(121) + "\n"}))
            self.assertEqual(rc, 1, out)
            self.assertIn("funclen: FAIL %s:1: big() is 121 lines (over 120)" % rel, out)

    def test_cycle_is_caught(self):
        # util.c calls back into m1.c (which uses degrade.c, which uses util.c): a cycle of
        # three, and an upward use
        root = self.tree({"src/common/util.c": CLEAN["src/common/util.c"]
                          + "int util_back(void) { return m1_run(); }\n"})
        rc, out = run(LAYERS, root)
        self.assertEqual(rc, 1, out)
        self.assertIn("layers: CYCLE (3 files): src/common/util.c src/mid/degrade.c src/mid/m1.c", out)
        self.assertIn("layers: UP src/common/util.c:4: uses m1_run of src/mid/m1.c: "
                      "src/common (rank 0) -> src/mid (rank 1)", out)
        rc, out = run(LAYERS, root, "-v")
        self.assertIn("layers:   src/common/util.c:4 -> src/mid/m1.c (m1_run)", out)

    def test_same_rank_cycle_is_caught(self):
        root = self.tree({"src/mid/m2.c": CLEAN["src/mid/m2.c"]
                          + "int m2_more(void) { return 1; }\n",
                          "src/mid/m1.c": CLEAN["src/mid/m1.c"]
                          + "int m1_more(void) { return m2_more(); }\n"})
        rc, out = run(LAYERS, root)
        self.assertEqual(rc, 1, out)
        self.assertIn("layers: CYCLE (2 files): src/mid/m1.c src/mid/m2.c", out)
        self.assertIn("1 cycle(s) (largest 2 files), 0 upward edge(s)", out)

    def test_upward_include_is_caught(self):
        root = self.tree({"src/mid/degrade.c": '#include "mid/m1.h"\n'
                          + CLEAN["src/mid/degrade.c"]})
        rc, out = run(LAYERS, root)
        self.assertEqual(rc, 1, out)
        self.assertIn('layers: UP src/mid/degrade.c:1: #include "mid/m1.h": '
                      'src/mid (rank 0, by src/mid/deg*.c) -> src/mid (rank 1)', out)
        self.assertIn("1 upward edge(s) (1 includes, 0 uses)", out)

    def test_header_include_and_commented_include(self):
        root = self.tree({"src/common/util.h": '/* #include "top/t.h" */\n'
                          '// #include "top/t.h"\n#include "top/t.h"\n'
                          + CLEAN["src/common/util.h"]})
        rc, out = run(LAYERS, root)
        self.assertEqual(rc, 1, out)
        self.assertIn('layers: UP src/common/util.h:3: #include "top/t.h": '
                      'src/common (rank 0) -> src/top (rank 2)', out)
        self.assertIn("1 upward edge(s) (1 includes, 0 uses)", out)

    def test_file_override_and_unranked(self):
        # low.c is rank 0 by its own entry, so using t.c (rank 2) goes up
        root = self.tree({"src/top/low.c": CLEAN["src/top/low.c"]
                          + "int low2(void) { return m2_run(0); }\n",
                          "src/new/n.c": "int n(void) { return 0; }\n"})
        rc, out = run(LAYERS, root)
        self.assertEqual(rc, 1, out)
        self.assertIn("layers: UP src/top/low.c:3: uses m2_run of src/mid/m2.c: "
                      "src/top (rank 0, by src/top/low.c) -> src/mid (rank 1)", out)
        self.assertIn("layers: UNRANKED src/new/n.c: no entry in mk/layers.txt covers it", out)
        self.assertIn("1 unranked file(s)", out)

    def test_bad_layers_file(self):
        root = self.tree({"mk/layers.txt": "src/common zero\n"})
        rc, out = run(LAYERS, root)
        self.assertEqual(rc, 2, out)
        self.assertIn("expected `PATH RANK`", out)

    def test_dot(self):
        root = self.tree({"src/mid/degrade.c": '#include "mid/m1.h"\n'
                          + CLEAN["src/mid/degrade.c"]
                          + "int d3(void) { return t_main(); }\n"})
        rc, out = run(LAYERS, root, "--dot")
        self.assertEqual(rc, 0, out)
        self.assertTrue(out.startswith("digraph src {"), out)
        self.assertIn('"src/mid" -> "src/top" [label="1 uses, 0 inc" color=red', out)
        self.assertIn('"src/mid" -> "src/common" [label="2 uses, 2 inc"];', out)


class Tarjan(unittest.TestCase):
    def setUp(self):
        spec = importlib.util.spec_from_file_location("lint_layers", LAYERS)
        self.m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.m)

    def test_deep_chain_and_big_cycle(self):
        n = 200000  # far deeper than Python's recursion limit
        chain = self.m.tarjan(range(n), lambda v: [v + 1] if v + 1 < n else [])
        self.assertEqual(len(chain), n)
        ring = self.m.tarjan(range(n), lambda v: [(v + 1) % n])
        self.assertEqual(len(ring), 1)
        self.assertEqual(len(ring[0]), n)

    def test_components(self):
        g = {1: [2], 2: [3], 3: [1, 4], 4: [5], 5: [4], 6: [6], 7: []}
        comps = sorted(self.m.tarjan(sorted(g), lambda v: g[v]))
        self.assertEqual(comps, [[1, 2, 3], [4, 5], [6], [7]])


if __name__ == "__main__":
    unittest.main()
