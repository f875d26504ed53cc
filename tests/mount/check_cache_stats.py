#!/usr/bin/python3
"""CacheStats: on a fresh mount of a compressed checkpoint, .ckptfs/stats.json has the
decoded-block cache counters and they move as reads hit and miss:

  {"cache": {"capacity_bytes", "charged_bytes", "hits", "misses", "evictions",
             "coalesced"}, "bytes_decompressed", ...}

  - capacity_bytes is the --cache-size the mount was given, and charged_bytes never
    exceeds it once reads are over;
  - a first read of a tensor misses and decodes no more than the tensor's bytes plus
    two frames (a random read decodes only the frames it touches), or twice that
    when the cache cannot hold them;
  - reading it again with the page cache dropped (when the cache can hold it) hits,
    and decodes at most two frames more;
  - with --expect-evictions, reading the whole merged file through a cache smaller
    than it evicts.

usage: check_cache_stats.py SRC MNT CAPACITY FRAME_SIZE [--expect-evictions]
"""

import json
import os
import time

from checklib import Checker, LoadSource, ReadFile, RunMain, TensorPath

CACHE_KEYS = ("capacity_bytes", "charged_bytes", "hits", "misses", "evictions", "coalesced")
# Prefetching may go on for a moment after a read returns.
SETTLE_S = 0.3


def Stats(ck: Checker, mnt: str) -> dict:
    time.sleep(SETTLE_S)
    text = ReadFile(os.path.join(mnt, ".ckptfs", "stats.json"))
    try:
        stats = json.loads(text)
    except ValueError as e:
        ck.Fail(f"stats.json is not JSON ({e}): {text[:200]!r}")
        return {}
    cache = stats.get("cache")
    if not ck.Expect(isinstance(cache, dict), f"stats.json has no \"cache\" object: {stats}"):
        return {}
    ok = True
    for key in CACHE_KEYS:
        ok &= ck.Expect(isinstance(cache.get(key), int), f"stats.json cache.{key}: {cache.get(key)!r}")
    ok &= ck.Expect(isinstance(stats.get("bytes_decompressed"), int),
                    f"stats.json bytes_decompressed: {stats.get('bytes_decompressed')!r}")
    return stats if ok else {}


def ReadUncached(path: str) -> int:
    """Reads the whole file after dropping its page cache, so the reads reach ckptfs."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        n = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return n
            n += len(chunk)
    finally:
        os.close(fd)


def Delta(after: dict, before: dict, key: str) -> int:
    if key == "bytes_decompressed":
        return after[key] - before[key]
    return after["cache"][key] - before["cache"][key]


def Main(args) -> int:
    src, mnt, capacity, frame_size = args[:4]
    capacity, frame_size = int(capacity), int(frame_size)
    expect_evictions = "--expect-evictions" in args[4:]
    ck = Checker("cache_stats")
    source = LoadSource(src)
    s0 = Stats(ck, mnt)
    if not s0:
        return ck.Finish("")
    ck.Equal(s0["cache"]["capacity_bytes"], capacity, "cache.capacity_bytes vs --cache-size")

    # One tensor of a few frames, and one small one in another shard, clear of the
    # first frame (which reading the headers at mount may have cached).
    big = sorted(source.tensors.values(), key=lambda t: -t.nbytes)[1]
    small = [t for t in source.tensors.values() if 0 < t.nbytes <= 4096
             and t.path != big.path and t.offset >= frame_size]
    for tensor in [big] + small[:1]:
        path = os.path.join(mnt, "tensors", TensorPath(tensor.name, tensor.dtype))
        what = f"{tensor.name!r} ({tensor.nbytes} bytes)"
        before = Stats(ck, mnt)
        ReadUncached(path)
        first = Stats(ck, mnt)
        if not before or not first:
            break
        ck.Expect(Delta(first, before, "misses") > 0, f"{what}: first read: no cache miss counted")
        decoded = Delta(first, before, "bytes_decompressed")
        bound = tensor.nbytes + 2 * frame_size
        fits = bound <= capacity
        # A cache smaller than the tensor may evict a frame before the read that needs it
        # arrives (readahead, prefetch): then allow each frame decoded twice, no more.
        ck.Expect(0 < decoded <= (bound if fits else 2 * bound),
                  f"{what}: first read decoded {decoded} bytes; expected 1 to "
                  f"{tensor.nbytes} + 2 frames of {frame_size}" + ("" if fits else ", times 2"))
        if not fits:
            continue  # a second read may rightly miss
        ReadUncached(path)
        second = Stats(ck, mnt)
        if not second:
            break
        ck.Expect(Delta(second, first, "hits") > 0, f"{what}: second read: no cache hit counted")
        again = Delta(second, first, "bytes_decompressed")
        ck.Expect(again <= 2 * frame_size,
                  f"{what}: second read decoded {again} more bytes; it should come from the cache")

    before = Stats(ck, mnt)
    size = ReadUncached(os.path.join(mnt, "model.safetensors"))
    after = Stats(ck, mnt)
    if before and after:
        ck.Expect(Delta(after, before, "bytes_decompressed") > 0,
                  "reading model.safetensors decoded nothing")
        if expect_evictions:
            ck.Expect(Delta(after, before, "evictions") > 0,
                      f"reading {size} bytes through a {capacity}-byte cache evicted nothing")
        ck.Expect(after["cache"]["charged_bytes"] <= capacity,
                  f"cache.charged_bytes {after['cache']['charged_bytes']} > capacity {capacity} "
                  "with no read in flight")
        for key in ("hits", "misses", "evictions", "coalesced"):
            ck.Expect(Delta(after, s0, key) >= 0, f"cache.{key} went down")
    return ck.Finish(f"capacity {capacity}, frames of {frame_size}")


if __name__ == "__main__":
    RunMain(Main, "SRC MNT CAPACITY FRAME_SIZE [--expect-evictions]")
