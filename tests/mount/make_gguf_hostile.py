#!/usr/bin/python3
"""Writes bad GGUF files and split sets for tests/mount/gguf_mount_test.cc, from the fixtures'
bytes (copied and patched, never changed in place).

  make_gguf_hostile.py FIXTURES OUT

FIXTURES is ../shared/fixtures/gguf (tiny-llama-f16.gguf, -mixed.gguf, split3/). Prints one
line per SOURCE to refuse, tab-separated: SOURCE (relative to OUT), a text its one-line
refusal must hold (the file or directory it names), then any further texts it must hold.
"""
import os
import shutil
import struct
import sys

SET = "tiny-llama-f16"
GGUF_INT32 = 5


def Split(k, count=3, prefix=SET):
    return f"{prefix}-{k:05d}-of-{count:05d}.gguf"


def Copy(src, dst, data=None):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if data is None:
        shutil.copyfile(src, dst)
    else:
        with open(dst, "wb") as f:
            f.write(data)


def Patched(path, old, new, count=1):
    """The bytes of `path` with `old` (found exactly `count` times) replaced by `new`."""
    with open(path, "rb") as f:
        data = f.read()
    assert data.count(old) == count, f"{path}: {old!r} found {data.count(old)} times"
    assert len(old) == len(new)
    return data.replace(old, new)


def TensorsCountPatched(path, value):
    """`path` with its split.tensors.count (an INT32 key-value) set to `value`."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    key = b"split.tensors.count"
    at = data.index(key) + len(key)
    kind, = struct.unpack_from("<I", data, at)
    assert kind == GGUF_INT32, f"{path}: split.tensors.count of type {kind}"
    struct.pack_into("<i", data, at + 4, value)
    return bytes(data)


def Main(fixtures, out):
    split3 = os.path.join(fixtures, "split3")
    f16 = os.path.join(fixtures, "tiny-llama-f16.gguf")
    mixed = os.path.join(fixtures, "tiny-llama-mixed.gguf")
    src = {k: os.path.join(split3, Split(k)) for k in (1, 2, 3)}
    cases = []

    # A split missing: split 2 of 3, whether the set is named by its directory or by a split.
    for k in (1, 3):
        Copy(src[k], os.path.join(out, "missing", Split(k)))
    for source in ("missing", f"missing/{Split(3)}", f"missing/{Split(1)}"):
        cases.append((source, Split(2), "split 2 of 3", "is missing"))

    # A split renamed into another set: the third split as 2 of 3 of `other` (its split.no
    # says 3), and a set of 2 made of the first two splits (their split.count says 3).
    Copy(src[1], os.path.join(out, "renamed", Split(1, prefix="other")))
    Copy(src[3], os.path.join(out, "renamed", Split(2, prefix="other")))
    Copy(src[3], os.path.join(out, "renamed", Split(3, prefix="other")))
    cases.append(("renamed", Split(2, prefix="other")))
    Copy(src[1], os.path.join(out, "recounted", Split(1, 2)))
    Copy(src[2], os.path.join(out, "recounted", Split(2, 2)))
    cases.append(("recounted", Split(1, 2)))

    # Splits from two models: split 3's split.tensors.count disagrees with the first's.
    for k in (1, 2):
        Copy(src[k], os.path.join(out, "two_sets", Split(k)))
    Copy(src[3], os.path.join(out, "two_sets", Split(3)), TensorsCountPatched(src[3], 40))
    cases.append(("two_sets", Split(3), "split.tensors.count"))

    # A tensor in two splits: split 2's blk.1.attn_v.weight renamed blk.1.attn_k.weight,
    # which split 1 holds (same length, so only the name's bytes change).
    for k in (1, 3):
        Copy(src[k], os.path.join(out, "duplicate", Split(k)))
    Copy(src[2], os.path.join(out, "duplicate", Split(2)),
         Patched(src[2], b"blk.1.attn_v.weight", b"blk.1.attn_k.weight"))
    cases.append(("duplicate", SET + "-0000", "blk.1.attn_k.weight", "is also in"))

    # Truncated: tensor data past the end of the file; a header cut short; one split cut.
    with open(f16, "rb") as f:
        data = f.read()
    Copy(f16, os.path.join(out, "truncated.gguf"), data[:-4096])
    cases.append(("truncated.gguf", "truncated.gguf", "runs past the end"))
    Copy(f16, os.path.join(out, "short_header.gguf"), data[:1000])
    cases.append(("short_header.gguf", "short_header.gguf", "runs past the end"))
    with open(src[2], "rb") as f:
        cut = f.read()[:-1000]
    for k in (1, 3):
        Copy(src[k], os.path.join(out, "truncated_split", Split(k)))
    Copy(src[2], os.path.join(out, "truncated_split", Split(2)), cut)
    cases.append(("truncated_split", Split(2), "runs past the end"))

    # Not GGUF at all, though named .gguf.
    Copy(f16, os.path.join(out, "bad_magic.gguf"), b"GGUX" + data[4:])
    cases.append(("bad_magic.gguf", "bad_magic.gguf", "no GGUF magic"))

    # Two models in one directory.
    Copy(f16, os.path.join(out, "two_models", "tiny-llama-f16.gguf"))
    Copy(mixed, os.path.join(out, "two_models", "tiny-llama-mixed.gguf"))
    cases.append(("two_models", "two_models", "2 GGUF models", "mount one of them"))

    for case in cases:
        print("\t".join(case))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(Main(sys.argv[1], sys.argv[2]))
