// Fuzz target: any bytes as an HDF5 file must be described or refused with one line naming
// the file, never crash or hang this process (libhdf5 runs in a child: its crashes are
// refusals here). What is described keeps ValidateFile's promises, checked again here on
// their own: plain unique paths, sizes equal to elements x type size, servable datasets
// inside the file and not overlapping. With CKPTFS_H5_FUZZ_VERBOSE set, each outcome is
// printed on stderr (the hand mutation run counts them).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/checked.h"
#include "core/format/keras/h5/h5_file.h"
#include "core/source/byte_source.h"

namespace {

void CheckPlainPath(const std::string& path) {
  if (path.empty() || path.find('\0') != std::string::npos || path.front() == '/' ||
      path.back() == '/' || path.find("//") != std::string::npos) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string shown = "fuzz.weights.h5";
  const ckptfs::MemorySource source(shown, std::string(reinterpret_cast<const char*>(data), size));
  ckptfs::h5::Limits limits;
  limits.read_bytes = 16 << 20;
  limits.objects = 4096;
  limits.depth = 16;
  limits.attribute_bytes = 1 << 20;
  limits.timeout = std::chrono::milliseconds(2000);
  const auto file = ckptfs::h5::Describe(source, 0, size, shown, limits);
  const bool verbose = std::getenv("CKPTFS_H5_FUZZ_VERBOSE") != nullptr;
  if (!file.ok()) {
    const std::string& message = file.status().message();
    if (verbose) std::fprintf(stderr, "refused: %s\n", message.c_str());
    if (message.rfind(shown + ": ", 0) != 0 || message.find('\n') != std::string::npos) {
      std::abort();
    }
    return 0;
  }
  if (verbose) std::fprintf(stderr, "described: %zu datasets\n", file->datasets.size());
  if (!ckptfs::h5::ValidateFile(*file, size, shown, limits).ok()) std::abort();
  std::set<std::string> paths;
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  for (const ckptfs::h5::Group& g : file->groups) {
    if (!g.path.empty()) CheckPlainPath(g.path);
    if (!paths.insert(g.path).second) std::abort();
  }
  for (const ckptfs::h5::Dataset& d : file->datasets) {
    CheckPlainPath(d.path);
    if (!paths.insert(d.path).second) std::abort();
    if (d.shape.size() > limits.rank) std::abort();
    const auto bytes = ckptfs::CheckedProduct(d.shape, d.type_size);
    if (!bytes || *bytes != d.size) std::abort();
    if (!d.problem.empty()) continue;
    if (!ckptfs::RangeWithin(d.offset, d.size, size)) std::abort();
    if (d.size > 0) extents.emplace_back(d.offset, d.offset + d.size);
  }
  std::sort(extents.begin(), extents.end());
  for (size_t i = 1; i < extents.size(); ++i) {
    if (extents[i].first < extents[i - 1].second) std::abort();
  }
  return 0;
}
