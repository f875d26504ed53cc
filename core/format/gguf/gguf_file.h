// GGUF, the file format of llama.cpp and ggml (ggml/docs/gguf.md; the reader of record is
// gguf_init_from_file_impl, ggml/src/gguf.cpp): a header of key-values and tensor infos,
// then the data section, each tensor's bytes at its offset, aligned.
//
//   u32 magic "GGUF", u32 version (2 or 3), u64 tensor_count, u64 kv_count,
//   kv_count x { string key, u32 value_type, value },
//   tensor_count x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset },
//   zero padding to `alignment` (general.alignment, a u32 power of two; 32 when absent),
//   the data section.
// A string is a u64 length then its bytes; an array a u32 item type, a u64 count, the
// items. Everything is little-endian (a big-endian file, version 3's other byte order, is
// refused, as are version 1's u32 counts).
//
// Dimensions are innermost first: ne[0] is the contiguous one, so numpy's shape is ne
// reversed. A tensor of a block type (Q4_0: 32 elements in 18 bytes) holds ne[0] /
// block_elements blocks per row, and ne[0] must be a multiple of the block.
//
// Strict, since SOURCE is untrusted: every count and length is checked against the bytes
// there are before anything is allocated for it; keys and tensor names are unique; a
// tensor's type is one ggml knows, its data aligned, inside the file and overlapping no
// other's. Every refusal is a Corruption (or Unsupported) naming the file. Pure functions;
// thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/encoding/dtype.h"
#include "core/source/byte_source.h"
#include "core/status.h"

namespace ckptfs::gguf {

inline constexpr uint64_t kDefaultAlignment = 32;  // GGUF_DEFAULT_ALIGNMENT
inline constexpr uint32_t kMaxDims = 4;            // GGML_MAX_DIMS

// A ggml tensor type (enum ggml_type, ggml/include/ggml.h) as GGUF stores it, with its
// traits (type_traits in ggml/src/ggml.c: blck_size, type_size).
struct GgmlType {
  uint32_t code = 0;
  std::string_view name;       // gguf-py's GGMLQuantizationType name: "Q4_0", "F16"
  std::string_view extension;  // lower case: "q4_0"
  uint32_t block_elements = 1;
  uint32_t block_bytes = 0;
  // The Dtype of its elements when it is one (F32, F16, BF16, F64, I8..I64), else none:
  // a block type, whose bytes only ggml can read.
  std::optional<Dtype> dtype;
};

// The type of `code`, or null for one ggml does not define (or no longer reads: the
// removed Q4_2, Q4_0_4_4...).
const GgmlType* GgmlTypeOf(uint32_t code);

// A value's type (enum gguf_type), named as gguf-py's GGUFValueType.
enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view ValueTypeName(ValueType type);  // "UINT32", "STRING", "ARRAY"

// Arrays longer than this are summarized in KeyValue::value, not listed.
inline constexpr uint64_t kListedArrayItems = 64;

struct KeyValue {
  std::string key;
  ValueType type = ValueType::kU8;
  ValueType item_type = ValueType::kU8;  // arrays: their items'
  uint64_t count = 0;                    // arrays: items
  // The record (key, type, value) as stored: [begin, end) of Header::kv_bytes, which a
  // merged header copies unchanged.
  uint64_t begin = 0;
  uint64_t end = 0;
  // The value for people (metadata.json): a number, bool or string (bytes that are not
  // UTF-8 replaced when dumped), a list of such, or for an array of more than
  // kListedArrayItems items {"type": "ARRAY[STRING]", "length": N}.
  nlohmann::ordered_json value;
};

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  // innermost first (GGUF's order)
  const GgmlType* type = nullptr;
  uint64_t offset = 0;  // in the data section
  uint64_t bytes = 0;   // ggml_nbytes: elements / block_elements * block_bytes
};

struct Header {
  uint32_t version = 3;
  uint64_t alignment = kDefaultAlignment;
  uint64_t data_start = 0;          // where the data section starts in the file
  std::vector<KeyValue> kv;         // in file order
  std::string kv_bytes;             // the key-value records as stored, end to end
  std::vector<TensorInfo> tensors;  // in file order

  // The key-value `key`, or null.
  const KeyValue* Find(std::string_view key) const;
  // An unsigned integer key-value (any of the u/i 8..64 types holding a value >= 0), or
  // nullopt when absent or of another type.
  std::optional<uint64_t> Unsigned(std::string_view key) const;
  // A string key-value, or nullopt.
  std::optional<std::string> String(std::string_view key) const;
};

// Parses the header at the start of `bytes`, a prefix of a file of `file_size` bytes
// (`bytes` may be the whole file). `shown` names the file in refusals. Ok with nullopt:
// the header goes on past `bytes` (read more, ReadHeader does).
Result<std::optional<Header>> ParseHeader(std::span<const uint8_t> bytes, uint64_t file_size,
                                          const std::string& shown);

// The header of `file`, reading its start, more as the header needs (at most
// kMaxHeaderBytes: a vocabulary of 256k tokens with its merges is ~20 MB).
inline constexpr uint64_t kMaxHeaderBytes = 256ull << 20;
Result<Header> ReadHeader(const ByteSource& file, const std::string& shown);

// numpy's shape of a tensor: `ne` reversed, outermost first.
std::vector<uint64_t> NumpyShape(const TensorInfo& t);

// The header of one GGUF file (version 3) with key-values `kv` (records of `kv_bytes`
// copied as stored, in order) and tensors `tensors` in order, their offsets given anew:
// each tensor's data follows the previous one's, padded with zeros to `alignment`, the
// layout gguf_write_to_buf writes. Returns the header padded to `alignment`, and
// `offsets` (one per tensor, in the data section).
std::string BuildHeader(std::span<const KeyValue> kv, std::string_view kv_bytes,
                        std::span<const TensorInfo> tensors, uint64_t alignment,
                        std::vector<uint64_t>& offsets);

// Rounds `n` up to a multiple of `alignment` (a power of two).
inline uint64_t AlignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) & ~(alignment - 1);
}

}  // namespace ckptfs::gguf
