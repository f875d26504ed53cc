// Pack: rewrite a checkpoint as seekable-zstd shards that ckptfs mounts with random access.
//
// Each shard becomes NAME.zst: independent zstd frames of `frame_size` decoded bytes,
// then the seekable format's seek table with an XXH64 checksum per frame (of the frame's
// original bytes). Frames are read and compressed on a pool of `threads` workers that
// runs across shard boundaries, while the calling thread writes them in order; at most
// 2 x threads frames are in flight, each holding its bytes and its compressed copy (about
// 2 x frame_size), besides one zstd context per worker. The workers also CRC the
// storages without a CRC from the bytes they hold (PackSummary::range_crcs), for the zip
// CRC sidecar, which then needs no second pass over the output. The bytes written are the
// same for any thread count. Plain `zstd -d` decodes the result (to the grouped bytes with
// `byte_group`). Non-weight files and the index are copied unchanged. With `shard_size`,
// tensors are regrouped (in aligned order) into new shards of at most that many bytes
// each (a larger tensor gets a shard of its own) under a new
// model.safetensors.index.json. Files are written under a temporary name (NAME.part) and
// renamed, so an interrupted pack leaves no file that looks complete.
//
// DEST must be missing or empty, with two exceptions, and never holds anything else
// than what this pack writes (any other entry is refused, naming it, and left alone):
//  - the leftovers of an interrupted pack, told apart by at least one NAME.part beside
//    (some of) the files this pack writes: the .part files are removed and the pack starts
//    over, replacing the finished files;
//  - with `force`, the files this pack writes, finished or not: they are replaced.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/checkpoint/checkpoint.h"
#include "core/status.h"

namespace ckptfs {

struct PackOptions {
  int level = 3;
  uint64_t frame_size = 4ull << 20;
  uint64_t shard_size = 0;  // 0: keep the source's sharding
  size_t threads = 0;       // frame workers; 0: one per core
  bool force = false;       // replace the files a previous pack wrote into DEST
  // Regroup the bytes of multi-byte elements by byte position in each frame before
  // compressing, and record it (core/codec/byte_group.h): smaller shards, which `zstd -d`
  // decodes to the grouped bytes, not the original ones. ckptfs mounts undo it.
  bool byte_group = false;
  // Called now and then with bytes written so far (decoded) and the total.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// What a pack wrote.
struct PackSummary {
  uint64_t decoded_bytes = 0;     // of the shards compressed
  uint64_t compressed_bytes = 0;  // their .zst files, seek tables included
  uint64_t copied_bytes = 0;      // files copied as they are (index, config...)
  size_t shards = 0;
  // The CRC-32 of each stored range of the storages without one (the safetensors tensors
  // a merged pytorch_model.bin records), by the compressed file's decoded name: computed
  // by the frame workers from the bytes they compress, so that the zip CRC sidecar
  // (WritePackedCrcs) needs no second pass that decodes every frame again.
  RangeCrcs range_crcs;
};

// Packs `ckpt` into the directory `dest`, which must be missing or empty. Refuses a
// checkpoint whose shards are already compressed.
// `summary`, if given, is filled on success. The first error (a read, compression, a
// write) stops the pack and is returned: the error of the first failing frame in file
// order, whatever the thread count; every worker has been joined by then, the shard being
// written is left as no file (its .part removed) and the shards after it are not started.
// `progress` is called on the calling thread only.
Status PackCheckpoint(const Checkpoint& ckpt, const std::string& dest, const PackOptions& options,
                      PackSummary* summary = nullptr);

}  // namespace ckptfs
