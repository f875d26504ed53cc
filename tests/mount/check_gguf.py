#!/usr/bin/python3
"""Checks mounted GGUF files (tests/mount/gguf_mount_test.cc) as a user sees them.

  check_gguf.py mount FIXTURES CASE=MNT ...   MNT mounts CASE: a file of FIXTURES/manifest.json
                                             ("tiny-llama-mixed.gguf") or a split set of its
                                             split_sets ("split3"), however it was stored
  check_gguf.py inspect CKPTFS FIXTURES CASE [OPTION... TARGET]
                                             `CKPTFS inspect` (and --json) of CASE, or of
                                             TARGET (a URL serving it) with OPTIONs before it

FIXTURES is ../shared/fixtures/gguf, written by gguf-py (its NOTICE.md); every expectation
comes from its manifest.json (sizes, sha256 of each file and of each tensor's stored bytes,
key-values) and from the fixture files' bytes, never from ckptfs. What a mount must show:
- the root: the GGUF file unchanged, or for a split set every split unchanged and NAME.gguf,
  the set merged, byte-identical to the unsplit file (the manifest's unsplit_reference).
- tensors/: each tensor at its name split at dots. F32/F16 as .npy in numpy's shape (GGUF's
  ne reversed), the data part being the stored bytes; BF16 as .safetensors (the stored
  bytes) and .npy (float32, each value the bf16 widened exactly); quantized types as
  leaf.<type> (weight.q4_0), the stored blocks with no header, with xattrs user.ckptfs.dtype,
  .shape, .block_size, .block_bytes and .name.
- model.safetensors (parsed by hand) and pytorch_model.bin (torch.load, weights_only): every
  F32/F16/BF16 tensor under its GGUF name in numpy's shape, no quantized one.
- .ckptfs/metadata.json: the key-values (a split set's split.* left out), scalars equal,
  arrays of more than 64 items as {"type": "ARRAY[...]", "length": N}.
"""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checklib import (Checker, EscapeComponent, ParseSafetensors, ReadFile, RunMain,  # noqa: E402
                      Validate, WidenToF32)

# ggml types with a numpy dtype, and their .npy descr.
NPY_DESCRS = {"F32": "<f4", "F16": "<f2"}
# ggml's block types (ggml/src/ggml.c type_traits): (elements, bytes) per block.
BLOCKS = {"Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
          "Q8_0": (32, 34), "Q8_1": (32, 36)}
ARRAY_LISTED = 64  # gguf_file.h kListedArrayItems
INSPECT_TIMEOUT_S = 60


def Sha(data):
    return hashlib.sha256(data).hexdigest()


def LeafPath(name, extension):
    return "/".join(EscapeComponent(c) for c in name.split(".")) + extension


class Case:
    """What a mount of one manifest entry must show: its tensors (with the file holding each
    and the offset there), its key-values, and its root files with their sha256."""

    def __init__(self, fixtures, manifest, case):
        self.fixtures = fixtures
        if case in manifest["files"]:
            entry = manifest["files"][case]
            self.tensors = [dict(t, file=case) for t in entry["tensors"]]
            self.kv = entry["kv"]
            self.roots = {os.path.basename(case): entry["sha256"]}
            self.split = False
        elif case in manifest["split_sets"]:
            split = manifest["split_sets"][case]
            self.tensors = split["tensors"]
            first = manifest["files"][split["files"][0]]
            self.kv = {k: v for k, v in first["kv"].items() if not k.startswith("split.")}
            self.roots = {os.path.basename(f): manifest["files"][f]["sha256"]
                          for f in split["files"]}
            unsplit = manifest["files"][split["unsplit_reference"]]
            self.roots[split["merged_name"]] = unsplit["sha256"]
            self.split = True
        else:
            raise ValueError(f"{case}: neither a file nor a split set of the manifest")

    def Stored(self, t):
        """The stored bytes of tensor `t`, read from the fixture file."""
        with open(os.path.join(self.fixtures, t["file"]), "rb") as f:
            return os.pread(f.fileno(), t["nbytes"], t["offset"])

    def Model(self):
        return [t for t in self.tensors if t["type"] not in BLOCKS]


# ---------------------------------------------------------------------------
# The views

def CheckRoot(ck, case, mnt):
    names = sorted(n for n in os.listdir(mnt) if n.endswith(".gguf"))
    ck.Equal(names, sorted(case.roots), f"{mnt}: the .gguf files at the root")
    for name, sha in case.roots.items():
        path = os.path.join(mnt, name)
        if ck.Expect(os.path.isfile(path), f"{path} is missing"):
            ck.Equal(Sha(ReadFile(path)), sha, f"{path}: sha256")


def CheckNpy(ck, path, descr, shape, stored=None, sha=None):
    """A .npy file: its header (descr, C order, shape) and its data part, as `stored` bytes
    or of sha256 `sha`. Returns the array."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        got_shape, fortran, dtype = read(f)
        data = f.read()
    ck.Equal(dtype.str, descr, f"{path}: dtype")
    ck.Equal(fortran, False, f"{path}: fortran_order")
    ck.Equal(list(got_shape), shape, f"{path}: shape")
    if stored is not None:
        ck.Expect(data == stored, f"{path}: data differs from the stored bytes")
    if sha is not None:
        ck.Equal(Sha(data), sha, f"{path}: sha256 of the data")
    return np.load(path)


def CheckTensors(ck, case, mnt):
    root = os.path.join(mnt, "tensors")
    expected = set()
    for t in case.tensors:
        name, ggml, shape = t["name"], t["type"], t["numpy_shape"]
        if ggml in NPY_DESCRS:
            path = LeafPath(name, ".npy")
            expected.add(path)
            CheckNpy(ck, os.path.join(root, path), NPY_DESCRS[ggml], shape, sha=t["sha256"])
        elif ggml == "BF16":
            stored = case.Stored(t)
            ck.Equal(Sha(stored), t["sha256"], f"{t['file']}: {name}: fixture bytes sha256")
            st_path, npy_path = LeafPath(name, ".safetensors"), LeafPath(name, ".npy")
            expected |= {st_path, npy_path}
            data = ReadFile(os.path.join(root, st_path))
            st = ParseSafetensors(data, st_path)
            Validate(st, len(data), st_path, ck)
            if ck.Equal(list(st.entries), [name], f"{st_path}: its tensors"):
                e = st.entries[name]
                ck.Equal((e.dtype, e.shape), ("BF16", shape), f"{st_path}: dtype and shape")
                ck.Expect(data[st.data_start + e.begin:st.data_start + e.end] == stored,
                          f"{st_path}: bytes differ from the stored ones")
            widened = WidenToF32("BF16", stored).tobytes()
            CheckNpy(ck, os.path.join(root, npy_path), "<f4", shape, stored=widened)
        elif ggml in BLOCKS:
            path = LeafPath(name, "." + ggml.lower())
            expected.add(path)
            full = os.path.join(root, path)
            data = ReadFile(full)
            ck.Equal(len(data), t["nbytes"], f"{path}: size")
            ck.Equal(Sha(data), t["sha256"], f"{path}: sha256")
            elements, block_bytes = BLOCKS[ggml]
            xattrs = {a: os.getxattr(full, a).decode() for a in os.listxattr(full)}
            ck.Equal(xattrs.get("user.ckptfs.dtype"), ggml, f"{path}: user.ckptfs.dtype")
            ck.Equal(json.loads(xattrs.get("user.ckptfs.shape", "null")), shape,
                     f"{path}: user.ckptfs.shape")
            ck.Equal(xattrs.get("user.ckptfs.block_size"), str(elements),
                     f"{path}: user.ckptfs.block_size")
            ck.Equal(xattrs.get("user.ckptfs.block_bytes"), str(block_bytes),
                     f"{path}: user.ckptfs.block_bytes")
            ck.Equal(xattrs.get("user.ckptfs.name"), name, f"{path}: user.ckptfs.name")
            ck.Equal(len(data), shape[-1] // elements * block_bytes * int(np.prod(shape[:-1])),
                     f"{path}: size from its shape and block")
        else:
            ck.Fail(f"{name}: type {ggml} unknown to this check")
    found = set()
    for dirpath, _, files in os.walk(root):
        found |= {os.path.relpath(os.path.join(dirpath, f), root) for f in files}
    ck.Equal(sorted(found - expected), [], f"{root}: files no tensor should have")
    ck.Equal(sorted(expected - found), [], f"{root}: files missing")


def CheckModelSafetensors(ck, case, mnt):
    path = os.path.join(mnt, "model.safetensors")
    data = ReadFile(path)
    st = ParseSafetensors(data, path)
    Validate(st, len(data), path, ck)
    model = case.Model()
    ck.Equal(sorted(st.entries), sorted(t["name"] for t in model), f"{path}: tensor names")
    for t in model:
        e = st.entries.get(t["name"])
        if e is None:
            continue
        ck.Equal((e.dtype, e.shape), (t["type"], t["numpy_shape"]), f"{path}: {t['name']}")
        ck.Equal(Sha(data[st.data_start + e.begin:st.data_start + e.end]), t["sha256"],
                 f"{path}: {t['name']}: sha256")


def CheckTorch(ck, case, mnt):
    import torch  # pylint: disable=import-outside-toplevel
    path = os.path.join(mnt, "pytorch_model.bin")
    state = torch.load(path, map_location="cpu", weights_only=True)
    model = case.Model()
    ck.Equal(sorted(state), sorted(t["name"] for t in model), f"{path}: keys")
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    for t in model:
        value = state.get(t["name"])
        if value is None:
            continue
        ck.Equal((value.dtype, list(value.shape)), (dtypes[t["type"]], t["numpy_shape"]),
                 f"{path}: {t['name']}: dtype and shape")
        raw = value.contiguous()
        if raw.dtype == torch.bfloat16:
            raw = raw.view(torch.int16)
        ck.Equal(Sha(raw.numpy().tobytes()), t["sha256"], f"{path}: {t['name']}: values")


def CheckMetadata(ck, case, mnt):
    path = os.path.join(mnt, ".ckptfs", "metadata.json")
    with open(path) as f:
        got = json.load(f)
    ck.Equal(list(got), list(case.kv), f"{path}: keys")
    for key, kv in case.kv.items():
        value = got.get(key)
        if kv["type"].startswith("ARRAY"):
            if kv["len"] > ARRAY_LISTED:
                ck.Equal(value, {"type": kv["type"], "length": kv["len"]}, f"{path}: {key}")
            else:
                ck.Expect(isinstance(value, list) and len(value) == kv["len"],
                          f"{path}: {key}: {value!r}, expected a list of {kv['len']}")
        elif kv["type"].startswith("FLOAT"):
            ck.Expect(isinstance(value, float) and np.float32(value) == np.float32(kv["value"]),
                      f"{path}: {key}: {value!r}, expected {kv['value']!r}")
        else:
            ck.Equal(value, kv["value"], f"{path}: {key}")
            ck.Equal(type(value), type(kv["value"]), f"{path}: {key}: JSON type")


def Mount(args):
    fixtures, pairs = args[0], args[1:]
    with open(os.path.join(fixtures, "manifest.json")) as f:
        manifest = json.load(f)
    ck = Checker("check_gguf.py mount")
    for pair in pairs:
        name, mnt = pair.split("=", 1)
        case = Case(fixtures, manifest, name)
        CheckRoot(ck, case, mnt)
        CheckTensors(ck, case, mnt)
        CheckModelSafetensors(ck, case, mnt)
        CheckTorch(ck, case, mnt)
        CheckMetadata(ck, case, mnt)
    return ck.Finish(f"{len(pairs)} mount(s) of {', '.join(p.split('=')[0] for p in pairs)}")


# ---------------------------------------------------------------------------
# inspect

def Bytes(n):
    """fs/... Bytes(): 1024-based, one decimal above bytes."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    v, u = float(n), 0
    while v >= 1024 and u + 1 < len(units):
        v /= 1024
        u += 1
    return f"{v:.1f} {units[u]}" if u else f"{v:.0f} {units[u]}"


def Inspect(args):
    ckptfs, fixtures, name = args[0], args[1], args[2]
    with open(os.path.join(fixtures, "manifest.json")) as f:
        manifest = json.load(f)
    case = Case(fixtures, manifest, name)
    target = args[3:] or [os.path.join(fixtures, name)]
    ck = Checker("check_gguf.py inspect")
    gguf = f"llama; version 3, alignment 32, {len(case.kv)} key-values"
    if case.split:
        merged = [n for n in case.roots if "-of-" not in n][0]
        gguf += f"; {len(case.roots) - 1} splits as {merged}"
    by_type = {}
    for t in case.tensors:
        count, size = by_type.get(t["type"], (0, 0))
        by_type[t["type"]] = (count + 1, size + t["nbytes"])
    # inspect's params rows: elements, tensors and bytes per ggml type, in name order.
    params = [f"  {k:<8} {{}} in {v[0]} tensor(s), {Bytes(v[1])}" for k, v in sorted(by_type.items())]

    text = subprocess.run([ckptfs, "inspect"] + target, capture_output=True,
                          timeout=INSPECT_TIMEOUT_S)
    if ck.Equal(text.returncode, 0, f"inspect exit code ({text.stderr[-500:]!r})"):
        lines = text.stdout.decode().splitlines()
        for key, value in (("format", "gguf"), ("gguf", gguf)):
            ck.Expect(f"{key:<9}{value}" in lines,
                      f"inspect: no line {key:<9}{value!r} in {text.stdout.decode()[:1500]!r}")
        for row in params:
            head, tail = row.split("{}")
            ck.Expect(any(line.startswith(head) and line.endswith(tail) for line in lines),
                      f"inspect: no params row {row!r} in {text.stdout.decode()[:1500]!r}")
        for t in case.tensors:
            ck.Expect(any(line.split()[:2] == [t["name"], t["type"]] for line in lines if line),
                      f"inspect: no row for {t['name']} {t['type']}")

    js = subprocess.run([ckptfs, "inspect", "--json"] + target, capture_output=True,
                        timeout=INSPECT_TIMEOUT_S)
    if ck.Equal(js.returncode, 0, f"inspect --json exit code ({js.stderr[-500:]!r})"):
        doc = json.loads(js.stdout)
        ck.Equal(doc.get("gguf"), gguf, "inspect --json: gguf")
        ck.Equal({k: (v.get("tensors"), v.get("bytes"))
                  for k, v in doc.get("parameters_by_dtype", {}).items()},
                 by_type, "inspect --json: parameters_by_dtype (tensors, bytes)")
        tensors = {e["name"]: e for e in doc.get("tensors", [])}
        ck.Equal(sorted(tensors), sorted(t["name"] for t in case.tensors),
                 "inspect --json: tensor names")
        for t in case.tensors:
            e = tensors.get(t["name"], {})
            ck.Equal((e.get("dtype"), e.get("shape"), e.get("bytes")),
                     (t["type"], t["numpy_shape"], t["nbytes"]),
                     f"inspect --json: {t['name']}: dtype, shape, bytes")
    return ck.Finish(f"inspect of {name}")


def Main(args):
    if args[0] == "mount" and len(args) >= 3:
        return Mount(args[1:])
    if args[0] == "inspect" and len(args) >= 4:
        return Inspect(args[1:])
    print(f"usage: {__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    RunMain(Main, "mount FIXTURES CASE=MNT ... | inspect CKPTFS FIXTURES CASE [OPTION... TARGET]")
