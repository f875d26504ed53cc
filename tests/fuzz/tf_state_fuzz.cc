// Fuzz target: any bytes as a TF `checkpoint` state file (text proto) must parse or be
// refused, never crash; a prefix it names must stay inside SOURCE: relative, no `..`
// component, no empty or `.` component, no NUL or control byte.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/format/tf/checkpoint_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto state = ckptfs::tf::ParseCheckpointState(text, "fuzz/checkpoint");
  auto prefix = ckptfs::tf::LatestCheckpointPrefix(text, "fuzz/checkpoint");
  if (prefix.ok() !=
      (state.ok() && !state->model_checkpoint_path.empty() &&
       ckptfs::tf::StatePathInSource(state->model_checkpoint_path, "fuzz/checkpoint").ok())) {
    std::abort();
  }
  if (!prefix.ok()) return 0;
  const std::string& p = *prefix;
  if (p.empty() || p.front() == '/') std::abort();
  size_t start = 0;
  while (true) {
    const size_t slash = p.find('/', start);
    const std::string_view part = std::string_view(p).substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") std::abort();
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  for (unsigned char c : p) {
    if (c < 0x20 || c == 0x7f) std::abort();
  }
  return 0;
}
