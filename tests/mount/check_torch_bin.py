#!/usr/bin/python3
"""MergedPytorchBin: MNT/pytorch_model.bin is one torch.save zip of every source tensor,
a flat {dotted name: tensor} dict, and real torch 1.13 loads it, with and without
weights_only, giving each tensor the source's dtype, shape and bytes.

The zip itself, parsed here: one archive directory holding data.pkl, version and
data/KEY records, every record stored (not compressed), every data/KEY record's data
64-byte aligned, no duplicate names. --crc says what its CRC-32 fields must be:
  valid   every record's CRC is right: zipfile.testzip() and `python3 -m zipfile -t`
          pass (torch sources; safetensors sources mounted with --zip-crc);
  zero    every data/KEY record's CRC field is 0 (safetensors sources by default).

For a torch source the merged file keeps one storage per source storage: tensors sharing
a storage in the source (tied weights, views) share one in the merged file, and no
others do; storage sizes and offsets are the source's, and so are strides: exactly for
non-contiguous tensors (which must be present too), and for contiguous ones in every
dimension of size > 1 (the only ones torch's is_contiguous looks at). For a safetensors source, tensors whose dtype
torch 1.13 lacks (U16, U32, U64, F8_*) are not required; if present, their bytes must be
the source's.

usage: check_torch_bin.py SRC MNT [--crc valid|zero]
"""

import collections
import io
import os
import struct
import subprocess
import sys
import zipfile
import zlib

import torch

from checklib import Checker, ReadFile, RunMain
from check_torch_lib import LoadAnySource, TensorBytes

ALIGNMENT = 64


def LocalDataStart(data: bytes, info: zipfile.ZipInfo, ck: Checker):
    """Where the record's data starts, from its local header; None if unreadable."""
    at = info.header_offset
    if not ck.Expect(data[at:at + 4] == b"PK\x03\x04",
                     f"{info.filename}: no local header at {at}"):
        return None, None
    name_len, extra_len = struct.unpack("<HH", data[at + 26:at + 30])
    local_crc = struct.unpack("<I", data[at + 14:at + 18])[0]
    flags = struct.unpack("<H", data[at + 6:at + 8])[0]
    return at + 30 + name_len + extra_len, (None if flags & 0x8 else local_crc)


def CheckZip(ck: Checker, path: str, data: bytes, crc: str) -> None:
    z = zipfile.ZipFile(io.BytesIO(data))
    infos = z.infolist()
    names = [i.filename for i in infos]
    ck.Equal(len(set(names)), len(names), "duplicate record names")
    prefixes = sorted({n.split("/", 1)[0] for n in names})
    if not ck.Equal(len(prefixes), 1, f"archive directories (records {names[:8]})"):
        return
    prefix = prefixes[0]
    for required in ("data.pkl", "version"):
        ck.Expect(f"{prefix}/{required}" in names, f"no record {prefix}/{required}")
    data_records = [i for i in infos if i.filename.startswith(f"{prefix}/data/")]
    ck.Expect(all(i.filename in (f"{prefix}/data.pkl", f"{prefix}/version")
                  or i in data_records for i in infos),
              f"unexpected records: {[n for n in names if '/data/' not in n]}")
    for info in infos:
        what = info.filename
        ck.Equal(info.compress_type, zipfile.ZIP_STORED, f"{what}: compression method")
        ck.Equal(info.flag_bits & 0x1, 0, f"{what}: encrypted flag")
        ck.Equal(info.compress_size, info.file_size, f"{what}: stored size vs size")
        start, local_crc = LocalDataStart(data, info, ck)
        if start is None:
            continue
        ck.Expect(start + info.file_size <= len(data), f"{what}: runs past the end")
        if info in data_records:
            ck.Equal(start % ALIGNMENT, 0, f"{what}: data offset {start} mod {ALIGNMENT}")
        body = data[start:start + info.file_size]
        if crc == "valid":
            ck.Equal(info.CRC, zlib.crc32(body), f"{what}: CRC-32 in the central directory")
            if local_crc is not None:
                ck.Equal(local_crc, info.CRC, f"{what}: CRC-32 in the local header")
        elif info in data_records:
            ck.Equal(info.CRC, 0, f"{what}: CRC-32 field (expected 0 without --zip-crc)")
    if crc == "valid":
        ck.Equal(z.testzip(), None, "zipfile.testzip(): first record with a bad CRC")
        result = subprocess.run([sys.executable, "-m", "zipfile", "-t", path],
                                capture_output=True, timeout=120, text=True)
        ck.Expect(result.returncode == 0 and "Done testing" in result.stdout
                  and "corrupted" not in result.stdout,
                  f"`python3 -m zipfile -t {path}`: exit {result.returncode}, "
                  f"stdout {result.stdout[-300:]!r}, stderr {result.stderr[-300:]!r}")


def MeaningfulStrides(t: torch.Tensor) -> tuple:
    """The strides of dimensions of size > 1: the others never move the address."""
    return tuple(s for n, s in zip(t.shape, t.stride()) if n > 1)


def CheckTensor(ck: Checker, what: str, got: torch.Tensor, want, exact_layout: bool,
                notes: list) -> None:
    if not ck.Expect(isinstance(got, torch.Tensor), f"{what}: a {type(got).__name__}"):
        return
    ck.Equal(got.dtype, want.tensor.dtype, f"{what} dtype")
    ck.Equal(list(got.shape), want.shape, f"{what} shape")
    if exact_layout and not want.contiguous:  # "exact strides"
        ck.Equal(tuple(got.stride()), tuple(want.tensor.stride()), f"{what} stride")
    elif exact_layout:
        # A contiguous tensor's layout is the same whatever the strides of its size-1
        # dimensions (torch.Tensor.is_contiguous ignores them), so only the others must
        # match; a difference in those of size 1 is noted in the summary, not failed.
        ck.Equal(MeaningfulStrides(got), MeaningfulStrides(want.tensor),
                 f"{what} strides of dimensions of size > 1")
        if tuple(got.stride()) != tuple(want.tensor.stride()):
            notes.append(f"{what.split(': ', 1)[-1]} strides {tuple(got.stride())} where the "
                         f"source has {tuple(want.tensor.stride())} (size-1 dimensions)")
    if exact_layout:
        ck.Equal(got.storage_offset(), want.tensor.storage_offset(), f"{what} storage offset")
        ck.Equal(got.storage().size(), want.tensor.storage().size(),
                 f"{what} storage size (elements)")
    if got.dtype == want.tensor.dtype and list(got.shape) == want.shape:
        ck.Expect(TensorBytes(got) == want.Bytes(), f"{what}: data differs from the source")


def CheckSharing(ck: Checker, how: str, loaded: dict, source) -> None:
    """Same storage in the merged file exactly when the same storage in the source."""
    groups = collections.defaultdict(list)
    for name, t in source.tensors.items():
        if t.storage is not None and isinstance(loaded.get(name), torch.Tensor):
            groups[t.storage].append(name)
    owner = {}
    for key, members in groups.items():
        ptrs = {loaded[n].storage().data_ptr() for n in members}
        ck.Equal(len(ptrs), 1, f"{how}: {members} share a storage in the source but not "
                 f"in pytorch_model.bin (storage data_ptr)")
        for p in ptrs:
            other = owner.setdefault(p, key)
            ck.Expect(other == key, f"{how}: {members} share a storage with "
                      f"{groups[other]} in pytorch_model.bin but not in the source")


def CheckLoaded(ck: Checker, how: str, loaded, source, notes: list) -> None:
    if not ck.Expect(isinstance(loaded, dict), f"{how}: gave a {type(loaded).__name__}, "
                     "not a dict"):
        return
    ck.Expect(all(isinstance(k, str) for k in loaded), f"{how}: non-string keys")
    torch_source = source.kind == "torch"
    required = {n for n, t in source.tensors.items() if t.tensor is not None}
    optional = set(source.tensors) - required
    ck.Equal(sorted(set(loaded) - optional), sorted(required), f"{how}: tensor names")
    for name in sorted(optional):
        if name not in loaded:
            notes.append(f"{name!r} ({source.tensors[name].dtype}) left out")
            continue
        got = loaded[name]
        ck.Expect(isinstance(got, torch.Tensor) and TensorBytes(got) == source.tensors[name].Bytes(),
                  f"{how}: {name!r} ({source.tensors[name].dtype}) is present but its bytes "
                  "differ from the source")
        notes.append(f"{name!r} ({source.tensors[name].dtype}) present as {got.dtype}")
    for name in sorted(required & set(loaded)):
        CheckTensor(ck, f"{how}: {name!r}", loaded[name], source.tensors[name], torch_source,
                    notes)
    if torch_source:
        CheckSharing(ck, how, loaded, source)


def Main(args) -> int:
    crc = "valid"
    if len(args) == 4 and args[2] == "--crc" and args[3] in ("valid", "zero"):
        crc = args[3]
        args = args[:2]
    src, mnt = args
    ck = Checker("torch bin")
    source = LoadAnySource(src)
    path = os.path.join(mnt, "pytorch_model.bin")
    data = ReadFile(path)
    ck.Equal(os.stat(path).st_size, len(data), "st_size vs bytes read")
    CheckZip(ck, path, data, crc)
    notes: list = []
    for weights_only in (False, True):
        how = f"torch.load(weights_only={weights_only})"
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=weights_only)
        except Exception as e:  # pylint: disable=broad-except
            ck.Fail(f"{how} of {path} raised {type(e).__name__}: {str(e)[-400:]}")
            continue
        CheckLoaded(ck, how, loaded, source, notes)
        del loaded
    note = f"; {'; '.join(sorted(set(notes)))}" if notes else ""
    return ck.Finish(f"{len(source.tensors)} {source.kind} tensors, {len(data)} bytes, "
                     f"CRCs {crc}{note}")


if __name__ == "__main__":
    RunMain(Main, "SRC MNT [--crc valid|zero]")
