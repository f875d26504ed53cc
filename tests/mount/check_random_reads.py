#!/usr/bin/python3
"""ConcurrentRandomReads: 8 threads pread random ranges (1 byte to 3 MiB, some past
EOF) of model.safetensors and of every shard, each compared with bytes computed from
the source. Page-cache pages are dropped every few reads so the reads keep reaching
the daemon concurrently instead of being served by the kernel.

usage: check_random_reads.py SRC MNT [THREADS [READS_PER_THREAD [SEED]]]
"""

import os
import random
import threading

from checklib import Checker, LoadSource, ParseSafetensors, ReadWeight, RunMain

DROP_CACHE_EVERY = 8


def ExpectedMerged(mnt: str, source) -> bytes:
    """The merged file as it must be given its own header (whose layout ckptfs picks
    and check_merged validates): header bytes, then each source tensor at its offset."""
    path = os.path.join(mnt, "model.safetensors")
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        prefix = n.to_bytes(8, "little") + f.read(n)
    st = ParseSafetensors(prefix, "model.safetensors")
    data = bytearray(prefix)
    data += bytes(os.stat(path).st_size - len(prefix))
    for name, e in st.entries.items():
        data[st.data_start + e.begin:st.data_start + e.end] = source.tensors[name].Read()
    return bytes(data)


def RandomRange(rng: random.Random, size: int):
    offset = rng.randrange(0, size + 64)
    roll = rng.random()
    if roll < 0.5:
        length = rng.randint(1, 4096)
    elif roll < 0.95:
        length = rng.randint(4097, 256 << 10)
    else:
        length = rng.randint(256 << 10, 3 << 20)
    return offset, length


def Difference(got: bytes, expected: bytes) -> str:
    if len(got) != len(expected):
        return f"got {len(got)} bytes, expected {len(expected)}"
    first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
    return f"first difference {first} bytes in"


def Reader(seed: int, reads: int, targets: dict, errors: list) -> None:
    rng = random.Random(seed)
    fds = {path: os.open(path, os.O_RDONLY) for path in targets}
    try:
        for i in range(reads):
            path = rng.choice(sorted(targets))
            want, fd = targets[path], fds[path]
            offset, length = RandomRange(rng, len(want))
            got = os.pread(fd, length, offset)
            expected = want[offset:offset + length]
            if got != expected:
                errors.append(f"thread seed {seed}: pread({os.path.basename(path)}, "
                              f"offset={offset}, length={length}): {Difference(got, expected)}")
            if i % DROP_CACHE_EVERY == 0:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError as e:
        errors.append(f"thread seed {seed}: {e}")
    finally:
        for fd in fds.values():
            os.close(fd)


def Main(args) -> int:
    src, mnt = args[:2]
    threads, reads, seed = [int(a) for a in args[2:]] + [8, 300, 1][len(args) - 2:]
    ck = Checker("random_reads")
    source = LoadSource(src)
    targets = {os.path.join(mnt, "model.safetensors"): ExpectedMerged(mnt, source)}
    for shard in source.weight_files:
        targets[os.path.join(mnt, "shards", os.path.basename(shard))] = ReadWeight(shard)
    errors = []
    workers = [threading.Thread(target=Reader, args=(seed * 1000 + t, reads, targets, errors))
               for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for e in errors:
        ck.Fail(e)
    ck.checked += threads * reads
    return ck.Finish(f"{threads} threads x {reads} preads over {len(targets)} files")


if __name__ == "__main__":
    RunMain(Main, "SRC MNT [THREADS [READS_PER_THREAD [SEED]]]")
