// Fuzz target: any bytes as a DCP `.metadata` must parse or be refused with one line naming
// the file, never crash. What parses keeps the reader's promises (metadata.h): every chunk
// has its tensor's rank and lies inside its size, every byte count fits 64 bits, and every
// relative_path is one plain file name.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/checked.h"
#include "core/format/dcp/metadata.h"

namespace {

void CheckPlainName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    std::abort();
  }
}

void CheckStorage(const ckptfs::dcp::StorageInfo& s) {
  CheckPlainName(s.relative_path);
  if (!ckptfs::CheckedAdd(s.offset, s.length)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string file = "fuzz/.metadata";
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const ckptfs::Result<ckptfs::dcp::Metadata> m = ckptfs::dcp::ParseMetadata(bytes, file);
  if (!m.ok()) {
    const std::string& message = m.status().message();
    if (message.rfind(file + ": ", 0) != 0 || message.find('\n') != std::string::npos) {
      std::abort();
    }
    return 0;
  }
  for (const ckptfs::dcp::TensorItem& t : m->tensors) {
    if (!ckptfs::CheckedProduct(t.size, ckptfs::DtypeSize(t.dtype))) std::abort();
    for (const ckptfs::dcp::Chunk& c : t.chunks) {
      if (c.offsets.size() != t.size.size() || c.sizes.size() != t.size.size()) std::abort();
      for (size_t d = 0; d < t.size.size(); ++d) {
        const auto end = ckptfs::CheckedAdd(c.offsets[d], c.sizes[d]);
        if (!end || *end > t.size[d]) std::abort();
      }
      CheckStorage(c.storage);
    }
  }
  for (const ckptfs::dcp::BytesItem& b : m->bytes) CheckStorage(b.storage);
  return 0;
}
