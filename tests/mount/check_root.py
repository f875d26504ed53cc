#!/usr/bin/python3
"""RootListing: the mount root holds the source's non-weight files byte for byte, the
merged model.safetensors, pytorch_model/, tensors/, shards/ and a live .ckptfs/stats.json; the index
json stays out of the root, and the mount refuses writes.

usage: check_root.py SRC MNT
"""

import errno
import json
import os

from checklib import Checker, LoadSource, ReadFile, RunMain

VIEWS = {"model.safetensors": False, "pytorch_model": True, "tensors": True, "shards": True,
         ".ckptfs": True}
# The README lists the legacy pytorch_model.bin view; it may not be built yet.
OPTIONAL_VIEWS = {"pytorch_model.bin"}


def CheckListing(ck: Checker, source, mnt: str) -> None:
    expected = {os.path.basename(p) for p in source.non_weight_files} | set(VIEWS)
    actual = set(os.listdir(mnt))
    ck.Equal(sorted(actual - OPTIONAL_VIEWS), sorted(expected), "root listing")
    if source.index_file:
        ck.Expect(os.path.basename(source.index_file) not in actual,
                  "the index json is at the root; loaders would prefer it to model.safetensors")
    for name, is_dir in VIEWS.items():
        path = os.path.join(mnt, name)
        ck.Expect(os.path.isdir(path) if is_dir else os.path.isfile(path),
                  f"{name} should be a {'directory' if is_dir else 'regular file'}")


def CheckNonWeightFiles(ck: Checker, source, mnt: str) -> None:
    for src_path in source.non_weight_files:
        name = os.path.basename(src_path)
        want = ReadFile(src_path)
        got = ReadFile(os.path.join(mnt, name))
        ck.Expect(got == want, f"{name}: content differs from the source")
        ck.Equal(os.stat(os.path.join(mnt, name)).st_size, len(want), f"{name}: st_size")


def ReadStats(ck: Checker, mnt: str):
    text = ReadFile(os.path.join(mnt, ".ckptfs", "stats.json"))
    try:
        stats = json.loads(text)
    except ValueError as e:
        ck.Fail(f".ckptfs/stats.json is not valid JSON ({e}): {text[:200]!r}")
        return None
    ck.Expect(isinstance(stats, dict), f".ckptfs/stats.json is not an object: {stats!r}")
    return stats


def NumericLeaves(value, prefix=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from NumericLeaves(v, f"{prefix}{k}.")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield prefix.rstrip("."), value


def CheckStatsAreLive(ck: Checker, mnt: str) -> None:
    """Reading model.safetensors must move some counter: a stats file served from the
    page cache (KEEP_CACHE) or with a stale st_size would look frozen."""
    before = ReadStats(ck, mnt)
    ReadFile(os.path.join(mnt, "model.safetensors"))
    after = ReadStats(ck, mnt)
    if not isinstance(before, dict) or not isinstance(after, dict):
        return
    old = dict(NumericLeaves(before))
    grew = [k for k, v in NumericLeaves(after) if k in old and v > old[k]]
    ck.Expect(bool(grew), "no counter in .ckptfs/stats.json grew after reading "
              f"model.safetensors: before {before}, after {after}")


def CheckReadOnly(ck: Checker, mnt: str) -> None:
    attempts = {
        "creating a file": lambda: os.close(os.open(os.path.join(mnt, "probe"),
                                                    os.O_CREAT | os.O_EXCL | os.O_WRONLY)),
        "opening model.safetensors for writing":
            lambda: os.close(os.open(os.path.join(mnt, "model.safetensors"), os.O_RDWR)),
        "mkdir": lambda: os.mkdir(os.path.join(mnt, "probe.d")),
    }
    for what, attempt in attempts.items():
        try:
            attempt()
            ck.Fail(f"{what} succeeded on a read-only mount")
        except OSError as e:
            ck.Expect(e.errno in (errno.EROFS, errno.EACCES, errno.EPERM),
                      f"{what}: expected EROFS, EACCES or EPERM, got {e}")


def Main(args) -> int:
    src, mnt = args
    ck = Checker("root")
    source = LoadSource(src)
    CheckListing(ck, source, mnt)
    CheckNonWeightFiles(ck, source, mnt)
    CheckStatsAreLive(ck, mnt)
    CheckReadOnly(ck, mnt)
    return ck.Finish(f"{len(source.non_weight_files)} non-weight files")


if __name__ == "__main__":
    RunMain(Main, "SRC MNT")
