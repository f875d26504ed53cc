// Fuzz target: any bytes as an nginx JSON autoindex must parse or be refused, never crash;
// every name kept is plain (not "." or "..", no '/', '\', NUL or control byte, at most 255
// bytes), files and directories are sorted, each name once, none both, and each has its
// info.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/source/remote_dir.h"

namespace {

bool Plain(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 255) return false;
  return std::none_of(name.begin(), name.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return c == '/' || c == '\\' || u < 0x20 || u == 0x7f;
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto listing = ckptfs::ParseAutoindexJson(body);
  if (!listing) return 0;
  for (const auto* names : {&listing->files, &listing->dirs}) {
    if (!std::is_sorted(names->begin(), names->end())) std::abort();
    if (std::adjacent_find(names->begin(), names->end()) != names->end()) std::abort();
    for (const std::string& name : *names) {
      if (!Plain(name)) std::abort();
    }
  }
  for (const std::string& file : listing->files) {
    if (std::binary_search(listing->dirs.begin(), listing->dirs.end(), file)) std::abort();
  }
  if (listing->info.size() != listing->files.size() + listing->dirs.size()) std::abort();
  return 0;
}
