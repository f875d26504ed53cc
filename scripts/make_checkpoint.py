#!/usr/bin/python3
"""Writes synthetic safetensors checkpoints for ckptfs tests, demos and benchmarks.

    make_checkpoint.py OUT_DIR [--kind mixed|llama|bench|headers|hostile]
                       [--shards N] [--tensors N] [--total-bytes SIZE] [--dtype DT]
                       [--seed S] [--single] [--case CASE] [--verbose]

Kinds:
  mixed    every safetensors dtype, scalars, zero-size and odd-length tensors, unicode
           names, names with '/', '%' and empty components; >= 8 shards by default.
  llama    a small llama-like model (F32 norms, --dtype weights) for the README demo.
  bench    --total-bytes of --dtype weight-like tensors, streamed in chunks.
  headers  many shards of many tiny tensors, to measure mount time.
  hostile  a small sharded checkpoint broken in exactly one way (--case).

The output looks like a Hugging Face checkpoint: `model-0000K-of-0000N.safetensors`
shards, `model.safetensors.index.json`, and config.json, tokenizer.json and
generation_config.json (or one `model.safetensors` with --single). Nothing else is
written: the mount shows every non-weight file, so tests recompute what they expect
by parsing the shards. Data is deterministic for a given seed. Only numpy is needed;
safetensors files are written by hand, laid out the way the reference library lays
them out so that every tensor is aligned to its element size.
"""

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, List, Optional

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
                   choices=("mixed", "llama", "bench", "headers", "hostile"))
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
    p.add_argument("--case", help="hostile only: " + ", ".join(HOSTILE_CASES))
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.shards is not None and args.shards < 1:
        p.error("--shards must be >= 1")
    if args.tensors is not None and (args.tensors < 1 or args.kind not in ("bench", "headers")):
        p.error("--tensors must be >= 1 and applies to --kind bench and headers only")
    if args.kind == "hostile" and args.single:
        p.error("--kind hostile is always sharded")
    if (args.kind == "hostile") != (args.case is not None):
        p.error("--case is required with --kind hostile, and only there")
    if args.case is not None and args.case not in HOSTILE_CASES:
        p.error(f"unknown --case {args.case!r}; one of: {', '.join(HOSTILE_CASES)}")
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
        if args.kind == "hostile":
            MakeHostile(args.out_dir, args.case, args.seed)
        else:
            Generate(args)
    except UsageError as e:
        print(f"make_checkpoint.py: {e}", file=sys.stderr)
        return 2
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
    else:  # headers
        shards = HeadersShards(args.shards or 2000, args.tensors or 200000)
        data_fn = RawBytes
    WriteNonWeightFiles(args.out_dir, args.kind, args.seed)
    WriteCheckpoint(args.out_dir, shards, args.seed, data_fn, args.single)


if __name__ == "__main__":
    sys.exit(Main(sys.argv[1:]))
