#!/usr/bin/python3
"""Prints the five longest source files of core/ and fs/, and their five longest functions.

    /usr/bin/python3 scripts/rooms.py [--most N]

The house rule: no file over 800 lines, no function over 120. scripts/test.sh (and so CI)
prints this before the tests, so that a room growing past the rule is seen when it does.
Read-only; exits 0 whatever it finds.

A function is a signature ending in '{' (no control statement, lambda or initializer)
through the first '}' clang-format puts at its indentation: bodies written inside a class
count as much as those at column 0.
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


CONTROL = ("if ", "if(", "for ", "for(", "while ", "while(", "switch ", "switch(", "catch ",
           "catch(", "else", "do ", "try", "return ", "} ", "case ", "namespace", "class ",
           "struct ", "enum ", "union ", "extern ", "template <")


def functions(path, lines):
    """(length, line number, name) of each function body in `lines`, at any indentation:
    a signature (a line, or lines continued below it, holding a '(' and ending with '{')
    that is no control statement, lambda or initializer, through the first '}' that
    clang-format puts at the signature's own indentation. Bodies inside other bodies
    (a local class's) count too."""
    out = []
    signature = []
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("//", "#")) or stripped.endswith(":") and \
                stripped in ("public:", "private:", "protected:"):
            signature = []
            continue
        signature.append((number, line))
        if not stripped.endswith(("{", ";", "}", "};")):
            continue
        first_number, first_line = signature[0]
        text = " ".join(l.strip() for _, l in signature)
        signature = []
        if not stripped.endswith("{") or "(" not in text:
            continue
        if text.startswith(CONTROL) or "](" in text or "] (" in text or " = " in \
                text.split("(")[0] or text.startswith(("}", ")", "{")):
            continue
        indent = first_line[: len(first_line) - len(first_line.lstrip())]
        match = NAME.search(text)
        for end in range(number, len(lines)):
            closing = lines[end]
            if closing.startswith(indent + "}") and not closing[len(indent):len(indent) + 1].isspace():
                out.append((end + 1 - first_number + 1, first_number,
                            match.group(1) if match else "?"))
                break
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
