#!/usr/bin/python3
"""Writes a llama-shaped GGUF v3 model for scripts/bench.sh, with numpy and the standard
library only (no gguf-py), as one file and as a split set of the same tensors.

    make_gguf.py OUT [--size 1G] [--splits 4] [--name model] [--seed 0]

writes
  OUT/NAME.gguf                          the model as one file, as convert_hf_to_gguf.py
                                         writes it unsplit
  OUT/split/NAME-0000K-of-0000N.gguf     the same model as N splits, as gguf-py's
                                         GGUFWriter writes them (convert_hf_to_gguf.py
                                         --split-max-size, llama.cpp's gguf-split --split)
(two directories: ckptfs refuses a directory holding two models.)

The model: general.architecture "llama" and its llama.* hyperparameters, a tokenizer of
32000 tokens (tokenizer.ggml.tokens, scores, token_type), then token_embd.weight (Q8_0),
per block attn_norm and ffn_norm (F32) and attn_q/k/v/output, ffn_gate/up/down (F16),
output_norm.weight (F32) and output.weight (Q8_0), in that order. The width is the largest
of 4096, 3072, 2048, 1024, 512, 256 (feed-forward 11008/4096 of it, as llama 7B) that
still fits 4 blocks in --size; as many blocks as fit follow (at 1G: 2048 wide, 9 blocks;
at 2G: 4096 wide, 4 blocks; never under one block of 256, about 20 MB with the tables).
F16 and F32 values are seeded normal * 0.02; Q8_0 tensors are seeded random bytes, 34
bytes a block of 32 elements (nothing here reads their scales).

The layout, as gguf-py writes it: header (magic, version 3, tensor and key-value counts),
key-values, tensor infos (offsets relative to the data section), zero padding to 32 (no
general.alignment: ggml's default), then each tensor's data zero-padded to 32, the last
one's too. Splits: tensors dealt in order into N runs of about equal bytes; the first
split holds every key-value and then split.no (UINT16, 0-based), split.count (UINT16) and
split.tensors.count (INT32); later splits hold only those three.

Self-check (always, after writing): the splits are parsed back and merged here as
`gguf-split --merge` would (the first split's key-values as stored less split.*, the
tensors in split order, re-laid out), and the merge must equal NAME.gguf byte for byte:
that is the NAME.gguf a ckptfs mount of OUT/split/ shows. Content is deterministic for a
--seed. Prints one line: the sizes, the width and the blocks.
"""
import argparse
import os
import struct
import sys
from typing import Dict, List, Tuple

import numpy as np

from make_checkpoint import ParseSize  # "1G", "512M": the size syntax of every scripts/make_*.py

ALIGNMENT = 32
VOCAB = 32000
CHUNK = 64 << 20  # bytes compared at a time by the self-check

# gguf_type (ggml/include/gguf.h)
T_UINT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 2, 4, 5, 6, 7, 8, 9
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
          10: "<Q", 11: "<q", 12: "<d"}
# ggml_type: code, elements a block, bytes a block
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q8_0": (8, 32, 34)}
WIDTHS = (4096, 3072, 2048, 1024, 512, 256)


class UsageError(Exception):
    pass


def Pad(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT - n


# ------------------------------------------------------------------ encoding
def Str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def Value(vtype: int, value) -> bytes:
    if vtype == T_STRING:
        return Str(value)
    if vtype == T_ARRAY:
        etype, items = value
        out = [struct.pack("<IQ", etype, len(items))]
        if etype == T_STRING:
            out.extend(Str(s) for s in items)
        else:
            out.append(np.asarray(items, dtype=np.dtype(SCALAR[etype])).tobytes())
        return b"".join(out)
    return struct.pack(SCALAR[vtype], value)


def KeyValue(key: str, vtype: int, value) -> bytes:
    return Str(key) + struct.pack("<I", vtype) + Value(vtype, value)


def TensorInfo(name: str, ne: List[int], ggml: str, offset: int) -> bytes:
    return (Str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne) +
            struct.pack("<IQ", GGML[ggml][0], offset))


def Header(kvs: List[bytes], infos: List[Tuple[str, List[int], str, int]]) -> bytes:
    """magic .. tensor infos, offsets relative to the data section, padded to ALIGNMENT."""
    out = [b"GGUF", struct.pack("<IQQ", 3, len(infos), len(kvs))] + kvs
    offset = 0
    for name, ne, ggml, nbytes in infos:
        out.append(TensorInfo(name, ne, ggml, offset))
        offset += nbytes + Pad(nbytes)
    head = b"".join(out)
    return head + bytes(Pad(len(head)))


# --------------------------------------------------------------------- model
def Nbytes(ne: List[int], ggml: str) -> int:
    _, block, size = GGML[ggml]
    n = int(np.prod(ne))
    assert n % block == 0, (ne, ggml)
    return n // block * size


def Shape(width: int) -> Tuple[int, int, int]:
    """(per-block bytes, embedding bytes, feed-forward width) of a width."""
    ff = width * 11008 // 4096
    block = 2 * (4 * width * width + 3 * width * ff) + 2 * 4 * width
    embed = 2 * Nbytes([width, VOCAB], "Q8_0") + 4 * width
    return block, embed, ff


def Plan(size: int) -> Tuple[int, int, int, List[Tuple[str, List[int], str, int]]]:
    """(width, ff, blocks, tensors as (name, ne, ggml type, bytes)) for about `size` bytes."""
    for width in WIDTHS:
        block, embed, ff = Shape(width)
        if embed + 4 * block <= size or width == WIDTHS[-1]:
            break
    blocks = max(1, (size - embed) // block)
    tensors = [("token_embd.weight", [width, VOCAB], "Q8_0")]
    for i in range(blocks):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", [width], "F32"),
                    (p + "attn_q.weight", [width, width], "F16"),
                    (p + "attn_k.weight", [width, width], "F16"),
                    (p + "attn_v.weight", [width, width], "F16"),
                    (p + "attn_output.weight", [width, width], "F16"),
                    (p + "ffn_norm.weight", [width], "F32"),
                    (p + "ffn_gate.weight", [width, ff], "F16"),
                    (p + "ffn_up.weight", [width, ff], "F16"),
                    (p + "ffn_down.weight", [ff, width], "F16")]
    tensors += [("output_norm.weight", [width], "F32"), ("output.weight", [width, VOCAB], "Q8_0")]
    return width, ff, blocks, [(n, ne, t, Nbytes(ne, t)) for n, ne, t in tensors]


def ModelKeyValues(width: int, ff: int, blocks: int, name: str) -> List[bytes]:
    heads = max(1, width // 128)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581tok{i}" for i in range(VOCAB - len(tokens))]
    token_type = [2, 3, 3] + [6] * 256 + [1] * (VOCAB - 259)
    scores = [0.0] * 259 + [-float(i) for i in range(VOCAB - 259)]
    return [
        KeyValue("general.architecture", T_STRING, "llama"),
        KeyValue("general.name", T_STRING, name),
        KeyValue("llama.context_length", T_UINT32, 4096),
        KeyValue("llama.embedding_length", T_UINT32, width),
        KeyValue("llama.block_count", T_UINT32, blocks),
        KeyValue("llama.feed_forward_length", T_UINT32, ff),
        KeyValue("llama.rope.dimension_count", T_UINT32, width // heads),
        KeyValue("llama.attention.head_count", T_UINT32, heads),
        KeyValue("llama.attention.head_count_kv", T_UINT32, heads),
        KeyValue("llama.attention.layer_norm_rms_epsilon", T_FLOAT32, 1e-5),
        KeyValue("general.file_type", T_UINT32, 1),  # LLAMA_FTYPE_MOSTLY_F16
        KeyValue("tokenizer.ggml.model", T_STRING, "llama"),
        KeyValue("tokenizer.ggml.tokens", T_ARRAY, (T_STRING, tokens)),
        KeyValue("tokenizer.ggml.scores", T_ARRAY, (T_FLOAT32, scores)),
        KeyValue("tokenizer.ggml.token_type", T_ARRAY, (T_INT32, token_type)),
        KeyValue("tokenizer.ggml.bos_token_id", T_UINT32, 1),
        KeyValue("tokenizer.ggml.eos_token_id", T_UINT32, 2),
        KeyValue("tokenizer.ggml.add_bos_token", T_BOOL, True),
        KeyValue("general.quantization_version", T_UINT32, 2),
    ]


def Deal(sizes: List[int], n: int) -> List[int]:
    """Split index (0-based) of each tensor: n runs in order, of about equal bytes."""
    if n > len(sizes):
        raise UsageError(f"{n} splits of {len(sizes)} tensors")
    total, at, out = sum(sizes), 0, []
    for i, s in enumerate(sizes):
        k = min(n - 1, at * n // total)
        # every split gets at least one tensor: never pass a split that the rest need
        k = max(k, n - (len(sizes) - i))
        if out:
            k = max(k, out[-1])
            k = min(k, out[-1] + 1)
        out.append(k)
        at += s
    assert out[0] == 0 and out[-1] == n - 1, out
    return out


def TensorData(rng: np.random.Generator, ne: List[int], ggml: str, nbytes: int) -> np.ndarray:
    if ggml == "Q8_0":
        return rng.integers(0, 256, size=nbytes, dtype=np.uint8)
    v = rng.standard_normal(int(np.prod(ne)), dtype=np.float32) * np.float32(0.02)
    return v.astype(np.float16 if ggml == "F16" else np.float32).view(np.uint8)


def Write(out: str, size: int, splits: int, name: str, seed: int) -> Tuple[str, List[str], str]:
    width, ff, blocks, tensors = Plan(size)
    model_kv = ModelKeyValues(width, ff, blocks, name)
    where = Deal([t[3] for t in tensors], splits)
    os.makedirs(os.path.join(out, "split"), exist_ok=True)
    single = os.path.join(out, f"{name}.gguf")
    parts = [os.path.join(out, "split", f"{name}-{k + 1:05d}-of-{splits:05d}.gguf")
             for k in range(splits)]
    files = [open(single, "wb")] + [open(p, "wb") for p in parts]
    try:
        files[0].write(Header(model_kv, tensors))
        for k in range(splits):
            split_kv = [KeyValue("split.no", T_UINT16, k),
                        KeyValue("split.count", T_UINT16, splits),
                        KeyValue("split.tensors.count", T_INT32, len(tensors))]
            mine = [t for t, s in zip(tensors, where) if s == k]
            files[1 + k].write(Header((model_kv if k == 0 else []) + split_kv, mine))
        for i, ((tname, ne, ggml, nbytes), k) in enumerate(zip(tensors, where)):
            data = TensorData(np.random.default_rng([seed, i]), ne, ggml, nbytes)
            assert data.nbytes == nbytes, tname
            for f in (files[0], files[1 + k]):
                f.write(data.data)
                f.write(bytes(Pad(nbytes)))
    finally:
        for f in files:
            f.close()
    return single, parts, f"width {width}, feed-forward {ff}, {blocks} blocks, {len(tensors)} tensors"


# ---------------------------------------------------------------- self-check
class Parsed:
    """A GGUF file's header, parsed back: each key-value's stored bytes, the tensor infos."""

    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            head = f.read(16 << 20)  # the header: 32000 tokens take well under 1 MiB
        self.b, self.at = head, 0
        magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", head, 0)
        assert magic == b"GGUF" and version == 3, (path, magic, version)
        self.at = 24
        self.kv: List[Tuple[str, bytes]] = []  # (key, stored bytes of key and value)
        for _ in range(n_kv):
            begin = self.at
            key = self.String()
            self.Skip(self.U32())
            self.kv.append((key, head[begin:self.at]))
        self.tensors: List[Tuple[str, List[int], int, int]] = []  # name, ne, type, offset
        for _ in range(n_tensors):
            tname = self.String()
            ne = [self.U64() for _ in range(self.U32())]
            ttype, offset = self.U32(), self.U64()
            self.tensors.append((tname, ne, ttype, offset))
        self.data_start = self.at + Pad(self.at)
        assert head[self.at:self.data_start] == bytes(self.data_start - self.at), path

    def Take(self, n: int) -> bytes:
        assert self.at + n <= len(self.b), self.path
        self.at += n
        return self.b[self.at - n:self.at]

    def U32(self) -> int:
        return struct.unpack("<I", self.Take(4))[0]

    def U64(self) -> int:
        return struct.unpack("<Q", self.Take(8))[0]

    def String(self) -> str:
        return self.Take(self.U64()).decode("utf-8")

    def Skip(self, vtype: int) -> None:
        if vtype == T_STRING:
            self.Take(self.U64())
        elif vtype == T_ARRAY:
            etype, count = self.U32(), self.U64()
            for _ in range(count):
                self.Skip(etype)
        else:
            self.Take(struct.calcsize(SCALAR[vtype]))

    def Value(self, key: str):
        for k, stored in self.kv:
            if k == key:
                vtype = struct.unpack_from("<I", stored, 8 + len(k.encode()))[0]
                return struct.unpack_from(SCALAR[vtype], stored, 12 + len(k.encode()))[0]
        raise KeyError(key)


def TensorBytes(ne: List[int], ttype: int) -> int:
    for _, (code, block, size) in GGML.items():
        if code == ttype:
            return int(np.prod(ne)) // block * size
    raise ValueError(f"ggml type {ttype}")


def SelfCheck(single: str, parts: List[str]) -> None:
    """NAME.gguf == the splits merged as gguf-split --merge does, byte for byte."""
    heads = [Parsed(p) for p in parts]
    total = 0
    for k, h in enumerate(heads):
        assert h.Value("split.no") == k and h.Value("split.count") == len(parts), h.path
        assert all(key.startswith("split.") for key, _ in h.kv) or k == 0, h.path
        total += len(h.tensors)
    assert heads[0].Value("split.tensors.count") == total
    kv = [stored for key, stored in heads[0].kv if not key.startswith("split.")]
    pieces = []  # (split file, absolute offset, bytes) of each tensor, merged order
    out = [b"GGUF", struct.pack("<IQQ", 3, total, len(kv))] + kv
    offset = 0
    for k, h in enumerate(heads):
        for tname, ne, ttype, toff in h.tensors:
            nbytes = TensorBytes(ne, ttype)
            out.append(Str(tname) + struct.pack("<I", len(ne)) +
                       struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", ttype, offset))
            pieces.append((parts[k], h.data_start + toff, nbytes))
            offset += nbytes + Pad(nbytes)
    merged_head = b"".join(out)
    merged_head += bytes(Pad(len(merged_head)))
    size = len(merged_head) + offset
    assert os.path.getsize(single) == size, (single, os.path.getsize(single), size)
    with open(single, "rb") as f:
        assert f.read(len(merged_head)) == merged_head, f"{single}: header differs from the merge"
        for path, at, nbytes in pieces:
            with open(path, "rb") as src:
                src.seek(at)
                left = nbytes
                while left:
                    n = min(CHUNK, left)
                    assert f.read(n) == src.read(n), f"{single}: tensor bytes differ from {path}"
                    left -= n
            assert f.read(Pad(nbytes)) == bytes(Pad(nbytes)), f"{single}: padding not zero"
        assert f.read(1) == b""


def Main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", metavar="OUT")
    parser.add_argument("--size", default="1G", help="about how many bytes (default 1G)")
    parser.add_argument("--splits", type=int, default=4)
    parser.add_argument("--name", default="model")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 2 <= args.splits <= 99999:
        raise UsageError("--splits must be 2..99999")
    if "/" in args.name or not args.name:
        raise UsageError("--name must be a file name")
    try:
        size = ParseSize(args.size)
    except argparse.ArgumentTypeError as e:
        raise UsageError(str(e)) from None
    single, parts, what = Write(args.out, size, args.splits, args.name, args.seed)
    SelfCheck(single, parts)
    sizes = [os.path.getsize(p) for p in parts]
    print(f"{single}: {os.path.getsize(single)} bytes; {len(parts)} splits in "
          f"{os.path.dirname(parts[0])}: {sum(sizes)} bytes ({', '.join(map(str, sizes))}); {what}; "
          f"merge of the splits == {os.path.basename(single)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(Main(sys.argv[1:]))
    except UsageError as e:
        print(f"make_gguf.py: {e}", file=sys.stderr)
        sys.exit(2)
