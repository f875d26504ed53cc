#!/usr/bin/python3
"""NpyPlainAndMmap: every tensor's file under tensors/ holds exactly the source tensor.
Dtypes numpy has are .npy files checked with numpy.load, plain and with mmap_mode='r'
(loaders mmap); BF16 and FP8 are one-tensor .safetensors files, parsed and validated,
and .npy files of float32 holding the exactly widened values (recomputed here from the
dtypes' definitions), read plain, by mmap and in odd-sized pieces.

usage: check_npy.py SRC MNT
"""

import os

import numpy as np

from checklib import (NUMPY_DESCRS, WIDENED, Checker, LoadSource, ParseSafetensors, ReadFile,
                      RunMain, TensorPath, TensorPaths, Validate, WidenToF32)


def CheckNpy(ck: Checker, path: str, tensor, want: bytes) -> None:
    descr = np.dtype(NUMPY_DESCRS[tensor.dtype])
    for mode in (None, "r"):
        what = f"{tensor.name!r} np.load(mmap_mode={mode!r})"
        arr = np.load(path, mmap_mode=mode, allow_pickle=False)
        ck.Equal(arr.dtype, descr, f"{what} dtype")
        ck.Equal(list(arr.shape), tensor.shape, f"{what} shape")
        ck.Expect(np.asarray(arr).tobytes() == want, f"{what}: data differs from the source")
        del arr  # closes the mapping before the next open


def CheckWidenedNpy(ck: Checker, path: str, tensor, want: bytes) -> None:
    expected = WidenToF32(tensor.dtype, want)
    for mode in (None, "r"):
        what = f"{tensor.name!r} widened np.load(mmap_mode={mode!r})"
        arr = np.load(path, mmap_mode=mode, allow_pickle=False)
        ck.Equal(arr.dtype, np.dtype("<f4"), f"{what} dtype")
        ck.Equal(list(arr.shape), tensor.shape, f"{what} shape")
        got = np.asarray(arr).reshape(-1)
        # NaN compares unequal: compare the NaN positions, then the rest exactly.
        ck.Expect(np.array_equal(np.isnan(got), np.isnan(expected)), f"{what}: NaNs differ")
        ok = ~np.isnan(expected)
        ck.Expect(got[ok].tobytes() == expected[ok].tobytes(), f"{what}: values differ")
        del arr, got
    # Reads that start and end inside a float32 (7 bytes at a time) give the same bytes.
    data = ReadFile(path)
    with open(path, "rb", buffering=0) as f:
        pieces = b"".join(iter(lambda: f.read(7), b""))
    ck.Expect(pieces == data, f"{tensor.name!r} widened .npy: 7-byte reads differ from one read")


def CheckOneTensorSafetensors(ck: Checker, path: str, tensor, want: bytes) -> None:
    data = ReadFile(path)
    what = f"{tensor.name!r} ({os.path.basename(path)})"
    st = ParseSafetensors(data, what)
    Validate(st, len(data), what, ck)
    if not ck.Equal(list(st.entries), [tensor.name], f"{what}: tensor names"):
        return
    e = st.entries[tensor.name]
    ck.Equal(e.dtype, tensor.dtype, f"{what} dtype")
    ck.Equal(e.shape, tensor.shape, f"{what} shape")
    ck.Expect(data[st.data_start + e.begin:st.data_start + e.end] == want,
              f"{what}: data differs from the source")


def Main(args) -> int:
    src, mnt = args
    ck = Checker("npy")
    source = LoadSource(src)
    for tensor in source.tensors.values():
        path = os.path.join(mnt, "tensors", TensorPath(tensor.name, tensor.dtype))
        if not ck.Expect(os.path.isfile(path), f"{tensor.name!r}: no file {path}"):
            continue
        want = tensor.Read()
        if tensor.dtype in NUMPY_DESCRS:
            CheckNpy(ck, path, tensor, want)
        else:
            CheckOneTensorSafetensors(ck, path, tensor, want)
        if tensor.dtype in WIDENED:
            widened = os.path.join(mnt, "tensors", TensorPaths(tensor.name, tensor.dtype)[1])
            if ck.Expect(os.path.isfile(widened), f"{tensor.name!r}: no file {widened}"):
                CheckWidenedNpy(ck, widened, tensor, want)
                ck.Equal(os.stat(widened).st_size, len(ReadFile(widened)),
                         f"{tensor.name!r} widened st_size")
        # Readers trust st_size: a wrong one truncates or pads what they see.
        ck.Equal(os.stat(path).st_size, len(ReadFile(path)), f"{tensor.name!r} st_size")
    npy = sum(t.dtype in NUMPY_DESCRS for t in source.tensors.values())
    widened = sum(t.dtype in WIDENED for t in source.tensors.values())
    return ck.Finish(f"{npy} .npy, {len(source.tensors) - npy} .safetensors and {widened} "
                     "widened .npy tensor files")


if __name__ == "__main__":
    RunMain(Main, "SRC MNT")
