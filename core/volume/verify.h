// Verify: read every stored byte of a checkpoint once and report what is damaged.
//
// What `ckptfs verify` does once the checkpoint opened (every header and frame index
// already validated): decode or read every stored file (weight shards, index, other
// files), each damaged zstd frame or unreadable file one report naming the file and, for
// a weight shard, the decoded byte range and the tensors it held; then, if nothing was
// damaged, each torch storage against the CRC-32 its zip records, and the format's own
// checks (FormatReader::verify: TF's index blocks and per-tensor CRC32C, DeepSpeed's rank
// files). Reports are Status lines; the caller prints them.
//
// Thread safety: reads through the checkpoint's thread-safe sources; one call at a time
// per report callback.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "core/checkpoint/checkpoint.h"
#include "core/status.h"

namespace ckptfs {

struct VerifyResult {
  size_t damaged = 0;       // reports made
  uint64_t bytes_read = 0;  // decoded bytes of every stored file
};

// Reads `ckpt` as above. `report` gets each problem; `progress` (may be null) the bytes
// read so far and VerifyTotalBytes, after each piece.
VerifyResult VerifyCheckpoint(const Checkpoint& ckpt,
                              const std::function<void(const Status&)>& report,
                              const std::function<void(uint64_t done, uint64_t total)>& progress);

// The stored bytes VerifyCheckpoint reads: every stored file's decoded size.
uint64_t VerifyTotalBytes(const Checkpoint& ckpt);

}  // namespace ckptfs
