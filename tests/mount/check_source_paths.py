#!/usr/bin/python3
"""Every file path of SOURCE names the same file, byte-identical, in the mount (issue 38).

  check_source_paths.py SRC MNT [--torch-latest]

Walks SRC (its top, each directory there and their folders: the depth a run mount shows)
and compares each regular file with the mount's file of the same path. --torch-latest:
`latest` is a file that torch.load opens (a run of single-file checkpoints), the same
dict as SOURCE's file it names; and views/latest/pytorch_model.bin loads.
"""
import os
import sys


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    src, mnt = argv[1], argv[2]
    checked = 0
    for dirpath, dirs, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        depth = 0 if rel == "." else rel.count("/") + 1
        if depth >= 2:
            dirs[:] = []
        for name in files:
            path = os.path.join(rel, name) if rel != "." else name
            try:
                with open(os.path.join(mnt, path), "rb") as f:
                    got = f.read()
            except OSError as e:
                fail("%s: %s in the mount, a file in SOURCE" % (path, e.strerror))
            with open(os.path.join(src, path), "rb") as f:
                if got != f.read():
                    fail("%s: the mount's bytes are not SOURCE's" % path)
            checked += 1
    line = "%d files of SOURCE at their paths, byte-identical" % checked
    if "--torch-latest" in argv:
        import torch
        latest = os.path.join(mnt, "latest")
        if not os.path.isfile(latest):
            fail("latest is not a file: %s" % os.readlink(latest))
        got = torch.load(latest, map_location="cpu")
        want = torch.load(os.path.join(src, os.readlink(latest)), map_location="cpu")
        if sorted(got) != sorted(want):
            fail("torch.load(latest) keys %s, SOURCE's %s" % (sorted(got), sorted(want)))
        merged = torch.load(os.path.join(mnt, "views", "latest", "pytorch_model.bin"),
                            weights_only=True)
        line += "; torch.load(latest) is %s, views/latest/pytorch_model.bin has %d tensors" % (
            os.readlink(latest), len(merged))
    print(line)


if __name__ == "__main__":
    main(sys.argv)
