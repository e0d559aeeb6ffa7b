# Layering lint for src/: finds cycles of mutual use among src/*.c files and includes or
# uses that go from a lower layer up to a higher one, with the ranks in mk/layers.txt.
#
#   /usr/bin/python3 mk/lint_layers.py [--root DIR] [--layers FILE] [-v] [--dot]
#
# File graph: A.c -> B.c when A uses, as an identifier token, a non-static function or
# global variable that universal-ctags says is defined in B.c (kinds f and v without the
# file-scope `file:` field). Comments, string and char literals are stripped first; member
# names after `.`/`->`, tags after struct/union/enum and member declarations inside
# struct/union bodies are not uses. A name that A defines itself (static too) is A's own.
# Cycles: the graph's strongly connected components (Tarjan, iterative); any component with
# more than one file fails, printed as one line listing its files (-v adds the edges inside).
# Layers: mk/layers.txt has lines `PATH RANK`; PATH is a folder, a file, or a glob of files
# (`src/quality/degrade*.c`). A file's rank comes from the most specific entry: its own path,
# then a glob matching it, then its deepest listed folder. A header with no file or glob
# entry of its own takes the rank of its same-named .c file when there is one. Entries for
# paths that do not exist are fine. An `#include "x/y.h"` (in a .c or .h under src/) or a
# use edge from a file of rank r to a file of rank above r fails, printed with file:line and
# both sides' folders and ranks; a src/ file no entry covers fails as UNRANKED.
# --dot prints the folder graph (Graphviz; upward edges red) instead of linting.
#
# Exit status: 0 pass, 1 violations, 2 the tool could not run (ctags missing, bad layers.txt).
# Python standard library only; ctags is $CTAGS or `ctags` on PATH.
import argparse
import fnmatch
import os
import re
import subprocess
import sys

CTAGS_ARGS = [
    "--languages=C", "--kinds-C=fv", "--fields=+neKZf", "--extras=F", "--excmd=number",
    "--sort=no", "-f", "-", "-L", "-",
]
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# C tokens, roughly: identifiers, pp-numbers (so `1.5` is not a member access), `->`, and
# any other single character that is not white space
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9][A-Za-z0-9_.]*|->|[^\sA-Za-z0-9_]")
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.M)
TAG_KEYWORDS = ("struct", "union", "enum")


def die(msg):
    print("layers: error: " + msg, file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------- source scanning

def strip_c(text, keep_strings):
    """Blanks comments (and, unless keep_strings, the insides of string and char literals),
    keeping every newline so that line numbers stay right."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " + "\n" * text.count("\n", i, j))
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "/":
            j = i
            while j < n and text[j] != "\n":  # a backslash-newline continues the comment
                j += 2 if text[j] == "\\" and j + 1 < n else 1
            out.append(" " + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            if keep_strings:
                out.append(text[i:j])
            else:
                out.append(c + "\n" * text.count("\n", i, j) + c)
            i = j
        else:
            # copy a run of ordinary characters in one go
            m = i + 1
            while m < n and text[m] not in "/\"'":
                m += 1
            out.append(text[i:m])
            i = m
    return "".join(out)


def used_names(text):
    """Yields (name, line) for identifier tokens that may name a function or global: not a
    member after `.` or `->`, not a struct/union/enum tag, not inside a struct or union body
    (member declarations)."""
    line = 1
    pos = 0
    prev = prev2 = ""
    braces = []     # for each open brace: True when it opened a struct or union body
    in_body = 0     # how many of those are open
    for m in TOKEN.finditer(text):
        tok = m.group(0)
        line += text.count("\n", pos, m.start())
        pos = m.start()
        if tok == "{":
            body = prev in ("struct", "union") or (
                prev2 in ("struct", "union") and IDENT.fullmatch(prev) is not None)
            braces.append(body)
            in_body += body
        elif tok == "}":
            if braces:
                in_body -= braces.pop()
        elif (not in_body and prev not in (".", "->") and prev not in TAG_KEYWORDS
              and (tok[0].isalpha() or tok[0] == "_")):
            yield tok, line
        prev2, prev = prev, tok


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


def list_files(root, tree, exts):
    out = []
    for d, dirs, files in os.walk(os.path.join(root, tree)):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(exts):
                out.append(os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/"))
    return out


def ctags_defs(root, cfiles):
    """Returns {file: set(names)} of non-static definitions and {file: set(names)} of all
    (static too) functions and variables defined in each .c file."""
    ctags = os.environ.get("CTAGS", "ctags")
    try:
        ver = subprocess.run([ctags, "--version"], capture_output=True, text=True).stdout
    except OSError as e:
        die("cannot run %s (%s); install universal-ctags (make deps)" % (ctags, e))
    if "Universal Ctags" not in ver:
        die("%s is not universal-ctags; install universal-ctags (make deps)" % ctags)
    p = subprocess.run([ctags] + CTAGS_ARGS, cwd=root, input="\n".join(cfiles) + "\n",
                       capture_output=True, text=True, errors="replace")
    if p.returncode != 0:
        die("ctags failed: " + p.stderr.strip())
    public = {f: set() for f in cfiles}
    local = {f: set() for f in cfiles}
    for raw in p.stdout.splitlines():
        cols = raw.split("\t")
        if raw.startswith("!_") or len(cols) < 4 or cols[1] not in local:
            continue
        if cols[3] not in ("function", "variable"):
            continue
        # a tag in a scope (a variable inside a function body) is not a global
        if any(c.startswith("scope:") for c in cols[4:]):
            continue
        local[cols[1]].add(cols[0])
        if not any(c.startswith("file:") for c in cols[4:]):
            public[cols[1]].add(cols[0])
    return public, local


# ---------------------------------------------------------------- graph

def build_graph(root, cfiles, texts):
    """edges[a][b] = list of (line, name) uses of b's public names in a, in order."""
    public, local = ctags_defs(root, cfiles)
    definers = {}
    for f in cfiles:
        for name in public[f]:
            definers.setdefault(name, []).append(f)
    dups = {}  # names defined non-static in more than one file that some other file uses
    edges = {f: {} for f in cfiles}
    for a in cfiles:
        own = local[a]
        seen = set()
        for name, line in used_names(texts[a]):
            if name in own or name in seen or name not in definers:
                continue
            seen.add(name)
            if len(definers[name]) > 1:
                dups[name] = definers[name]
            for b in definers[name]:
                if b != a:
                    edges[a].setdefault(b, []).append((line, name))
    return edges, dups


def tarjan(nodes, succ):
    """Strongly connected components, iteratively (no recursion the input can deepen).
    Returns the list of components, each a sorted list of nodes."""
    index = {}
    low = {}
    on_stack = set()
    stack = []
    comps = []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(succ(start)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ(w))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return comps


# ---------------------------------------------------------------- layers

class Layers:
    def __init__(self, root, path):
        self.root = root
        self.path = path
        self.exact = {}    # path -> rank (file or folder)
        self.globs = []    # (pattern, rank)
        try:
            text = read(root, path)
        except OSError as e:
            die("cannot read %s: %s" % (path, e))
        for no, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or not re.fullmatch(r"-?[0-9]+", parts[1]):
                die("%s:%d: expected `PATH RANK`, got %r" % (path, no, raw))
            p, r = parts[0].rstrip("/"), int(parts[1])
            if any(ch in p for ch in "*?["):
                if any(g == p and gr != r for g, gr in self.globs):
                    die("%s:%d: %s listed twice with different ranks" % (path, no, p))
                self.globs.append((p, r))
            else:
                if p in self.exact and self.exact[p] != r:
                    die("%s:%d: %s listed twice with different ranks" % (path, no, p))
                self.exact[p] = r

    def _file_entry(self, f):
        if f in self.exact:
            return f, self.exact[f]
        d = os.path.dirname(f)
        hits = {(g, r) for g, r in self.globs
                if os.path.dirname(g) == d and fnmatch.fnmatchcase(f, g)}
        if len({r for _, r in hits}) > 1:
            die("%s: globs %s give %s different ranks"
                % (self.path, ", ".join(sorted(g for g, _ in hits)), f))
        if hits:
            return sorted(hits)[0]
        return None

    def lookup(self, f):
        """(rank, entry) for a file, or (None, None) when nothing covers it."""
        e = self._file_entry(f)
        if e is None and f.endswith(".h"):
            c = f[:-2] + ".c"
            if os.path.exists(os.path.join(self.root, c)):
                e = self._file_entry(c)
        if e is not None:
            return e[1], e[0]
        d = os.path.dirname(f)
        while d:
            if d in self.exact:
                return self.exact[d], d
            d = os.path.dirname(d)
        return None, None


def side(layers, f):
    rank, entry = layers.lookup(f)
    folder = os.path.dirname(f)
    via = "" if entry == folder else ", by %s" % entry
    return rank, "%s (rank %s%s)" % (folder, rank, via)


def resolve_include(root, src_file, inc):
    for base in (os.path.dirname(src_file), "src", "sim/lib"):
        cand = os.path.normpath(os.path.join(base, inc)).replace(os.sep, "/")
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description="Cycle and layering lint for src/ (universal-ctags).")
    ap.add_argument("--root", default=".", help="repository root (default: .)")
    ap.add_argument("--layers", default="mk/layers.txt", help="rank file, relative to --root")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="also print the edges inside each cycle, with the names used")
    ap.add_argument("--dot", action="store_true", help="print the folder graph (Graphviz) only")
    a = ap.parse_args()
    root = a.root

    cfiles = list_files(root, "src", (".c",))
    allfiles = list_files(root, "src", (".c", ".h"))
    if not cfiles:
        die("no .c files under %s/src" % root)
    layers = Layers(root, a.layers)
    raw = {f: read(root, f) for f in allfiles}
    texts = {f: strip_c(raw[f], keep_strings=False) for f in cfiles}
    edges, dups = build_graph(root, cfiles, texts)

    includes = []  # (file, line, text, target)
    for f in allfiles:
        t = strip_c(raw[f], keep_strings=True)
        for m in INCLUDE.finditer(t):
            target = resolve_include(root, f, m.group(1))
            if target and target.startswith("src/") and target != f:
                includes.append((f, t.count("\n", 0, m.start()) + 1, m.group(1), target))

    if a.dot:
        print_dot(layers, edges, includes)
        return 0

    violations = 0
    # cycles
    comps = tarjan(cfiles, lambda v: sorted(edges[v]))
    cycles = [c for c in comps if len(c) > 1]
    cycles.sort(key=lambda c: (-len(c), c))
    for c in cycles:
        violations += 1
        print("layers: CYCLE (%d files): %s" % (len(c), " ".join(c)))
        if a.verbose:
            members = set(c)
            for x in c:
                for y in sorted(edges[x]):
                    if y in members:
                        uses = edges[x][y]
                        names = ", ".join(n for _, n in uses[:4]) + (
                            ", +%d more" % (len(uses) - 4) if len(uses) > 4 else "")
                        print("layers:   %s:%d -> %s (%s)" % (x, uses[0][0], y, names))

    # unranked files
    unranked = [f for f in allfiles if layers.lookup(f)[0] is None]
    for f in unranked:
        print("layers: UNRANKED %s: no entry in %s covers it" % (f, a.layers))
    violations += len(unranked)

    # upward includes and calls
    up_inc = up_call = 0
    for f, line, text, target in includes:
        rf, sf = side(layers, f)
        rt, st = side(layers, target)
        if rf is not None and rt is not None and rt > rf:
            up_inc += 1
            print('layers: UP %s:%d: #include "%s": %s -> %s' % (f, line, text, sf, st))
    for f in cfiles:
        for target in sorted(edges[f], key=lambda t: (edges[f][t][0][0], t)):
            rf, sf = side(layers, f)
            rt, st = side(layers, target)
            if rf is not None and rt is not None and rt > rf:
                up_call += 1
                uses = edges[f][target]
                more = " (+%d more)" % (len(uses) - 1) if len(uses) > 1 else ""
                print("layers: UP %s:%d: uses %s%s of %s: %s -> %s"
                      % (f, uses[0][0], uses[0][1], more, target, sf, st))
    violations += up_inc + up_call

    for name in sorted(dups):
        print("layers: NOTE %s is defined non-static in %s; uses count as edges to each"
              % (name, ", ".join(dups[name])))

    nedges = sum(len(v) for v in edges.values())
    summary = ("%d files, %d use edges, %d includes; %d cycle(s)%s, %d upward edge(s) "
               "(%d includes, %d uses), %d unranked file(s)"
               % (len(cfiles), nedges, len(includes), len(cycles),
                  " (largest %d files)" % len(cycles[0]) if cycles else "",
                  up_inc + up_call, up_inc, up_call, len(unranked)))
    if violations:
        print("layers: FAIL: " + summary)
        return 1
    print("layers: OK: " + summary)
    return 0


def print_dot(layers, edges, includes):
    """Folder graph: one node per folder of src/ files, labelled with its files' ranks, one
    edge per folder pair that has use or include edges, labelled with their counts; red when
    any of them goes upward."""
    agg = {}

    def add(f, t, kind):
        a, b = os.path.dirname(f), os.path.dirname(t)
        if a == b:
            return
        e = agg.setdefault((a, b), {"use": 0, "include": 0, "up": False})
        e[kind] += 1
        rf, rt = layers.lookup(f)[0], layers.lookup(t)[0]
        if rf is not None and rt is not None and rt > rf:
            e["up"] = True

    for f, fe in edges.items():
        for t in fe:
            add(f, t, "use")
    for f, _, _, t in includes:
        add(f, t, "include")
    folders = sorted({x for pair in agg for x in pair})
    ranks = {}
    for f in list(edges) + [i[0] for i in includes] + [i[3] for i in includes]:
        r = layers.lookup(f)[0]
        if r is not None:
            ranks.setdefault(os.path.dirname(f), set()).add(r)
    print("digraph src {")
    print("  rankdir=BT; node [shape=box];")
    for d in folders:
        rs = sorted(ranks.get(d, ()))
        label = "?" if not rs else str(rs[0]) if len(rs) == 1 else "%d-%d" % (rs[0], rs[-1])
        print('  "%s" [label="%s\\nrank %s"];' % (d, d, label))
    for (a, b), e in sorted(agg.items()):
        color = ' color=red fontcolor=red' if e["up"] else ""
        print('  "%s" -> "%s" [label="%d uses, %d inc"%s];' % (a, b, e["use"], e["include"], color))
    print("}")


if __name__ == "__main__":
    sys.exit(main())
