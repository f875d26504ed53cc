#!/usr/bin/python3
"""ShardsIdentical: shards/ holds exactly the source's weight files and index json,
each byte-identical with a matching st_size, for shard-aware loaders.

usage: check_shards.py SRC MNT
"""

import os

from checklib import Checker, LoadSource, ReadFile, ReadWeight, RunMain


def Main(args) -> int:
    src, mnt = args
    ck = Checker("shards")
    source = LoadSource(src)
    files = source.weight_files + ([source.index_file] if source.index_file else [])
    shards_dir = os.path.join(mnt, "shards")
    ck.Equal(sorted(os.listdir(shards_dir)), sorted(os.path.basename(p) for p in files),
             "shards/ listing")
    for src_path in files:
        path = os.path.join(shards_dir, os.path.basename(src_path))
        if not ck.Expect(os.path.isfile(path), f"missing {path}"):
            continue
        want = ReadWeight(src_path)
        ck.Expect(ReadFile(path) == want, f"{os.path.basename(path)} differs from the source")
        ck.Equal(os.stat(path).st_size, len(want), f"{os.path.basename(path)} st_size")
    return ck.Finish(f"{len(files)} files")


if __name__ == "__main__":
    RunMain(Main, "SRC MNT")
