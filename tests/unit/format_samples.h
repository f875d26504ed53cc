// Minimal checkpoints of each format, registered by the format's own test file, so the
// table's tests (formats_test.cc) cover a new format without an edit of their own.
// Detection looks at names and small files only: a sample's bytes need not parse.
#pragma once

#include <map>
#include <string>
#include <utility>

namespace ckptfs::testing {

// Format name (FormatReader::name) -> its sample's files (name -> bytes).
inline std::map<std::string, std::map<std::string, std::string>>& FormatSamples() {
  static std::map<std::string, std::map<std::string, std::string>> samples;
  return samples;
}

// At namespace scope in a format's test file:
//   const FormatSample kSample("keras", {{"cp.weights.h5", "not parsed by detect"}});
struct FormatSample {
  FormatSample(std::string format, std::map<std::string, std::string> files) {
    FormatSamples().emplace(std::move(format), std::move(files));
  }
};

}  // namespace ckptfs::testing
