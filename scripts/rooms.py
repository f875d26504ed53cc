#!/usr/bin/python3
"""Prints the five longest source files of core/ and fs/, and their five longest functions.

    /usr/bin/python3 scripts/rooms.py [--most N]

The house rule: no file over 800 lines, no function over 120. scripts/test.sh (and so CI)
prints this before the tests, so that a room growing past the rule is seen when it does.
Read-only; exits 0 whatever it finds.

A function is what clang-format leaves at column 0: a line that opens a body ('{' at its
end, a '(' in the signature that ends there) and the first '}' at column 0 after it. Bodies
written inside a class (indented) are not counted: they are short by habit.
"""

import argparse
import os
import re

ROOTS = ("core", "fs")
FILE_LIMIT = 800
FUNCTION_LIMIT = 120
NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_:~]*(?:operator\S*)?)\s*\(")


def sources(repo):
    for root in ROOTS:
        for dirpath, _, names in os.walk(os.path.join(repo, root)):
            for name in sorted(names):
                if name.endswith((".cc", ".h")):
                    yield os.path.join(dirpath, name)


def functions(path, lines):
    """(length, line number, name) of each column-0 body in `lines`."""
    out = []
    signature = []
    start = None
    for number, line in enumerate(lines, 1):
        if start is None:
            if not line.strip() or line.startswith(("//", "#")):
                signature = []
                continue
            if line[:1].isspace() and not signature:
                continue  # inside a class or a namespace-level statement, not a signature
            signature.append(line.strip())
            text = " ".join(signature)
            if line.rstrip().endswith("{") and "(" in text and not text.startswith(
                    ("namespace", "class ", "struct ", "enum ", "union ", "extern ")):
                match = NAME.search(text)
                start = (number - len(signature) + 1, match.group(1) if match else "?")
            elif line.rstrip().endswith((";", "}", "{")):
                signature = []
        elif line.startswith("}"):
            first, name = start
            out.append((number - first + 1, first, name))
            start, signature = None, []
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--most", type=int, default=5)
    args = parser.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files, bodies = [], []
    for path in sources(repo):
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        shown = os.path.relpath(path, repo)
        files.append((len(lines), shown))
        bodies += [(n, f"{shown}:{line}", name) for n, line, name in functions(path, lines)]
    print(f"rooms: the {args.most} longest files of {'/ and '.join(ROOTS)}/ (the rule: {FILE_LIMIT} lines)")
    for n, shown in sorted(files, reverse=True)[: args.most]:
        print(f"  {n:5d}  {shown}{'  (over)' if n > FILE_LIMIT else ''}")
    print(f"rooms: the {args.most} longest functions (the rule: {FUNCTION_LIMIT} lines)")
    for n, where, name in sorted(bodies, reverse=True)[: args.most]:
        print(f"  {n:5d}  {where}  {name}{'  (over)' if n > FUNCTION_LIMIT else ''}")


if __name__ == "__main__":
    main()
