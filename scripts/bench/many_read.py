#!/usr/bin/python3
"""The bench's many-readers reader: a loader that shards a model across processes.

    many_read.py --readers N --ranges FILE...   every tensor of these safetensors files
    many_read.py --readers N --tensors DIR      every file under DIR, whole (a mount's
                                                tensors/: .npy, or .safetensors for BF16)

Prints "BYTES SECONDS": the bytes read and the wall time from the moment every reader was
ready to the moment the last one finished. The tensors are dealt round-robin, in file
order, to N forked readers, so neighbouring tensors go to different readers and every
reader seeks between its tensors (as ranks that split a model by tensor do). Each reader
opens each file once and reads its tensors with pread in 1 MiB pieces into one reused
buffer. What happens before the start (parsing headers, listing DIR, forking) is not
timed. A reader that fails makes the whole run fail (exit 1) with its error on stderr.
"""
import argparse
import json
import os
import struct
import sys
import time

PIECE = 1 << 20


def safetensors_ranges(path):
    """(path, offset, length) of every tensor in a safetensors file, in offset order."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    jobs = []
    for info in header.values():
        begin, end = info["data_offsets"]
        if end > begin:
            jobs.append((path, 8 + n + begin, end - begin))
    jobs.sort(key=lambda job: job[1])
    return jobs


def tensor_files(root):
    jobs = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            jobs.append((path, 0, os.stat(path).st_size))
    return jobs


def read_jobs(jobs):
    buffer = bytearray(PIECE)
    view = memoryview(buffer)
    fds = {}
    try:
        for path, offset, length in jobs:
            fd = fds.get(path)
            if fd is None:
                fd = fds[path] = os.open(path, os.O_RDONLY)
            end = offset + length
            while offset < end:
                n = os.preadv(fd, [view[:min(PIECE, end - offset)]], offset)
                if n <= 0:
                    raise OSError(f"{path}: short read at {offset}")
                offset += n
    finally:
        for fd in fds.values():
            os.close(fd)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, required=True)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--ranges", nargs="+", metavar="FILE")
    group.add_argument("--tensors", metavar="DIR")
    args = parser.parse_args()
    if args.readers < 1:
        parser.error("--readers must be at least 1")

    jobs = tensor_files(args.tensors) if args.tensors else [
        job for path in args.ranges for job in safetensors_ranges(path)]
    if not jobs:
        sys.exit("many_read: nothing to read")
    shares = [jobs[i::args.readers] for i in range(args.readers)]

    go_read, go_write = os.pipe()
    children = []
    for share in shares:
        pid = os.fork()
        if pid == 0:
            os.close(go_write)
            code = 0
            try:
                os.read(go_read, 1)  # wait for the start
                read_jobs(share)
            except BaseException as e:  # noqa: BLE001 - any failure fails the run
                print(f"many_read: {e}", file=sys.stderr)
                code = 1
            os._exit(code)
        children.append(pid)
    os.close(go_read)
    start = time.monotonic()
    os.write(go_write, b"x" * len(children))
    failed = 0
    for pid in children:
        _, status = os.waitpid(pid, 0)
        failed += status != 0
    seconds = time.monotonic() - start
    os.close(go_write)
    if failed:
        sys.exit(f"many_read: {failed} of {len(children)} readers failed")
    print(sum(job[2] for job in jobs), f"{seconds:.6f}")


if __name__ == "__main__":
    main()
