#!/usr/bin/python3
"""The bench's mmap reader: what safetensors, torch.load(mmap=True) and numpy do to a file.

    mmap_read.py FILE...    prints the bytes read

Each file is mapped read-only and copied out in 64 MiB pieces into one reused buffer (a
loader copies tensor by tensor into its own memory), so every page is faulted in through
the page cache, in order, as a loader's first touch does. No madvise: loaders give none.
"""
import mmap
import os
import sys

import numpy as np

PIECE = 64 << 20


def main(paths):
    buffer = np.empty(PIECE, dtype=np.uint8)
    total = 0
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
    print(total)


if __name__ == "__main__":
    main(sys.argv[1:])
