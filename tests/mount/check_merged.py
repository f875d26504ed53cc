#!/usr/bin/python3
"""MergedSafetensors: mount/model.safetensors, parsed here independently, is a valid
safetensors file (docs/usage.md's rules: space-padded header, contiguous offsets from 0
to the end, aligned tensors, string __metadata__ kept) holding every source tensor
with its dtype, shape and bytes. `cp` copies it intact and an mmap of it (what
safetensors loaders do) reads the same bytes through numpy.

usage: check_merged.py SRC MNT
"""

import mmap
import os
import subprocess
import tempfile

import numpy as np

from checklib import (NUMPY_DESCRS, Checker, LoadSource, ParseSafetensors, ReadFile,
                      RunMain, Validate)


def CheckTensors(ck: Checker, st, data: bytes, source) -> None:
    ck.Equal(sorted(st.entries), sorted(source.tensors), "tensor names")
    for name, e in st.entries.items():
        tensor = source.tensors.get(name)
        if tensor is None:
            continue
        ck.Equal(e.dtype, tensor.dtype, f"{name!r} dtype")
        ck.Equal(e.shape, tensor.shape, f"{name!r} shape")
        ck.Expect(data[st.data_start + e.begin:st.data_start + e.end] == tensor.Read(),
                  f"{name!r}: data differs from the source")


def CheckMetadata(ck: Checker, st, source) -> None:
    for key, value in source.metadata.items():
        ck.Equal((st.metadata or {}).get(key), value, f"__metadata__[{key!r}]")


def CheckCopy(ck: Checker, path: str, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "copy.safetensors")
        result = subprocess.run(["cp", path, copy], capture_output=True, timeout=120)
        if ck.Equal(result.returncode, 0, f"cp exit code ({result.stderr!r})"):
            ck.Expect(ReadFile(copy) == data, "cp's copy differs from read()")


def CheckMmap(ck: Checker, path: str, st, source) -> None:
    """Views each tensor in a shared mapping of the whole file, as loaders do."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        for name, e in st.entries.items():
            tensor = source.tensors.get(name)
            if tensor is None:
                continue
            descr = NUMPY_DESCRS.get(e.dtype, "|u1")  # bytes for dtypes numpy lacks
            count = (e.end - e.begin) // np.dtype(descr).itemsize
            view = np.frombuffer(m, dtype=descr, count=count, offset=st.data_start + e.begin)
            ck.Expect(view.tobytes() == tensor.Read(), f"{name!r}: mmap view differs")
            del view  # a live view keeps the mapping from closing


def Main(args) -> int:
    src, mnt = args
    ck = Checker("merged")
    source = LoadSource(src)
    path = os.path.join(mnt, "model.safetensors")
    data = ReadFile(path)
    ck.Equal(os.stat(path).st_size, len(data), "st_size vs bytes read")
    st = ParseSafetensors(data, "model.safetensors")
    Validate(st, len(data), "model.safetensors", ck)
    CheckMetadata(ck, st, source)
    CheckTensors(ck, st, data, source)
    CheckCopy(ck, path, data)
    CheckMmap(ck, path, st, source)
    return ck.Finish(f"{len(st.entries)} tensors, {len(data)} bytes")


if __name__ == "__main__":
    RunMain(Main, "SRC MNT")
