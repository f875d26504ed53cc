#include "core/layout/views/widened_source.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/encoding/widen.h"

namespace ckptfs {

WidenedSource::WidenedSource(const ByteSource& stored, Dtype dtype, uint32_t phase)
    : stored_(stored), dtype_(dtype), phase_(phase), size_(DtypeSize(dtype)) {}

uint64_t WidenedSource::Size() const {
  const uint64_t stored = stored_.Size();
  return stored < phase_ ? 0 : (stored - phase_) / size_ * 4;
}

Status WidenedSource::Read(uint64_t offset, uint64_t length, ReadSink& sink) const {
  CKPTFS_RETURN_IF_ERROR(CheckRange(offset, length));
  if (length == 0) return Status::Ok();
  std::span<uint8_t> out = sink.Fill();
  // Whole elements under the read, a chunk at a time: a read that starts or ends inside
  // a float32 widens its element and keeps the bytes asked for.
  const uint64_t chunk_elements = kWidenChunk / size_;
  std::vector<uint8_t> stored(std::min(kWidenChunk, ((length + 7) / 4 + 1) * size_));
  std::vector<uint8_t> wide(stored.size() / size_ * 4);
  uint64_t element = offset / 4;
  const uint64_t end_element = (offset + length + 3) / 4;
  size_t at = 0;  // bytes of `out` filled
  while (element < end_element) {
    const uint64_t n = std::min(chunk_elements, end_element - element);
    std::span<uint8_t> piece(stored.data(), n * size_);
    CKPTFS_RETURN_IF_ERROR(stored_.ReadAt(phase_ + element * size_, piece));
    WidenToF32(dtype_, piece.data(), n, wide.data());
    const uint64_t skip = at == 0 ? offset - element * 4 : 0;
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n * 4 - skip, out.size() - at));
    std::memcpy(out.data() + at, wide.data() + skip, take);
    at += take;
    element += n;
  }
  return Status::Ok();
}

void WidenedSource::Prefetch(uint64_t offset, uint64_t length) const {
  const uint64_t first = offset / 4;
  const uint64_t last = (offset + length + 3) / 4;
  stored_.Prefetch(phase_ + first * size_, (last - first) * size_);
}

}  // namespace ckptfs
