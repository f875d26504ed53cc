#!/usr/bin/python3
"""DamagedFrame: a mount whose compressed shard has one damaged range (see
make_checkpoint.py ZST_HOSTILE_CASES) fails reads that touch it with EIO, never
with wrong, short or zero bytes, and keeps serving everything else exactly, before
and after the failures. SRC is the undamaged plain checkpoint (`--kind zstbase`).

  - tensors/<DAMAGED>.npy: reading it fails with EIO, twice (an error is not cached
    as data, nor turned into success);
  - model.safetensors and shards/<SHARD> (which hold the damaged bytes): a full
    read fails with EIO, while ranges of them that avoid the damaged tensor's
    frames read back exactly;
  - every other tensor file, every other shard, and the non-weight files read back
    exactly, checked again after the failures.

usage: check_damaged.py SRC MNT DAMAGED_TENSOR SHARD FRAME_SIZE
"""

import errno
import os

import numpy as np

from checklib import (NUMPY_DESCRS, Checker, LoadSource, ParseSafetensors, ReadFile,
                      ReadWeight, RunMain, TensorPath)


def ExpectEio(ck: Checker, path: str, what: str) -> None:
    try:
        data = ReadFile(path)
        ck.Fail(f"{what}: read {len(data)} bytes, expected EIO")
    except OSError as e:
        ck.Equal(e.errno, errno.EIO, f"{what}: errno")


def CheckIntactTensors(ck: Checker, source, mnt: str, damaged: str, when: str) -> int:
    n = 0
    for tensor in source.tensors.values():
        if tensor.name == damaged:
            continue
        path = os.path.join(mnt, "tensors", TensorPath(tensor.name, tensor.dtype))
        try:
            arr = np.load(path, allow_pickle=False)
        except OSError as e:
            ck.Fail(f"{when}: {tensor.name!r}: {e}")
            continue
        ck.Equal(arr.dtype, np.dtype(NUMPY_DESCRS[tensor.dtype]), f"{when}: {tensor.name!r} dtype")
        ck.Expect(arr.tobytes() == tensor.Read(), f"{when}: {tensor.name!r} differs from the source")
        n += 1
    return n


def CheckIntactRanges(ck: Checker, path: str, want: bytes, bad_begin: int, bad_end: int,
                      frame_size: int, what: str) -> None:
    """Reads of `path` (expected content `want`) that stay clear of [bad_begin, bad_end)
    by at least one frame (plus the 128 KiB the kernel may read ahead) succeed."""
    margin = frame_size + (128 << 10)
    ranges = [(0, min(4096, len(want))), (0, max(0, bad_begin - margin)),
              (bad_end + margin, len(want) - bad_end - margin)]
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset, length in ranges:
            if length <= 0:
                continue
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            try:
                got = os.pread(fd, length, offset)
                ck.Expect(got == want[offset:offset + length],
                          f"{what}: pread(offset={offset}, length={length}) differs")
            except OSError as e:
                ck.Fail(f"{what}: pread(offset={offset}, length={length}) away from the "
                        f"damage [{bad_begin}, {bad_end}): {e}")
    finally:
        os.close(fd)


def Main(args) -> int:
    src, mnt, damaged, shard, frame_size = args
    frame_size = int(frame_size)
    ck = Checker("damaged")
    source = LoadSource(src)
    bad = source.tensors[damaged]
    intact = CheckIntactTensors(ck, source, mnt, damaged, "before the failures")

    ExpectEio(ck, os.path.join(mnt, "tensors", TensorPath(damaged, bad.dtype)),
              f"tensors/{TensorPath(damaged, bad.dtype)}")
    ExpectEio(ck, os.path.join(mnt, "tensors", TensorPath(damaged, bad.dtype)),
              f"tensors/{TensorPath(damaged, bad.dtype)} (second read)")
    ExpectEio(ck, os.path.join(mnt, "shards", shard), f"shards/{shard}")
    ExpectEio(ck, os.path.join(mnt, "model.safetensors"), "model.safetensors")

    # The undamaged parts of the damaged shard, in shards/ and in the merged file.
    shard_bytes = ReadWeight(os.path.join(src, shard))
    CheckIntactRanges(ck, os.path.join(mnt, "shards", shard), shard_bytes, bad.offset,
                      bad.offset + bad.nbytes, frame_size, f"shards/{shard}")
    merged = os.path.join(mnt, "model.safetensors")
    with open(merged, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        st = ParseSafetensors(n.to_bytes(8, "little") + f.read(n), "model.safetensors")
    want = bytearray(st.data_start + max(e.end for e in st.entries.values()))
    want[:st.data_start] = n.to_bytes(8, "little") + st.header_bytes
    for name, e in st.entries.items():
        if name != damaged:
            want[st.data_start + e.begin:st.data_start + e.end] = source.tensors[name].Read()
    e = st.entries[damaged]
    CheckIntactRanges(ck, merged, bytes(want), st.data_start + e.begin, st.data_start + e.end,
                      frame_size, "model.safetensors")

    for path in source.weight_files:
        name = os.path.basename(path)
        if name != shard:
            ck.Expect(ReadFile(os.path.join(mnt, "shards", name)) == ReadWeight(path),
                      f"shards/{name} differs from the source")
    for path in source.non_weight_files:
        name = os.path.basename(path)
        ck.Expect(ReadFile(os.path.join(mnt, name)) == ReadFile(path), f"{name} differs")
    CheckIntactTensors(ck, source, mnt, damaged, "after the failures")
    return ck.Finish(f"{damaged!r} gives EIO, {intact} other tensors intact")


if __name__ == "__main__":
    RunMain(Main, "SRC MNT DAMAGED_TENSOR SHARD FRAME_SIZE")
