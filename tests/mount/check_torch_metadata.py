#!/usr/bin/python3
"""TorchMetadataJson: MNT/.ckptfs/metadata.json holds the source's non-tensor values.

For a torch source it is a JSON object mirroring the nested containers of the pickled
object with tensors left out: int dict keys as decimal strings, tuples as lists, None
as null, every int and float exact (a float must round-trip: 0.30000000000000004).
Containers that held only tensors may be kept empty or left out (compared pruned). For
a safetensors source it is {"__metadata__": {the shards' string metadata}}.

usage: check_torch_metadata.py SRC MNT
"""

import json
import os

from checklib import Checker, ReadFile, RunMain, Short
from check_torch_lib import REMOVED, LoadAnySource, Prune


def Main(args) -> int:
    src, mnt = args
    ck = Checker("torch metadata")
    source = LoadAnySource(src)
    path = os.path.join(mnt, ".ckptfs", "metadata.json")
    if not ck.Expect(os.path.isfile(path), f"no {path}; .ckptfs/ holds "
                     f"{sorted(os.listdir(os.path.join(mnt, '.ckptfs')))}"):
        return ck.Finish("")
    data = ReadFile(path)
    ck.Equal(os.stat(path).st_size, len(data), "metadata.json st_size")
    try:
        got = json.loads(data.decode("utf-8"))
    except ValueError as e:
        ck.Fail(f"metadata.json is not UTF-8 JSON ({e}): {data[:300]!r}")
        return ck.Finish("")
    ck.Expect(isinstance(got, dict), f"metadata.json is not an object: {Short(got)}")
    if source.kind != "safetensors" and isinstance(got, dict) and "__weights_only__" in got:
        # ckptfs's verdict on the source (issue 37), not a value of it: check_weights_only.py
        verdict = got.pop("__weights_only__")
        ck.Expect(isinstance(verdict, dict) and isinstance(verdict.get("loads"), bool),
                  f"__weights_only__ is not a verdict: {Short(verdict)}")
    if source.kind == "safetensors":
        ck.Equal(got, source.metadata, "metadata.json")
    else:
        pruned_got, pruned_want = Prune(got), Prune(source.metadata)
        ck.Equal(None if pruned_got is REMOVED else pruned_got,
                 None if pruned_want is REMOVED else pruned_want,
                 "metadata.json (empty containers pruned)")
        CheckExactTypes(ck, pruned_got, pruned_want, "metadata.json")
    return ck.Finish(f"{len(data)} bytes: {Short(got, 200)}")


def CheckExactTypes(ck: Checker, got, want, where: str) -> None:
    """1 == 1.0 == True in python; JSON keeps them apart, and so must metadata.json."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k in want:
            if k in got:
                CheckExactTypes(ck, got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        for i, (g, w) in enumerate(zip(got, want)):
            CheckExactTypes(ck, g, w, f"{where}[{i}]")
    elif want is not REMOVED:
        ck.Equal(type(got).__name__, type(want).__name__, f"{where}: JSON type")


if __name__ == "__main__":
    RunMain(Main, "SRC MNT")
