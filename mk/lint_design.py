# Design-map lint: docs/design.md's "Modules" table must name every src/**/*.c file, and
# only files that exist; its event table must name every core_listen call; its folder-arrow
# listing must be what mk/lint_layers.py --dot draws; so that the map a newcomer is asked to
# trust cannot drift.
#
#   /usr/bin/python3 mk/lint_design.py [--root DIR] [--doc FILE] [--no-arrows]
#   /usr/bin/python3 mk/lint_design.py --arrows     the listing to paste, and its count
#
# The table is the section whose heading starts with "## Modules" (up to the next "## ").
# A file row is a table row whose second cell is exactly one backticked path relative to
# src/ ending in .c (| | `net/conn.c` | job |); a folder row's second cell is a bold,
# backticked folder (| **3** | **`net/`** | job |). Checked:
#   - every src/**/*.c has a file row (MISSING), and every file row names a file that
#     exists (NO SUCH FILE);
#   - no file has two rows (TWICE);
#   - every file row sits under the folder row of its own folder (WRONG FOLDER), and every
#     src/ folder that holds a .c file has a folder row (NO FOLDER ROW).
# Other mentions of files in the section (prose, the job column) are not rows.
#
# The event table: rows whose first cell is a backticked `CORE_EV_*` name; the listeners are
# the backticked .c paths (relative to src/) of the row's last cell. Every src/**/*.c that
# calls core_listen(.., CORE_EV_X, ..) must be named in X's row (UNNAMED LISTENER), every
# file named there must make that call (NOT LISTENING), every event listened to has a row
# (NO EVENT ROW).
#
# The arrows: the first ``` block after the paragraph that starts "The arrows between
# folders" must be, line for line, the listing built from lint_layers.py --dot (one line per
# folder, highest rank first: `RANK  FOLDER/ -> TARGET USES/INCLUDES, ...`, targets highest
# rank first), and the paragraph's "N arrows" its count (ARROWS LISTING, ARROW COUNT). Needs
# universal-ctags, as lint_layers.py does; --no-arrows skips it.
#
# Exit status: 0 pass, 1 violations, 2 the tool could not run (no doc, no Modules section).
# Python standard library only (and lint_layers.py for the arrows).
import argparse
import os
import re
import subprocess
import sys

FILE_CELL = re.compile(r"^`([A-Za-z0-9_./-]+\.c)`$")
FOLDER_CELL = re.compile(r"^\*\*`([A-Za-z0-9_./-]+)/`\*\*$")


def die(msg):
    print("design: error: " + msg, file=sys.stderr)
    sys.exit(2)


def section(text, heading):
    """The lines of the "## " section whose heading starts with heading, with their 1-based
    line numbers (None: no such section). mk/lint_state.py reads its census with it too."""
    out, inside, found = [], False, False
    for no, line in enumerate(text.split("\n"), 1):
        if line.startswith("## "):
            if inside:
                break
            inside = found = line.startswith(heading)
            continue
        if inside:
            out.append((no, line))
    return out if found else None


def modules_section(text):
    return section(text, "## Modules")


def table_cells(lines):
    """(line number, [cells]) of each table row of the lines (the |---| rule left out)."""
    rows = []
    for no, line in lines:
        s = line.strip()
        if not s.startswith("|") or re.match(r"^\|[\s|:-]+\|$", s):
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if len(cells) >= 2:
            rows.append((no, cells))
    return rows


def table_rows(lines):
    """(line number, second cell) of each table row of the section."""
    return [(no, cells[1]) for no, cells in table_cells(lines)]


def source_files(root):
    src = os.path.join(root, "src")
    found = set()
    for d, _, files in os.walk(src):
        for f in files:
            if f.endswith(".c"):
                found.add(os.path.relpath(os.path.join(d, f), src).replace(os.sep, "/"))
    return found


def check(root, doc):
    """The list of violation lines (empty: pass)."""
    try:
        text = open(doc, encoding="utf-8").read()
    except OSError as e:
        die(f"cannot read {doc}: {e.strerror}")
    section = modules_section(text)
    if section is None:
        die(f"{doc} has no '## Modules' section")
    rel = os.path.relpath(doc, root)
    problems, rows, folder = [], {}, None
    folders = set()
    for no, cell in table_rows(section):
        m = FOLDER_CELL.match(cell)
        if m:
            folder = m.group(1)
            folders.add(folder)
            continue
        m = FILE_CELL.match(cell)
        if not m:
            continue
        path = m.group(1)
        if path in rows:
            problems.append(f"{rel}:{no}: TWICE: src/{path} (first at line {rows[path]})")
            continue
        rows[path] = no
        if folder is None or os.path.dirname(path) != folder:
            problems.append(f"{rel}:{no}: WRONG FOLDER: src/{path} is not under the row of "
                            f"src/{os.path.dirname(path)}/ (it follows {folder or 'no folder row'})")
    present = source_files(root)
    for path in sorted(present - set(rows)):
        problems.append(f"{rel}: MISSING: src/{path} has no row in the Modules table")
    for path in sorted(set(rows) - present):
        problems.append(f"{rel}:{rows[path]}: NO SUCH FILE: src/{path} is in the Modules table")
    for d in sorted({os.path.dirname(p) for p in present} - folders):
        problems.append(f"{rel}: NO FOLDER ROW: src/{d}/ has no folder row in the Modules table")
    return problems, len(present)


# ---- the folder arrows: the listing under "The arrows between folders" ---------------------

NODE = re.compile(r'^\s*"src/([\w/]+)" \[label="[^"]*\\nrank (\d+)"\];$')
EDGE = re.compile(r'^\s*"src/([\w/]+)" -> "src/([\w/]+)" \[label="(\d+) uses, (\d+) inc"')
ARROWS = re.compile(r"\b(\d+) arrows\b")


def arrows_listing(dot):
    """(the listing's lines, the number of arrows) from `lint_layers.py --dot`'s text: one
    line per folder, highest rank first, its targets highest rank first (then by name)."""
    ranks, out = {}, {}
    for line in dot.split("\n"):
        m = NODE.match(line)
        if m:
            ranks[m.group(1)] = int(m.group(2))
            continue
        m = EDGE.match(line)
        if m:
            out.setdefault(m.group(1), []).append((m.group(2), int(m.group(3)), int(m.group(4))))
    order = sorted(ranks, key=lambda f: (-ranks[f], f))
    lines, n = [], 0
    for f in order:
        targets = sorted(out.get(f, []), key=lambda t: (-ranks.get(t[0], -1), t[0]))
        n += len(targets)
        text = ", ".join(f"{t} {u}/{i}" for t, u, i in targets) or "(nothing)"
        lines.append(f"{ranks[f]}  {f + '/':<11}-> {text}")
    return lines, n


def check_arrows(root, doc, text):
    """The listing in the doc (the first ``` block after the line that starts "The arrows
    between folders") and its "N arrows" figure against lint_layers.py --dot."""
    p = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "lint_layers.py"), "--root", root, "--dot"], capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        die("lint_layers.py --dot failed: " + p.stderr.strip()[-300:])
    want, n = arrows_listing(p.stdout)
    rel = os.path.relpath(doc, root)
    lines = text.split("\n")
    at = next((k for k, l in enumerate(lines) if l.startswith("The arrows between folders")), None)
    if at is None:
        return [f"{rel}: NO ARROWS: no paragraph starting 'The arrows between folders'"]
    problems = []
    para_end = next((k for k in range(at, len(lines)) if not lines[k].strip()), len(lines))
    m = ARROWS.search(" ".join(lines[at:para_end]))
    if not m or int(m.group(1)) != n:
        problems.append(f"{rel}:{at + 1}: ARROW COUNT: the text says {m.group(1) if m else 'no'} arrows, "
                        f"lint_layers.py --dot draws {n}")
    start = next((k for k in range(at, len(lines)) if lines[k].startswith("```")), None)
    end = next((k for k in range(start + 1, len(lines)) if lines[k].startswith("```")), None) if start else None
    have = lines[start + 1:end] if end else []
    if have != want:
        problems.append(f"{rel}:{(start or at) + 1}: ARROWS LISTING: not what lint_layers.py --dot draws; "
                        f"print it with `mk/lint_design.py --arrows`")
        for k, (h, w) in enumerate(zip(have + [""] * len(want), want + [""] * len(have))):
            if h != w:
                problems.append(f"{rel}:{start + 2 + k}:   has  {h}")
                problems.append(f"{rel}:{start + 2 + k}:   want {w}")
    return problems


# ---- the event table: who listens to which core event -------------------------------------

LISTEN = re.compile(r"\bcore_listen\s*\([^,]*,\s*(CORE_EV_\w+)")


def listeners(root):
    """{event: {src-relative .c path}} of every core_listen call in src/."""
    found = {}
    for path in source_files(root):
        with open(os.path.join(root, "src", path), encoding="utf-8") as fh:
            text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", fh.read(), flags=re.S)
        for m in LISTEN.finditer(text):
            found.setdefault(m.group(1), set()).add(path)
    return found


def check_events(root, doc, text):
    """The event table (rows whose first cell is a backticked CORE_EV_ name; listeners are
    the backticked .c paths of the last cell) against the core_listen calls."""
    rel = os.path.relpath(doc, root)
    rows = {}
    for no, cells in table_cells(enumerate(text.split("\n"), 1)):
        m = re.fullmatch(r"`(CORE_EV_\w+)`", cells[0])
        if m and len(cells) >= 4:
            rows[m.group(1)] = (no, set(re.findall(r"`([\w/]+\.c)`", cells[-1])))
    problems = []
    calls = listeners(root)
    for ev in sorted(set(calls) | set(rows)):
        if ev not in rows:
            problems.append(f"{rel}: NO EVENT ROW: {ev} is listened to ({', '.join(sorted(calls[ev]))}) "
                            "but has no row in the event table")
            continue
        no, named = rows[ev]
        for path in sorted(calls.get(ev, set()) - named):
            problems.append(f"{rel}:{no}: UNNAMED LISTENER: src/{path} calls core_listen({ev}) "
                            "but the row does not name it")
        for path in sorted(named - calls.get(ev, set())):
            problems.append(f"{rel}:{no}: NOT LISTENING: the row names src/{path}, which has no "
                            f"core_listen({ev})")
    return problems


def main():
    ap = argparse.ArgumentParser(description="docs/design.md's Modules table against src/**/*.c")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--doc", help="default: ROOT/docs/design.md")
    ap.add_argument("--arrows", action="store_true", help="print the folder-arrow listing to paste, and exit")
    ap.add_argument("--no-arrows", action="store_true", help="skip the folder-arrow check (no ctags)")
    args = ap.parse_args()
    doc = args.doc or os.path.join(args.root, "docs", "design.md")
    if args.arrows:
        p = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "lint_layers.py"), "--root", args.root, "--dot"], capture_output=True, text=True,
                           timeout=300)
        lines, n = arrows_listing(p.stdout)
        print("\n".join(lines))
        print(f"({n} arrows)")
        return 0 if p.returncode == 0 else 2
    problems, n = check(args.root, doc)
    with open(doc, encoding="utf-8") as fh:
        text = fh.read()
    problems += check_events(args.root, doc, text)
    if not args.no_arrows:
        problems += check_arrows(args.root, doc, text)
    for p in problems:
        print("design: " + p)
    if problems:
        print(f"design: {len(problems)} problem(s); every src/**/*.c needs one row in "
              "docs/design.md's Modules table, under its folder's row; every core_listen call "
              "its file in its event's row; the folder arrows as lint_layers.py --dot draws them")
        return 1
    print(f"design: docs/design.md's Modules table names all {n} src/*.c files; its event table "
          "names every core_listen call" + ("" if args.no_arrows else "; its folder arrows are the lint's"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
