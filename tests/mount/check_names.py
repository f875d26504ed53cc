#!/usr/bin/python3
"""NameEscaping: tensors/ holds exactly one file per tensor (two for BF16 / F8: the stored
bytes' .safetensors and the widened .npy) at the path docs/usage.md's
escaping gives (dotted name split into directories; '%' -> %25, '/' -> %2F, empty
component -> %, '.'/'..' -> %2E/%2E%2E) and nothing else: no stray files or directories.

usage: check_names.py SRC MNT
"""

import os

from checklib import Checker, LoadSource, RunMain, TensorPaths


def Walk(root: str):
    """All files and directories under root, relative to it. Symlinks count as files,
    and would be a bug: nothing in tensors/ should point elsewhere."""
    files, dirs = set(), set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        prefix = "" if rel == "." else rel + "/"
        dirs.update(prefix + d for d in dirnames)
        files.update(prefix + f for f in filenames)
    return files, dirs


def Parents(path: str):
    parts = path.split("/")[:-1]
    return {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}


def Main(args) -> int:
    src, mnt = args
    ck = Checker("names")
    source = LoadSource(src)
    expected = {p: t.name for t in source.tensors.values() for p in TensorPaths(t.name, t.dtype)}
    ck.Equal(len(expected), sum(len(TensorPaths(t.name, t.dtype)) for t in source.tensors.values()),
             "distinct paths (escaping must be injective)")
    files, dirs = Walk(os.path.join(mnt, "tensors"))
    for path in sorted(set(expected) - files):
        ck.Fail(f"missing tensors/{path} for {expected[path]!r}")
    for path in sorted(files - set(expected)):
        ck.Fail(f"unexpected file tensors/{path}")
    expected_dirs = set().union(*(Parents(p) for p in expected))
    ck.Equal(sorted(dirs), sorted(expected_dirs), "directories under tensors/")
    for path in sorted(files & set(expected)):
        ck.Expect(not os.path.islink(os.path.join(mnt, "tensors", path)),
                  f"tensors/{path} is a symlink")
    return ck.Finish(f"{len(files)} files in {len(dirs)} directories")


if __name__ == "__main__":
    RunMain(Main, "SRC MNT")
