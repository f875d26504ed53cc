// LentBytes: bytes handed out without a copy, kept valid by what lends them (a pinned cache
// block, a buffer). The front end writes them into a reply, then drops the keep_alive.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace ckptfs {

// `bytes` stays valid while `keep_alive` lives.
struct LentBytes {
  std::span<const uint8_t> bytes;
  std::shared_ptr<const void> keep_alive;
};

}  // namespace ckptfs
