#!/usr/bin/python3
"""Packed: DEST, written by `ckptfs pack PLAIN DEST`, is a checkpoint of seekable zstd
shards holding exactly PLAIN's tensors, that ordinary tools can read:

  - PLAIN's non-weight files are copied byte for byte, and the index keeps naming
    the shards by their plain names; each shard is present only as NAME.zst;
  - each NAME.zst ends with a well-formed seek table (reserved bits clear) with the
    checksum flag set; its frames tile the file before it, each decodes on its own
    (python3-zstandard) to its table size, at most FRAME_SIZE, with its checksum
    (low 32 bits of XXH64) matching;
  - `zstd -d` decodes NAME.zst to the concatenated frames;
  - without --shard-size: each decoded shard equals PLAIN's byte for byte;
    with --shard-size S: the decoded shards are valid safetensors files of at most S
    bytes each (unless holding a single tensor), together holding every PLAIN tensor
    (name, dtype, shape, bytes) once, and the index maps each tensor to its shard.

usage: check_packed.py PLAIN DEST FRAME_SIZE [SHARD_SIZE]
"""

import json
import os
import subprocess

from checklib import (Checker, DecodeFrame, LoadSource, ParseSafetensors, ParseSeekTable,
                      ReadFile, RunMain, Validate, Xxh64Low32)


def CheckSeekable(ck: Checker, path: str, frame_size: int) -> bytes:
    """Checks one NAME.zst; returns what its frames decode to (b"" if unusable)."""
    name = os.path.basename(path)
    data = ReadFile(path)
    try:
        table = ParseSeekTable(data, name)
    except ValueError as e:
        ck.Fail(str(e))
        return b""
    ck.Expect(table.checksummed, f"{name}: seek table without the checksum flag")
    ck.Expect(len(table.entries) > 0, f"{name}: no frames")
    decoded, pos = [], 0
    for k, (csize, dsize, checksum) in enumerate(table.entries):
        frame = data[pos:pos + csize]
        pos += csize
        what = f"{name} frame {k} (compressed [{pos - csize}, {pos}))"
        ck.Expect(0 < dsize <= frame_size, f"{what}: decoded size {dsize} not in 1..{frame_size}")
        try:
            plain = DecodeFrame(frame, max(dsize, 1))
        except Exception as e:  # pylint: disable=broad-except  # zstandard.ZstdError
            ck.Fail(f"{what}: does not decode on its own: {e}")
            return b""
        ck.Equal(len(plain), dsize, f"{what}: decoded length vs seek table")
        if checksum is not None:
            ck.Equal(checksum, Xxh64Low32(plain), f"{what}: seek table checksum")
        decoded.append(plain)
    out = b"".join(decoded)
    result = subprocess.run(["zstd", "-d", "-c", "-q", path], capture_output=True, timeout=300)
    if ck.Equal(result.returncode, 0, f"zstd -d {name} exit code ({result.stderr[-300:]!r})"):
        ck.Expect(result.stdout == out, f"zstd -d {name} differs from its frames")
    return out


def Main(args) -> int:
    plain_dir, dest = args[:2]
    frame_size = int(args[2])
    shard_size = int(args[3]) if len(args) > 3 else None
    ck = Checker("packed")
    plain = LoadSource(plain_dir)

    # Files: non-weight files copied, index kept under its name, shards only as .zst.
    for path in plain.non_weight_files:
        name = os.path.basename(path)
        copy = os.path.join(dest, name)
        ck.Expect(os.path.isfile(copy) and ReadFile(copy) == ReadFile(path),
                  f"{name}: not copied intact to DEST")
    index_name = os.path.basename(plain.index_file) if plain.index_file else None
    shard_names = []
    if index_name:
        index_path = os.path.join(dest, index_name)
        if not ck.Expect(os.path.isfile(index_path), f"DEST has no {index_name}"):
            return ck.Finish("")
        with open(index_path) as f:
            index = json.load(f)
        weight_map = index.get("weight_map", {})
        shard_names = sorted(set(weight_map.values()))
    else:
        shard_names = [os.path.basename(p) for p in plain.weight_files]
    expected_files = ({os.path.basename(p) for p in plain.non_weight_files}
                      | ({index_name} if index_name else set())
                      | {n + ".zst" for n in shard_names}
                      # the zip CRCs of the merged pytorch_model.bin (safetensors shards)
                      | {".ckptfs-zip-crc"})
    ck.Equal(sorted(os.listdir(dest)), sorted(expected_files), "DEST listing")

    decoded = {}
    for name in shard_names:
        path = os.path.join(dest, name + ".zst")
        if ck.Expect(os.path.isfile(path), f"DEST lacks {name}.zst"):
            decoded[name] = CheckSeekable(ck, path, frame_size)

    if shard_size is None:
        ck.Equal(shard_names, sorted(os.path.basename(p) for p in plain.weight_files),
                 "shard names")
        for path in plain.weight_files:
            name = os.path.basename(path)
            if name in decoded:
                ck.Expect(decoded[name] == ReadFile(path),
                          f"{name}.zst does not decode to PLAIN's {name}")
        return ck.Finish(f"{len(decoded)} shards decode to PLAIN's")

    # Re-sharded: same tensors, shards within the size, index consistent.
    found = {}
    for name, data in decoded.items():
        if not data:
            continue
        st = ParseSafetensors(data, name)
        Validate(st, len(data), name, ck)
        ck.Expect(len(data) <= shard_size or len(st.entries) == 1,
                  f"{name}: {len(data)} bytes with {len(st.entries)} tensors > --shard-size {shard_size}")
        for tname, e in st.entries.items():
            ck.Expect(tname not in found, f"{tname!r} in two shards")
            found[tname] = (name, e.dtype, e.shape, data[st.data_start + e.begin:st.data_start + e.end])
            if index_name:
                ck.Equal(weight_map.get(tname), name, f"index entry of {tname!r}")
    ck.Equal(sorted(found), sorted(plain.tensors), "tensor names")
    for tname, t in plain.tensors.items():
        if tname in found:
            _, dtype, shape, data = found[tname]
            ck.Equal((dtype, shape), (t.dtype, t.shape), f"{tname!r} dtype and shape")
            ck.Expect(data == t.Read(), f"{tname!r}: bytes differ from PLAIN")
    if index_name:
        ck.Equal(sorted(weight_map), sorted(plain.tensors), "index weight_map names")
    ck.Expect(len(decoded) > 1 or sum(t.nbytes for t in plain.tensors.values()) <= shard_size,
              f"--shard-size {shard_size} gave {len(decoded)} shard(s)")
    return ck.Finish(f"{len(found)} tensors re-sharded into {len(decoded)} shards")


if __name__ == "__main__":
    RunMain(Main, "PLAIN DEST FRAME_SIZE [SHARD_SIZE]")
