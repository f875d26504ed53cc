// A stored byte range, the unit every format's reader and every view share: parsers that
// map a tensor onto pieces of several files (DeepSpeed ZeRO) speak it without knowing the
// checkpoint model above them.
#pragma once

#include <cstdint>

namespace ckptfs {

// `size` bytes at `offset` in shard `shard` (the caller's number for the file).
struct StoredRange {
  uint32_t shard = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

}  // namespace ckptfs
