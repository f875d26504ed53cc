// Strict little-endian base-128 varints, as LevelDB tables and protobuf write them.
// A decoder refuses truncation (input ends inside the varint) and overflow (more bytes
// than the type holds, or high bits set in the last byte) instead of wrapping. Pure
// functions, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ckptfs::tf {

enum class VarintError { kNone, kTruncated, kOverflow };

// Reads a varint from the front of `in` and advances `in` past it; on failure `in` is
// unchanged and `error` says why.
inline std::optional<uint64_t> ReadVarint64(std::string_view& in, VarintError* error) {
  uint64_t value = 0;
  for (size_t i = 0; i < 10; ++i) {
    if (i == in.size()) {
      *error = VarintError::kTruncated;
      return std::nullopt;
    }
    const auto byte = static_cast<uint8_t>(in[i]);
    if (i == 9 && byte > 1) break;  // bits past 64
    value |= uint64_t{byte & 0x7fu} << (7 * i);
    if (byte < 0x80) {
      in.remove_prefix(i + 1);
      return value;
    }
  }
  *error = VarintError::kOverflow;
  return std::nullopt;
}

inline std::optional<uint32_t> ReadVarint32(std::string_view& in, VarintError* error) {
  std::string_view probe = in;
  const auto value = ReadVarint64(probe, error);
  if (!value) return std::nullopt;
  if (*value > UINT32_MAX || in.size() - probe.size() > 5) {
    *error = VarintError::kOverflow;
    return std::nullopt;
  }
  in = probe;
  return static_cast<uint32_t>(*value);
}

inline const char* VarintErrorText(VarintError error) {
  return error == VarintError::kOverflow ? "varint overflow" : "truncated varint";
}

inline uint32_t LoadLe32(const char* p) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
}
inline uint64_t LoadLe64(const char* p) { return LoadLe32(p) | uint64_t{LoadLe32(p + 4)} << 32; }

}  // namespace ckptfs::tf
