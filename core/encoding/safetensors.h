// safetensors: strict reader of a file's header and writer of synthesized headers.
//
// File layout: u64 little-endian N, then N bytes of JSON
//   {"__metadata__": {str: str}, NAME: {"dtype": D, "shape": [..], "data_offsets": [b, e]}}
// then the data; offsets are relative to the data start 8+N.
//
// The reader treats the file as untrusted and enforces the reference library's rules:
// N <= 100 MB and within the file, a JSON object, known dtypes, shape x element size ==
// byte length (checked arithmetic), offsets sorted contiguous from 0 with no holes or
// overlaps and ending exactly at end of file, no NUL in names, string metadata.
// Every error message starts with the source's name.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/encoding/dtype.h"
#include "core/source/byte_source.h"
#include "core/status.h"

namespace ckptfs {

inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

struct TensorEntry {
  std::string name;
  Dtype dtype = Dtype::kU8;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // relative to the data start
  uint64_t end = 0;
};

using Metadata = std::vector<std::pair<std::string, std::string>>;

struct SafetensorsHeader {
  uint64_t data_start = 0;           // 8 + N
  std::vector<TensorEntry> tensors;  // sorted by begin
  Metadata metadata;                 // "__metadata__", in key order
};

// Reads and validates the header of `source`.
Result<SafetensorsHeader> ReadSafetensorsHeader(const ByteSource& source);

// Parses a header already in memory; `file_size` is the whole file's size.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view json, uint64_t file_size,
                                                 const std::string& file_name);

// Number of elements of a tensor of `shape` (1 for a scalar), or nullopt on overflow.
std::optional<uint64_t> ElementCount(std::span<const uint64_t> shape);

// Number of bytes a tensor of `dtype` and `shape` occupies, or nullopt on overflow.
std::optional<uint64_t> TensorByteSize(Dtype dtype, std::span<const uint64_t> shape);

// Serializes the 8-byte length and JSON header for `tensors` (offsets as given) and
// `metadata`, padded with spaces so the data start is a multiple of 8.
std::string BuildSafetensorsHeader(std::span<const TensorEntry> tensors, const Metadata& metadata);

// BuildSafetensorsHeader in pieces, for a writer that makes the entries on demand: the
// JSON body is SafetensorsHeaderOpening, the entries (each but the first preceded by ','
// when the opening holds no metadata, every one otherwise), "}", then spaces up to a
// multiple of 8; the 8-byte length before it counts the body with its padding.
std::string SafetensorsHeaderOpening(const Metadata& metadata);  // "{" + "__metadata__"
void AppendSafetensorsEntry(std::string& out, std::string_view name, Dtype dtype,
                            std::span<const uint64_t> shape, uint64_t begin, uint64_t end);

// Writes a shape as a JSON array: "[2,3]"; "[]" for a scalar.
std::string ShapeToJson(std::span<const uint64_t> shape);

}  // namespace ckptfs
