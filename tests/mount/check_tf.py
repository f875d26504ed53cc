#!/usr/bin/python3
"""Checks every view of a mounted TensorFlow bundle against the writer's description.

  check_tf.py SRC MOUNT [--expected FILE] [--model-key KEY]

SRC is the bundle's directory (the files shards/ must show unchanged); FILE (default
SRC/expected.json, written by scripts/make_tf_checkpoint.py) lists each raw key with its
dtype, shape and the hex of the whole tensor's bytes in row-major order, computed by the
writer from the values, not from the slices that store them. Names are derived here from
the keys by the rule README states (strip /.ATTRIBUTES/VARIABLE_VALUE, split on '/', undo
'..' and '.S', drop a marker's leading dot, join with '.'), independently of ckptfs.

Checked: tensors/ (numpy.load, also mmap; xattrs tf_key, name, dtype, shape), the merged
model.safetensors (parsed by hand: header rules, every tensor's bytes), pytorch_model.bin
(torch.load weights_only for the dtypes torch 1.13 has), shards/ byte-identical to SRC,
.ckptfs/metadata.json (strings, the object graph).

The merged files hold the model (README's rule, applied here on the raw keys): for an
object-based bundle (keys with a `.ATTRIBUTES` segment) every tensor but optimizer slots
(a `.OPTIMIZER_SLOT` segment), `save_counter` and the optimizer's own variables (first
segment `optimizer`); for a name-based one, or with --model-key '', every tensor.
tensors/ holds every tensor whatever the model.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checklib import DTYPE_SIZES, NUMPY_DESCRS, Checker, RunMain  # noqa: E402

SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def model_keys(keys, model_key):
    """The keys whose tensors the merged files hold (see the docstring)."""
    if model_key == "" or not any(".ATTRIBUTES" in k.split("/") for k in keys):
        return set(keys)

    def training_state(k):
        parts = k.split("/")
        return parts[0] in ("optimizer", "save_counter") or ".OPTIMIZER_SLOT" in parts
    return {k for k in keys if not training_state(k)}


def unescape(segment):
    out, i = [], 0
    if segment.startswith(".") and not segment.startswith("..") and not segment.startswith(".S"):
        i = 1
    while i < len(segment):
        if segment[i] == "." and i + 1 < len(segment) and segment[i + 1] in ".S":
            out.append("." if segment[i + 1] == "." else "/")
            i += 2
        else:
            out.append(segment[i])
            i += 1
    return "".join(out)


def segments(key):
    if key.endswith(SUFFIX):
        key = key[: -len(SUFFIX)]
    return [unescape(s) for s in key.split("/")]


def escape_component(c):
    if c == "":
        return "%"
    if c == ".":
        return "%2E"
    if c == "..":
        return "%2E%2E"
    return c.replace("%", "%25").replace("/", "%2F")


def tensor_path(mount, key, dtype):
    parts = [escape_component(s) for s in segments(key)]
    ext = ".npy" if dtype in NUMPY_DESCRS else ".safetensors"
    return os.path.join(mount, "tensors", *parts[:-1], parts[-1] + ext)


def one_tensor_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    entry = next(v for k, v in header.items() if k != "__metadata__")
    begin, end = entry["data_offsets"]
    return entry, data[8 + n + begin : 8 + n + end]


def check_tensor_files(c, mount, numeric):
    for key, e in numeric.items():
        path = tensor_path(mount, key, e["dtype"])
        want = bytes.fromhex(e["hex"])
        if not os.path.isfile(path):
            c.Fail(f"{key}: no file {path}")
            continue
        if e["dtype"] in NUMPY_DESCRS:
            for mode in (None, "r"):
                a = np.load(path, mmap_mode=mode)
                c.Expect(list(a.shape) == e["shape"], f"{path}: shape {list(a.shape)}, want {e['shape']}")
                c.Expect(a.dtype.str == NUMPY_DESCRS[e["dtype"]], f"{path}: dtype {a.dtype.str}")
                c.Expect(np.ascontiguousarray(a).tobytes() == want, f"{path}: bytes differ (mmap={mode})")
        else:
            entry, got = one_tensor_safetensors(path)
            c.Expect(entry["dtype"] == e["dtype"] and entry["shape"] == e["shape"], f"{path}: {entry}")
            c.Expect(got == want, f"{path}: bytes differ")
        xattrs = {
            "user.ckptfs.tf_key": key,
            "user.ckptfs.name": ".".join(segments(key)),
            "user.ckptfs.dtype": e["dtype"],
        }
        for name, value in xattrs.items():
            got = os.getxattr(path, name).decode("utf-8", "surrogateescape")
            c.Expect(got == value, f"{path}: xattr {name} is {got!r}, want {value!r}")
        shape = json.loads(os.getxattr(path, "user.ckptfs.shape"))
        c.Expect(shape == e["shape"], f"{path}: xattr shape {shape}")


def check_merged(c, mount, numeric):
    with open(os.path.join(mount, "model.safetensors"), "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    c.Expect(n % 8 == 0, f"model.safetensors: header length {n} not a multiple of 8")
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    spans = []
    names = {".".join(segments(k)): k for k in numeric}
    c.Expect(set(header) - {"__metadata__"} == set(names), "model.safetensors: names differ: "
             f"{sorted(set(header) ^ set(names) - {'__metadata__'})}")
    for name, entry in header.items():
        if name == "__metadata__" or name not in names:
            continue
        e = numeric[names[name]]
        begin, end = entry["data_offsets"]
        spans.append((begin, end))
        c.Expect(entry["dtype"] == e["dtype"] and entry["shape"] == e["shape"], f"{name}: {entry}")
        c.Expect(begin % DTYPE_SIZES[e["dtype"]] == 0, f"{name}: offset {begin} unaligned")
        c.Expect(data[base + begin : base + end] == bytes.fromhex(e["hex"]), f"merged {name}: bytes differ")
    spans.sort()
    pos = 0
    for begin, end in spans:
        c.Expect(begin == pos, f"model.safetensors: hole or overlap at {pos}")
        pos = end
    c.Expect(base + pos == len(data), "model.safetensors: trailing bytes")


TORCH_DTYPES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "I32": "int32",
                "I64": "int64", "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}


def check_torch(c, mount, numeric):
    import torch

    state = torch.load(os.path.join(mount, "pytorch_model.bin"), weights_only=True)
    for key, e in numeric.items():
        name = ".".join(segments(key))
        if e["dtype"] not in TORCH_DTYPES:
            continue
        if name not in state:
            c.Fail(f"pytorch_model.bin: no {name}")
            continue
        t = state[name]
        c.Expect(list(t.shape) == e["shape"], f"torch {name}: shape {list(t.shape)}")
        c.Expect(str(t.dtype) == "torch." + TORCH_DTYPES[e["dtype"]], f"torch {name}: {t.dtype}")
        raw = t.contiguous().view(torch.int16) if t.dtype == torch.bfloat16 else t.contiguous()
        c.Expect(raw.numpy().tobytes() == bytes.fromhex(e["hex"]), f"torch {name}: bytes differ")


def check_torch_has_only(c, mount, numeric):
    import torch

    state = torch.load(os.path.join(mount, "pytorch_model.bin"), weights_only=True)
    names = {".".join(segments(k)) for k in numeric}
    extra = sorted(set(state) - names)
    c.Expect(not extra, f"pytorch_model.bin: tensors outside the model: {extra}")


def check_shards(c, src, mount):
    shards = os.path.join(mount, "shards")
    names = sorted(os.listdir(shards))
    c.Expect(any(n.endswith(".index") for n in names), f"shards/: no .index in {names}")
    for name in names:
        with open(os.path.join(shards, name), "rb") as a, open(os.path.join(src, name), "rb") as b:
            c.Expect(a.read() == b.read(), f"shards/{name}: differs from SRC")


def check_metadata(c, mount, strings):
    with open(os.path.join(mount, ".ckptfs", "metadata.json")) as f:
        meta = json.load(f)
    for key, e in strings.items():
        want = [s.encode("latin-1").decode("utf-8", "replace") for s in e["strings"]]
        if key == "_CHECKPOINTABLE_OBJECT_GRAPH":
            nodes = meta.get("object_graph", {}).get("nodes", [])
            c.Expect(len(nodes) > 0, "metadata.json: no object graph nodes")
            children = {ch["name"] for n in nodes for ch in n.get("children", [])}
            c.Expect("model" in children, f"metadata.json: object graph children {children}")
            continue
        got = meta.get("strings", {}).get(key, {}).get("value")
        if e["shape"] == []:
            want = want[0]
        c.Expect(got == want, f"metadata.json: {key} is {got!r}, want {want!r}")


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("mount")
    ap.add_argument("--expected")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--model-key", help="the mount's --model-key ('' only)")
    args = ap.parse_args(argv)
    with open(args.expected or os.path.join(args.src, "expected.json")) as f:
        expected = json.load(f)
    numeric = {k: e for k, e in expected.items() if e["dtype"] in DTYPE_SIZES}
    strings = {k: e for k, e in expected.items() if e["dtype"] == "STRING"}
    c = Checker("check_tf")
    check_tensor_files(c, args.mount, numeric)
    model = model_keys(numeric, args.model_key)
    model_numeric = {k: e for k, e in numeric.items() if k in model}
    check_merged(c, args.mount, model_numeric)
    if not args.no_torch:
        check_torch(c, args.mount, model_numeric)
        check_torch_has_only(c, args.mount, model_numeric)
    check_shards(c, args.src, args.mount)
    check_metadata(c, args.mount, strings)
    return c.Finish(f"{len(numeric)} tensors in tensors/, {len(model_numeric)} in the merged "
                    f"files, {len(strings)} string entries")


if __name__ == "__main__":
    RunMain(main, "SRC MOUNT [--expected FILE] [--no-torch]")
