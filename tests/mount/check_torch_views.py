#!/usr/bin/python3
"""TorchSourceViews: a torch source mounts to the same views as a safetensors one.

- The root holds exactly the non-weight files (byte for byte), model.safetensors,
  pytorch_model.bin, pytorch_model/, tensors/, shards/ and .ckptfs/; no index json.
- shards/ holds exactly the source's weight files and index, byte for byte.
- model.safetensors, parsed here independently (JSON header + bytes) and validated by
  the reference rules, holds every contiguous tensor (dtype, shape, bytes) and no
  other, with __metadata__ {"format": "pt"}.
- tensors/ holds exactly one file per contiguous tensor at its escaped dotted path:
  .npy (numpy.load, plain and mmap, gives the source tensor) or, for bf16, a
  one-tensor .safetensors and an .npy of float32 holding the exactly widened values;
  with the user.ckptfs.{dtype,shape,name} xattrs (the stored dtype on both). Nested
  dicts and lists become directories (model_state_dict/fc/weight.npy,
  optimizer_state_dict/state/0/exp_avg.npy, ema/0.npy).
- Non-contiguous tensors are in neither view, and with --log FILE (repeatable: the
  daemon's --log-file, the stderr of `ckptfs mount`), some log line names each of them.

usage: check_torch_views.py SRC MNT [--log FILE]...
"""

import json
import os

import numpy as np

from checklib import (NUMPY_DESCRS, WIDENED, Checker, ParseSafetensors, ReadFile, ReadWeight,
                      RunMain, TensorPath, TensorPaths, Validate, WidenToF32)
from check_torch_lib import LoadTorchSource

VIEWS = {"model.safetensors": False, "pytorch_model.bin": False, "pytorch_model": True,
         "tensors": True, "shards": True, ".ckptfs": True}


def CheckRoot(ck: Checker, source, mnt: str) -> None:
    expected = {os.path.basename(p) for p in source.non_weight_files} | set(VIEWS)
    ck.Equal(sorted(os.listdir(mnt)), sorted(expected), "root listing")
    for name, is_dir in VIEWS.items():
        path = os.path.join(mnt, name)
        ck.Expect(os.path.isdir(path) if is_dir else os.path.isfile(path),
                  f"{name} should be a {'directory' if is_dir else 'regular file'}")
    for src_path in source.non_weight_files:
        name = os.path.basename(src_path)
        path = os.path.join(mnt, name)
        if ck.Expect(os.path.isfile(path), f"{name}: missing at the root"):
            ck.Expect(ReadFile(path) == ReadFile(src_path), f"{name}: differs from the source")


def CheckShards(ck: Checker, source, mnt: str) -> None:
    files = source.weight_files + ([source.index_file] if source.index_file else [])
    shards = os.path.join(mnt, "shards")
    ck.Equal(sorted(os.listdir(shards)), sorted(os.path.basename(p) for p in files),
             "shards/ listing")
    for src_path in files:
        path = os.path.join(shards, os.path.basename(src_path))
        if not ck.Expect(os.path.isfile(path), f"missing {path}"):
            continue
        want = ReadWeight(src_path)
        ck.Expect(ReadFile(path) == want, f"shards/{os.path.basename(path)} differs")
        ck.Equal(os.stat(path).st_size, len(want), f"shards/{os.path.basename(path)} st_size")


def CheckMergedSafetensors(ck: Checker, source, mnt: str) -> None:
    path = os.path.join(mnt, "model.safetensors")
    data = ReadFile(path)
    ck.Equal(os.stat(path).st_size, len(data), "model.safetensors st_size")
    st = ParseSafetensors(data, "model.safetensors")
    Validate(st, len(data), "model.safetensors", ck)
    ck.Equal(st.metadata, {"format": "pt"}, "model.safetensors __metadata__")
    wanted = source.contiguous
    ck.Equal(sorted(st.entries), sorted(wanted), "model.safetensors tensor names "
             "(every contiguous tensor, no non-contiguous one)")
    for name, e in st.entries.items():
        t = wanted.get(name)
        if t is None:
            continue
        ck.Equal(e.dtype, t.dtype, f"model.safetensors {name!r} dtype")
        ck.Equal(e.shape, t.shape, f"model.safetensors {name!r} shape")
        ck.Expect(data[st.data_start + e.begin:st.data_start + e.end] == t.Bytes(),
                  f"model.safetensors {name!r}: data differs from the source")


def FilesUnder(root: str):
    for dirpath, _, files in os.walk(root):
        for f in files:
            yield os.path.relpath(os.path.join(dirpath, f), root)


def CheckTensorFiles(ck: Checker, source, mnt: str) -> None:
    root = os.path.join(mnt, "tensors")
    wanted = {TensorPath(n, t.dtype): t for n, t in source.contiguous.items()}
    every = [p for n, t in source.contiguous.items() for p in TensorPaths(n, t.dtype)]
    ck.Equal(sorted(FilesUnder(root)), sorted(every), "files under tensors/")
    for rel, t in sorted(wanted.items()):
        path = os.path.join(root, rel)
        if not ck.Expect(os.path.isfile(path), f"{t.name!r}: no file tensors/{rel}"):
            continue
        want = t.Bytes()
        if t.dtype in NUMPY_DESCRS:
            for mode in (None, "r"):
                what = f"tensors/{rel} np.load(mmap_mode={mode!r})"
                arr = np.load(path, mmap_mode=mode, allow_pickle=False)
                ck.Equal(arr.dtype, np.dtype(NUMPY_DESCRS[t.dtype]), f"{what} dtype")
                ck.Equal(list(arr.shape), t.shape, f"{what} shape")
                ck.Expect(np.ascontiguousarray(arr).tobytes() == want,
                          f"{what}: data differs from the source")
                del arr
        else:
            data = ReadFile(path)
            st = ParseSafetensors(data, f"tensors/{rel}")
            Validate(st, len(data), f"tensors/{rel}", ck)
            if ck.Equal(list(st.entries), [t.name], f"tensors/{rel}: tensor names"):
                e = st.entries[t.name]
                ck.Equal((e.dtype, e.shape), (t.dtype, t.shape), f"tensors/{rel} dtype, shape")
                ck.Expect(data[st.data_start + e.begin:st.data_start + e.end] == want,
                          f"tensors/{rel}: data differs from the source")
        ck.Equal(os.stat(path).st_size, len(ReadFile(path)), f"tensors/{rel} st_size")
        CheckXattrs(ck, path, rel, t)
        if t.dtype in WIDENED:
            CheckWidened(ck, root, t, want)


def CheckWidened(ck: Checker, root: str, t, want: bytes) -> None:
    rel = TensorPaths(t.name, t.dtype)[1]
    path = os.path.join(root, rel)
    if not ck.Expect(os.path.isfile(path), f"{t.name!r}: no file tensors/{rel}"):
        return
    expected = WidenToF32(t.dtype, want)
    for mode in (None, "r"):
        what = f"tensors/{rel} np.load(mmap_mode={mode!r})"
        arr = np.load(path, mmap_mode=mode, allow_pickle=False)
        ck.Equal((arr.dtype, list(arr.shape)), (np.dtype("<f4"), t.shape), f"{what} dtype, shape")
        got = np.asarray(arr).reshape(-1)
        ck.Expect(np.array_equal(got, expected, equal_nan=True), f"{what}: values differ")
        del arr, got
    CheckXattrs(ck, path, rel, t)


def CheckXattrs(ck: Checker, path: str, rel: str, t) -> None:
    try:
        dtype = os.getxattr(path, "user.ckptfs.dtype").decode()
        shape = json.loads(os.getxattr(path, "user.ckptfs.shape"))
        name = os.getxattr(path, "user.ckptfs.name").decode("utf-8")
    except OSError as e:
        ck.Fail(f"tensors/{rel}: xattrs: {e}")
        return
    ck.Equal((dtype, shape, name), (t.dtype, t.shape, t.name), f"tensors/{rel} xattrs")


def CheckLog(ck: Checker, source, logs: list) -> None:
    text = "".join(ReadFile(log).decode("utf-8", errors="replace") for log in logs)
    for name, t in source.tensors.items():
        if not t.contiguous:
            ck.Expect(name in text, f"the daemon log does not name non-contiguous {name!r} "
                      f"(left out of model.safetensors and tensors/); log: {text[-600:]!r}")


def Main(args) -> int:
    src, mnt, rest = args[0], args[1], args[2:]
    logs = rest[1::2]
    if len(rest) % 2 or any(flag != "--log" for flag in rest[0::2]):
        raise ValueError(f"bad arguments {rest}: expected --log FILE pairs")
    ck = Checker("torch views")
    source = LoadTorchSource(os.path.abspath(src))
    CheckRoot(ck, source, mnt)
    CheckShards(ck, source, mnt)
    CheckMergedSafetensors(ck, source, mnt)
    CheckTensorFiles(ck, source, mnt)
    if logs:
        CheckLog(ck, source, logs)
    left_out = len(source.tensors) - len(source.contiguous)
    return ck.Finish(f"{len(source.contiguous)} tensors in every view, {left_out} "
                     "non-contiguous left out")


if __name__ == "__main__":
    RunMain(Main, "SRC MNT [--log FILE]...")
