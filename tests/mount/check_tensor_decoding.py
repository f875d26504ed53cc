#!/usr/bin/python3
"""TensorReadsDecodeOnlyTheirFrames: each of COUNT tensors, picked at random and read
whole through its tensors/ file on a compressed mount, makes ckptfs decode at most the
tensor's bytes plus two frames (the partial frames at either end), as
.ckptfs/stats.json's bytes_decompressed counts it, including any prefetching the
read started (counted after the mount has been idle for a moment). Readahead or
prefetch running on into the next tensors breaks this.

usage: check_tensor_decoding.py SRC MNT FRAME_SIZE [COUNT [SEED]]
"""

import json
import os
import random
import time

from checklib import Checker, LoadSource, ReadFile, RunMain, TensorPath

SETTLE_S = 0.3


def Decompressed(mnt: str) -> int:
    time.sleep(SETTLE_S)
    return json.loads(ReadFile(os.path.join(mnt, ".ckptfs", "stats.json")))["bytes_decompressed"]


def Main(args) -> int:
    src, mnt, frame_size = args[:3]
    frame_size = int(frame_size)
    count = int(args[3]) if len(args) > 3 else 8
    seed = int(args[4]) if len(args) > 4 else 1
    ck = Checker("tensor_decoding")
    source = LoadSource(src)
    big = sorted(t.name for t in source.tensors.values() if t.nbytes >= 2 * frame_size)
    picked = random.Random(seed).sample(big, min(count, len(big)))
    ck.Expect(len(picked) > 1, f"only {len(picked)} tensors of 2 frames or more to read")
    requested = decoded = 0
    for name in picked:
        tensor = source.tensors[name]
        path = os.path.join(mnt, "tensors", TensorPath(name, tensor.dtype))
        before = Decompressed(mnt)
        ReadFile(path)
        d = Decompressed(mnt) - before
        requested += tensor.nbytes
        decoded += d
        ck.Expect(d <= tensor.nbytes + 2 * frame_size,
                  f"{name!r} ({tensor.nbytes} bytes): decoded {d} bytes = tensor + "
                  f"{(d - tensor.nbytes) / frame_size:.1f} frames of {frame_size}; at most 2")
    return ck.Finish(f"{len(picked)} tensors, decoded/requested "
                     f"{decoded / max(requested, 1):.3f}")


if __name__ == "__main__":
    RunMain(Main, "SRC MNT FRAME_SIZE [COUNT [SEED]]")
