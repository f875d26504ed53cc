// Fuzz target: any bytes as an S3 ListObjectsV2 answer must parse or be refused, never
// crash; a page that says it is truncated carries its continuation token, and the files
// kept for a directory have plain names (no '/', not "." or "..", at most 255 bytes).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/source/s3.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view xml(reinterpret_cast<const char*>(data), size);
  (void)ckptfs::S3ErrorCode(xml);
  auto page = ckptfs::ParseListObjectsV2(xml, "s3://fuzz/run/");
  if (!page.ok()) return 0;
  if (page->truncated && page->next_token.empty()) std::abort();
  for (const auto& [name, object] : ckptfs::S3CheckpointFiles("run/", page->objects)) {
    if (name.empty() || name == "." || name == ".." || name.size() > 255 ||
        name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
      std::abort();
    }
    if (object.key != "run/" + name) std::abort();
  }
  for (const std::string& dir : ckptfs::S3SubdirectoryNames("run/", page->prefixes)) {
    if (dir.empty() || dir == "." || dir == ".." || dir.find('/') != std::string::npos) {
      std::abort();
    }
  }
  return 0;
}
