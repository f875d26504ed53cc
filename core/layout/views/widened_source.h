// WidenedSource: a stored file's elements of a float type numpy lacks (core/encoding/widen.h),
// read as float32. tensors/ lays a BF16 or F8 tensor's .npy data out as a range of one: the
// file's bytes are never materialized, each read widens just the stored range under it.
//
// Contract: element k of the stored file is the `DtypeSize(dtype)` bytes at
// phase + k * DtypeSize(dtype); its float32 is bytes [4k, 4k + 4) here. So a tensor stored
// at `offset` (offset % size == phase) of `size` bytes is [(offset - phase) / size * 4,
// ... + size / size_of_element * 4) here (WidenedOffset). Reads go through the stored
// source's own Read (its cache, its decoder, its fetches), in pieces of at most
// kWidenChunk stored bytes, so a read holds at most that much besides the reader's memory.
// Never lends, has no descriptor (the bytes are made). Errors: the stored source's, and
// Corruption for a range past Size(). Thread-safe, as the stored source is.
#pragma once

#include <cstdint>
#include <string>

#include "core/encoding/dtype.h"
#include "core/source/byte_source.h"

namespace ckptfs {

inline constexpr uint64_t kWidenChunk = 64 << 10;

class WidenedSource final : public ByteSource {
 public:
  // `stored` must outlive this source; `dtype` must widen (WidensToF32);
  // phase < DtypeSize(dtype).
  WidenedSource(const ByteSource& stored, Dtype dtype, uint32_t phase);

  // Where stored byte `offset` (an element's first byte, of this source's phase) is here.
  uint64_t WidenedOffset(uint64_t offset) const { return (offset - phase_) / size_ * 4; }

  uint64_t Size() const override;
  Status Read(uint64_t offset, uint64_t length, ReadSink& sink) const override;
  const std::string& Name() const override { return stored_.Name(); }
  uint32_t Mode() const override { return stored_.Mode(); }
  struct timespec MTime() const override {
    return stored_.MTime();
  }
  void Prefetch(uint64_t offset, uint64_t length) const override;

 private:
  const ByteSource& stored_;
  Dtype dtype_;
  uint32_t phase_;
  uint32_t size_;  // stored bytes per element
};

}  // namespace ckptfs
