#!/usr/bin/python3
"""Writes synthetic safetensors checkpoints for ckptfs tests, demos and benchmarks.

    make_checkpoint.py OUT_DIR [--kind mixed|llama|bench|headers|hostile|zstbase]
                       [--shards N] [--tensors N] [--total-bytes SIZE] [--dtype DT]
                       [--seed S] [--single] [--case CASE] [--verbose]
                       [--compress none|seekable|multiframe|single] [--frame-size SIZE]
                       [--level N] [--keep-plain] [--[no-]seek-checksums]
                       [--[no-]frame-checksums] [--no-content-size] [--from PLAIN_DIR]

Kinds:
  mixed    every safetensors dtype, scalars, zero-size and odd-length tensors, unicode
           names, names with '/', '%' and empty components; >= 8 shards by default.
  llama    a small llama-like model (F32 norms, --dtype weights) for the README demo.
  bench    --total-bytes of --dtype weight-like tensors, streamed in chunks.
  headers  many shards of many tiny tensors, to measure mount time.
  hostile  a small sharded checkpoint broken in exactly one way (--case); the zst-*
           cases are zstd-compressed and broken in the compressed bytes (see
           ZST_HOSTILE_CASES for what ckptfs must do with each).
  zstbase  the undamaged, uncompressed checkpoint every zst-* hostile case starts from:
           tests compare the tensors that must stay readable against it.

The output looks like a Hugging Face checkpoint: `model-0000K-of-0000N.safetensors`
shards, `model.safetensors.index.json`, and config.json, tokenizer.json and
generation_config.json (or one `model.safetensors` with --single). Nothing else is
written: the mount shows every non-weight file, so tests recompute what they expect
by parsing the shards. Data is deterministic for a given seed. Only numpy is needed;
safetensors files are written by hand, laid out the way the reference library lays
them out so that every tensor is aligned to its element size.

Compression (--compress, or --from PLAIN_DIR to compress a copy of an existing plain
checkpoint, same tensors and bytes): every weight file NAME becomes NAME.zst (NAME is
removed unless --keep-plain); non-weight files and the index stay plain, and the index
keeps naming NAME. Kinds:
  seekable    --frame-size chunks, each one zstd frame with its content size, then the
              zstd seekable format's seek table (a skippable frame) whose entries carry
              checksums (low 32 bits of XXH64, seed 0) unless --no-seek-checksums.
              The frames carry no zstd content checksum unless --frame-checksums.
  multiframe  the same frames, concatenated, without a seek table; with zstd content
              checksums unless --no-frame-checksums, and without content sizes if
              --no-content-size.
  single      what `zstd -q -LEVEL NAME` writes: one frame, content size and checksum.
`zstd -d` decodes all three. This needs python3-zstandard (and the zstd CLI for single).
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, List, Optional, Tuple

import numpy as np

# Element size in bytes of every safetensors dtype.
DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}

# Floating dtypes with an IEEE-style exponent field: (unsigned view, exponent shift,
# exponent mask, lowest exponent used). See WeightLike.
FLOAT_LAYOUTS = {
    "BF16": (np.uint16, 7, 0xFF, 118),
    "F16": (np.uint16, 10, 0x1F, 6),
    "F32": (np.uint32, 23, 0xFF, 118),
    "F64": (np.uint64, 52, 0x7FF, 1014),
}

CHUNK_BYTES = 16 << 20  # bench tensors are streamed in chunks this size
NON_WEIGHT_FILES = ("config.json", "tokenizer.json", "generation_config.json")
SHARD_METADATA = {"format": "pt"}
HOSTILE_CASES = (
    "missing-shard", "truncated-shard", "header-past-eof", "bad-json",
    "overlapping-offsets", "out-of-range-offsets", "shape-mismatch", "duplicate-tensor",
    "index-escape", "huge-header", "nul-name", "bad-dtype", "shape-overflow",
    "offset-overflow",
)


class UsageError(Exception):
    """Bad command line; reported on one line with exit code 2."""


@dataclass
class Tensor:
    name: str
    dtype: str
    shape: List[int]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * DTYPE_SIZES[self.dtype]


# ---------------------------------------------------------------------------
# Data generation

class RandomStream:
    """Deterministic random bytes. SFC64 raw output runs at ~2 GB/s here, about ten
    times faster than Generator.bytes, which keeps multi-GiB bench data quick."""

    def __init__(self, *seed: int):
        self._bits = np.random.SFC64(list(seed))

    def array(self, nbytes: int) -> np.ndarray:
        words = self._bits.random_raw((nbytes + 7) // 8)
        return words.view(np.uint8)[:nbytes]

    def bytes(self, nbytes: int) -> bytes:
        return self.array(nbytes).tobytes()


def RawBytes(stream: RandomStream, tensor: Tensor) -> Iterator[bytes]:
    """Every bit pattern (NaNs, denormals...), so byte comparisons catch any change.
    BOOL stays 0/1 because other values are not valid booleans for numpy and torch."""
    data = stream.array(tensor.nbytes)
    if tensor.dtype == "BOOL":
        data = data & 1
    yield data.tobytes()


def WeightLike(stream: RandomStream, tensor: Tensor) -> Iterator[bytes]:
    """Small float values (|x| in [2^-9, 2^-1)) with random sign and mantissa: 3 bits of
    exponent entropy, so zstd sees roughly what real weights give it. Integer and FP8
    dtypes get raw bytes. Streamed so a huge tensor never sits in memory whole."""
    layout = FLOAT_LAYOUTS.get(tensor.dtype)
    remaining = tensor.nbytes
    while remaining > 0:
        n = min(remaining, CHUNK_BYTES)
        data = stream.array(n)
        if layout is not None:
            uint, shift, mask, base = layout
            words = data.view(uint)
            low3 = (words >> uint(shift)) & uint(7)
            words &= uint(~(mask << shift) & np.iinfo(uint).max)
            words |= (low3 + uint(base)) << uint(shift)
        elif tensor.dtype == "BOOL":
            data = data & 1
        yield data.tobytes()
        remaining -= n


DataFn = Callable[[RandomStream, Tensor], Iterable[bytes]]


# ---------------------------------------------------------------------------
# safetensors writing

def SafetensorsOrder(tensors: List[Tensor]) -> List[Tensor]:
    """The reference writer's order: larger alignment first, then by name. Starting
    at offset 0 with the biggest elements keeps every tensor aligned without padding."""
    return sorted(tensors, key=lambda t: (-DTYPE_SIZES[t.dtype], t.name))


def EncodeHeader(header: dict) -> bytes:
    """Compact UTF-8 JSON padded with spaces to a multiple of 8, as the reference does,
    so data starts 8-aligned."""
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return text + b" " * (-len(text) % 8)


def BuildHeader(tensors: List[Tensor], metadata: Optional[dict]) -> dict:
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": t.shape,
                          "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    return header


def WriteSafetensors(path: str, tensors: List[Tensor], stream: RandomStream,
                     data_fn: DataFn, metadata: Optional[dict] = SHARD_METADATA) -> int:
    """Writes one safetensors file; returns the number of tensor data bytes."""
    ordered = SafetensorsOrder(tensors)
    header = EncodeHeader(BuildHeader(ordered, metadata))
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little"))
        f.write(header)
        for t in ordered:
            written = 0
            for chunk in data_fn(stream, t):
                f.write(chunk)
                written += len(chunk)
            assert written == t.nbytes, (t.name, written, t.nbytes)
    return sum(t.nbytes for t in ordered)


def ShardName(k: int, n: int) -> str:
    return f"model-{k:05d}-of-{n:05d}.safetensors"


def WriteIndex(out_dir: str, weight_map: dict, total_size: int) -> None:
    index = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2, ensure_ascii=False, sort_keys=True)
        f.write("\n")


def WriteCheckpoint(out_dir: str, shards: List[List[Tensor]], seed: int, data_fn: DataFn,
                    single: bool) -> None:
    """Writes the shards (or one model.safetensors) and the index. Each shard draws from
    its own stream so shards could be written in any order with the same bytes."""
    if single:
        tensors = [t for shard in shards for t in shard]
        WriteSafetensors(os.path.join(out_dir, "model.safetensors"), tensors,
                         RandomStream(seed, 0), data_fn)
        return
    weight_map, total = {}, 0
    for k, tensors in enumerate(shards, start=1):
        name = ShardName(k, len(shards))
        total += WriteSafetensors(os.path.join(out_dir, name), tensors,
                                  RandomStream(seed, k), data_fn)
        weight_map.update({t.name: name for t in tensors})
    WriteIndex(out_dir, weight_map, total)


def WriteNonWeightFiles(out_dir: str, kind: str, seed: int) -> None:
    """Small stand-ins for the files a real checkpoint carries beside its weights."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "ckptfs_test_kind": kind, "seed": seed, "torch_dtype": "bfloat16"}
    tokenizer = {"version": "1.0", "model": {"type": "BPE", "vocab": {"<s>": 0, "</s>": 1,
                                                                      "ünï": 2, "权重": 3}}}
    generation = {"bos_token_id": 0, "eos_token_id": 1, "max_length": 64}
    for name, obj in zip(NON_WEIGHT_FILES, (config, tokenizer, generation)):
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.write("\n")


def Distribute(tensors: List[Tensor], n: int) -> List[List[Tensor]]:
    """Round-robin, so every shard gets a mix of dtypes and sizes."""
    return [tensors[k::n] for k in range(n)]


# ---------------------------------------------------------------------------
# Kinds

def MixedTensors() -> List[Tensor]:
    """Every dtype and the awkward corners the mount must get right."""
    t = [
        # Large enough to span several 1 MiB FUSE reads and cache blocks.
        Tensor("model.embed_tokens.weight", "BF16", [1024, 1024]),
        Tensor("lm_head.weight", "F16", [768, 1024]),
        Tensor("model.big.f32", "F32", [700, 1000]),
        Tensor("model.big.f64", "F64", [300, 500]),
        Tensor("model.ids", "I64", [1000, 129]),
        Tensor("model.norm.weight", "F32", [1024]),
        # One of every other dtype, with odd byte lengths.
        Tensor("model.i32", "I32", [17, 33]),
        Tensor("model.i16", "I16", [5, 7, 9]),
        Tensor("model.i8", "I8", [3, 5]),
        Tensor("model.u8", "U8", [7]),
        Tensor("model.u16", "U16", [9]),
        Tensor("model.u32", "U32", [5]),
        Tensor("model.u64", "U64", [3]),
        Tensor("model.f16.odd", "F16", [3]),
        Tensor("model.bf16.odd", "BF16", [5]),
        Tensor("model.mask", "BOOL", [6, 11]),
        Tensor("model.f8.e4m3", "F8_E4M3", [16, 9]),
        Tensor("model.f8.e5m2", "F8_E5M2", [13]),
        # Scalars and zero-size tensors.
        Tensor("model.scalar.f32", "F32", []),
        Tensor("model.scalar.bf16", "BF16", []),
        Tensor("model.scalar.i64", "I64", []),
        Tensor("model.scalar.bool", "BOOL", []),
        Tensor("model.empty", "F32", [0, 4]),
        Tensor("model.empty.bf16", "BF16", [0, 4]),
        Tensor("model.empty.u8", "U8", [0]),
        # Names that need escaping to become paths.
        Tensor("model.ünïcode.权重", "F16", [3, 3]),
        Tensor("model.a/b.weight", "F32", [2, 2]),
        Tensor("model..double", "I32", [3]),
        Tensor("model...triple", "I16", [2]),
        Tensor("model.pct%41.weight", "U8", [5]),
        Tensor("model.%", "I8", [1]),
        Tensor(".leading", "F32", [1]),
        Tensor("trailing.", "F32", [1]),
        Tensor("model.../..", "U8", [2]),
        # A tensor whose file sits beside a directory of the same stem.
        Tensor("model.layer", "F32", [4]),
        Tensor("model.layer.weight", "F32", [4]),
    ]
    for i in range(8):
        t += [
            Tensor(f"model.layers.{i}.self_attn.q_proj.weight", "BF16", [64, 64]),
            Tensor(f"model.layers.{i}.mlp.up_proj.weight", "F16", [96, 64]),
            Tensor(f"model.layers.{i}.input_layernorm.weight", "F32", [64]),
        ]
    return t


def LlamaTensors(dtype: str, layers: int = 4, hidden: int = 256, inter: int = 688,
                 vocab: int = 1024) -> List[Tensor]:
    t = [Tensor("model.embed_tokens.weight", dtype, [vocab, hidden])]
    for i in range(layers):
        p = f"model.layers.{i}."
        t += [Tensor(p + f"self_attn.{x}_proj.weight", dtype, [hidden, hidden])
              for x in "qkvo"]
        t += [Tensor(p + "mlp.gate_proj.weight", dtype, [inter, hidden]),
              Tensor(p + "mlp.up_proj.weight", dtype, [inter, hidden]),
              Tensor(p + "mlp.down_proj.weight", dtype, [hidden, inter]),
              Tensor(p + "input_layernorm.weight", "F32", [hidden]),
              Tensor(p + "post_attention_layernorm.weight", "F32", [hidden])]
    t += [Tensor("model.norm.weight", "F32", [hidden]),
          Tensor("lm_head.weight", dtype, [vocab, hidden])]
    return t


def LlamaShards(tensors: List[Tensor], n: int) -> List[List[Tensor]]:
    """Contiguous runs of layers per shard, like transformers' save_pretrained."""
    per = -(-len(tensors) // n)
    return [tensors[k * per:(k + 1) * per] for k in range(n)]


def BenchTensors(total_bytes: int, count: int, dtype: str) -> List[Tensor]:
    """`count` equal [rows, 1024] tensors adding up to about total_bytes."""
    cols = 1024
    rows = max(1, total_bytes // count // (cols * DTYPE_SIZES[dtype]))
    return [Tensor(f"model.layers.{i}.weight", dtype, [rows, cols]) for i in range(count)]


def HeadersShards(shards: int, tensors: int) -> List[List[Tensor]]:
    """Tiny tensors (a few bytes) in a deep-ish tree, so mount cost is all metadata."""
    kinds = (("F32", [1]), ("U8", [3]), ("BF16", [2]))
    out = [[] for _ in range(shards)]
    for i in range(tensors):
        dtype, shape = kinds[i % len(kinds)]
        out[i % shards].append(
            Tensor(f"model.layers.{i % shards}.block.{i // shards}.weight", dtype, shape))
    return out


# ---------------------------------------------------------------------------
# Hostile checkpoints: a valid 3-shard checkpoint with exactly one defect, almost
# always in shard 2 (the mount tests check that the refusal names that file).

def HostileShards() -> List[List[Tensor]]:
    return [[Tensor(f"model.layers.{s}.w{j}", "F32", [4, 4]) for j in range(3)]
            for s in range(3)]


def BreakShard(case: str, path: str, index: dict, out_dir: str) -> None:
    """Rewrites shard 2 (at `path`) or the index so the checkpoint has one defect.
    A rewritten shard's tensors replace its index entries, so the index stays
    consistent and the shard is the only thing wrong."""
    victim = os.path.basename(path)
    size = os.path.getsize(path)

    def Rewrite(entries: dict, data_len: int, listed: Optional[List[str]] = None) -> None:
        WriteRawShard(path, {"__metadata__": SHARD_METADATA, **entries}, bytes(data_len))
        SetShardEntries(index, victim, list(entries) if listed is None else listed)

    if case == "missing-shard":
        os.remove(path)
    elif case == "truncated-shard":
        os.truncate(path, size - 10)
    elif case == "header-past-eof":
        PatchHeaderLength(path, size - 8 + 1)
    elif case == "bad-json":
        text = b'{"model.x":{"dtype":"F32",'
        WriteRawShard(path, {}, bytes(64), raw_header=text + b" " * (-len(text) % 8))
    elif case == "overlapping-offsets":
        Rewrite({"model.ov.a": Entry("F32", [16], 0, 64),
                 "model.ov.b": Entry("F32", [8], 32, 64)}, 64)
    elif case == "out-of-range-offsets":
        Rewrite({"model.oor": Entry("F32", [40], 0, 160)}, 96)
    elif case == "shape-mismatch":
        # Contiguous and aligned; only shape x dtype disagrees with the 32-byte span.
        Rewrite({"model.sm": Entry("F32", [4, 4], 0, 32)}, 32)
    elif case == "shape-overflow":
        # 2^62 elements * 4 bytes wraps to 0 in 64-bit arithmetic: unchecked code
        # takes it for an empty tensor.
        Rewrite({"model.so": Entry("F32", [1 << 62], 0, 0)}, 0)
    elif case == "offset-overflow":
        # end - begin wraps to 16 == 16 x U8, and end <= data size: only checked
        # arithmetic (or begin <= end) refuses it.
        Rewrite({"model.oo": Entry("U8", [16], (1 << 64) - 8, 8)}, 16)
    elif case == "duplicate-tensor":
        # Shard 2 also carries model.layers.0.w0, which the index and shard 1 own.
        Rewrite({"model.layers.1.w0": Entry("F32", [4, 4], 0, 64),
                 "model.layers.0.w0": Entry("F32", [4, 4], 64, 128)}, 128,
                listed=["model.layers.1.w0"])
    elif case == "index-escape":
        # Climbs out and back into OUT_DIR, so the file exists: only a path check refuses it.
        escaped = f"../{os.path.basename(os.path.abspath(out_dir))}/{victim}"
        index["weight_map"] = {n: escaped if s == victim else s
                               for n, s in index["weight_map"].items()}
    elif case == "huge-header":
        # The file really is 200 MiB long (sparse), so only a header size limit, not an
        # end-of-file check, stops a 200 MiB read and parse.
        PatchHeaderLength(path, 200 << 20)
        os.truncate(path, 8 + (200 << 20) + 64)
    elif case == "nul-name":
        Rewrite({"model.bad\u0000name": Entry("F32", [4], 0, 16)}, 16)
    elif case == "bad-dtype":
        Rewrite({"model.bd": Entry("F12", [4], 0, 16)}, 16)
    else:
        raise AssertionError(case)  # ParseArgs only lets HOSTILE_CASES through


def Entry(dtype: str, shape: list, begin: int, end: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def PatchHeaderLength(path: str, length: int) -> None:
    with open(path, "r+b") as f:
        f.write(length.to_bytes(8, "little"))


def WriteRawShard(path: str, header: dict, data: bytes,
                  raw_header: Optional[bytes] = None) -> None:
    """A shard written without any validation, so it can be wrong on purpose."""
    body = raw_header if raw_header is not None else EncodeHeader(header)
    with open(path, "wb") as f:
        f.write(len(body).to_bytes(8, "little"))
        f.write(body)
        f.write(data)


def SetShardEntries(index: dict, shard: str, names: List[str]) -> None:
    wm = {n: s for n, s in index["weight_map"].items() if s != shard}
    wm.update({n: shard for n in names})
    index["weight_map"] = wm


def MakeHostile(out_dir: str, case: str, seed: int) -> None:
    WriteNonWeightFiles(out_dir, "hostile", seed)
    WriteCheckpoint(out_dir, HostileShards(), seed, RawBytes, single=False)
    index_path = os.path.join(out_dir, "model.safetensors.index.json")
    with open(index_path) as f:
        index = json.load(f)
    BreakShard(case, os.path.join(out_dir, ShardName(2, 3)), index, out_dir)
    # total_size stays the valid checkpoint's: loaders treat it as a hint, and a
    # recount would be meaningless for the overflow cases.
    WriteIndex(out_dir, index["weight_map"], index["metadata"]["total_size"])


# ---------------------------------------------------------------------------
# zstd: seekable, multi-frame and single-frame shards (--compress, --from)

ZSTD_MAGIC = 0xFD2FB528
SKIPPABLE_MAGIC_SEEK_TABLE = 0x184D2A5E
SEEKABLE_MAGIC = 0x8F92EAB1
SEEK_TABLE_CHECKSUM_FLAG = 0x80
COMPRESS_KINDS = ("none", "seekable", "multiframe", "single")


def Zstandard():
    """python3-zstandard, imported only when compressing (Debian: python3-zstandard)."""
    try:
        import zstandard  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise UsageError("--compress needs the zstandard module "
                         "(Debian package python3-zstandard)") from e
    return zstandard


@dataclass
class Frame:
    data: bytes        # the whole zstd frame
    decoded_size: int
    checksum: int      # low 32 bits of XXH64(decoded, seed 0)


@dataclass
class CompressOptions:
    kind: str = "seekable"
    frame_size: int = 1 << 20
    level: int = 3
    seek_checksums: bool = True
    frame_checksums: Optional[bool] = None  # None: per kind (seekable no, multiframe yes)
    content_size: bool = True
    keep_plain: bool = False

    def FrameChecksums(self) -> bool:
        return self.kind != "seekable" if self.frame_checksums is None else self.frame_checksums


def CompressFrame(chunk: bytes, level: int, with_checksum: bool, content_size: bool) -> Frame:
    """One zstd frame for `chunk`. The frame is always compressed with a content
    checksum, which zstd defines as the low 32 bits of XXH64(content, seed 0): exactly
    the seekable format's per-frame checksum, so no separate XXH64 is needed. Without
    --frame-checksums the checksum flag (Frame_Header_Descriptor bit 2) is cleared and
    the 4 trailing bytes dropped; the blocks do not depend on that flag."""
    zstandard = Zstandard()
    cctx = zstandard.ZstdCompressor(level=level, write_checksum=True,
                                    write_content_size=content_size)
    data = cctx.compress(chunk)
    checksum = int.from_bytes(data[-4:], "little")
    if not with_checksum:
        assert data[4] & 0x04
        data = data[:4] + bytes([data[4] & ~0x04]) + data[5:-4]
    return Frame(data, len(chunk), checksum)


def CompressFrames(path: str, opts: CompressOptions) -> Iterator[Frame]:
    """The frames of `path`, compressed on all cores (zstandard releases the GIL), in
    order, holding at most a few chunks per core in memory."""
    workers = os.cpu_count() or 1
    with open(path, "rb") as f, concurrent.futures.ThreadPoolExecutor(workers) as pool:
        pending = []
        while True:
            chunk = f.read(opts.frame_size)
            if chunk:
                pending.append(pool.submit(CompressFrame, chunk, opts.level,
                                           opts.FrameChecksums(), opts.content_size))
            if pending and (not chunk or len(pending) >= 4 * workers):
                yield pending.pop(0).result()
            if not chunk and not pending:
                return


def SeekTable(frames: List[Tuple[int, int, int]], checksums: bool,
              descriptor: Optional[int] = None, count: Optional[int] = None) -> bytes:
    """The seek table skippable frame for (compressed size, decoded size, checksum)
    entries. `descriptor` and `count` override the footer (hostile cases only)."""
    body = bytearray()
    for compressed, decoded, checksum in frames:
        body += compressed.to_bytes(4, "little") + decoded.to_bytes(4, "little")
        if checksums:
            body += checksum.to_bytes(4, "little")
    if descriptor is None:
        descriptor = SEEK_TABLE_CHECKSUM_FLAG if checksums else 0
    body += (len(frames) if count is None else count).to_bytes(4, "little")
    body += bytes([descriptor]) + SEEKABLE_MAGIC.to_bytes(4, "little")
    return (SKIPPABLE_MAGIC_SEEK_TABLE.to_bytes(4, "little")
            + len(body).to_bytes(4, "little") + bytes(body))


def CompressFile(path: str, opts: CompressOptions) -> str:
    """Writes path + '.zst' as opts.kind; returns its path. Removes `path` unless
    opts.keep_plain."""
    out = path + ".zst"
    if opts.kind == "single":
        if shutil.which("zstd") is None:
            raise UsageError("--compress single needs the zstd command (Debian package zstd)")
        level = [f"-{opts.level}"] + (["--ultra"] if opts.level > 19 else [])
        subprocess.run(["zstd", "-q", "--no-progress", "-f", *level, "-o", out, path],
                       check=True)
    else:
        entries = []
        with open(out, "wb") as f:
            for frame in CompressFrames(path, opts):
                f.write(frame.data)
                entries.append((len(frame.data), frame.decoded_size, frame.checksum))
            if opts.kind == "seekable":
                f.write(SeekTable(entries, opts.seek_checksums))
    if not opts.keep_plain:
        os.remove(path)
    return out


def WeightFiles(out_dir: str) -> List[str]:
    """Names of the weight files of a plain checkpoint directory: the shards its index
    names, or its single *.safetensors."""
    names = sorted(os.listdir(out_dir))
    indexes = [n for n in names if n.endswith(".safetensors.index.json")]
    if indexes:
        with open(os.path.join(out_dir, indexes[0])) as f:
            return sorted(set(json.load(f)["weight_map"].values()))
    return [n for n in names if n.endswith(".safetensors")]


def CompressCheckpoint(out_dir: str, opts: CompressOptions) -> None:
    for name in WeightFiles(out_dir):
        CompressFile(os.path.join(out_dir, name), opts)


def CopyAndCompress(plain_dir: str, out_dir: str, opts: CompressOptions) -> None:
    """--from: OUT_DIR gets PLAIN_DIR's files (non-weight files and the index copied,
    weight files compressed), so its tensors are PLAIN_DIR's byte for byte."""
    if not os.path.isdir(plain_dir):
        raise UsageError(f"{plain_dir}: --from needs a checkpoint directory")
    weights = set(WeightFiles(plain_dir))
    if not weights:
        raise UsageError(f"{plain_dir}: no weight files (index or *.safetensors) to compress")
    for name in sorted(os.listdir(plain_dir)):
        src = os.path.join(plain_dir, name)
        if not os.path.isfile(src) or (name.endswith(".zst") and name[:-4] in weights):
            continue
        shutil.copyfile(src, os.path.join(out_dir, name))
        if name in weights:
            CompressFile(os.path.join(out_dir, name), opts)


# ---------------------------------------------------------------------------
# Hostile zstd checkpoints: `zstbase` (3 shards, each model.layers.{s}.w{0..3}, F32
# [256, 256] = 256 KiB of random bytes, so about 1 MiB per shard) compressed with
# 64 KiB frames, so each shard has 17 frames; then shard 2's .zst is damaged (or shard
# K's with --damage-shard K, whose damaged tensor is then model.layers.{K-1}.w1). Frames
# 5-7 (decoded bytes [320K, 512K)) lie wholly inside model.layers.1.w1 (decoded
# [D + 256K, D + 512K) with D = 8 + header length < 64K), and every defect that leaves
# the checkpoint mountable is confined to frames 6 and 7: then reads of
# model.layers.1.w1 (and of model.safetensors and shards/<shard 2>, which contain it)
# must fail with EIO, and every other tensor must read back exactly.
#
# What ckptfs must do with each case:
#   "eio"     mount succeeds (the damage is only visible when the frame is decoded,
#             and mount must not decode data frames); reading the damaged tensor gives
#             EIO with a log line naming the shard and an offset; the daemon lives on
#             and the other tensors read back exactly.
#   "refuse"  mount exits 2 with one line naming the shard, quickly (headers, seek table
#             and frame headers are enough to see it).
#   "either"  the defect may be caught at mount (as "refuse") or when reading (as "eio").
# `ckptfs verify` must exit 2 naming the shard for every case.

ZST_FRAME_SIZE = 64 << 10
ZST_DAMAGED_FRAME = 6
ZST_DAMAGED_TENSOR = "model.layers.1.w1"
ZST_HOSTILE_CASES = {
    # Frame 6's first block header gets the reserved block type 3: the frame no longer
    # decodes (and has no zstd checksum).
    "zst-corrupt-frame": "eio",
    # A byte in frame 6's raw (stored) block is flipped: the frame decodes cleanly to
    # wrong bytes, the frame carries no zstd checksum, and only the seek table's
    # checksum (flag set) shows it: the checksum flag must be honoured.
    "zst-checksum-mismatch": "eio",
    # Seek table: frame 6's Compressed_Size + 7, frame 7's - 7. The total still
    # matches the file, but frame 7 does not start where the table says.
    "zst-lying-seek-table": "either",
    # Seek table: frame 6's Decompressed_Size - 16, frame 7's + 16. The decoded total
    # is unchanged, but trusting the table would shift bytes by 16.
    "zst-lying-decoded-size": "either",
    # Frame 6's header claims a content size of 1 TiB (8-byte Frame_Content_Size, a
    # window descriptor instead of Single_Segment); the seek table stays truthful.
    # Allocating what the frame claims is the bomb.
    "zst-bomb": "either",
    # Seek table: frame 6's Decompressed_Size is 0xFFFFFFFF (4 GiB - 1): the decoded
    # shard no longer matches its safetensors header.
    "zst-bomb-seek-table": "refuse",
    # The whole checkpoint is multi-frame (no seek table); frame 6 of shard 2 claims
    # 1 TiB: the frame index built at mount adds up to more than the header allows.
    "zst-bomb-multiframe": "refuse",
    # The whole checkpoint is single-frame (`zstd` CLI); shard 2's one frame claims
    # 1 TiB instead of its real size.
    "zst-bomb-single": "refuse",
    # Shard 2's seekable .zst cut in the middle of frame 6, seek table gone: a multi-
    # frame file whose last frame is truncated and whose frames add up to too little.
    "zst-truncated": "refuse",
    # Frame 0 (holding the safetensors header) gets the reserved block type: the
    # header cannot be decoded.
    "zst-header-frame-corrupt": "refuse",
    # Seek table descriptor with a reserved bit (bit 2) set, which a compliant
    # decoder must refuse.
    "zst-seek-table-reserved": "refuse",
    # Seek table footer claiming 0x7FFFFFFF frames (a 24 GiB table) while its skippable
    # frame is 216 bytes: trusting the count would allocate or read far past the file.
    "zst-seek-table-count": "refuse",
}
ZST_CASE_COMPRESSION = {"zst-bomb-multiframe": "multiframe", "zst-bomb-single": "single"}


def ZstBaseShards() -> List[List[Tensor]]:
    return [[Tensor(f"model.layers.{s}.w{j}", "F32", [256, 256]) for j in range(4)]
            for s in range(3)]


def WriteZstBase(out_dir: str, seed: int) -> None:
    WriteNonWeightFiles(out_dir, "zstbase", seed)
    WriteCheckpoint(out_dir, ZstBaseShards(), seed, RawBytes, single=False)


def FrameHeaderSize(frame: bytes) -> int:
    """Bytes of a zstd frame header: magic, descriptor, window, dictionary id, content size."""
    assert int.from_bytes(frame[:4], "little") == ZSTD_MAGIC
    fhd = frame[4]
    single_segment = bool(fhd & 0x20)
    fcs_bytes = (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
    did_bytes = (0, 1, 2, 4)[fhd & 3]
    return 5 + (0 if single_segment else 1) + did_bytes + fcs_bytes


def WithContentSize(frame: bytes, claimed: int, decoded_size: int) -> bytes:
    """`frame` with its header rewritten to claim `claimed` decoded bytes (8-byte field)
    and a window descriptor covering the real content (no Single_Segment)."""
    fhd = frame[4]
    window_log = max(10, (max(decoded_size, 1) - 1).bit_length())
    header = (ZSTD_MAGIC.to_bytes(4, "little")
              + bytes([(3 << 6) | (fhd & 0x04), (window_log - 10) << 3])
              + claimed.to_bytes(8, "little"))
    return header + frame[FrameHeaderSize(frame):]


def ReadFrames(path: str) -> List[bytes]:
    """The zstd frames of a file we wrote (seek table excluded), split by walking block
    headers."""
    with open(path, "rb") as f:
        data = f.read()
    frames, pos = [], 0
    while pos < len(data):
        if int.from_bytes(data[pos:pos + 4], "little") != ZSTD_MAGIC:
            break  # the seek table's skippable frame
        start, pos = pos, pos + FrameHeaderSize(data[pos:pos + 18])
        while True:
            block = int.from_bytes(data[pos:pos + 3], "little")
            last, btype, bsize = block & 1, (block >> 1) & 3, block >> 3
            pos += 3 + (1 if btype == 1 else bsize)
            if last:
                break
        if data[start + 4] & 0x04:
            pos += 4
        frames.append(data[start:pos])
    return frames


def BreakZstShard(case: str, path: str) -> None:
    """Damages the compressed shard at `path` (written by CompressFile with
    ZST_FRAME_SIZE frames) as ZST_HOSTILE_CASES describes."""
    frames = ReadFrames(path)
    decoded = [Zstandard().ZstdDecompressor().decompress(f, max_output_size=1 << 24)
               for f in frames]
    sizes = [len(d) for d in decoded]
    checksums = [CompressFrame(d, 1, True, True).checksum for d in decoded]
    table_opts = {}
    n = ZST_DAMAGED_FRAME
    single = ZST_CASE_COMPRESSION.get(case) == "single"
    assert single or (len(frames) > n + 1 and sizes[n] == sizes[n + 1] == ZST_FRAME_SIZE)

    def SetBlockType(k: int, btype: int) -> None:
        frame = bytearray(frames[k])
        at = FrameHeaderSize(frame)
        frame[at] = (frame[at] & ~0x06) | (btype << 1)
        frames[k] = bytes(frame)

    if case in ("zst-corrupt-frame", "zst-header-frame-corrupt"):
        SetBlockType(0 if case == "zst-header-frame-corrupt" else n, 3)
    elif case == "zst-checksum-mismatch":
        frame = bytearray(frames[n])
        at = FrameHeaderSize(frame)
        block = int.from_bytes(frame[at:at + 3], "little")
        assert (block >> 1) & 3 == 0, "random data should be stored as a raw block"
        frame[at + 3 + 1000] ^= 0x5A
        frames[n] = bytes(frame)
    elif case in ("zst-bomb", "zst-bomb-multiframe"):
        frames[n] = WithContentSize(frames[n], 1 << 40, sizes[n])
    elif case == "zst-bomb-single":
        assert len(frames) == 1
        frames[0] = WithContentSize(frames[0], 1 << 40, sizes[0])
    entries = [[len(f), sizes[k], checksums[k]] for k, f in enumerate(frames)]
    if case == "zst-lying-seek-table":
        entries[n][0] += 7
        entries[n + 1][0] -= 7
    elif case == "zst-lying-decoded-size":
        entries[n][1] -= 16
        entries[n + 1][1] += 16
    elif case == "zst-bomb-seek-table":
        entries[n][1] = 0xFFFFFFFF
    elif case == "zst-seek-table-reserved":
        table_opts["descriptor"] = SEEK_TABLE_CHECKSUM_FLAG | 0x04
    elif case == "zst-seek-table-count":
        table_opts["count"] = 0x7FFFFFFF
    with open(path, "wb") as f:
        if case == "zst-truncated":
            f.write(b"".join(frames[:n]) + frames[n][:len(frames[n]) // 2])
            return
        f.write(b"".join(frames))
        if ZST_CASE_COMPRESSION.get(case, "seekable") == "seekable":
            f.write(SeekTable([tuple(e) for e in entries], True, **table_opts))


def MakeZstHostile(out_dir: str, case: str, seed: int, level: int, shard: int = 2) -> None:
    WriteZstBase(out_dir, seed)
    opts = CompressOptions(kind=ZST_CASE_COMPRESSION.get(case, "seekable"),
                           frame_size=ZST_FRAME_SIZE, level=level, frame_checksums=False)
    if opts.kind == "single":
        opts.frame_checksums = None  # the zstd CLI's own default
    CompressCheckpoint(out_dir, opts)
    BreakZstShard(case, os.path.join(out_dir, ShardName(shard, 3) + ".zst"))


# ---------------------------------------------------------------------------
# Command line

def ParseSize(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(I?B)?\s*", text.upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (examples: 4096, 512M, 2G)")
    return int(m.group(1)) << (10 * " KMGT".index(m.group(2) or " "))


def ParseArgs(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir", metavar="OUT_DIR", help="created if missing; must be empty")
    p.add_argument("--kind", default="mixed",
                   choices=("mixed", "llama", "bench", "headers", "hostile", "zstbase"))
    p.add_argument("--shards", type=int, help="default: mixed 8, llama 2, bench 8, "
                   "headers 2000")
    p.add_argument("--tensors", type=int, help="bench (default 64) and headers "
                   "(default 200000) only")
    p.add_argument("--total-bytes", type=ParseSize, default=ParseSize("2G"),
                   help="bench only; e.g. 512M, 2G (default 2G)")
    p.add_argument("--dtype", default="BF16", choices=sorted(DTYPE_SIZES),
                   help="bench and llama weights (default BF16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--single", action="store_true", help="one model.safetensors, no index")
    p.add_argument("--case", help="hostile only: " + ", ".join(HOSTILE_CASES + tuple(
        ZST_HOSTILE_CASES)))
    p.add_argument("--damage-shard", type=int, default=2, choices=(1, 2, 3),
                   help="zst-* hostile cases: which of the 3 shards is damaged (default 2; "
                   "the damaged tensor is then model.layers.{K-1}.w1)")
    p.add_argument("--verbose", action="store_true")
    z = p.add_argument_group("compression (zstd; see the top of this script)")
    z.add_argument("--compress", choices=COMPRESS_KINDS, default="none",
                   help="write weight files as NAME.zst (default none)")
    z.add_argument("--from", dest="from_dir", metavar="PLAIN_DIR",
                   help="compress a copy of this plain checkpoint instead of generating one")
    z.add_argument("--frame-size", type=ParseSize, default=ParseSize("1M"),
                   help="decoded bytes per frame, seekable and multiframe (default 1M)")
    z.add_argument("--level", type=int, default=3, help="zstd level (default 3)")
    z.add_argument("--keep-plain", action="store_true",
                   help="leave the uncompressed NAME next to NAME.zst")
    z.add_argument("--seek-checksums", action=argparse.BooleanOptionalAction, default=True,
                   help="seekable: checksums in the seek table (default yes)")
    z.add_argument("--frame-checksums", action=argparse.BooleanOptionalAction, default=None,
                   help="zstd content checksums in each frame (default: seekable no, "
                   "multiframe yes; single always has them)")
    z.add_argument("--no-content-size", dest="content_size", action="store_false",
                   help="multiframe: frames without Frame_Content_Size")
    args = p.parse_args(argv)
    if args.frame_size < 1 or args.frame_size > (1 << 30):
        p.error("--frame-size must be between 1 and 1G")
    if not 1 <= args.level <= 22:
        p.error("--level must be between 1 and 22")
    if args.from_dir is not None and args.compress == "none":
        p.error("--from needs --compress seekable, multiframe or single")
    if args.damage_shard != 2 and (args.case or "") not in ZST_HOSTILE_CASES:
        p.error("--damage-shard applies to the zst-* hostile cases only")
    if args.kind == "hostile" and args.compress != "none":
        p.error("--kind hostile chooses its own compression (the zst-* cases)")
    if not args.content_size and args.compress != "multiframe":
        p.error("--no-content-size applies to --compress multiframe only")
    if args.shards is not None and args.shards < 1:
        p.error("--shards must be >= 1")
    if args.tensors is not None and (args.tensors < 1 or args.kind not in ("bench", "headers")):
        p.error("--tensors must be >= 1 and applies to --kind bench and headers only")
    if args.kind == "hostile" and args.single:
        p.error("--kind hostile is always sharded")
    if (args.kind == "hostile") != (args.case is not None):
        p.error("--case is required with --kind hostile, and only there")
    cases = HOSTILE_CASES + tuple(ZST_HOSTILE_CASES)
    if args.case is not None and args.case not in cases:
        p.error(f"unknown --case {args.case!r}; one of: {', '.join(cases)}")
    return args


def PrepareOutDir(out_dir: str) -> None:
    """Refuses a non-empty directory: leftovers would show up in the mount as extra files."""
    os.makedirs(out_dir, exist_ok=True)
    if os.listdir(out_dir):
        raise UsageError(f"{out_dir}: OUT_DIR is not empty")


def Main(argv: List[str]) -> int:
    args = ParseArgs(argv)
    try:
        PrepareOutDir(args.out_dir)
        opts = CompressOptions(kind=args.compress, frame_size=args.frame_size,
                               level=args.level, seek_checksums=args.seek_checksums,
                               frame_checksums=args.frame_checksums,
                               content_size=args.content_size, keep_plain=args.keep_plain)
        if args.from_dir is not None:
            CopyAndCompress(args.from_dir, args.out_dir, opts)
        elif args.kind == "hostile" and args.case in ZST_HOSTILE_CASES:
            MakeZstHostile(args.out_dir, args.case, args.seed, args.level, args.damage_shard)
        elif args.kind == "hostile":
            MakeHostile(args.out_dir, args.case, args.seed)
        else:
            Generate(args)
            if args.compress != "none":
                CompressCheckpoint(args.out_dir, opts)
    except UsageError as e:
        print(f"make_checkpoint.py: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"make_checkpoint.py: {e}", file=sys.stderr)
        return 1
    if args.verbose:
        total = sum(os.path.getsize(os.path.join(args.out_dir, f))
                    for f in os.listdir(args.out_dir))
        print(f"wrote {args.kind} checkpoint to {args.out_dir}: "
              f"{len(os.listdir(args.out_dir))} files, {total} bytes")
    return 0


def Generate(args: argparse.Namespace) -> None:
    if args.kind == "mixed":
        shards = Distribute(MixedTensors(), args.shards or 8)
        data_fn = RawBytes
    elif args.kind == "llama":
        shards = LlamaShards(LlamaTensors(args.dtype), args.shards or 2)
        data_fn = WeightLike
    elif args.kind == "bench":
        tensors = BenchTensors(args.total_bytes, args.tensors or 64, args.dtype)
        shards = LlamaShards(tensors, args.shards or 8)
        data_fn = WeightLike
    elif args.kind == "zstbase":
        WriteZstBase(args.out_dir, args.seed)
        return
    else:  # headers
        shards = HeadersShards(args.shards or 2000, args.tensors or 200000)
        data_fn = RawBytes
    WriteNonWeightFiles(args.out_dir, args.kind, args.seed)
    WriteCheckpoint(args.out_dir, shards, args.seed, data_fn, args.single)


if __name__ == "__main__":
    sys.exit(Main(sys.argv[1:]))
