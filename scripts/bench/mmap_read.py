#!/usr/bin/python3
"""The bench's mmap reader: what safetensors, torch.load(mmap=True) and numpy do to a file.

    mmap_read.py FILE...             prints "BYTES SECONDS": the bytes read and the time it took
    mmap_read.py --tensors FILE...   the same, tensor by tensor (a safetensors loader)

Each file is mapped read-only and copied out in 64 MiB pieces into one reused buffer (a
loader copies tensor by tensor into its own memory), so every page is faulted in through
the page cache, piece after piece, as a loader's first touch does. No madvise: loaders
give none.
With --tensors each file is a safetensors file: its header is parsed and each tensor
copied out of the map, in file order, into an array of its own, as safetensors'
load_file does (the wan section's "mmap loader"); BYTES is then the tensors' bytes.
The time leaves out starting Python and importing numpy (a tenth of a second, the same for
every contender, which would flatten the ratios).

The copy is numpy's, which is glibc's memmove, and for a piece this large that may copy
from the end down: it did here (the daemon saw each piece's reads in descending order),
as a loader's own large memcpy of a tensor out of the map can.
"""
import json
import mmap
import os
import sys
import time

import numpy as np

PIECE = 64 << 20


def tensor_ranges(fd):
    """(begin, end) of each tensor of a safetensors file, absolute, in file order."""
    header_len = int.from_bytes(os.pread(fd, 8, 0), "little")
    header = json.loads(os.pread(fd, header_len, 8))
    base = 8 + header_len
    spans = [e["data_offsets"] for k, e in header.items() if k != "__metadata__"]
    return sorted((base + b, base + e) for b, e in spans)


def load_tensors(paths):
    total = 0
    start = time.monotonic()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            ranges = tensor_ranges(fd)
            with mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ) as mm:
                view = np.frombuffer(mm, dtype=np.uint8)
                for begin, end in ranges:
                    tensor = view[begin:end].copy()  # the loader's own memory
                    total += tensor.nbytes
                    del tensor
                del view
        finally:
            os.close(fd)
    print(total, f"{time.monotonic() - start:.6f}")


def main(paths):
    buffer = np.empty(PIECE, dtype=np.uint8)
    buffer.fill(0)  # its pages faulted in before the clock
    total = 0
    start = time.monotonic()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                continue
            with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mm:
                view = np.frombuffer(mm, dtype=np.uint8)
                for at in range(0, size, PIECE):
                    n = min(PIECE, size - at)
                    buffer[:n] = view[at:at + n]
                del view
            total += size
        finally:
            os.close(fd)
    print(total, f"{time.monotonic() - start:.6f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--tensors"]:
        load_tensors(sys.argv[2:])
    else:
        main(sys.argv[1:])
