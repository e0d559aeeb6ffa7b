# Module-state lint: every mutable variable with static storage in src/**/*.c and shim/*.c
# must be listed in docs/design.md's "## Module state" census and named by the house rule,
# so that who keeps state where can be found by reading one table.
#
#   /usr/bin/python3 mk/lint_state.py [--root DIR] [--doc FILE] [--list]
#
# What counts (a careful reading of the C text, comments, strings and preprocessor lines
# taken out; Python standard library only, no ctags):
#   - a file-scope variable definition, static or not (`extern` declarations, typedefs and
#     function prototypes are not definitions);
#   - a `static` variable inside a function body (hidden state all the same);
#   - a `_Thread_local` / `__thread` one likewise (none in src/ today).
# A variable that is itself const is not state and is skipped: `static const T x[]`,
# `const char *const names[]`, `T *const p`. A pointer to const data is NOT const
# (`static const char *g_source` can be set again) and counts. What a macro expands to is
# not seen (common/check.h's report-once flags).
#
# The naming rule (docs/design.md, "Module state"): a variable is either `g_<what>`
# (lower case) or `<module>_state`, the one struct of a module, where <module> is the file's
# stem or its folder (`shim_grants_state` in gate/shim_grants.c, `sched_state` in
# sched/scheduler.c). Never `G`, never a bare name.
#
# The census is the table of the section whose heading starts with "## Module state": a row
# whose first cell holds one or more backticked names (`g_book`, `g_init`) and whose second
# cell is one backticked path from the repository root (`src/workers/host_book.c`).
# Checked: UNLISTED (a variable with no row), MISNAMED (against the rule), NOT FOUND (a row
# names a variable the file does not define), TWICE (a variable in two rows).
#
# Exit status: 0 pass, 1 violations, 2 the tool could not run (no doc, no section).
# Python standard library only (and mk/lint_design.py's section and table readers).
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lint_design  # noqa: E402  (the section and table readers)

FOLDERS = ("src", "shim")  # sim/ is the test stand-in for the GPU: not covered (design.md)
IDENT = re.compile(r"[A-Za-z_]\w*")
KEYWORDS = {
    "static", "extern", "const", "volatile", "register", "auto", "inline", "restrict",
    "_Thread_local", "__thread", "_Atomic", "struct", "union", "enum", "unsigned", "signed",
    "int", "char", "short", "long", "float", "double", "void", "_Bool", "bool",
    "__attribute__", "_Alignas", "typedef", "sizeof",
}
NAME_OK = re.compile(r"^g_[a-z0-9_]+$")


def die(msg):
    print("state: error: " + msg, file=sys.stderr)
    sys.exit(2)


def strip_c(text):
    """The text with comments, string and char literals blanked and preprocessor lines
    (with their continuations) removed; newlines are kept so line numbers stay true."""
    out, i, n = [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if at_line_start and c == "#":
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                i += 1
            continue
        at_line_start = False
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " + "\n" * text.count("\n", i, j))
            i = j
            continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            out.append("\n" * text.count("\n", i, j))
            i = j + 1
            continue
        if c == "\n":
            at_line_start = True
        out.append(c)
        i += 1
    return "".join(out)


def drop_groups(s, open_, close):
    """s with every outermost open_..close group emptied (struct bodies, initializers)."""
    out, depth = [], 0
    for ch in s:
        if ch == open_:
            if depth == 0:
                out.append(open_)
            depth += 1
        elif ch == close and depth:
            depth -= 1
            if depth == 0:
                out.append(close)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def split_top(s, sep):
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def declared(stmt):
    """[(name, is_const)] of the variables a declaration statement defines ([] for a
    typedef, an extern declaration, a prototype, a bare struct or enum definition)."""
    s = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", stmt)
    s = drop_groups(s, "{", "}")
    words = set(IDENT.findall(s))
    if "typedef" in words or "extern" in words:
        return []
    out, specs = [], None
    for k, part in enumerate(split_top(s, ",")):
        part = split_top(part, "=")[0]
        m = re.search(r"\(\s*\*\s*((?:const\s+)?)(\w+)\s*\)\s*\(", part)  # a function pointer
        if m:
            out.append((m.group(2), bool(m.group(1))))
            continue
        body = re.sub(r"\[[^\]]*\]", "", part).rstrip()
        if body.endswith(")"):
            return []  # a function prototype
        tagless = re.sub(r"\b(struct|union|enum)\s+\w+", r"\1", body)
        ids = [w for w in IDENT.findall(tagless) if w not in KEYWORDS]
        if not ids:
            continue  # `struct x {..};`, `enum {..};`: no variable
        name = ids[-1]
        before = body[: body.rfind(name)]
        if k == 0:
            specs = before.split("*")[0]
        else:
            before = (specs or "") + before
        if "*" in before:
            is_const = bool(re.search(r"\bconst\b", before[before.rfind("*"):]))
        else:
            is_const = bool(re.search(r"\bconst\b", before))
        out.append((name, is_const))
    return out


def local_statics(s, lo, hi):
    """(offset, statement) of each declaration inside s[lo:hi] (a function body) that starts
    with a storage keyword: from the keyword to its `;` outside any brackets."""
    out = []
    for m in re.finditer(r"(?<![\w])(static|_Thread_local|__thread)\b", s[lo:hi]):
        at = lo + m.start()
        k = at - 1
        while k >= lo and s[k] in " \t\n":
            k -= 1
        if k >= lo and s[k] not in ";{}":
            continue  # not at a statement's start (a cast, a word in a declaration)
        depth, j = 0, at
        while j < hi and not (s[j] == ";" and depth == 0):
            depth += s[j] in "([{"
            depth -= s[j] in ")]}"
            j += 1
        out.append((at, s[at:j]))
    return out


def name_line(s, at, stmt, name):
    """The line of the declarator's name (the statement's first line if not found)."""
    body = drop_groups(stmt, "{", "}")
    m = re.search(r"(?<![\w])" + re.escape(name) + r"(?![\w])", stmt)
    if m and body.find(name) >= 0:
        # the name outside any braces: the last whole-word hit that is at depth 0
        depth, last = 0, None
        for mm in re.finditer(r"[{}]|(?<![\w])" + re.escape(name) + r"(?![\w])", stmt):
            t = mm.group(0)
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
            elif depth == 0 and last is None:
                last = mm.start()
        if last is not None:
            return s.count("\n", 0, at + last) + 1
    return s.count("\n", 0, at + len(stmt) - len(stmt.lstrip())) + 1


def variables(text):
    """[(name, line, where, is_const)] of a C file; where is 'file' or 'function'."""
    s = strip_c(text)
    found, depth, start, fn_start = [], 0, 0, None
    i, n = 0, len(s)
    while i < n:
        ch = s[i]
        if ch == "{":
            if depth == 0:
                head = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", s[start:i]).strip()
                if head.endswith(")"):
                    fn_start = i  # a function body: its `static`s are read below
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and fn_start is not None:
                for at, stmt in local_statics(s, fn_start + 1, i):
                    for name, is_const in declared(stmt):
                        found.append((name, name_line(s, at, stmt, name), "function", is_const))
                fn_start = None
                start = i + 1
        elif ch == ";" and depth == 0:
            stmt = s[start:i]
            line = s.count("\n", 0, start + len(stmt) - len(stmt.lstrip())) + 1
            for name, is_const in declared(stmt):
                found.append((name, name_line(s, start, stmt, name), "file", is_const))
            start = i + 1
        i += 1
    return found


def scan(root):
    """{(relpath, name): [(line, where)]} of every mutable static-storage variable."""
    state = {}
    for top in FOLDERS:
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(".c"):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
                for name, line, where, is_const in variables(text):
                    if not is_const:  # two functions' statics of one name: one row covers both
                        state.setdefault((rel, name), []).append((line, where))
    return state


def census(text):
    """[(line, [names], path)] of the Module state section's rows, or None."""
    lines = lint_design.section(text, "## Module state")
    if lines is None:
        return None
    rows = []
    for no, cells in lint_design.table_cells(lines):
        path = re.fullmatch(r"`([\w./-]+\.c)`", cells[1])
        names = re.findall(r"`(\w+)`", cells[0])
        if path and names:
            rows.append((no, names, path.group(1)))
    return rows


def name_ok(rel, name):
    if NAME_OK.match(name):
        return True
    stem = os.path.splitext(os.path.basename(rel))[0]
    folder = os.path.basename(os.path.dirname(rel))
    return name in (stem + "_state", folder + "_state")


def check(root, doc):
    try:
        with open(doc, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        die(f"cannot read {doc}: {e.strerror}")
    rows = census(text)
    if rows is None:
        die(f"{doc} has no '## Module state' section")
    rel_doc = os.path.relpath(doc, root)
    state = scan(root)
    problems, listed = [], {}
    for no, names, path in rows:
        for name in names:
            key = (path, name)
            if key in listed:
                problems.append(f"{rel_doc}:{no}: TWICE: {name} ({path}) is also at line {listed[key]}")
                continue
            listed[key] = no
            if key not in state:
                problems.append(f"{rel_doc}:{no}: NOT FOUND: {path} defines no mutable variable {name}")
    for (path, name), seen in sorted(state.items()):
        for line, where in seen:
            kind = "a function's static" if where == "function" else "file-scope"
            if not name_ok(path, name):
                problems.append(f"{path}:{line}: MISNAMED: {name} ({kind}): name it g_<what>, or "
                                f"<module>_state for the module's one struct")
            if (path, name) not in listed:
                problems.append(f"{path}:{line}: UNLISTED: {name} ({kind}) has no row in "
                                f"{rel_doc}'s Module state census")
    return problems, state


def main():
    ap = argparse.ArgumentParser(description="docs/design.md's Module state census against src/ and shim/")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--doc", help="default: ROOT/docs/design.md")
    ap.add_argument("--list", action="store_true", help="print every variable found, then check")
    args = ap.parse_args()
    doc = args.doc or os.path.join(args.root, "docs", "design.md")
    if args.list:
        for (path, name), seen in sorted(scan(args.root).items()):
            for line, where in seen:
                print(f"{path}:{line}: {name} ({where})")
    problems, state = check(args.root, doc)
    for p in problems:
        print("state: " + p)
    if problems:
        print(f"state: {len(problems)} problem(s); every mutable variable with static storage in "
              "src/ and shim/ needs a row in docs/design.md's Module state census and a name by its rule")
        return 1
    files = len({p for p, _ in state})
    print(f"state: docs/design.md's Module state census names all {len(state)} variables of {files} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
