# Ledger-writer lint: the GPU ledger (src/policy/ledger.h) has one writer, the scheduler
# (src/sched/). Every other module reads it through the const sched_ledger() and books
# through the sched_book_* verbs (src/sched/scheduler.h "Who holds what"), so a booking bug
# has one place to start.
#
#   /usr/bin/python3 mk/lint_ledger.py [--root DIR]
#
# Checked in every src/**/*.c and *.h outside src/sched/ and the ledger's own files
# (src/policy/ledger.c, ledger.h), with comments and string literals blanked first:
#   - no call of a ledger function that changes the book (WRITE): ledger_init,
#     ledger_set_gpu, ledger_set_foreign, ledger_reserve, ledger_reserve_ahead_of_claim,
#     ledger_force, ledger_release, ledger_resize, ledger_claim, ledger_unclaim,
#     ledger_set_asked (ledger_entry_init, which readies an unlinked entry its holder
#     embeds, and the const queries are allowed);
#   - no pointer to a mutable ledger (MUTABLE): `ledger_t *` not preceded by const, which
#     is how a write through a cast of sched_ledger() would start.
# Exit status: 0 pass, 1 violations, 2 the tool could not run (no src/ folder).
# Python standard library only.
import argparse
import os
import re
import sys

WRITERS = ("init", "set_gpu", "set_foreign", "reserve", "reserve_ahead_of_claim", "force", "release",
           "resize", "claim", "unclaim", "set_asked")
WRITE_CALL = re.compile(r"\bledger_(" + "|".join(WRITERS) + r")\s*\(")
MUTABLE = re.compile(r"(?<![A-Za-z0-9_])ledger_t\s*\*")
CONST_BEFORE = re.compile(r"\bconst\s+$")
ALLOWED_DIRS = ("src/sched/",)
ALLOWED_FILES = ("src/policy/ledger.c", "src/policy/ledger.h")


def blank(text):
    """text with comments and string and char literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + (c if j - 1 > i else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def violations(rel, text):
    """(line, kind, what) for each ledger write or mutable ledger pointer in one file."""
    code = blank(text)
    found = []
    for m in WRITE_CALL.finditer(code):
        found.append((code.count("\n", 0, m.start()) + 1, "WRITE", "ledger_" + m.group(1) + "()"))
    for m in MUTABLE.finditer(code):
        line_start = code.rfind("\n", 0, m.start()) + 1
        if not CONST_BEFORE.search(code[line_start:m.start()]):
            found.append((code.count("\n", 0, m.start()) + 1, "MUTABLE", "ledger_t *"))
    return sorted(found)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    src = os.path.join(args.root, "src")
    if not os.path.isdir(src):
        print("ledger: error: no src/ folder under " + args.root, file=sys.stderr)
        return 2
    bad, n_files = 0, 0
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for f in sorted(filenames):
            if not f.endswith((".c", ".h")):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), args.root).replace(os.sep, "/")
            if rel.startswith(ALLOWED_DIRS) or rel in ALLOWED_FILES:
                continue
            n_files += 1
            with open(os.path.join(dirpath, f), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for line, kind, what in violations(rel, text):
                bad += 1
                print("ledger: %s:%d: %s %s: only src/sched/ writes the GPU ledger; book through a "
                      "sched_book_* verb (sched/scheduler.h)" % (rel, line, kind, what))
    if bad:
        print("ledger: FAIL: %d ledger write(s) outside src/sched/" % bad)
        return 1
    print("ledger: OK: %d files outside src/sched/ only read the GPU ledger" % n_files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
