// Fuzz target: any bytes as a data.pkl must unpickle or be refused, never crash, and an
// accepted tree must stay inside its arena and within the input's size.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/encoding/pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tree =
      ckptfs::Unpickle(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.pkl");
  if (!tree.ok()) return 0;
  const size_t n = tree->values.size();
  if (tree->root >= n || n > size) std::abort();
  size_t items = 0;
  size_t text = 0;
  for (const ckptfs::PickleValue& v : tree->values) {
    for (uint32_t item : v.items) {
      if (item >= n) std::abort();
    }
    if (v.state != ckptfs::PickleValue::kNoState && v.state >= n) std::abort();
    items += v.items.size();
    text += v.text.size();
  }
  // Each item was pushed by at least one byte of input and is popped into one container.
  // Text grows at most twice (latin-1 in UNICODE to UTF-8), except a global's name: up to
  // 44 bytes for STACK_GLOBAL and two GETs, five bytes of input.
  if (items > size || text > 9 * size) std::abort();
  return 0;
}
