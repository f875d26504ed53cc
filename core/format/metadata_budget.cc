#include "core/format/metadata_budget.h"

#include <algorithm>

namespace ckptfs {

void MetadataBudget::AddStored(uint64_t bytes) {
  stored_ = std::min(stored_ + bytes, UINT64_MAX / 64);
}

uint64_t MetadataBudget::limit() const { return per_stored_byte_ * stored_ + fixed_; }

Status MetadataBudget::Charge(uint64_t bytes) {
  if (bytes > limit() || used_ > limit() - bytes) {
    return Status::Unsupported(file_name_ + ": metadata needs over " + std::to_string(limit()) +
                               " bytes of memory (" + std::to_string(per_stored_byte_) + " x its " +
                               std::to_string(stored_) + " stored bytes + " +
                               std::to_string(fixed_ >> 20) + " MiB): refused");
  }
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  return Status::Ok();
}

void MetadataBudget::Release(uint64_t bytes) { used_ -= std::min(bytes, used_); }

Status MetadataBudget::Append(std::string& out, std::string_view piece) {
  if (out.size() + piece.size() > out.capacity()) {
    const uint64_t old_capacity = out.capacity();
    // Growth by half: while the text moves, old and new buffers live together (2.5x).
    const uint64_t capacity =
        std::max<uint64_t>(old_capacity + old_capacity / 2, out.size() + piece.size());
    CKPTFS_RETURN_IF_ERROR(Charge(capacity));
    out.reserve(capacity);
    Release(old_capacity);
  }
  out.append(piece);
  return Status::Ok();
}

}  // namespace ckptfs
