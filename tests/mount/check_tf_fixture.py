#!/usr/bin/python3
"""Checks a mounted real TF fixture: every view agrees, and the known values hold.

  check_tf_fixture.py SRC MOUNT

shards/ must hold the bundle's files byte-identical to SRC's (SRC itself, or SRC/variables
for a SavedModel); every tensors/*.npy must equal its model.safetensors entry (parsed by
hand) and its pytorch_model.bin entry (torch.load weights_only); the bundle's data bytes
must be exactly the tensors' bytes found in the data file. The merged files hold the model:
every tensor but an object-based bundle's training state (check_tf.py's model_keys). TensorFlow Serving's half_plus_two
models hold a = 0.5, b = 2 (half_plus_three: b = 3), as their names say.
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checklib import Checker, RunMain  # noqa: E402
from check_tf import model_keys  # noqa: E402


def merged(mount):
    with open(os.path.join(mount, "model.safetensors"), "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    return {k: data[8 + n + v["data_offsets"][0] : 8 + n + v["data_offsets"][1]]
            for k, v in header.items() if k != "__metadata__"}


def main(argv):
    src, mount = argv
    c = Checker("check_tf_fixture")
    bundle_dir = os.path.join(src, "variables") if os.path.isdir(os.path.join(src, "variables")) else src
    shards = sorted(os.listdir(os.path.join(mount, "shards")))
    c.Expect(any(s.endswith(".index") for s in shards), f"shards/: {shards}")
    data_bytes = b""
    for s in shards:
        with open(os.path.join(mount, "shards", s), "rb") as a, open(os.path.join(bundle_dir, s), "rb") as b:
            got = a.read()
            c.Equal(got == b.read(), True, f"shards/{s} equals the stored file")
            if ".data-" in s:
                data_bytes += got
    tensors = merged(mount)
    import torch
    state = torch.load(os.path.join(mount, "pytorch_model.bin"), weights_only=True)
    values = {}
    keys = {}
    for root, _, files in os.walk(os.path.join(mount, "tensors")):
        for f in files:
            path = os.path.join(root, f)
            name = os.getxattr(path, "user.ckptfs.name").decode()
            key = os.getxattr(path, "user.ckptfs.tf_key").decode()
            c.Expect(len(key) > 0, f"{path}: no tf_key")
            a = np.load(path)
            raw = np.ascontiguousarray(a).tobytes()
            values[name] = a
            keys[key] = name
            if name in tensors:
                c.Equal(raw, tensors.get(name), f"{name}: tensors/ vs model.safetensors")
            if name in state:
                c.Equal(state[name].numpy().tobytes(), raw, f"{name}: pytorch_model.bin")
            c.Expect(raw in data_bytes, f"{name}: bytes not found in the data files")
    model = sorted(keys[k] for k in model_keys(keys, None))
    c.Equal(model, sorted(tensors), "model.safetensors holds the model's tensors/ names")
    c.Expect(set(state) <= set(model), f"pytorch_model.bin: not the model: {sorted(set(state) - set(model))}")
    leaf = os.path.basename(os.path.dirname(os.path.abspath(src)))
    known = {"half_plus_two": {"a": 0.5, "b": 2.0}, "half_plus_three": {"a": 0.5, "b": 3.0}}
    for model, want in known.items():
        if model in leaf:
            for name, v in want.items():
                c.Equal(float(values.get(name, np.nan)), v, f"{leaf}: {name}")
    return c.Finish(f"{len(values)} tensors agree in every view")


if __name__ == "__main__":
    RunMain(main, "SRC MOUNT")
