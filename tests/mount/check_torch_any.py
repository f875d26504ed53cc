#!/usr/bin/python3
"""TorchAnyValues: a torch.save holding values no allowlist knows (issue 23, item 1),
read through the mount by numpy and torch, against an oracle written beside it.

  - tensors/ holds exactly the oracle's tensors (ORACLE: torch.save of {name: tensor}),
    each .npy equal to it in values (numpy.load, also mmap); complex64 as '<c8'.
  - .ckptfs/metadata.json holds each key of META (a JSON object) as given: the opaque
    forms of docs/formats.md.
  - pytorch_model.bin loads with torch.load(weights_only=True) and each of its tensors
    equals the oracle's (mounted with --model-key '': full names).
  - model.safetensors parses, holds no complex tensor, and its bytes equal the oracle's.

usage: check_torch_any.py MNT ORACLE [META]
"""

import json
import os

import numpy as np
import torch

from checklib import Checker, ParseSafetensors, ReadFile, RunMain, Short


def NpyFiles(root: str):
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), root)
            for ext in (".npy", ".safetensors"):  # .safetensors where numpy lacks the dtype
                if rel.endswith(ext):
                    out[rel[:-len(ext)].replace(os.sep, ".")] = os.path.join(d, f)
    return out


# safetensors dtype -> numpy, for the dtypes numpy has.
NUMPY = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
         "F16": np.float16, "I32": np.int32, "U32": np.uint32, "F32": np.float32,
         "F64": np.float64, "I64": np.int64, "U64": np.uint64, "C64": np.complex64}


def RawBytes(t: torch.Tensor, dtype: str) -> bytes:
    """The bytes ckptfs must serve for oracle tensor `t` stored as `dtype`."""
    if dtype in NUMPY:
        return t.numpy().astype(NUMPY[dtype]).tobytes()
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()  # bf16


def Main(args) -> int:
    mnt, oracle_path = args[0], args[1]
    ck = Checker("torch any values")
    oracle = torch.load(oracle_path, weights_only=True)
    files = NpyFiles(os.path.join(mnt, "tensors"))
    ck.Equal(sorted(files), sorted(oracle), "tensors/ .npy files")
    for name, want in oracle.items():
        if name not in files:
            continue
        if files[name].endswith(".safetensors"):
            data = ReadFile(files[name])
            st = ParseSafetensors(data, files[name])
            e = st.entries.get(name.split(".")[-1]) or next(iter(st.entries.values()))
            ck.Equal(data[st.data_start + e.begin:st.data_start + e.end],
                     RawBytes(want, e.dtype), f"tensors/{name}.safetensors bytes")
            continue
        for mmap in (None, "r"):
            got = np.load(files[name], mmap_mode=mmap)
            ck.Expect(list(got.shape) == list(want.shape) and
                      np.array_equal(np.asarray(got), want.numpy().astype(got.dtype)),
                      f"tensors/{name}.npy (mmap {mmap}): {Short(got)} != {Short(want)}")
        if want.dtype == torch.complex64:
            ck.Equal(np.load(files[name]).dtype.str, "<c8", f"{name} dtype")
    if len(args) > 2:
        meta = json.loads(ReadFile(os.path.join(mnt, ".ckptfs", "metadata.json")))
        for key, want in json.load(open(args[2])).items():
            ck.Equal(meta.get(key), want, f"metadata.json[{key!r}]")
    merged = torch.load(os.path.join(mnt, "pytorch_model.bin"), weights_only=True)
    for name, got in merged.items():
        if ck.Expect(name in oracle, f"pytorch_model.bin has {name!r}, not in the oracle"):
            ck.Expect(torch.equal(got.to(oracle[name].dtype), oracle[name]),
                      f"pytorch_model.bin {name}")
    # numpy's uint32 key array (np.random.get_state()[1]) has no torch 1.13 type: in
    # tensors/ only.
    untyped = {n for n, f in files.items() if f.endswith(".npy") and
               np.load(f, mmap_mode="r").dtype in (np.uint16, np.uint32, np.uint64)}
    ck.Equal(sorted(set(oracle) - untyped - set(merged)), [],
             "oracle tensors missing from pytorch_model.bin")
    data = ReadFile(os.path.join(mnt, "model.safetensors"))
    st = ParseSafetensors(data, "model.safetensors")
    for name, e in st.entries.items():
        ck.Expect(not e.dtype.startswith("C"), f"model.safetensors holds complex {name}")
        if ck.Expect(name in oracle, f"model.safetensors has {name!r}, not in the oracle"):
            raw = data[st.data_start + e.begin:st.data_start + e.end]
            ck.Expect(raw == RawBytes(oracle[name], e.dtype), f"model.safetensors {name}")
    complex_names = {n for n, t in oracle.items() if t.is_complex()}
    ck.Equal(sorted(set(oracle) - complex_names - set(st.entries)), [],
             "oracle tensors missing from model.safetensors")
    return ck.Finish(f"{len(oracle)} tensors, {len(merged)} in pytorch_model.bin, "
                     f"{len(st.entries)} in model.safetensors")


if __name__ == "__main__":
    RunMain(Main, __doc__)
