# Length lint: measures every C function in src/, shim/ and sim/ with universal-ctags (tag
# line .. end line, inclusive), prints one line per function over the warning limit (80
# lines) and fails when a function in any of them is over the hard limit (120 lines), or when
# a .c or .h file in src/ is over --file-max lines (800: a file that long is two rooms).
#
#   /usr/bin/python3 mk/lint_funclen.py [--root DIR] [--warn N] [--fail N] [--file-max N]
#
# Exit status: 0 pass, 1 a function over its limit or a src/ file over its limit, 2 the tool
# could not run. "over 80" in the summary counts every function longer than --warn,
# including those also longer than --fail. Python standard library only; ctags is $CTAGS or
# `ctags` on PATH.
import argparse
import os
import subprocess
import sys

CTAGS_ARGS = [
    "--languages=C", "--map-C=+.h", "--map-C++=-.h",  # .h files are C here, not C++
    "--kinds-C=f", "--fields=+neKZf", "--extras=F", "--excmd=number", "--sort=no",
    "-R", "-f", "-",
]


def die(msg):
    print("funclen: error: " + msg, file=sys.stderr)
    sys.exit(2)


def run_ctags(root, tree):
    """Yields (path, line, end or None, name) for every function defined under root/tree."""
    ctags = os.environ.get("CTAGS", "ctags")
    try:
        ver = subprocess.run([ctags, "--version"], capture_output=True, text=True).stdout
    except OSError as e:
        die("cannot run %s (%s); install universal-ctags (make deps)" % (ctags, e))
    if "Universal Ctags" not in ver:
        die("%s is not universal-ctags; install universal-ctags (make deps)" % ctags)
    p = subprocess.run([ctags] + CTAGS_ARGS + [tree], cwd=root, capture_output=True,
                       text=True, errors="replace")
    if p.returncode != 0:
        die("ctags failed: " + p.stderr.strip())
    for raw in p.stdout.splitlines():
        if raw.startswith("!_"):
            continue
        cols = raw.split("\t")
        if len(cols) < 4:
            continue
        name, path = cols[0], cols[1]
        fields = {}
        for c in cols[3:]:
            k, _, v = c.partition(":")
            fields[k] = v
        if cols[3] != "function":  # --fields=+K: the kind's long name
            continue
        line = int(fields.get("line", cols[2].split(";")[0]))
        end = int(fields["end"]) if fields.get("end", "").isdigit() else None
        yield path, line, end, name


TREES = ("src", "shim", "sim")  # every tree of C the project builds


def measure(root, tree, warn, fail):
    """Prints the long functions of one tree and returns its summary line and fail count."""
    if not os.path.isdir(os.path.join(root, tree)):
        return "funclen: %s: absent" % tree, 0
    total = over_warn = over_fail = 0
    longest = None
    unmeasured = []
    rows = []
    for path, line, end, name in run_ctags(root, tree):
        total += 1
        if end is None:
            unmeasured.append("%s:%d: %s" % (path, line, name))
            continue
        n = end - line + 1
        if longest is None or n > longest[0]:
            longest = (n, path, line, name)
        if n > warn:
            over_warn += 1
            if n > fail:
                over_fail += 1
            rows.append((path, line, name, n))
    for path, line, name, n in sorted(rows):
        if n > fail:
            print("funclen: FAIL %s:%d: %s() is %d lines (over %d)" % (path, line, name, n, fail))
        else:
            print("funclen: WARN %s:%d: %s() is %d lines (over %d)" % (path, line, name, n, warn))
    for u in unmeasured:
        print("funclen: NOTE %s: ctags gave no end line; not measured" % u)
    lng = ("longest %s:%d %s() %d lines" % (longest[1], longest[2], longest[3], longest[0])
           if longest else "no functions")
    summary = ("funclen: %s: %d functions, %d over %d, %d over %d, %s"
               % (tree, total, over_warn, warn, over_fail, fail, lng))
    return summary, over_fail


def long_files(root, tree, limit):
    """Prints every .c/.h file of root/tree over `limit` lines; returns how many."""
    n = 0
    biggest = (0, None)
    for dirpath, _, files in sorted(os.walk(os.path.join(root, tree))):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, f)
            with open(path, errors="replace") as fh:
                lines = sum(1 for _ in fh)
            rel = os.path.relpath(path, root)
            if lines > biggest[0]:
                biggest = (lines, rel)
            if lines > limit:
                print("funclen: FAIL %s is %d lines (over %d)" % (rel, lines, limit))
                n += 1
    if biggest[1]:
        print("funclen: %s: largest file %s, %d lines" % (tree, biggest[1], biggest[0]))
    return n


def main():
    ap = argparse.ArgumentParser(description="Function length lint (universal-ctags).")
    ap.add_argument("--root", default=".", help="repository root (default: .)")
    ap.add_argument("--warn", type=int, default=80, help="warn above this many lines (80)")
    ap.add_argument("--fail", type=int, default=120, help="fail above this many lines (120)")
    ap.add_argument("--file-max", type=int, default=800, help="fail a src/ file above this many lines (800)")
    a = ap.parse_args()
    failed = 0
    summaries = []
    for tree in TREES:
        summary, n = measure(a.root, tree, a.warn, a.fail)
        summaries.append(summary)
        failed += n
    for summary in summaries:
        print(summary)
    big = long_files(a.root, "src", a.file_max)
    names = "/, ".join(TREES) + "/"
    if failed or big:
        print("funclen: FAIL: %d function(s) in %s over %d lines, %d src/ file(s) over %d lines"
              % (failed, names, a.fail, big, a.file_max))
        return 1
    print("funclen: OK: no function in %s over %d lines, no src/ file over %d lines"
          % (names, a.fail, a.file_max))
    return 0


if __name__ == "__main__":
    sys.exit(main())
