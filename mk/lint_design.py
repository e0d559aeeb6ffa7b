# Design-map lint: docs/design.md's "Modules" table must name every src/**/*.c file, and
# only files that exist, so that the map a newcomer is asked to trust cannot drift.
#
#   /usr/bin/python3 mk/lint_design.py [--root DIR] [--doc FILE]
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
# Exit status: 0 pass, 1 violations, 2 the tool could not run (no doc, no Modules section).
# Python standard library only.
import argparse
import os
import re
import sys

FILE_CELL = re.compile(r"^`([A-Za-z0-9_./-]+\.c)`$")
FOLDER_CELL = re.compile(r"^\*\*`([A-Za-z0-9_./-]+)/`\*\*$")


def die(msg):
    print("design: error: " + msg, file=sys.stderr)
    sys.exit(2)


def modules_section(text):
    """The lines of the "## Modules" section, with their 1-based line numbers."""
    out, inside, found = [], False, False
    for no, line in enumerate(text.split("\n"), 1):
        if line.startswith("## "):
            if inside:
                break
            inside = found = line.startswith("## Modules")
            continue
        if inside:
            out.append((no, line))
    return out if found else None


def table_rows(section):
    """(line number, second cell) of each table row of the section."""
    rows = []
    for no, line in section:
        s = line.strip()
        if not s.startswith("|") or re.match(r"^\|[\s|:-]+\|$", s):
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if len(cells) >= 2:
            rows.append((no, cells[1]))
    return rows


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


def main():
    ap = argparse.ArgumentParser(description="docs/design.md's Modules table against src/**/*.c")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--doc", help="default: ROOT/docs/design.md")
    args = ap.parse_args()
    doc = args.doc or os.path.join(args.root, "docs", "design.md")
    problems, n = check(args.root, doc)
    for p in problems:
        print("design: " + p)
    if problems:
        print(f"design: {len(problems)} problem(s); every src/**/*.c needs one row in "
              "docs/design.md's Modules table, under its folder's row")
        return 1
    print(f"design: docs/design.md's Modules table names all {n} src/*.c files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
