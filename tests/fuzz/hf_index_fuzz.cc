// Fuzz target: any bytes as an index json must parse or be refused, never crash, and an
// accepted index must name only plain shard files.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/encoding/hf_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto index = ckptfs::ParseHfIndex(std::string_view(reinterpret_cast<const char*>(data), size),
                                    "fuzz.index.json");
  if (!index.ok()) return 0;
  for (const auto& shard : index->shard_files) {
    if (!ckptfs::IsPlainFileName(shard)) std::abort();
  }
  return 0;
}
