// GatherSource: bytes gathered from pieces of other sources in a repeating pattern, the
// ByteSource of a tensor assembled from chunks (dcp::TileTensor, core/format/dcp/tiling.h)
// where the pieces are too many to list one by one: a 32000x8192 tensor split along
// dimension 1 is 32000 x 8 pieces, described here by 8.
//
// Group g is `count` repetitions; repetition r is its runs in order, run k being
// [base_k + r * stride_k, + length_k) of source_k. The source's bytes are the groups'
// repetitions end to end. A read finds its first group and repetition by arithmetic
// (a binary search over groups, then a division), then reads each run it covers from its
// source: nothing is copied at construction, and a read copies only what it asks for.
//
// Lending: when the reader takes lent spans, what a piece's source lends (cache blocks) is
// passed on as lent; a piece a source fills goes into memory this read makes and lends
// with it. Otherwise every piece fills its part of the reader's memory.
//
// Mode() is the most restrictive of the sources' (a file is never more readable than any
// source it shows bytes of), MTime() the newest, Identity() empty unless every source has
// one (then made of theirs), Fd() -1 (no single descriptor holds these bytes).
// CheckUnchanged() and BeginServing() go to every source.
//
// The sources are borrowed: they must outlive this object (a Checkpoint's shards, which
// own them, hold its decoded sources too). Thread-safe as its sources are.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/source/byte_source.h"

namespace ckptfs {

struct GatherRun {
  const ByteSource* source = nullptr;
  uint64_t base = 0;    // offset in `source` of repetition 0
  uint64_t stride = 0;  // bytes between repetitions in `source`
  uint64_t length = 0;  // bytes per repetition
};

struct GatherGroup {
  uint64_t count = 0;
  std::vector<GatherRun> runs;
};

class GatherSource final : public ByteSource {
 public:
  // Checks every run lies inside its source for every repetition (InvalidArgument naming
  // `name` and the source), and that the total fits 64 bits.
  static Result<std::unique_ptr<GatherSource>> Make(std::string name,
                                                    std::vector<GatherGroup> groups);

  uint64_t Size() const override { return size_; }
  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override;
  const std::string& Name() const override { return name_; }
  Status CheckUnchanged() const override;
  uint32_t Mode() const override;
  struct timespec MTime() const override;
  void Prefetch(uint64_t offset, uint64_t length) const override;
  void BeginServing() override;
  std::string Identity() const override;
  std::string StorageKind() const override { return "gathered"; }

  // Bytes this object holds for its description (for memory tests and docs/memory.md).
  uint64_t DescriptionBytes() const;

 private:
  GatherSource() = default;
  std::string name_;
  std::vector<GatherGroup> groups_;
  std::vector<uint64_t> group_start_;  // byte offset of each group
  std::vector<uint64_t> row_bytes_;    // bytes of one repetition of each group
  uint64_t size_ = 0;
};

}  // namespace ckptfs
