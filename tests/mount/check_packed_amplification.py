#!/usr/bin/python3
"""Issue 28, no read amplification on packed sources: each of COUNT tensors, read whole
through its tensors/ file on a mount of PACKED (`ckptfs pack PLAIN PACKED`), makes ckptfs
decode at most the frames overlapping the tensor and, with --remote (PACKED served over
HTTP), fetch at most their compressed bytes plus less than one 1 MiB block at each end,
prefetch included (counted once the mount has been idle for a moment). stats.json's
per-view counters show it: the tensors view is charged with all of that work.

usage: check_packed_amplification.py PLAIN PACKED MNT [--remote] [COUNT]
"""

import json
import os
import struct
import time

from checklib import Checker, ReadFile, RunMain, TensorPath

BLOCK = 1 << 20
SEEK_MAGIC = 0x8F92EAB1


def Stats(mnt: str) -> dict:
    # Prefetch runs on after the read returns: wait until the counters stay put.
    last = None
    for _ in range(50):
        time.sleep(0.1)
        j = json.loads(ReadFile(os.path.join(mnt, ".ckptfs", "stats.json")))
        now = (j["bytes_decompressed"], j.get("remote", {}).get("bytes_fetched"))
        if now == last:
            return j
        last = now
    return j


def Frames(zst: str) -> list:
    """(decoded_offset, decoded_size, compressed_size) of each frame, from the seek table."""
    with open(zst, "rb") as f:
        f.seek(-9, os.SEEK_END)
        count, descriptor, magic = struct.unpack("<IBI", f.read(9))
        assert magic == SEEK_MAGIC, zst
        entry = 12 if descriptor & 0x80 else 8
        f.seek(-9 - count * entry, os.SEEK_END)
        table = f.read(count * entry)
    frames, at = [], 0
    for i in range(count):
        csize, dsize = struct.unpack_from("<II", table, i * entry)
        frames.append((at, dsize, csize))
        at += dsize
    return frames


def Tensors(plain: str) -> list:
    """(name, dtype, shard file name, offset in the shard, nbytes) of every tensor."""
    out = []
    for shard in sorted(os.listdir(plain)):
        if not shard.endswith(".safetensors"):
            continue
        with open(os.path.join(plain, shard), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        for name, t in header.items():
            if name == "__metadata__":
                continue
            b, e = t["data_offsets"]
            out.append((name, t["dtype"], shard, 8 + n + b, e - b))
    return out


def Main(args) -> int:
    plain, packed, mnt = args[:3]
    remote = "--remote" in args[3:]
    rest = [a for a in args[3:] if a != "--remote"]
    count = int(rest[0]) if rest else 3
    ck = Checker("packed_amplification")
    tensors = sorted(Tensors(plain), key=lambda t: (t[2], t[3]))
    # Tensors in the middle of their shards, not sharing frames with each other.
    picked = tensors[len(tensors) // 4 :: max(1, len(tensors) // (2 * count))][:count]
    ck.Expect(len(picked) == count, f"only {len(picked)} tensors to read")
    before = Stats(mnt)
    ck.Expect("views" in before, "stats.json has no views object")
    for view in ("tensors", "model.safetensors", "shards", "other"):
        ck.Expect(view in before.get("views", {}), f"stats.json views lack {view!r}")
    for name, dtype, shard, offset, nbytes in picked:
        frames = Frames(os.path.join(packed, shard + ".zst"))
        over = [f for f in frames if f[0] < offset + nbytes and offset < f[0] + f[1]]
        decoded_bound = sum(f[1] for f in over)
        compressed = sum(f[2] for f in over)
        data = ReadFile(os.path.join(mnt, "tensors", TensorPath(name, dtype)))
        ck.Expect(len(data) >= nbytes, f"{name}: read {len(data)} bytes")
        after = Stats(mnt)
        decoded = after["bytes_decompressed"] - before["bytes_decompressed"]
        ck.Expect(decoded <= decoded_bound,
                  f"{name} ({nbytes} bytes, {len(over)} frames of {decoded_bound} bytes): "
                  f"decoded {decoded}")
        view, view_before = after["views"]["tensors"], before["views"]["tensors"]
        ck.Expect(view["bytes_decoded"] - view_before["bytes_decoded"] == decoded,
                  f"{name}: tensors view charged {view['bytes_decoded']} decoded, all {decoded}")
        ck.Expect(view["bytes_served"] - view_before["bytes_served"] == len(data),
                  f"{name}: tensors view served {view['bytes_served']}, read {len(data)}")
        if remote:
            fetched = after["remote"]["bytes_fetched"] - before["remote"]["bytes_fetched"]
            ck.Expect(fetched <= compressed + 2 * BLOCK,
                      f"{name}: fetched {fetched} bytes for frames of {compressed} compressed "
                      f"bytes; at most those plus {2 * BLOCK}")
            ck.Expect(view["bytes_fetched"] - view_before["bytes_fetched"] == fetched,
                      f"{name}: tensors view charged {view['bytes_fetched']} fetched, "
                      f"all {fetched}")
            print(f"{name}: {nbytes} bytes, frames {decoded_bound} decoded / {compressed} "
                  f"compressed; decoded {decoded}, fetched {fetched}")
        else:
            print(f"{name}: {nbytes} bytes, frames {decoded_bound}; decoded {decoded}")
        before = after
    return ck.Finish(f"{len(picked)} tensors")


if __name__ == "__main__":
    RunMain(Main, "PLAIN PACKED MNT [--remote] [COUNT]")
