#!/usr/bin/python3
"""Checks a mounted PyTorch distributed checkpoint (DCP) against what PyTorch wrote.

  check_dcp.py SRC MOUNT [TORCH_SAVE]

SRC/expected.safetensors holds every tensor whole (flattened names), written from the
unsharded tensors before they were distributed (fixtures' NOTICE.md, scripts/make_dcp.py).
Every view must hold those bytes: tensors/ (every tensor, optimizer state included),
model.safetensors and pytorch_model.bin (the `model` sub-tree, its prefix stripped), and
shards/ the stored files unchanged. TORCH_SAVE, when given, is what PyTorch's own
dcp_to_torch_save wrote from SRC: its model must equal pytorch_model.bin, and its
non-tensor values .ckptfs/metadata.json.
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checklib import WIDENED, Checker, RunMain, WidenToF32  # noqa: E402

DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
          "I8": "i1", "U8": "u1", "BOOL": "?"}


def safetensors(path):
    """name -> (dtype, shape, bytes), parsed by hand."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    return {k: (v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def tensor_file(mount, name):
    base = os.path.join(mount, "tensors", *name.split("."))
    for suffix in (".npy", ".safetensors"):
        if os.path.exists(base + suffix):
            return base + suffix
    return None


def non_tensors(value):
    """`value` with tensors left out (as metadata.json has it): dicts and lists kept."""
    import torch
    if isinstance(value, torch.Tensor):
        return None
    if isinstance(value, dict):
        out = {k: non_tensors(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [non_tensors(v) for v in value]
    return value


def prune(value):
    """`value` without the dicts that held only tensors (empty once they are left out)."""
    if isinstance(value, dict):
        out = {k: prune(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v != {}}
    if isinstance(value, list):
        return [prune(v) for v in value]
    return value


def main(argv):
    src, mount = argv[0], argv[1]
    torch_save = argv[2] if len(argv) > 2 else None
    c = Checker("check_dcp")
    want = safetensors(os.path.join(src, "expected.safetensors"))
    model = {k[len("model."):]: v for k, v in want.items() if k.startswith("model.")}
    if not model:  # a bare state dict: the whole of it is the model
        model = want

    for name, (dtype, shape, raw) in want.items():
        if dtype in WIDENED:  # the stored bytes' .safetensors, and float32 .npy beside it
            base = os.path.join(mount, "tensors", *name.split("."))
            if c.Expect(os.path.isfile(base + ".safetensors"), f"tensors/: no .safetensors for {name}"):
                one = safetensors(base + ".safetensors")
                c.Equal(list(one.values())[0], (dtype, shape, raw), f"{name}: tensors/ one-tensor file")
            if c.Expect(os.path.isfile(base + ".npy"), f"tensors/: no widened .npy for {name}"):
                a = np.load(base + ".npy")
                c.Equal((a.dtype.str, list(a.shape)), ("<f4", shape), f"{name}: widened dtype, shape")
                c.Expect(np.array_equal(a.reshape(-1), WidenToF32(dtype, raw), equal_nan=True),
                         f"{name}: widened values")
            continue
        path = tensor_file(mount, name)
        if not c.Expect(path is not None, f"tensors/: no file for {name}"):
            continue
        if path.endswith(".npy"):
            a = np.load(path)
            c.Equal(list(a.shape), shape, f"{name}: tensors/ shape")
            c.Equal(a.dtype.str, np.dtype(DTYPES[dtype]).str, f"{name}: tensors/ dtype")
            c.Equal(np.ascontiguousarray(a).tobytes() == raw, True, f"{name}: tensors/ bytes")
        else:
            one = safetensors(path)
            c.Equal(list(one.values())[0], (dtype, shape, raw), f"{name}: tensors/ one-tensor file")

    merged = safetensors(os.path.join(mount, "model.safetensors"))
    c.Equal(sorted(merged), sorted(model), "model.safetensors holds the model")
    for name, got in merged.items():
        c.Equal(got == model.get(name), True, f"{name}: model.safetensors entry")

    import torch
    state = torch.load(os.path.join(mount, "pytorch_model.bin"), weights_only=True)
    c.Equal(sorted(state), sorted(model), "pytorch_model.bin holds the model")
    for name, t in state.items():
        if name in model:
            raw = t.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
            c.Equal(raw == model[name][2], True, f"{name}: pytorch_model.bin bytes")
            c.Equal(list(t.shape), model[name][1], f"{name}: pytorch_model.bin shape")

    for f in os.listdir(os.path.join(mount, "shards")):
        with open(os.path.join(mount, "shards", f), "rb") as a, open(os.path.join(src, f), "rb") as b:
            c.Equal(a.read() == b.read(), True, f"shards/{f} equals the stored file")

    if torch_save:
        theirs = torch.load(torch_save)
        their_model = theirs.get("model", theirs)
        for name, t in their_model.items():
            if c.Expect(name in state, f"{name}: in dcp_to_torch_save's model, not in ours"):
                c.Equal(torch.equal(state[name], t), True, f"{name}: equals dcp_to_torch_save's")
        with open(os.path.join(mount, ".ckptfs", "metadata.json")) as f:
            ours = json.load(f)
        expected = prune(json.loads(json.dumps(non_tensors(theirs))))  # tuples become lists
        ours = prune(ours)
        c.Equal(ours, expected, "metadata.json vs dcp_to_torch_save's non-tensor values")
    return c.Finish(f"{len(want)} tensors, {len(model)} in the model, agree in every view")


if __name__ == "__main__":
    RunMain(main, "SRC MOUNT [TORCH_SAVE]")
