// metadata_budget: the memory a parser may hold for a checkpoint's metadata, counted while
// it parses, so that hostile metadata (a compression bomb, a million empty strings, keys
// that prefix compression makes long) is refused at a stated bound instead of growing the
// daemon without one.
//
// The bound: kMetadataBytesPerStoredByte (32) times the metadata's stored bytes, plus
// kMetadataFixedBytes (32 MiB). The parser says how many stored bytes it read
// (AddStored: an index file, a string tensor) and charges what it builds from them
// (Charge: decoded blocks while they live, keys, entries, the JSON it writes for
// metadata.json); Release gives back what it freed. A Charge past the limit fails, one
// line naming the file:
//   "ckpt-1.index: metadata needs over 40123456 bytes of memory (32 x its 123456 stored
//    bytes + 32 MiB): refused"
// Charges are the parser's own estimate of heap it holds (sizes and element counts, not
// malloc's figures): close to the RSS it costs, never far below it.
//
// One budget per checkpoint being opened; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ckptfs {

inline constexpr uint64_t kMetadataBytesPerStoredByte = 32;
inline constexpr uint64_t kMetadataFixedBytes = 32ull << 20;

class MetadataBudget {
 public:
  explicit MetadataBudget(std::string file_name,
                          uint64_t per_stored_byte = kMetadataBytesPerStoredByte,
                          uint64_t fixed_bytes = kMetadataFixedBytes)
      : file_name_(std::move(file_name)), per_stored_byte_(per_stored_byte), fixed_(fixed_bytes) {}

  // `bytes` more of stored metadata were read: the limit grows by per_stored_byte x bytes.
  void AddStored(uint64_t bytes);
  // Counts `bytes` more held; refused (and not counted) when the total would pass the limit.
  Status Charge(uint64_t bytes);
  void Release(uint64_t bytes);
  // Appends `piece` to `out`, charging the growth of out's capacity before it happens (it
  // grows by half; the old buffer is released once the new one is charged and filled).
  Status Append(std::string& out, std::string_view piece);

  uint64_t limit() const;
  uint64_t used() const { return used_; }
  uint64_t peak() const { return peak_; }
  uint64_t stored() const { return stored_; }

 private:
  std::string file_name_;
  uint64_t per_stored_byte_;
  uint64_t fixed_;
  uint64_t stored_ = 0;
  uint64_t used_ = 0;
  uint64_t peak_ = 0;
};

// Heap bytes a std::string holds beyond its own object (none while it fits inline).
inline uint64_t HeapBytes(const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 : 0; }

}  // namespace ckptfs
