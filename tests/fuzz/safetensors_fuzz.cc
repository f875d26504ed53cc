// Fuzz target: any bytes as a safetensors file must parse or be refused, never crash,
// and an accepted header must describe ranges inside the file.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/encoding/safetensors.h"
#include "core/source/byte_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ckptfs::MemorySource source("fuzz.safetensors",
                              std::string(reinterpret_cast<const char*>(data), size));
  auto header = ckptfs::ReadSafetensorsHeader(source);
  if (!header.ok()) return 0;
  for (const ckptfs::TensorEntry& t : header->tensors) {
    if (header->data_start + t.end > size || t.begin > t.end) std::abort();
  }
  // Whatever was accepted must serialize to a header that parses again.
  std::string rebuilt = ckptfs::BuildSafetensorsHeader(header->tensors, header->metadata);
  ckptfs::MemorySource again(
      "rebuilt", rebuilt + std::string(reinterpret_cast<const char*>(data) + header->data_start,
                                       size - header->data_start));
  if (!ckptfs::ReadSafetensorsHeader(again).ok()) std::abort();
  return 0;
}
