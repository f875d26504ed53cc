#!/usr/bin/python3
"""MergedCopy: FILE, a copy of a mount's model.safetensors made elsewhere (a timed `cat`
of it in a test), is a valid safetensors file holding every tensor of SRC with its dtype,
shape and bytes: the checks of check_merged.py, on a file that is not in the mount.

usage: check_merged_copy.py SRC FILE
"""

import os

from check_merged import CheckMetadata, CheckTensors
from checklib import Checker, LoadSource, ParseSafetensors, ReadFile, RunMain, Validate


def Main(args) -> int:
    src, path = args
    ck = Checker("merged copy")
    source = LoadSource(src)
    data = ReadFile(path)
    st = ParseSafetensors(data, os.path.basename(path))
    Validate(st, len(data), os.path.basename(path), ck)
    CheckMetadata(ck, st, source)
    CheckTensors(ck, st, data, source)
    return ck.Finish(f"{len(st.entries)} tensors, {len(data)} bytes")


if __name__ == "__main__":
    RunMain(Main, "SRC FILE")
