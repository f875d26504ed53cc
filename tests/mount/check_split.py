#!/usr/bin/python3
"""SplitView: a mount's pytorch_model/ is the per-key split layout of its model, and a
per-key split SOURCE mounts to the same tensors in every view.

- pytorch_model/ holds exactly map.pt and one <escaped key>.pt per expected tensor (the
  escape rule is implemented here, independently: '%' -> %25, '/' -> %2F, "map" -> %6Dap,
  over 255 bytes -> 200 bytes + '~' + FNV-1a 64 hex).
- map.pt loads with torch.load (weights_only and not) as a list of str: the expected keys,
  in the expected order when one is known (--ordered).
- each <key>.pt loads with torch.load both ways as a bare tensor equal to the expected
  one: dtype, shape and bits (BF16 included).
- with --split, SRC is a split checkpoint (a directory holding map.pt, or pytorch_model/
  map.pt): the oracle is torch.load of its own map.pt and key files, and model.safetensors
  (parsed and validated here) holds exactly those tensors too. Otherwise SRC is a torch or
  safetensors checkpoint loaded by check_torch_lib, and the view holds its tensors that
  torch has a type for (weights-only sources: every tensor, names unchanged).

usage: check_split.py SRC MNT [--split] [--ordered]
"""

import argparse
import collections
import os

import torch

from checklib import Checker, ParseSafetensors, ReadFile, RunMain, Validate
from check_torch_lib import ST_OF_TORCH, IntView, LoadAnySource, TensorBytes
from make_split import SplitFileName


def LoadBoth(ck: Checker, path: str, what: str):
    """torch.load with and without weights_only; the first result, or None."""
    results = []
    for weights_only in (True, False):
        try:
            results.append(torch.load(path, map_location="cpu", weights_only=weights_only))
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            ck.Fail(f"{what}: torch.load(weights_only={weights_only}) failed: {e}")
            return None
    return results[0]


def SplitOracle(src: str) -> "collections.OrderedDict[str, torch.Tensor]":
    keys_dir = src if os.path.exists(os.path.join(src, "map.pt")) else \
        os.path.join(src, "pytorch_model")
    keys = torch.load(os.path.join(keys_dir, "map.pt"), weights_only=True)
    return collections.OrderedDict(
        (k, torch.load(os.path.join(keys_dir, SplitFileName(k)), weights_only=True))
        for k in keys)


def OtherOracle(src: str) -> "collections.OrderedDict[str, torch.Tensor]":
    source = LoadAnySource(src)
    return collections.OrderedDict(
        (name, t.tensor) for name, t in source.tensors.items()
        if t.tensor is not None and t.tensor.is_contiguous())


def SameTensor(ck: Checker, got, want: torch.Tensor, what: str) -> None:
    if not ck.Expect(isinstance(got, torch.Tensor), f"{what}: not a tensor but {type(got)}"):
        return
    ck.Equal(got.dtype, want.dtype, f"{what}: dtype")
    ck.Equal(list(got.shape), list(want.shape), f"{what}: shape")
    if got.dtype == want.dtype and got.shape == want.shape:
        ck.Expect(torch.equal(IntView(got), IntView(want)), f"{what}: values differ")


def CheckView(ck: Checker, mnt: str, want, ordered: bool) -> None:
    view = os.path.join(mnt, "pytorch_model")
    expected_files = {"map.pt"} | {SplitFileName(k) for k in want}
    ck.Equal(sorted(os.listdir(view)), sorted(expected_files), "pytorch_model/ listing")
    keys = LoadBoth(ck, os.path.join(view, "map.pt"), "pytorch_model/map.pt")
    if keys is not None:
        ck.Expect(isinstance(keys, list) and all(isinstance(k, str) for k in keys),
                  f"map.pt is not a list of str: {type(keys)}")
        if ordered:
            ck.Equal(keys, list(want), "map.pt keys, in order")
        else:
            ck.Equal(sorted(keys), sorted(want), "map.pt keys")
    for key, tensor in want.items():
        name = SplitFileName(key)
        path = os.path.join(view, name)
        got = LoadBoth(ck, path, f"pytorch_model/{name[:60]}")
        if got is not None:
            SameTensor(ck, got, tensor, f"pytorch_model/{name[:60]}")


def CheckMerged(ck: Checker, mnt: str, want) -> None:
    path = os.path.join(mnt, "model.safetensors")
    data = ReadFile(path)
    st = ParseSafetensors(data, "model.safetensors")
    Validate(st, len(data), "model.safetensors", ck)
    ck.Equal(sorted(st.entries), sorted(want), "model.safetensors tensor names")
    for key, tensor in want.items():
        e = st.entries.get(key)
        if e is None:
            continue
        ck.Equal(e.dtype, ST_OF_TORCH[tensor.dtype], f"model.safetensors {key[:60]}: dtype")
        ck.Equal(e.shape, list(tensor.shape), f"model.safetensors {key[:60]}: shape")
        got = data[st.data_start + e.begin:st.data_start + e.end]
        ck.Expect(got == TensorBytes(tensor), f"model.safetensors {key[:60]}: bytes differ")


def main(argv) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("src")
    p.add_argument("mnt")
    p.add_argument("--split", action="store_true")
    p.add_argument("--ordered", action="store_true")
    args = p.parse_args(argv)
    ck = Checker("SplitView")
    want = SplitOracle(args.src) if args.split else OtherOracle(args.src)
    CheckView(ck, args.mnt, want, args.ordered or args.split)
    if args.split:
        CheckMerged(ck, args.mnt, want)
    return ck.Finish(f"pytorch_model/ holds {len(want)} tensors loadable by torch.load")


if __name__ == "__main__":
    RunMain(main, __doc__)
