"""Shared helpers for the mount checks (check_*.py).

Everything a check expects is recomputed from the source checkpoint, parsed here
independently of ckptfs and of scripts/make_checkpoint.py: a bug shared by the
writer and the reader of a format cannot hide this way. Checks collect every
mismatch (up to a limit) and exit 1 with them listed, or print one OK line.

The SRC a check is given is what it expects, not necessarily what was mounted: the
mount tests mount a zstd-compressed copy and pass the plain checkpoint it was made
from. A SRC whose shards are only present as NAME.zst works too: they are decoded
with the `zstd` command, an independent decoder.
"""

import json
import math
import os
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}

# dtypes numpy has, as little-endian .npy descrs; the others become .safetensors files.
NUMPY_DESCRS = {
    "BOOL": "|b1", "U8": "|u1", "I8": "|i1", "I16": "<i2", "U16": "<u2", "F16": "<f2",
    "I32": "<i4", "U32": "<u4", "F32": "<f4", "I64": "<i8", "U64": "<u8", "F64": "<f8",
}

MAX_REPORTED = 30


class Checker:
    """Collects failures so one run reports all of them, not just the first."""

    def __init__(self, name: str):
        self.name = name
        self.failures: List[str] = []
        self.checked = 0

    def Expect(self, ok: bool, message: str) -> bool:
        self.checked += 1
        if not ok:
            self.failures.append(message)
        return ok

    def Fail(self, message: str) -> None:
        self.Expect(False, message)

    def Equal(self, actual, expected, what: str) -> bool:
        return self.Expect(actual == expected,
                           f"{what}: got {Short(actual)}, expected {Short(expected)}")

    def Finish(self, summary: str) -> int:
        if not self.failures:
            print(f"OK {self.name}: {summary} ({self.checked} checks)")
            return 0
        print(f"FAIL {self.name}: {len(self.failures)} of {self.checked} checks failed")
        for message in self.failures[:MAX_REPORTED]:
            print(f"  - {message}")
        if len(self.failures) > MAX_REPORTED:
            print(f"  ... and {len(self.failures) - MAX_REPORTED} more")
        return 1


def Short(value, limit: int = 120) -> str:
    text = repr(value)
    if len(text) <= limit:
        return text
    length = f" ({len(value)} long)" if hasattr(value, "__len__") else ""
    return f"{text[:limit]}...{length}"


def RunMain(main: Callable[[List[str]], int], usage: str) -> None:
    """Exit 1 with a traceback on an unexpected exception (e.g. EIO from the mount),
    2 on bad usage, else main's code."""
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(f"usage: {os.path.basename(sys.argv[0])} {usage}", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(main(args))
    except Exception:  # pylint: disable=broad-except
        print(f"FAIL {os.path.basename(sys.argv[0])}: unexpected exception")
        traceback.print_exc(file=sys.stdout)
        sys.exit(1)


# ---------------------------------------------------------------------------
# safetensors

@dataclass
class Entry:
    dtype: str
    shape: List[int]
    begin: int
    end: int


@dataclass
class Safetensors:
    """A parsed safetensors header. `entries` keeps file order."""
    header_len: int
    header_bytes: bytes
    metadata: Optional[dict]
    entries: Dict[str, Entry]

    @property
    def data_start(self) -> int:
        return 8 + self.header_len


def ParseSafetensors(data: bytes, what: str) -> Safetensors:
    """Parses the header of a safetensors file held in `data` (bytes, mmap...).
    Raises ValueError on anything that is not even parseable; Validate() checks the rest."""
    if len(data) < 8:
        raise ValueError(f"{what}: {len(data)} bytes, shorter than the length prefix")
    n = int.from_bytes(data[:8], "little")
    if 8 + n > len(data):
        raise ValueError(f"{what}: header length {n} runs past the end ({len(data)} bytes)")
    raw = bytes(data[8:8 + n])
    obj = json.loads(raw.decode("utf-8"), object_pairs_hook=RefuseDuplicateKeys)
    if not isinstance(obj, dict):
        raise ValueError(f"{what}: header is not a JSON object")
    metadata = obj.pop("__metadata__", None)
    entries = {}
    for name, e in obj.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise ValueError(f"{what}: tensor {name!r}: bad entry {e!r}")
        entries[name] = Entry(e["dtype"], list(e["shape"]), *e["data_offsets"])
    return Safetensors(n, raw, metadata, entries)


def MappedTensors(path: str) -> Dict[str, tuple]:
    """name -> (dtype, shape, bytes) of a safetensors file, read through mmap as loaders do."""
    import mmap
    import struct
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        n = struct.unpack("<Q", m[:8])[0]
        header = json.loads(m[8:8 + n])
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            out[name] = (info["dtype"], info["shape"], bytes(m[8 + n + begin:8 + n + end]))
        return out


def RefuseDuplicateKeys(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"duplicate JSON keys in {keys}")
    return dict(pairs)


def Validate(st: Safetensors, file_size: int, what: str, ck: Checker) -> None:
    """The reference validator's rules plus the ones docs/usage.md adds for ckptfs output:
    space padding to a multiple of 8, contiguous offsets from 0 with no holes up to the
    end of the file, every tensor aligned to its element size, string metadata."""
    ck.Equal(st.header_len % 8, 0, f"{what}: header length {st.header_len} mod 8")
    json_end = len(st.header_bytes.rstrip(b" "))
    ck.Expect(st.header_bytes[:json_end].endswith(b"}"),
              f"{what}: header padding is not spaces after the JSON object: "
              f"{st.header_bytes[-16:]!r}")
    if st.metadata is not None:
        ck.Expect(isinstance(st.metadata, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in st.metadata.items()),
            f"{what}: __metadata__ is not a map of strings: {st.metadata!r}")
    expected_begin = 0
    for name, e in sorted(st.entries.items(), key=lambda kv: (kv[1].begin, kv[1].end)):
        size = DTYPE_SIZES.get(e.dtype)
        if not ck.Expect(size is not None, f"{what}: {name!r}: unknown dtype {e.dtype!r}"):
            continue
        ck.Equal(e.begin, expected_begin, f"{what}: {name!r} begin (holes or overlap)")
        ck.Equal(e.end - e.begin, Elements(e.shape) * size,
                 f"{what}: {name!r} byte length for {e.dtype}{e.shape}")
        ck.Equal((st.data_start + e.begin) % size, 0,
                 f"{what}: {name!r} absolute offset {st.data_start + e.begin} mod {size}")
        expected_begin = e.end
    ck.Equal(st.data_start + expected_begin, file_size,
             f"{what}: end of the last tensor vs file size")


def Elements(shape: List[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# ---------------------------------------------------------------------------
# The source checkpoint

@dataclass
class SourceTensor:
    name: str
    dtype: str
    shape: List[int]
    path: str    # the shard holding it
    offset: int  # absolute, in that shard
    nbytes: int

    def Read(self) -> bytes:
        if not os.path.exists(self.path):  # only NAME.zst
            return ReadWeight(self.path)[self.offset:self.offset + self.nbytes]
        with open(self.path, "rb") as f:
            return os.pread(f.fileno(), self.nbytes, self.offset)


@dataclass
class Source:
    weight_files: List[str]   # absolute paths of the shards (or single file)
    index_file: Optional[str]  # absolute path, None for a single file
    non_weight_files: List[str] = field(default_factory=list)  # absolute paths
    tensors: Dict[str, SourceTensor] = field(default_factory=dict)
    metadata: Dict[str, str] = field(default_factory=dict)     # union over shards


def LoadSource(src: str) -> Source:
    """SRC as ckptfs takes it: a directory with a safetensors index or a single
    *.safetensors file, or the path of one safetensors file."""
    src = os.path.abspath(src)
    if os.path.isfile(src):
        source = Source([src], None)
    else:
        names = sorted(os.listdir(src))
        indexes = [n for n in names if n.endswith(".safetensors.index.json")]
        if indexes:
            with open(os.path.join(src, indexes[0])) as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            source = Source([os.path.join(src, s) for s in shards],
                            os.path.join(src, indexes[0]))
        else:
            singles = {n[:-4] if n.endswith(".zst") else n for n in names
                       if n.endswith(".safetensors") or n.endswith(".safetensors.zst")}
            source = Source([os.path.join(src, n) for n in sorted(singles)], None)
        weights = set(source.weight_files) | {source.index_file}
        weights |= {p + ".zst" for p in source.weight_files}
        # A packed source's zip CRC sidecar is read by the mount, never shown.
        source.non_weight_files = [os.path.join(src, n) for n in names
                                   if os.path.join(src, n) not in weights
                                   and n != ".ckptfs-zip-crc"]
    for path in source.weight_files:
        AddShard(source, path)
    return source


def AddShard(source: Source, path: str) -> None:
    if os.path.exists(path):
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            st = ParseSafetensors(n.to_bytes(8, "little") + f.read(n), path)
    else:
        st = ParseSafetensors(ReadWeight(path), path)
    source.metadata.update(st.metadata or {})
    for name, e in st.entries.items():
        assert name not in source.tensors, f"source: {name!r} in two shards"
        source.tensors[name] = SourceTensor(name, e.dtype, e.shape, path,
                                            st.data_start + e.begin, e.end - e.begin)


# ---------------------------------------------------------------------------
# Per-tensor paths

def EscapeComponent(component: str) -> str:
    """docs/usage.md's escaping: '%' first (so the escapes it introduces stay unambiguous),
    then '/'; '.' and '..' could walk the tree and an empty name cannot exist."""
    if component == "":
        return "%"
    if component in (".", ".."):
        return "%2E" * len(component)
    return component.replace("%", "%25").replace("/", "%2F")


def TensorPath(name: str, dtype: str) -> str:
    """Path of a tensor's file relative to the mount's tensors/ directory: its .npy, or
    for a dtype numpy lacks the .safetensors of its stored bytes."""
    ext = ".npy" if dtype in NUMPY_DESCRS else ".safetensors"
    return "/".join(EscapeComponent(c) for c in name.split(".")) + ext


# dtypes numpy lacks whose tensors/ file has a float32 .npy beside it, widened on read.
WIDENED = ("BF16", "F8_E4M3", "F8_E5M2")


def TensorPaths(name: str, dtype: str) -> List[str]:
    """Every file of a tensor under tensors/: TensorPath, and the widened .npy."""
    paths = [TensorPath(name, dtype)]
    if dtype in WIDENED:
        paths.append("/".join(EscapeComponent(c) for c in name.split(".")) + ".npy")
    return paths


def _Float8(byte: int, mantissa_bits: int, bias: int, fn: bool) -> float:
    """One float8 value from its definition (ml_dtypes: float8_e4m3fn, float8_e5m2)."""
    sign = -1.0 if byte & 0x80 else 1.0
    exponent = (byte >> mantissa_bits) & ((1 << (7 - mantissa_bits)) - 1)
    mantissa = byte & ((1 << mantissa_bits) - 1)
    top = (1 << (7 - mantissa_bits)) - 1
    nan = math.copysign(float("nan"), sign)  # a NaN keeps its sign, as ml_dtypes widens it
    if fn and exponent == top and mantissa == (1 << mantissa_bits) - 1:
        return nan
    if not fn and exponent == top:
        return sign * float("inf") if mantissa == 0 else nan
    if exponent == 0:
        return sign * mantissa / (1 << mantissa_bits) * 2.0 ** (1 - bias)
    return sign * (1 + mantissa / (1 << mantissa_bits)) * 2.0 ** (exponent - bias)


def WidenToF32(dtype: str, data: bytes):
    """The float32 values of BF16 / F8_E4M3 / F8_E5M2 `data`, as a flat numpy array."""
    import numpy as np
    if dtype == "BF16":
        return (np.frombuffer(data, "<u2").astype("<u4") << 16).view("<f4")
    mantissa_bits, bias, fn = (3, 7, True) if dtype == "F8_E4M3" else (2, 15, False)
    return np.array([_Float8(b, mantissa_bits, bias, fn) for b in data], dtype="<f4")


def ReadFile(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------------------
# zstd

_DECODED: Dict[str, bytes] = {}


def ReadWeight(path: str) -> bytes:
    """The bytes of weight file `path`: the file itself, or, when only `path`.zst
    exists, its decoding by the `zstd` command (kept in memory: test data is small)."""
    if os.path.exists(path):
        return ReadFile(path)
    if path not in _DECODED:
        result = subprocess.run(["zstd", "-d", "-c", "-q", path + ".zst"],
                                capture_output=True, timeout=300)
        if result.returncode != 0:
            raise ValueError(f"zstd -d {path}.zst failed: {result.stderr[-300:]!r}")
        _DECODED[path] = result.stdout
    return _DECODED[path]


ZSTD_MAGIC = 0xFD2FB528
SEEK_TABLE_SKIPPABLE_MAGIC = 0x184D2A5E
SEEKABLE_MAGIC = 0x8F92EAB1


@dataclass
class SeekTable:
    """A parsed zstd seekable-format seek table (contrib/seekable_format)."""
    descriptor: int
    entries: List[tuple]  # (compressed size, decompressed size, checksum or None)
    table_bytes: int      # the whole skippable frame, magic and size included

    @property
    def checksummed(self) -> bool:
        return bool(self.descriptor & 0x80)


def ParseSeekTable(data: bytes, what: str) -> SeekTable:
    """Raises ValueError unless `data` ends with a well-formed seek table whose frames
    tile the rest of the file exactly."""
    if len(data) < 17 or int.from_bytes(data[-4:], "little") != SEEKABLE_MAGIC:
        raise ValueError(f"{what}: no seekable magic at the end")
    count = int.from_bytes(data[-9:-5], "little")
    descriptor = data[-5]
    if descriptor & 0x7C:
        raise ValueError(f"{what}: reserved seek table descriptor bits set: {descriptor:#x}")
    entry_size = 12 if descriptor & 0x80 else 8
    table_bytes = 8 + count * entry_size + 9
    if table_bytes > len(data):
        raise ValueError(f"{what}: seek table of {count} frames is larger than the file")
    start = len(data) - table_bytes
    if int.from_bytes(data[start:start + 4], "little") != SEEK_TABLE_SKIPPABLE_MAGIC:
        raise ValueError(f"{what}: the seek table is not in a 0x184D2A5E skippable frame")
    if int.from_bytes(data[start + 4:start + 8], "little") != table_bytes - 8:
        raise ValueError(f"{what}: seek table Frame_Size disagrees with its frame count")
    entries = []
    for k in range(count):
        at = start + 8 + k * entry_size
        fields = [int.from_bytes(data[at + 4 * i:at + 4 * i + 4], "little")
                  for i in range(entry_size // 4)]
        entries.append((fields[0], fields[1], fields[2] if entry_size == 12 else None))
    if sum(e[0] for e in entries) != start:
        raise ValueError(f"{what}: frames add up to {sum(e[0] for e in entries)} bytes, "
                         f"but {start} precede the seek table")
    return SeekTable(descriptor, entries, table_bytes)


def Xxh64Low32(data: bytes) -> int:
    """The low 32 bits of XXH64(data, seed 0), the seekable format's frame checksum.
    It is also exactly the content checksum zstd appends to a frame, so it is read off a
    frame python3-zstandard writes: no XXH64 implementation needed."""
    import zstandard  # pylint: disable=import-outside-toplevel
    frame = zstandard.ZstdCompressor(level=1, write_checksum=True).compress(data)
    return int.from_bytes(frame[-4:], "little")


def DecodeFrame(frame: bytes, max_size: int) -> bytes:
    import zstandard  # pylint: disable=import-outside-toplevel
    return zstandard.ZstdDecompressor().decompress(frame, max_output_size=max_size)
