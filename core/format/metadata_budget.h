// MetadataBudget: the memory a parser may spend building one record of metadata (a torch
// pickle; reusable by any parser whose output can outgrow its input), counted as it builds.
//
// The limit is kMetadataMemoryRatio times the record's stored size plus
// kMetadataMemoryFixed: 32 x + 64 MiB. A parser charges what it allocates *before* it
// allocates (a growing vector's new capacity while the old one is still held, a heap
// string, a hash node), releases only what it has freed (a vector's old buffer once it
// moved), and refuses the record once a charge fails, so its own peak stays within the
// limit. Why 32: a torch state dict's tree costs ~20 times its pickle (15 values of ~100
// bytes per tensor against ~80 to 150 bytes of pickle, memo references making the pickle
// small), so 16 would refuse ordinary checkpoints; a pickle of millions of small ints (2
// bytes each, ~100 each as a tree) costs ~50 times and is refused, in one line naming the
// file, rather than taking 485 MiB for 7.8 MiB. Not thread-safe: one per parse.
#pragma once

#include <cstdint>
#include <string>

namespace ckptfs {

inline constexpr uint64_t kMetadataMemoryRatio = 32;
inline constexpr uint64_t kMetadataMemoryFixed = 64ull << 20;

class MetadataBudget {
 public:
  explicit MetadataBudget(uint64_t stored_bytes)
      : stored_(stored_bytes),
        limit_(stored_bytes > (UINT64_MAX - kMetadataMemoryFixed) / kMetadataMemoryRatio
                   ? UINT64_MAX
                   : stored_bytes * kMetadataMemoryRatio + kMetadataMemoryFixed) {}

  // Adds `bytes` to what was spent; false once that is past the limit (and from then on).
  bool Charge(uint64_t bytes) {
    used_ = bytes > UINT64_MAX - used_ ? UINT64_MAX : used_ + bytes;
    return used_ <= limit_;
  }
  // Gives back `bytes` charged earlier and since freed.
  void Release(uint64_t bytes) { used_ -= bytes < used_ ? bytes : used_; }
  uint64_t used() const { return used_; }
  uint64_t limit() const { return limit_; }

  // What a refusal says: "would take more than L bytes of memory (32 times its S bytes
  // plus 64 MiB)".
  std::string Exceeded() const {
    return "would take more than " + std::to_string(limit_) + " bytes of memory (" +
           std::to_string(kMetadataMemoryRatio) + " times its " + std::to_string(stored_) +
           " bytes plus 64 MiB)";
  }

 private:
  uint64_t stored_;
  uint64_t limit_;
  uint64_t used_ = 0;
};

}  // namespace ckptfs
