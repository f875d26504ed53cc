# Writes the seed corpus of gguf_fuzz (tests/fuzz/corpus/gguf): small GGUF files laid out
# as gguf-py's GGUFWriter writes them (header, key-values, tensor infos, zero padding to the
# alignment, each tensor's data padded to it), valid ones of versions 3 and 2, and near
# misses one defect away from them. Written here with struct, never copies of
# ../shared/fixtures; each under 4 KiB.
# Usage: /usr/bin/python3 tests/fuzz/gguf_seeds.py tests/fuzz/corpus/gguf
import os, struct, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
# ggml types: code -> (block elements, block bytes)
GF32, GF16, GQ4_0 = 0, 1, 2
TYPES = {GF32: (1, 4), GF16: (1, 2), GQ4_0: (32, 18)}

def string(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b

def value(t, v):
    return string(v) if t == STRING else struct.pack(SCALAR[t], v)

def kv(key, t, v):
    return string(key) + struct.pack("<I", t) + value(t, v)

def kv_array(key, item, items):
    return (string(key) + struct.pack("<IIQ", ARRAY, item, len(items)) +
            b"".join(value(item, v) for v in items))

def info(name, ne, ggml_type, offset):
    return (string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
            + struct.pack("<IQ", ggml_type, offset))

def nbytes(ne, ggml_type):
    elements = 1
    for n in ne: elements *= n
    block, size = TYPES[ggml_type]
    return elements // block * size

def gguf(kvs, tensors, version=3, alignment=32, magic=b"GGUF", counts=None, offsets=None,
         data_cut=0):
    """tensors: (name, ne, type); laid out tightly unless `offsets` says otherwise."""
    layout, at = [], 0
    for i, (name, ne, t) in enumerate(tensors):
        off = offsets[i] if offsets else at
        layout.append(off)
        at = off + (nbytes(ne, t) + alignment - 1) // alignment * alignment
    n_tensors, n_kv = counts or (len(tensors), len(kvs))
    head = magic + struct.pack("<IQQ", version, n_tensors, n_kv) + b"".join(kvs)
    head += b"".join(info(n, ne, t, o) for (n, ne, t), o in zip(tensors, layout))
    head += bytes(-len(head) % alignment)
    size = max([o + nbytes(ne, t) for (_, ne, t), o in zip(tensors, layout)] + [0])
    size = (size + alignment - 1) // alignment * alignment
    data = bytes((i * 7 + 1) & 0xff for i in range(size))
    return head + data[:len(data) - data_cut]

def write(name, data):
    assert len(data) < 4096, name
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)

ARCH = kv("general.architecture", STRING, "llama")
TENSORS = [("token_embd.weight", [8, 4], GF16), ("blk.0.attn_norm.weight", [8], GF32),
           ("blk.0.ffn_up.weight", [64, 2], GQ4_0), ("scale", [], GF32)]
ALL_KINDS = [ARCH, kv("t.u8", U8, 200), kv("t.i8", I8, -5), kv("t.u16", U16, 60000),
             kv("t.i16", I16, -300), kv("t.u32", U32, 4000000000), kv("t.i32", I32, -70000),
             kv("t.f32", F32, 0.25), kv("t.bool", BOOL, True), kv("t.u64", U64, 1 << 40),
             kv("t.i64", I64, -(1 << 40)), kv("t.f64", F64, -2.5),
             kv_array("t.ints", I32, [1, -2, 3]), kv_array("t.words", STRING, ["a", "bc"]),
             kv_array("tokenizer.ggml.tokens", STRING, [f"t{i}" for i in range(70)]),
             kv_array("tokenizer.ggml.scores", F32, [0.5] * 70)]

# valid: every value type and F16/F32/Q4_0 tensors; version 2; alignment 64; no tensors
write("v3_all_kinds.gguf", gguf(ALL_KINDS, TENSORS))
write("v2.gguf", gguf([ARCH, kv("llama.block_count", U32, 1)], TENSORS[:2], version=2))
write("align64.gguf", gguf([kv("general.alignment", U32, 64), ARCH], TENSORS, alignment=64))
write("no_tensors.gguf", gguf([ARCH, kv("general.name", STRING, "vocab only")], []))
write("gaps_out_of_order.gguf", gguf([ARCH], TENSORS[:3], offsets=[192, 0, 64]))
# near misses
write("big_endian.gguf", gguf([ARCH], TENSORS[:2], version=0x03000000))
write("version1.gguf", gguf([ARCH], TENSORS[:2], version=1))
write("kv_count_huge.gguf", gguf([ARCH], TENSORS[:2], counts=(2, 1 << 40)))
write("string_huge.gguf", gguf([struct.pack("<Q", 1 << 63) + b"k"], []))
write("nested_array.gguf",
      gguf([ARCH, string("n") + struct.pack("<IIQIQB", ARRAY, ARRAY, 1, U8, 1, 5)], TENSORS[:1]))
write("align48.gguf", gguf([kv("general.alignment", U32, 48), ARCH], TENSORS[:2]))
write("q4_0_half_block.gguf", gguf([ARCH], [("q", [16], GQ4_0)]))
write("offsets_overlap.gguf", gguf([ARCH], TENSORS[:2], offsets=[0, 32]))
write("overlap_past_empty.gguf",
      gguf([ARCH], [("big", [32], GF32), ("empty", [0], GF32), ("c", [8], GF32)],
           offsets=[0, 32, 64]))
write("offset_unaligned.gguf", gguf([ARCH], TENSORS[:2], offsets=[0, 80]))
write("name_twice.gguf", gguf([ARCH], [("w", [8], GF32), ("w", [8], GF32)]))
write("data_cut.gguf", gguf([ARCH], TENSORS, data_cut=40))
