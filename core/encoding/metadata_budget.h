// MetadataBudget: the memory a parser may spend building one checkpoint's metadata (a
// torch pickle, a TensorFlow bundle; any parser whose output can outgrow its input),
// counted as it builds, so that hostile metadata (a compression bomb, a million empty
// strings, keys that prefix compression makes long, millions of small ints) is refused at
// a stated bound instead of growing the daemon without one.
//
// The limit is kMetadataMemoryRatio times the metadata's stored bytes plus
// kMetadataMemoryFixed: 32 x + 64 MiB. Stored bytes are given at construction and may
// grow (AddStored: a TF string tensor read for metadata.json). A parser charges what it
// allocates *before* it allocates (a growing vector's new capacity while the old one is
// still held, a heap string, a decoded block), releases only what it has freed, and
// refuses the record once a charge fails, so its own peak stays within the limit. Why 32:
// it admits the ordinary checkpoints of every format that charges it, with room to spare,
// where 16 would refuse some (ratios measured: docs/security.md, docs/tensorflow.md).
//
// Two ways to charge: Charge (bool: counted even past the limit, false from then on; for
// the pickle's own Refuse) and ChargeOrRefuse (a Status: refused and not counted, one line
// naming the file given at construction: "ckpt-1.index: metadata would take more than L
// bytes of memory (32 times its S bytes plus 64 MiB)"). Not thread-safe: one per parse.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/checked.h"
#include "core/status.h"

namespace ckptfs {

inline constexpr uint64_t kMetadataMemoryRatio = 32;
inline constexpr uint64_t kMetadataMemoryFixed = 64ull << 20;

class MetadataBudget {
 public:
  explicit MetadataBudget(uint64_t stored_bytes) { AddStored(stored_bytes); }
  // `file_name` starts ChargeOrRefuse's refusal; `fixed_bytes` replaces the 64 MiB (tests).
  explicit MetadataBudget(std::string file_name, uint64_t stored_bytes = 0,
                          uint64_t fixed_bytes = kMetadataMemoryFixed)
      : file_name_(std::move(file_name)), fixed_(fixed_bytes) {
    AddStored(stored_bytes);
  }

  // `bytes` more of stored metadata were read: the limit grows by 32 x bytes.
  void AddStored(uint64_t bytes) {
    stored_ = std::min(stored_ + std::min(bytes, kMaxStored), kMaxStored);
  }
  // Adds `bytes` to what was spent; false once that is past the limit (and from then on).
  bool Charge(uint64_t bytes) {
    used_ = SaturatingAdd(used_, bytes);
    peak_ = std::max(peak_, used_);
    return used_ <= limit();
  }
  // Counts `bytes` more held; refused (and not counted) when the total would pass the limit.
  Status ChargeOrRefuse(uint64_t bytes) {
    const std::optional<uint64_t> total = CheckedAdd(used_, bytes);
    if (!total || *total > limit()) {
      return Status::Unsupported(file_name_ + ": metadata " + Exceeded());
    }
    Charge(bytes);
    return Status::Ok();
  }
  // Gives back `bytes` charged earlier and since freed.
  void Release(uint64_t bytes) { used_ -= bytes < used_ ? bytes : used_; }
  // Appends `piece` to `out`, charging the growth of out's capacity before it happens (it
  // grows by half; the old buffer is released once the new one is charged and filled).
  Status Append(std::string& out, std::string_view piece) {
    if (out.size() + piece.size() > out.capacity()) {
      const uint64_t old_capacity = out.capacity();
      const uint64_t capacity =
          std::max<uint64_t>(old_capacity + old_capacity / 2, out.size() + piece.size());
      CKPTFS_RETURN_IF_ERROR(ChargeOrRefuse(capacity));
      out.reserve(capacity);
      Release(old_capacity);
    }
    out.append(piece);
    return Status::Ok();
  }

  uint64_t used() const { return used_; }
  uint64_t peak() const { return peak_; }
  uint64_t stored() const { return stored_; }
  uint64_t limit() const { return stored_ * kMetadataMemoryRatio + fixed_; }

  // What a refusal says: "would take more than L bytes of memory (32 times its S bytes
  // plus 64 MiB)".
  std::string Exceeded() const {
    return "would take more than " + std::to_string(limit()) + " bytes of memory (" +
           std::to_string(kMetadataMemoryRatio) + " times its " + std::to_string(stored_) +
           " bytes plus " + std::to_string(fixed_ >> 20) + " MiB)";
  }

 private:
  static constexpr uint64_t kMaxStored = UINT64_MAX / 64;  // 32 x it + fixed cannot wrap

  std::string file_name_;
  uint64_t fixed_ = kMetadataMemoryFixed;
  uint64_t stored_ = 0;
  uint64_t used_ = 0;
  uint64_t peak_ = 0;
};

// Heap bytes a std::string holds beyond its own object (none while it fits inline).
inline uint64_t HeapBytes(const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 : 0; }

}  // namespace ckptfs
