// Checkpoint: what OpenCheckpoint finds in SOURCE, validated, with every file open.
//
// SOURCE is a directory holding either a `*.safetensors.index.json` with its shards or a
// single `*.safetensors` file, or the path of one `*.safetensors` file. Opening reads only
// headers, so its cost grows with the number of tensors, not the bytes of the checkpoint.
// Every inconsistency (missing or truncated shard, a tensor listed in the index but not in
// its shard or the reverse, a tensor in two shards, a bad header) is a Status whose
// message names the offending file. The result is immutable and safe to share between
// threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/format/dtype.h"
#include "core/format/safetensors.h"
#include "core/source/byte_source.h"
#include "core/status.h"

namespace ckptfs {

// A stored file the mount shows unchanged (shards, the index, config.json...).
struct StoredFile {
  std::string name;  // file name within SOURCE
  std::unique_ptr<ByteSource> source;
};

struct Tensor {
  std::string name;
  Dtype dtype;
  std::vector<uint64_t> shape;
  uint32_t shard;   // index into Checkpoint::shards
  uint64_t offset;  // absolute byte offset within the shard file
  uint64_t size;    // bytes
};

struct Checkpoint {
  std::string source_path;
  std::vector<StoredFile> shards;  // weight files, in file name order
  std::vector<StoredFile> index;   // the index json, if any (shown under shards/)
  std::vector<StoredFile> others;  // non-weight files, shown at the mount root
  std::vector<Tensor> tensors;     // sorted by name
  Metadata metadata;               // union of the shards' __metadata__, first shard wins

  uint64_t TotalTensorBytes() const;
};

// What a checkpoint directory offers, whatever stores it: the names of its regular files
// and a way to open one by name. Local directories today; object stores later; maps of
// in-memory files in tests.
struct SourceDir {
  std::string path;                // shown in messages and stats
  std::vector<std::string> files;  // plain names, sorted
  std::function<Result<std::unique_ptr<ByteSource>>(const std::string& name)> open;
};

// Finds and validates the checkpoint in `dir`: the index if there is one (preferring
// model.safetensors.index.json among several), else its only .safetensors file.
Result<Checkpoint> OpenCheckpointIn(const SourceDir& dir);

// OpenCheckpointIn over a local directory, or over the directory of a .safetensors
// path, in which case only that file is used.
Result<Checkpoint> OpenCheckpoint(const std::string& source_path);

}  // namespace ckptfs
