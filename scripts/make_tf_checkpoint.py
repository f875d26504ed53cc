#!/usr/bin/python3
"""Writes TensorFlow TensorBundle checkpoints byte by byte, for tests (TensorFlow is not needed).

  make_tf_checkpoint.py standard DIR [--snappy]   every dtype, 2 shards, slices, strings, a
                                                   `checkpoint` file, DIR/expected.json; an
                                                   object checkpoint's training state (an
                                                   optimizer slot, save_counter, optimizer/iter
                                                   and optimizer/learning_rate)
  make_tf_checkpoint.py many DIR [--count N]      N small F32 variables in one shard
  make_tf_checkpoint.py graph_nodes DIR [--count N]
                                                   only an object graph of N empty nodes (2
                                                   bytes each, 33 MB of metadata.json at 300k)
  make_tf_checkpoint.py big DIR [--size BYTES] [--shards K]
                                                   F32 variables of 64 MiB (random bytes,
                                                   no CRCs: for scripts/bench.sh) in K shards
  make_tf_checkpoint.py hostile DIR               DIR/<case>/ckpt.* per hostile case, and
                                                   DIR/cases.json {case: text the refusal holds}
  make_tf_checkpoint.py corpus DIR                small .index files to seed the fuzz target

The index is a LevelDB table as TF's table_builder writes it: prefix-compressed entries with a
restart point every 16, blocks of about 4 KiB, each with a 5-byte trailer (type, masked CRC32C),
an empty metaindex, an index block of separators, and the 48-byte footer. Block compression is
snappy (type 1) with --snappy when python3-snappy is installed. expected.json lists each raw key
with its dtype, shape and the hex of the whole tensor's bytes in row-major order, computed here
independently of the slices that store it.
"""
import argparse
import json
import os
import struct
import sys

MAGIC = 0xDB4775248B80FB57

# --- CRC32C ---------------------------------------------------------------------------------
_TABLE = []
for _b in range(256):
    _c = _b
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data, crc=0):
    c = crc ^ 0xFFFFFFFF
    t = _TABLE
    for b in data:
        c = (c >> 8) ^ t[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def mask(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# --- protobuf wire format -------------------------------------------------------------------
def varint(v):
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def field_bytes(num, b):
    return varint((num << 3) | 2) + varint(len(b)) + b


def field_fixed32(num, v):
    return varint((num << 3) | 5) + struct.pack("<I", v)


def header_proto(num_shards, endianness=0, min_consumer=0):
    version = field_varint(1, 1) + (field_varint(2, min_consumer) if min_consumer else b"")
    out = field_varint(1, num_shards)
    if endianness:
        out += field_varint(2, endianness)
    return out + field_bytes(3, version)


def shape_proto(shape):
    return b"".join(field_bytes(2, field_varint(1, d) if d else b"") for d in shape)


def slice_proto(extents):
    """extents: [(start, length or None)]"""
    out = b""
    for start, length in extents:
        e = (field_varint(1, start) if start else b"") + (
            field_varint(2, length) if length is not None else b"")
        out += field_bytes(1, e)
    return out


def entry_proto(dtype, shape, shard_id=0, offset=0, size=0, crc=None, slices=()):
    out = field_varint(1, dtype) + field_bytes(2, shape_proto(shape))
    if shard_id:
        out += field_varint(3, shard_id)
    if offset:
        out += field_varint(4, offset)
    if size:
        out += field_varint(5, size)
    if crc is not None:
        out += field_fixed32(6, crc)
    for s in slices:
        out += field_bytes(7, slice_proto(s))
    return out


# --- OrderedCode slice keys (tensorflow/core/util/saved_tensor_slice_util.cc) ----------------
def _num_increasing(v):
    b = v.to_bytes(8, "big").lstrip(b"\0") if v else b""
    return bytes([len(b)]) + b


def _signed_num_increasing(v):
    x = ~v if v < 0 else v
    length = min(x.bit_length() // 7 + 1, 10)
    header = [(0, 0), (0x80, 0), (0xC0, 0), (0xE0, 0), (0xF0, 0), (0xF8, 0), (0xFC, 0), (0xFE, 0),
              (0xFF, 0), (0xFF, 0x80), (0xFF, 0xC0)][length]
    buf = bytearray((b"\xff\xff" if v < 0 else b"\0\0") + struct.pack(">q", v))[10 - length:]
    buf[0] ^= header[0]
    if length > 1:
        buf[1] ^= header[1]
    return bytes(buf)


def slice_key(name, extents):
    out = _num_increasing(0)
    out += b"".join(b"\0\xff" if c == 0 else b"\xff\0" if c == 0xFF else bytes([c]) for c in name)
    out += b"\0\x01" + _num_increasing(len(extents))
    for start, length in extents:
        out += _signed_num_increasing(start) + _signed_num_increasing(-1 if length is None else length)
    return out


# --- LevelDB table --------------------------------------------------------------------------
class BlockBuilder:
    def __init__(self, restart_interval=16):
        self.buf = bytearray()
        self.restarts = [0]
        self.counter = 0
        self.last = b""
        self.interval = restart_interval

    def add(self, key, value):
        shared = 0
        if self.counter < self.interval:
            n = min(len(key), len(self.last))
            while shared < n and key[shared] == self.last[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buf))
            self.counter = 0
        self.buf += varint(shared) + varint(len(key) - shared) + varint(len(value))
        self.buf += key[shared:] + value
        self.last = key
        self.counter += 1

    def finish(self):
        return bytes(self.buf) + b"".join(struct.pack("<I", r) for r in self.restarts) + \
            struct.pack("<I", len(self.restarts))

    def size(self):
        return len(self.buf) + 4 * len(self.restarts) + 4


def write_table(entries, snappy=False, block_size=4096):
    """entries: sorted [(key bytes, value bytes)]; returns the table's bytes."""
    out = bytearray()

    def emit(contents):
        ctype = 0
        if snappy:
            import snappy as snappy_mod
            packed = snappy_mod.compress(contents)
            if len(packed) < len(contents) - len(contents) // 8:
                contents, ctype = packed, 1
        handle = varint(len(out)) + varint(len(contents))
        out.extend(contents)
        out.append(ctype)
        out.extend(struct.pack("<I", mask(crc32c(bytes([ctype]), crc32c(contents)))))
        return handle

    index = BlockBuilder(restart_interval=1)
    block = BlockBuilder()
    for key, value in entries:
        block.add(key, value)
        if block.size() >= block_size:
            index.add(block.last, emit(block.finish()))
            block = BlockBuilder()
    if block.counter or not index.counter:
        index.add(block.last, emit(block.finish()))
    meta = emit(BlockBuilder().finish())
    idx = emit(index.finish())
    footer = meta + idx
    footer += b"\0" * (40 - len(footer)) + struct.pack("<Q", MAGIC)
    return bytes(out) + footer


# --- tensors --------------------------------------------------------------------------------
# TF DataType code, struct format, numpy-free value maker.
DTYPES = {
    "F32": (1, 4), "F64": (2, 8), "I32": (3, 4), "U8": (4, 1), "I16": (5, 2), "I8": (6, 1),
    "I64": (9, 8), "BOOL": (10, 1), "BF16": (14, 2), "U16": (17, 2), "F16": (19, 2),
    "U32": (22, 4), "U64": (23, 8), "F8_E5M2": (24, 1), "F8_E4M3": (25, 1),
}


def tensor_bytes(key, nbytes):
    """Deterministic bytes that differ per key (BOOL-safe: callers mask to 0/1)."""
    x = crc32c(key) or 1
    out = bytearray()
    while len(out) < nbytes:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        out.append((x >> 16) & 0xFF)
    return bytes(out)


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Bundle:
    """Collects tensors, places them in shards, writes PREFIX.index and data files."""

    def __init__(self, num_shards=1):
        self.num_shards = num_shards
        self.data = [bytearray() for _ in range(num_shards)]
        self.entries = {}
        self.expected = {}
        self.next_shard = 0

    def _place(self, raw, crc_value=None):
        shard = self.next_shard
        self.next_shard = (self.next_shard + 1) % self.num_shards
        offset = len(self.data[shard])
        self.data[shard] += raw
        crc = mask(crc_value if crc_value is not None else crc32c(raw))
        return shard, offset, crc

    def add(self, key, dtype, shape, raw=None):
        code, size = DTYPES[dtype]
        raw = raw if raw is not None else tensor_bytes(key, numel(shape) * size)
        if dtype == "BOOL":
            raw = bytes(b & 1 for b in raw)
        shard, offset, crc = self._place(raw)
        self.entries[key] = entry_proto(code, shape, shard, offset, len(raw), crc)
        self.expected[key] = {"dtype": dtype, "shape": shape, "hex": raw.hex()}

    def add_partitioned(self, key, dtype, shape, axis, cuts):
        """Splits a tensor along `axis` at `cuts` (e.g. [2] splits [0,2) and [2,n))."""
        code, size = DTYPES[dtype]
        whole = tensor_bytes(key, numel(shape) * size)
        bounds = [0] + cuts + [shape[axis]]
        slices = []
        outer = numel(shape[:axis])
        inner = numel(shape[axis + 1:]) * size
        for lo, hi in zip(bounds, bounds[1:]):
            raw = bytearray()
            for o in range(outer):
                base = (o * shape[axis] + lo) * inner
                raw += whole[base:base + (hi - lo) * inner]
            extents = [(0, None)] * len(shape)
            extents[axis] = (lo, hi - lo)
            slice_shape = list(shape)
            slice_shape[axis] = hi - lo
            shard, offset, crc = self._place(bytes(raw))
            self.entries[slice_key(key, extents)] = entry_proto(code, slice_shape, shard, offset,
                                                                len(raw), crc)
            slices.append(extents)
        self.entries[key] = entry_proto(code, shape, slices=slices)
        self.expected[key] = {"dtype": dtype, "shape": shape, "hex": whole.hex()}

    def add_strings(self, key, strings, shape):
        lengths = b"".join(varint(len(s)) for s in strings)
        crc = 0
        for s in strings:
            crc = crc32c(struct.pack("<I", len(s)), crc)
        check = struct.pack("<I", mask(crc))
        crc = crc32c(check, crc)
        body = b"".join(strings)
        crc = crc32c(body, crc)
        shard, offset, masked = self._place(lengths + check + body, crc_value=crc)
        self.entries[key] = entry_proto(7, shape, shard, offset, len(lengths + check + body), masked)
        self.expected[key] = {"dtype": "STRING", "shape": shape,
                              "strings": [s.decode("latin-1") for s in strings]}

    def write(self, directory, prefix, snappy=False, header=None, entries_hook=None):
        os.makedirs(directory, exist_ok=True)
        entries = dict(self.entries)
        entries[b""] = header if header is not None else header_proto(self.num_shards)
        items = sorted(entries.items())
        if entries_hook:
            items = entries_hook(items)
        with open(os.path.join(directory, prefix + ".index"), "wb") as f:
            f.write(write_table(items, snappy=snappy))
        for k, d in enumerate(self.data):
            name = "%s.data-%05d-of-%05d" % (prefix, k, self.num_shards)
            with open(os.path.join(directory, name), "wb") as f:
                f.write(d)


def object_graph():
    """A TrackableObjectGraph: root -> model -> dense (kernel), save_counter, optimizer."""
    def ref(node_id, name):
        return field_bytes(1, field_varint(1, node_id) + field_bytes(2, name))

    def attr(key):
        return field_bytes(2, field_bytes(1, b"VARIABLE_VALUE") + field_bytes(3, key))
    nodes = [
        ref(1, b"model") + ref(3, b"save_counter") + ref(4, b"optimizer"),
        ref(2, b"dense"),
        ref(5, b"kernel"),
        attr(b"save_counter/.ATTRIBUTES/VARIABLE_VALUE"),
        field_bytes(3, field_varint(1, 5) + field_bytes(2, b"m") + field_varint(3, 6)),
        attr(b"model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"),
        attr(b"model/dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE"),
    ]
    return b"".join(field_bytes(1, n) for n in nodes)


def standard(directory, snappy):
    b = Bundle(num_shards=2)
    for i, dtype in enumerate(sorted(DTYPES)):
        b.add(("dtypes/%s" % dtype).encode(), dtype, [2, 3] if i % 2 else [5])
    b.add(b"model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE", "F32", [4, 3])
    b.add(b"model/dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE", "F32", [4, 3])
    b.add(b"model/conv1..weight/.ATTRIBUTES/VARIABLE_VALUE", "F16", [2, 2])
    b.add(b"model/a.Sb/.ATTRIBUTES/VARIABLE_VALUE", "I32", [3])
    b.add(b"save_counter/.ATTRIBUTES/VARIABLE_VALUE", "I64", [])
    # The optimizer's own variables (Keras: iterations, learning rate): training state too.
    b.add(b"optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE", "I64", [])
    b.add(b"optimizer/learning_rate/.ATTRIBUTES/VARIABLE_VALUE", "F32", [])
    b.add(b"empty", "F32", [0, 4])
    b.add_partitioned(b"part/axis0", "F32", [6, 4], 0, [2, 5])
    b.add_partitioned(b"part/axis1", "F64", [3, 5], 1, [2])
    b.add_partitioned(b"part/axis1_of_3d", "I16", [2, 4, 3], 1, [1, 3])
    b.add_strings(b"strings/vocab", [b"alpha", b"", b"\xff\x00bin"], [3])
    b.add_strings(b"_CHECKPOINTABLE_OBJECT_GRAPH", [object_graph()], [])
    b.write(directory, "ckpt-3", snappy=snappy)
    with open(os.path.join(directory, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "/stale/machine/dir/ckpt-3"\n'
                'all_model_checkpoint_paths: "ckpt-2"\n'
                'all_model_checkpoint_paths: "/stale/machine/dir/ckpt-3"\n'
                'all_model_checkpoint_timestamps: 1700000000.5\n'
                'last_preserved_timestamp: 1699999999.25\n')
    with open(os.path.join(directory, "expected.json"), "w") as f:
        json.dump({k.decode("latin-1"): v for k, v in b.expected.items()}, f, indent=1)


def many(directory, count):
    b = Bundle(num_shards=1)
    for i in range(count):
        b.add(("model/layer_%05d/kernel/.ATTRIBUTES/VARIABLE_VALUE" % i).encode(), "F32", [2],
              raw=struct.pack("<ff", i, -i))
    b.write(directory, "ckpt-1")


def graph_nodes(directory, count):
    """Metadata's worst text per stored byte: nodes with no fields, each a JSON object."""
    b = Bundle(num_shards=1)
    b.add_strings(b"_CHECKPOINTABLE_OBJECT_GRAPH", [field_bytes(1, b"") * count], [])
    b.write(directory, "ckpt")


def big(directory, size, shards):
    """About `size` bytes of F32 variables, 64 MiB each (smaller if `size` is small), spread
    over `shards` data files and streamed to disk: Python could not CRC a gigabyte in time, so
    entries carry no crc32c (TF's own writer always does; readers treat it as optional)."""
    os.makedirs(directory, exist_ok=True)
    per = max(4, min(64 << 20, size // 8) // 4 * 4)
    count = max(1, size // per)
    files = [open(os.path.join(directory, "ckpt-1.data-%05d-of-%05d" % (k, shards)), "wb")
             for k in range(shards)]
    offsets = [0] * shards
    entries = {b"": header_proto(shards)}
    for i in range(count):
        k = i % shards
        key = ("model/layer_%03d/kernel/.ATTRIBUTES/VARIABLE_VALUE" % i).encode()
        entries[key] = entry_proto(1, [per // 4], k, offsets[k], per)
        for done in range(0, per, 8 << 20):
            files[k].write(os.urandom(min(8 << 20, per - done)))
        offsets[k] += per
    for f in files:
        f.close()
    with open(os.path.join(directory, "ckpt-1.index"), "wb") as f:
        f.write(write_table(sorted(entries.items())))
    with open(os.path.join(directory, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-1"\n')


def hostile(directory):
    cases = {}

    def case(name, expect, **kw):
        b = Bundle(num_shards=kw.pop("num_shards", 1))
        b.add(b"a", "F32", [2])
        b.add(b"b", "I32", [3])
        build = kw.pop("build", None)
        if build:
            build(b)
        d = os.path.join(directory, name)
        b.write(d, "ckpt", **kw)
        cases[name] = expect
        return d

    def patch(name, fn):
        path = os.path.join(directory, name, "ckpt.index")
        with open(path, "rb") as f:
            data = bytearray(f.read())
        with open(path, "wb") as f:
            f.write(fn(data))

    case("bad_magic", "bad magic")
    patch("bad_magic", lambda d: d[:-1] + b"\x00")
    case("truncated_footer", "truncated footer")
    patch("truncated_footer", lambda d: d[:30])
    case("truncated_block", "runs past the table")
    patch("truncated_block", lambda d: d[:10] + d[-48:])
    case("block_crc", "block checksum mismatch")
    patch("block_crc", lambda d: d[:5] + bytes([d[5] ^ 0x40]) + d[6:])
    case("unsorted_keys", "not strictly ascending",
         entries_hook=lambda items: [items[0], items[2], items[1]])
    case("duplicate_keys", "not strictly ascending",
         entries_hook=lambda items: [items[0], items[1], items[1], items[2]])
    case("varint_overflow", "varint overflow",
         build=lambda b: b.entries.__setitem__(b"c", b"\x08" + b"\xff" * 10 + b"\x01"))
    case("shard_id", "shard_id 3 >= num_shards 1",
         build=lambda b: b.entries.__setitem__(b"c", entry_proto(1, [1], 3, 0, 4, 0)))
    case("past_data_file", "runs past the end of the file",
         build=lambda b: b.entries.__setitem__(b"c", entry_proto(1, [2], 0, 100, 8, 0)))
    case("dtype_shape_size", "needs 12 bytes, entry says 8",
         build=lambda b: b.entries.__setitem__(b"c", entry_proto(1, [3], 0, 0, 8, 0)))
    case("huge_elements", "huge element count",
         build=lambda b: b.entries.__setitem__(b"c", entry_proto(1, [1 << 40, 1 << 30], 0, 0, 8)))
    case("big_endian", "big-endian bundle", header=header_proto(1, endianness=1))
    case("overlapping_slices", "slices overlap",
         build=lambda b: overlapping(b))
    case("incomplete_slices", "uncovered", build=lambda b: incomplete(b))
    case("wrong_wire_type", "wrong wire type",
         build=lambda b: b.entries.__setitem__(b"c", field_bytes(1, b"xx")))
    case("missing_data_file", "missing")
    os.remove(os.path.join(directory, "missing_data_file", "ckpt.data-00000-of-00001"))
    if _has_snappy():
        d = case("snappy_past_size", "snappy block", snappy=True,
                 build=lambda b: [b.add(("pad%03d" % i).encode(), "F32", [1]) for i in range(60)])
        patch("snappy_past_size", lambda data: shrink_snappy_length(data))
    with open(os.path.join(directory, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


def read_varint(buf, pos):
    """The varint at buf[pos:], and the position after it."""
    v = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, pos


def shrink_snappy_length(data):
    """Lowers the stated length of the first snappy block by one and fixes its CRC, so the
    block is well formed but decodes past its stated size."""
    # The first block starts at 0; find it through the index handle in the footer.
    footer = data[-48:]
    _, pos = read_varint(footer, 0)  # metaindex handle: offset, size
    _, pos = read_varint(footer, pos)
    index_off, pos = read_varint(footer, pos)
    index_size, pos = read_varint(footer, pos)
    index = bytes(data[index_off:index_off + index_size])
    # The index's first entry value is the first data block's handle.
    p = 3 + index[1]
    off, q = read_varint(index, p)
    size, q = read_varint(index, q)
    assert data[off + size] == 1, "first block not snappy"
    block = bytearray(data[off:off + size])
    # Stated length is a varint at the block's start; lower it keeping its byte count.
    length, n = read_varint(block, 0)
    new = varint(length - 1)
    assert len(new) == n
    block[:n] = new
    data[off:off + size] = block
    data[off + size + 1:off + size + 5] = struct.pack("<I", mask(crc32c(b"\x01", crc32c(bytes(block)))))
    return data


def overlapping(b):
    code, size = DTYPES["F32"]
    ext0 = [(0, 3), (0, None)]
    ext1 = [(2, 2), (0, None)]
    for ext in (ext0, ext1):
        raw = tensor_bytes(b"p", ext[0][1] * 2 * size)
        shard, offset, crc = b._place(raw)
        b.entries[slice_key(b"p", ext)] = entry_proto(code, [ext[0][1], 2], shard, offset, len(raw), crc)
    b.entries[b"p"] = entry_proto(code, [4, 2], slices=[ext0, ext1])


def incomplete(b):
    code, size = DTYPES["F32"]
    ext0 = [(0, 2), (0, None)]
    raw = tensor_bytes(b"p", 2 * 2 * size)
    shard, offset, crc = b._place(raw)
    b.entries[slice_key(b"p", ext0)] = entry_proto(code, [2, 2], shard, offset, len(raw), crc)
    b.entries[b"p"] = entry_proto(code, [4, 2], slices=[ext0])


def _has_snappy():
    try:
        import snappy  # noqa: F401
        return True
    except ImportError:
        return False


def corpus(directory):
    import shutil
    import tempfile
    tmp = tempfile.mkdtemp()
    try:
        standard(os.path.join(tmp, "plain"), False)
        if _has_snappy():
            standard(os.path.join(tmp, "snappy"), True)
        hostile(os.path.join(tmp, "hostile"))
        many(os.path.join(tmp, "many"), 300)
        os.makedirs(directory, exist_ok=True)
        for root, _, files in os.walk(tmp):
            for name in files:
                if name.endswith(".index"):
                    tag = os.path.relpath(root, tmp).replace(os.sep, "_")
                    shutil.copy(os.path.join(root, name), os.path.join(directory, tag + ".index"))
    finally:
        shutil.rmtree(tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=["standard", "many", "graph_nodes", "big", "hostile",
                                       "corpus"])
    ap.add_argument("dir")
    ap.add_argument("--snappy", action="store_true", help="snappy-compress index blocks")
    ap.add_argument("--count", type=int, default=None,
                    help="many: variables (50000); graph_nodes: nodes (300000)")
    ap.add_argument("--size", type=int, default=1 << 30, help="big: total bytes")
    ap.add_argument("--shards", type=int, default=8, help="big: data files")
    args = ap.parse_args()
    if args.snappy and not _has_snappy():
        sys.exit("make_tf_checkpoint.py: --snappy needs python3-snappy")
    if args.kind == "standard":
        standard(args.dir, args.snappy)
    elif args.kind == "many":
        many(args.dir, 50000 if args.count is None else args.count)
    elif args.kind == "graph_nodes":
        graph_nodes(args.dir, 300000 if args.count is None else args.count)
    elif args.kind == "big":
        big(args.dir, args.size, args.shards)
    elif args.kind == "hostile":
        hostile(args.dir)
    else:
        corpus(args.dir)


if __name__ == "__main__":
    main()
